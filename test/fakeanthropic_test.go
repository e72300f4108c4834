package test

// A fake Anthropic Messages API on 127.0.0.1 for the Claude agent
// (@agentclientprotocol/claude-agent-acp 0.101.0, which runs the Claude Code
// CLI of @anthropic-ai/claude-agent-sdk): ANTHROPIC_BASE_URL points at it.
//
// What the CLI sends (measured, testdata/real-agents/agentclientprotocol-
// claude-agent-acp-0.101.0-*): POST /v1/messages?beta=true, streamed
// ("stream": true) but for auto mode's classifier (below). Besides the turn
// itself it makes side calls: a session title (no tools; the prompt inside
// <session>…</session>), a "[SUGGESTION MODE: …]" call after each turn, and,
// after a background subagent ends, a turn whose last user message is a
// <task-notification>.
// A subagent's calls carry its own conversation: the Agent tool's prompt is
// its first user message. The last message of a request may have another
// role than "user" (system reminders). In mode auto, actions other than
// edits in the working directory (launching a subagent, say) are first put
// to a classifier: a call without "stream" and without tools whose user
// message is a <transcript>, answered with <severity>N</severity>; the
// fake answers it like any side call, which the CLI takes as a failure and
// blocks the action (the tests run subagents in mode default).
//
// A test registers a script and puts its token in the prompt; the fake acts
// on the newest user message only: a script token there starts the
// script's tool call (Write, or Agent for a subagent), a tool_result of one
// of the fake's tool calls gets that script's text; anything else gets
// fakeAnthropicText. Calls without tools (titles) always get text.

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeAnthropicText is the reply to a call that no script owns.
var fakeAnthropicText = []string{"Hello", " from the fake Anthropic API."}

// fileWrite is a file a fake model asks the agent to write.
type fileWrite struct {
	Path    string // absolute
	Content string
}

type anthropicScript struct {
	// Write makes the model call the Write tool first.
	Write *fileWrite
	// Delegate makes the model call the Agent tool first: a subagent
	// whose first user message is Delegate.Prompt.
	Delegate *anthropicDelegate
	// Tool makes the model call this tool (Bash, Read ...) with Input
	// first, when the agent offers it.
	Tool  string
	Input map[string]any
	// Text is the reply: at once, or after the tool's result.
	Text []string
}

type anthropicDelegate struct {
	Description, Prompt, SubagentType string
}

// toolResult is a tool_result the fake received for one of its tool calls.
type toolResult struct {
	Tool    string // the tool the fake called
	Content string // the result's text
	IsError bool
}

type anthropicScriptState struct {
	anthropicScript
	scriptLog[toolResult]
}

type fakeAnthropic struct {
	t   testing.TB
	srv *httptest.Server

	mu      sync.Mutex
	n       int
	scripts []*anthropicScriptState
	toolIDs map[string]*anthropicScriptState // tool_use id → the script that made it
	tools   map[string]string                // tool_use id → tool name
	// received is every request body, for tests that assert what never
	// reached the model.
	received []byte
}

// startFakeAnthropic starts the fake, closed in t.Cleanup (register it
// before the agents that use it, so that it outlives them).
func startFakeAnthropic(t testing.TB) *fakeAnthropic {
	t.Helper()
	f := &fakeAnthropic{t: t, toolIDs: map[string]*anthropicScriptState{}, tools: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the base URL for ANTHROPIC_BASE_URL.
func (f *fakeAnthropic) URL() string { return f.srv.URL }

// Script registers s; put the returned state's token in a prompt.
func (f *fakeAnthropic) Script(s anthropicScript) *anthropicScriptState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &anthropicScriptState{anthropicScript: s, scriptLog: newScriptLog[toolResult]("anthropic", len(f.scripts)+1)}
	f.scripts = append(f.scripts, st)
	return st
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// blocks returns the content blocks (a string content is one text block).
func (m anthropicMessage) blocks() []anthropicBlock {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}
	}
	var bs []anthropicBlock
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

type anthropicRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	Tools  []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Messages []anthropicMessage `json:"messages"`
}

func (r *anthropicRequest) hasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// resultText is the text of a tool_result's content (a string or blocks).
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var bs []anthropicBlock
	_ = json.Unmarshal(raw, &bs)
	var texts []string
	for _, b := range bs {
		texts = append(texts, b.Text)
	}
	return strings.Join(texts, "\n")
}

// anthropicReply is what the fake answers: text, or one tool call.
type anthropicReply struct {
	text   []string
	tool   string
	input  any
	script *anthropicScriptState // the script that made the tool call
}

