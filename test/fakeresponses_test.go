package test

// A fake OpenAI Responses API on 127.0.0.1 for Codex
// (@agentclientprotocol/codex-acp 2.6.0, which runs `codex app-server` of
// @openai/codex 0.166.0). Codex ignores OPENAI_BASE_URL: it reaches the fake
// through a model provider in CODEX_HOME/config.toml (codexSetup).
//
// What Codex sends (measured, testdata/real-agents/agentclientprotocol-
// codex-acp-2.6.0-*): POST /v1/responses, "stream": true, the conversation
// in "input" (message items with input_text parts; a tool's result as a
// custom_tool_call_output or function_call_output item with the call_id).
// The model name decides which tools Codex offers: for a model it knows
// (gpt-5.5) apply_patch is a freeform "custom" tool; for an unknown one it
// is missing and Codex warns about missing metadata in the chat.
//
// As in the other fakes, a test registers a script and puts its token in
// the prompt. The newest input item decides: a tool output of one of the
// fake's calls gets the script's text; a user message with a token starts
// the script's apply_patch call; anything else gets fakeResponsesText.

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

// fakeResponsesText is the reply to a call that no script owns.
var fakeResponsesText = []string{"Hello", " from the fake Responses API."}

type responsesScript struct {
	// Write makes the model add the file with apply_patch first.
	Write *fileWrite
	// Command makes the model run it with exec_command first (when Write
	// is nil).
	Command string
	// Escalate asks Codex to run Command outside its own sandbox
	// (sandbox_permissions require_escalated): Codex asks the client
	// first, as a model does after its sandbox refused a command.
	Escalate bool
	// Text is the reply: at once, or after the tool's output.
	Text []string
}

type responsesScriptState struct {
	responsesScript
	scriptLog[string] // tool outputs
}

type fakeResponses struct {
	t   testing.TB
	srv *httptest.Server

	mu      sync.Mutex
	n       int
	scripts []*responsesScriptState
	calls   map[string]*responsesScriptState // call_id → the script
	// received is every request body, for tests that assert what never
	// reached the model.
	received []byte
}

// startFakeResponses starts the fake, closed in t.Cleanup (register it
// before the agents that use it).
func startFakeResponses(t testing.TB) *fakeResponses {
	t.Helper()
	f := &fakeResponses{t: t, calls: map[string]*responsesScriptState{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the provider's base_url (with /v1).
func (f *fakeResponses) URL() string { return f.srv.URL + "/v1" }

// Script registers s; put the returned state's token in a prompt.
func (f *fakeResponses) Script(s responsesScript) *responsesScriptState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &responsesScriptState{responsesScript: s, scriptLog: newScriptLog[string]("responses", len(f.scripts)+1)}
	f.scripts = append(f.scripts, st)
	return st
}

type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	CallID  string          `json:"call_id"`
	Output  json.RawMessage `json:"output"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

func (f *fakeResponses) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.n++
	n := f.n
	f.received = append(f.received, body...)
	f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		f.t.Logf("fake responses #%d: %s %s: 404", n, r.Method, r.URL)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"message":"not in the fake Responses API","type":"invalid_request_error"}}`))
		return
	}
	var req struct {
		Model string          `json:"model"`
		Input []responsesItem `json:"input"`
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		f.t.Logf("fake responses #%d: bad JSON body: %v", n, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	hasPatch, hasExec := false, false
	for _, t := range req.Tools {
		hasPatch = hasPatch || t.Name == "apply_patch"
		hasExec = hasExec || t.Name == "exec_command"
	}
	var text []string
	var patch, command string
	var escalate bool
	var script *responsesScriptState
	what := "no script"
	f.mu.Lock()
	if k := len(req.Input); k > 0 {
		last := req.Input[k-1]
		switch {
		case strings.HasSuffix(last.Type, "call_output"):
			if s := f.calls[last.CallID]; s != nil {
				out := string(last.Output)
				var str string
				if json.Unmarshal(last.Output, &str) == nil {
					out = str
				}
				s.mu.Lock()
				s.results = append(s.results, out)
				s.mu.Unlock()
				text, what = s.Text, s.token+": text after the tool's output"
			}
		case last.Type == "message" && last.Role == "user":
			for _, c := range last.Content {
				for _, s := range f.scripts {
					if script != nil || !strings.Contains(c.Text, s.token) {
						continue
					}
					script = s
					if s.Write != nil && hasPatch {
						patch = "*** Begin Patch\n*** Add File: " + s.Write.Path + "\n"
						for _, l := range strings.SplitAfter(s.Write.Content, "\n") {
							if l != "" {
								patch += "+" + strings.TrimSuffix(l, "\n") + "\n"
							}
						}
						patch += "*** End Patch\n"
						what = s.token + ": apply_patch"
					} else if s.Command != "" && hasExec {
						command, escalate, what = s.Command, s.Escalate, s.token+": exec_command"
					} else {
						text, what = s.Text, s.token+": text"
					}
				}
			}
		}
	}
	callID := fmt.Sprintf("call_fake_%d", n)
	if patch != "" || command != "" {
		f.calls[callID] = script
		script.mu.Lock()
		script.calls++
		script.mu.Unlock()
	}
	f.mu.Unlock()
	if patch == "" && command == "" && text == nil {
		text = fakeResponsesText
	}
	f.t.Logf("fake responses #%d: %s (%d bytes, %d input items, %d tools, model %s): %s", n, r.URL, len(body), len(req.Input), len(req.Tools), req.Model, what)

	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	event := func(typ string, v map[string]any) {
		v["type"] = typ
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, mustJSON(v))
		if flusher != nil {
			flusher.Flush()
		}
	}
	rid := fmt.Sprintf("resp_fake_%d", n)
	event("response.created", map[string]any{"response": map[string]any{"id": rid}})
	switch {
	case patch != "":
		event("response.output_item.done", map[string]any{"output_index": 0, "item": map[string]any{
			"type": "custom_tool_call", "id": fmt.Sprintf("ctc_fake_%d", n), "call_id": callID, "name": "apply_patch", "input": patch}})
	case command != "":
		event("response.output_item.done", map[string]any{"output_index": 0, "item": map[string]any{
			"type": "function_call", "id": fmt.Sprintf("fc_fake_%d", n), "call_id": callID, "name": "exec_command",
			"arguments": string(mustJSON(execArgs(command, escalate)))}})
	default:
		mid := fmt.Sprintf("msg_fake_%d", n)
		event("response.output_item.added", map[string]any{"output_index": 0, "item": map[string]any{"type": "message", "id": mid, "role": "assistant", "content": []any{}}})
		for _, t := range text {
			event("response.output_text.delta", map[string]any{"item_id": mid, "output_index": 0, "content_index": 0, "delta": t})
		}
		event("response.output_item.done", map[string]any{"output_index": 0, "item": map[string]any{"type": "message", "id": mid, "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": strings.Join(text, "")}}}})
	}
	event("response.completed", map[string]any{"response": map[string]any{"id": rid, "usage": map[string]any{
		"input_tokens": 5, "input_tokens_details": nil, "output_tokens": 3, "output_tokens_details": nil, "total_tokens": 8}}})
}

