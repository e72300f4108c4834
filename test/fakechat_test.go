package test

// A fake OpenAI-compatible Chat Completions API on 127.0.0.1 for OpenCode
// (opencode-ai 1.18.33, `opencode acp`): its config names a provider of the
// bundled @ai-sdk/openai-compatible package whose baseURL is the fake
// (opencodeSetup).
//
// What OpenCode sends (measured, testdata/real-agents/opencode-ai-1.18.33-*):
// POST /v1/chat/completions with "stream": true; first a title call without
// tools, then the turn with its tools (bash, edit, glob, grep, read, skill,
// task, todowrite, webfetch, write); a tool's result comes back as a
// message of role "tool" with the tool_call_id.
//
// As in the other fakes, a test registers a script and puts its token in
// the prompt. The last message decides: a tool message answering one of the
// fake's calls gets the script's text; a user message with a token starts
// the script's write call (when the call offers tools); anything else gets
// fakeChatText.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeChatText is the reply to a call that no script owns.
var fakeChatText = []string{"Hello", " from the fake chat API."}

type chatScript struct {
	// Write makes the model call the write tool first.
	Write *fileWrite
	// Tool makes the model call this tool (read, bash ...) with Input
	// first, when the call offers it.
	Tool  string
	Input map[string]any
	// Text is the reply: at once, or after the tool's result.
	Text []string
}

type chatScriptState struct {
	chatScript
	scriptLog[string] // tool results: their text
}

type fakeChat struct {
	t   testing.TB
	srv *httptest.Server

	mu      sync.Mutex
	n       int
	scripts []*chatScriptState
	calls   map[string]*chatScriptState // tool_call_id → the script
	// received is every request body, for tests that assert what never
	// reached the model.
	received []byte
}