func (f *fakeAnthropic) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.n++
	n := f.n
	f.received = append(f.received, body...)
	f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"input_tokens":5}`))
		return
	case r.Method == http.MethodHead || r.Method == http.MethodGet && r.URL.Path == "/":
		return // connectivity checks
	case r.Method != http.MethodPost || r.URL.Path != "/v1/messages":
		f.t.Logf("fake anthropic #%d: %s %s: 404", n, r.Method, r.URL)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"not_found_error","message":"not in the fake Anthropic API"}}`))
		return
	}
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		f.t.Logf("fake anthropic #%d: bad JSON body: %v", n, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	reply, what := f.decide(&req)
	f.t.Logf("fake anthropic #%d: %s (%d bytes, %d messages, %d tools): %s", n, r.URL, len(body), len(req.Messages), len(req.Tools), what)
	f.write(w, &req, n, reply)
}

// decide picks the reply from the newest user message.
func (f *fakeAnthropic) decide(req *anthropicRequest) (anthropicReply, string) {
	var last []anthropicBlock
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			last = req.Messages[i].blocks()
			break
		}
	}
	if len(req.Tools) == 0 {
		return anthropicReply{text: []string{"Fake title"}}, "side call without tools"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range last {
		if b.Type != "tool_result" {
			continue
		}
		s := f.toolIDs[b.ToolUseID]
		if s == nil {
			continue
		}
		s.mu.Lock()
		s.results = append(s.results, toolResult{Tool: f.tools[b.ToolUseID], Content: resultText(b.Content), IsError: b.IsError})
		s.mu.Unlock()
		return anthropicReply{text: s.Text}, fmt.Sprintf("%s: text after the %s result (error %v)", s.token, f.tools[b.ToolUseID], b.IsError)
	}
	for _, b := range last {
		if b.Type != "text" {
			continue
		}
		for _, s := range f.scripts {
			if !strings.Contains(b.Text, s.token) {
				continue
			}
			switch {
			case s.Write != nil && req.hasTool("Write"):
				return anthropicReply{tool: "Write", input: map[string]any{"file_path": s.Write.Path, "content": s.Write.Content}, script: s}, s.token + ": Write"
			case s.Tool != "" && req.hasTool(s.Tool):
				return anthropicReply{tool: s.Tool, input: s.Input, script: s}, s.token + ": " + s.Tool
			case s.Delegate != nil && req.hasTool("Agent"):
				d := s.Delegate
				return anthropicReply{tool: "Agent", input: map[string]any{"description": d.Description, "prompt": d.Prompt, "subagent_type": d.SubagentType}, script: s}, s.token + ": Agent"
			}
			return anthropicReply{text: s.Text}, s.token + ": text"
		}
	}
	return anthropicReply{text: fakeAnthropicText}, "no script"
}

// Received returns every request body the fake got, concatenated.
func (f *fakeAnthropic) Received() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.received...)
}

// write sends the reply as the Messages API does, streamed (SSE) or not.
func (f *fakeAnthropic) write(w http.ResponseWriter, req *anthropicRequest, n int, reply anthropicReply) {
	model := req.Model
	if model == "" {
		model = "fake"
	}
	usage := map[string]any{"input_tokens": 5, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	msg := map[string]any{"id": fmt.Sprintf("msg_fake_%d", n), "type": "message", "role": "assistant", "model": model,
		"stop_sequence": nil, "usage": usage}
	var toolID string
	if reply.tool != "" {
		toolID = fmt.Sprintf("toolu_fake_%d", n)
	}
	if !req.Stream {
		out := maps.Clone(msg)
		if toolID != "" {
			out["content"] = []any{map[string]any{"type": "tool_use", "id": toolID, "name": reply.tool, "input": reply.input}}
			out["stop_reason"] = "tool_use"
		} else {
			out["content"] = []any{map[string]any{"type": "text", "text": strings.Join(reply.text, "")}}
			out["stop_reason"] = "end_turn"
		}
		f.remember(toolID, reply)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(mustJSON(out))
		return
	}
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
	start := maps.Clone(msg)
	start["content"], start["stop_reason"] = []any{}, nil
	event("message_start", map[string]any{"message": start})
	stop := "end_turn"
	if toolID != "" {
		// Remembered before the stream ends: the result may come back
		// on another connection at once.
		f.remember(toolID, reply)
		event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "tool_use", "id": toolID, "name": reply.tool, "input": map[string]any{}}})
		event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(mustJSON(reply.input))}})
		stop = "tool_use"
	} else {
		event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, t := range reply.text {
			event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": t}})
		}
	}
	event("content_block_stop", map[string]any{"index": 0})
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 3}})
	event("message_stop", map[string]any{})
}