// execArgs are the arguments of an exec_command call.
func execArgs(command string, escalate bool) map[string]any {
	args := map[string]any{"cmd": command, "yield_time_ms": 5000}
	if escalate {
		args["sandbox_permissions"] = "require_escalated"
		args["justification"] = "Run it outside the sandbox?"
	}
	return args
}

// Received returns every request body the fake got, concatenated.
func (f *fakeResponses) Received() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.received...)
}

// TestFakeResponsesAPI pins the fake's wire format without Codex, so that
// a failure of TestCodex can be told apart from a broken fake.
func TestFakeResponsesAPI(t *testing.T) {
	t.Parallel()
	f := startFakeResponses(t)
	write := f.Script(responsesScript{Write: &fileWrite{Path: "/w/x.txt", Content: "a\nb\n"}, Text: []string{"Done."}})
	tools := []any{map[string]any{"type": "custom", "name": "apply_patch"}}
	msg := func(text string) map[string]any {
		return map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}
	}
	url := f.URL() + "/responses"
	if code, _, _ := postJSON(t, f.URL()+"/models", map[string]any{}); code != 404 {
		t.Errorf("unknown path: %d, want 404", code)
	}
	_, ctype, body := postJSON(t, url, map[string]any{"stream": true, "tools": tools, "input": []any{msg("please " + write.token)}})
	want := `"input":"*** Begin Patch\n*** Add File: /w/x.txt\n+a\n+b\n*** End Patch\n"`
	if ctype != "text/event-stream" || !strings.Contains(body, `"type":"custom_tool_call"`) || !strings.Contains(body, want) ||
		!strings.Contains(body, "event: response.completed") {
		t.Errorf("apply_patch call: %s %s", ctype, body)
	}
	id := body[strings.Index(body, "call_fake_"):]
	id = id[:strings.IndexByte(id, '"')]
	_, _, body = postJSON(t, url, map[string]any{"stream": true, "tools": tools, "input": []any{msg("please " + write.token),
		map[string]any{"type": "custom_tool_call_output", "call_id": id, "output": "Success."}}})
	if !strings.Contains(body, `"delta":"Done."`) || strings.Contains(body, "custom_tool_call") {
		t.Errorf("after the tool: %s", body)
	}
	if out := write.Results(); len(out) != 1 || out[0] != "Success." || write.ToolCalls() != 1 {
		t.Errorf("outputs %q, calls %d", out, write.ToolCalls())
	}
	// Without apply_patch among the tools, or without a script: text.
	if _, _, body := postJSON(t, url, map[string]any{"input": []any{msg(write.token)}}); !strings.Contains(body, `"delta":"Done."`) {
		t.Errorf("no apply_patch tool: %s", body)
	}
	if _, _, body := postJSON(t, url, map[string]any{"tools": tools, "input": []any{msg("hi")}}); !strings.Contains(body, fakeResponsesText[1]) {
		t.Errorf("no script: %s", body)
	}
}