// startFakeChat starts the fake, closed in t.Cleanup (register it before
// the agents that use it).
func startFakeChat(t testing.TB) *fakeChat {
	t.Helper()
	f := &fakeChat{t: t, calls: map[string]*chatScriptState{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the provider's baseURL (with /v1).
func (f *fakeChat) URL() string { return f.srv.URL + "/v1" }

// Script registers s; put the returned state's token in a prompt.
func (f *fakeChat) Script(s chatScript) *chatScriptState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &chatScriptState{chatScript: s, scriptLog: newScriptLog[string]("chat", len(f.scripts)+1)}
	f.scripts = append(f.scripts, st)
	return st
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
}

// text is the message's text: a string content, or its text parts.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &parts)
	var texts []string
	for _, p := range parts {
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n")
}

func (f *fakeChat) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.n++
	n := f.n
	f.received = append(f.received, body...)
	f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		f.t.Logf("fake chat #%d: %s %s: 404", n, r.Method, r.URL)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"message":"not in the fake chat API","type":"invalid_request_error"}}`))
		return
	}
	var req struct {
		Model    string        `json:"model"`
		Stream   bool          `json:"stream"`
		Messages []chatMessage `json:"messages"`
		Tools    []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		f.t.Logf("fake chat #%d: bad JSON body: %v", n, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	hasTool := func(name string) bool {
		for _, t := range req.Tools {
			if t.Function.Name == name {
				return true
			}
		}
		return false
	}
	var text []string
	var tool, args string
	what := "no script"
	callID := fmt.Sprintf("call_fake_%d", n)
	f.mu.Lock()
	if k := len(req.Messages); k > 0 && len(req.Tools) > 0 {
		last := req.Messages[k-1]
		switch last.Role {
		case "tool":
			if s := f.calls[last.ToolCallID]; s != nil {
				s.mu.Lock()
				s.results = append(s.results, last.text())
				s.mu.Unlock()
				text, what = s.Text, s.token+": text after the tool's result"
			}
		case "user":
			for _, s := range f.scripts {
				if !strings.Contains(last.text(), s.token) {
					continue
				}
				switch {
				case s.Write != nil && hasTool("write"):
					tool, args = "write", string(mustJSON(map[string]string{"filePath": s.Write.Path, "content": s.Write.Content}))
				case s.Tool != "" && hasTool(s.Tool):
					tool, args = s.Tool, string(mustJSON(s.Input))
				}
				if args != "" {
					f.calls[callID] = s
					s.mu.Lock()
					s.calls++
					s.mu.Unlock()
					what = s.token + ": " + tool
				} else {
					text, what = s.Text, s.token+": text"
				}
				break
			}
		}
	}
	f.mu.Unlock()
	if len(req.Tools) == 0 {
		text, what = []string{"Fake title"}, "side call without tools"
	}
	if args == "" && text == nil {
		text = fakeChatText
	}
	f.t.Logf("fake chat #%d: %s (%d bytes, %d messages, %d tools, model %s): %s", n, r.URL, len(body), len(req.Messages), len(req.Tools), req.Model, what)

	base := map[string]any{"id": fmt.Sprintf("chatcmpl-fake-%d", n), "created": 1, "model": req.Model}
	usage := map[string]any{"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": strings.Join(text, "")}
		finish := "stop"
		if args != "" {
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": callID, "type": "function", "function": map[string]any{"name": tool, "arguments": args}}}}
			finish = "tool_calls"
		}
		out := map[string]any{"object": "chat.completion", "usage": usage,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}}
		for k, v := range base {
			out[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(mustJSON(out))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	chunk := func(v map[string]any) {
		v["object"] = "chat.completion.chunk"
		for k, x := range base {
			v[k] = x
		}
		fmt.Fprintf(w, "data: %s\n\n", mustJSON(v))
		if flusher != nil {
			flusher.Flush()
		}
	}
	choice := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	if args != "" {
		chunk(choice(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": callID, "type": "function",
			"function": map[string]any{"name": tool, "arguments": ""}}}}, nil))
		chunk(choice(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": args}}}}, nil))
		chunk(choice(map[string]any{}, "tool_calls"))
	} else {
		for i, t := range text {
			d := map[string]any{"content": t}
			if i == 0 {
				d["role"] = "assistant"
			}
			chunk(choice(d, nil))
		}
		chunk(choice(map[string]any{}, "stop"))
	}
	chunk(map[string]any{"choices": []any{}, "usage": usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Received returns every request body the fake got, concatenated.
func (f *fakeChat) Received() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.received...)
}

// TestFakeChatAPI pins the fake's wire format without OpenCode, so that a
// failure of TestOpencode can be told apart from a broken fake.
func TestFakeChatAPI(t *testing.T) {
	t.Parallel()
	f := startFakeChat(t)
	write := f.Script(chatScript{Write: &fileWrite{Path: "/w/x.txt", Content: "new\n"}, Text: []string{"Done."}})
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "write"}}}
	user := func(content any) map[string]any { return map[string]any{"role": "user", "content": content} }
	url := f.URL() + "/chat/completions"
	if code, _, _ := postJSON(t, f.URL()+"/models", map[string]any{}); code != 404 {
		t.Errorf("unknown path: %d, want 404", code)
	}
	// A title call (no tools) naming a script still gets text.
	_, ctype, body := postJSON(t, url, map[string]any{"stream": true, "messages": []any{user(write.token)}})
	if ctype != "text/event-stream" || !strings.Contains(body, `"content":"Fake title"`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("title call: %s %s", ctype, body)
	}
	_, _, body = postJSON(t, url, map[string]any{"stream": true, "tools": tools,
		"messages": []any{user([]any{map[string]any{"type": "text", "text": "please " + write.token}})}})
	if !strings.Contains(body, `"name":"write"`) || !strings.Contains(body, `\"filePath\":\"/w/x.txt\"`) || !strings.Contains(body, `"finish_reason":"tool_calls"`) {
		t.Errorf("write call: %s", body)
	}
	id := body[strings.Index(body, "call_fake_"):]
	id = id[:strings.IndexByte(id, '"')]
	_, _, body = postJSON(t, url, map[string]any{"stream": true, "tools": tools, "messages": []any{
		user("please " + write.token), map[string]any{"role": "tool", "tool_call_id": id, "content": "Wrote file successfully."}}})
	if !strings.Contains(body, `"content":"Done."`) || !strings.Contains(body, `"finish_reason":"stop"`) {
		t.Errorf("after the tool: %s", body)
	}
	if r := write.Results(); len(r) != 1 || r[0] != "Wrote file successfully." || write.ToolCalls() != 1 {
		t.Errorf("results %q, calls %d", r, write.ToolCalls())
	}
	_, ctype, body = postJSON(t, url, map[string]any{"tools": tools, "messages": []any{user("hi")}})
	if ctype != "application/json" || !strings.Contains(body, `"content":"Hello from the fake chat API."`) {
		t.Errorf("no script, not streamed: %s %s", ctype, body)
	}
	// Any tool: the call carries the script's input as its arguments.
	bash := f.Script(chatScript{Tool: "bash", Input: map[string]any{"command": "cat x"}, Text: []string{"Ran."}})
	bashTools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "bash"}}}
	_, _, body = postJSON(t, url, map[string]any{"stream": true, "tools": bashTools, "messages": []any{user("run " + bash.token)}})
	if !strings.Contains(body, `"name":"bash"`) || !strings.Contains(body, `{\"command\":\"cat x\"}`) || bash.ToolCalls() != 1 {
		t.Errorf("bash call: %s", body)
	}
	if !strings.Contains(string(f.Received()), "run "+bash.token) {
		t.Errorf("Received lacks the last request")
	}
}