// remember binds a tool call the fake makes to the script that asked for it.
func (f *fakeAnthropic) remember(toolID string, reply anthropicReply) {
	if toolID == "" {
		return
	}
	f.mu.Lock()
	f.toolIDs[toolID] = reply.script
	f.tools[toolID] = reply.tool
	f.mu.Unlock()
	reply.script.mu.Lock()
	reply.script.calls++
	reply.script.mu.Unlock()
}

// postJSON posts body to url and returns the status, content type and body.
func postJSON(t *testing.T, url string, body any) (int, string, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(string(mustJSON(body))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestFakeAnthropicAPI pins the fake's wire format without Claude, so that
// a failure of TestClaude can be told apart from a broken fake.
func TestFakeAnthropicAPI(t *testing.T) {
	t.Parallel()
	f := startFakeAnthropic(t)
	write := f.Script(anthropicScript{Write: &fileWrite{Path: "/w/x.txt", Content: "new\n"}, Text: []string{"Done."}})
	deleg := f.Script(anthropicScript{Delegate: &anthropicDelegate{Description: "d", Prompt: "p", SubagentType: "general-purpose"}})
	tools := []any{map[string]any{"name": "Write"}, map[string]any{"name": "Agent"}}
	user := func(content any) map[string]any { return map[string]any{"role": "user", "content": content} }
	url := f.URL() + "/v1/messages?beta=true"

	if code, _, body := postJSON(t, f.URL()+"/v1/messages/count_tokens", map[string]any{}); code != 200 || body != `{"input_tokens":5}` {
		t.Errorf("count_tokens: %d %s", code, body)
	}
	if code, _, _ := postJSON(t, f.URL()+"/v1/other", map[string]any{}); code != 404 {
		t.Errorf("unknown path: %d, want 404", code)
	}
	// A side call without tools gets text, even naming a script.
	_, ctype, body := postJSON(t, url, map[string]any{"stream": true, "messages": []any{user("title for " + write.token)}})
	if ctype != "text/event-stream" || !strings.Contains(body, `"text":"Fake title"`) || strings.Contains(body, "tool_use") {
		t.Errorf("side call: %s %s", ctype, body)
	}
	// The token starts the Write; the tool_result gets the text.
	_, _, body = postJSON(t, url, map[string]any{"stream": true, "tools": tools, "messages": []any{
		user([]any{map[string]any{"type": "text", "text": "please " + write.token}})}})
	for _, want := range []string{"event: message_start", `"name":"Write"`, `\"file_path\":\"/w/x.txt\"`, `"stop_reason":"tool_use"`, "event: message_stop"} {
		if !strings.Contains(body, want) {
			t.Errorf("Write call lacks %s: %s", want, body)
		}
	}
	id := body[strings.Index(body, "toolu_fake_"):]
	id = id[:strings.IndexByte(id, '"')]
	_, _, body = postJSON(t, url, map[string]any{"stream": true, "tools": tools, "messages": []any{
		user("please " + write.token),
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "Write"}}},
		user([]any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": "refused", "is_error": true}}),
		map[string]any{"role": "system", "content": "a reminder"},
	}})
	if !strings.Contains(body, `"text":"Done."`) || strings.Contains(body, "tool_use") {
		t.Errorf("after the tool: %s", body)
	}
	if r := write.Results(); len(r) != 1 || r[0] != (toolResult{Tool: "Write", Content: "refused", IsError: true}) || write.ToolCalls() != 1 {
		t.Errorf("results %+v, calls %d", r, write.ToolCalls())
	}
	// Delegate calls Agent, not streamed here.
	_, ctype, body = postJSON(t, url, map[string]any{"tools": tools, "messages": []any{user(deleg.token)}})
	if ctype != "application/json" || !strings.Contains(body, `"name":"Agent"`) || !strings.Contains(body, `"subagent_type":"general-purpose"`) {
		t.Errorf("Agent call: %s %s", ctype, body)
	}
	// Anything else: the default text.
	if _, _, body := postJSON(t, url, map[string]any{"stream": true, "tools": tools, "messages": []any{user("hi")}}); !strings.Contains(body, fakeAnthropicText[1]) {
		t.Errorf("no script: %s", body)
	}
}
