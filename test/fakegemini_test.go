package test

// The fake Gemini API: a loopback HTTP server that stands in for the Gemini
// Developer API (generativelanguage.googleapis.com) so that the real Gemini
// CLI runs end to end with no network and no credential. It is a Go port of
// gemini.mjs (shared notes, real-peers.md, appendix B), scriptable per test:
// each script is selected by a token the test puts in its prompt text.
//
// What Gemini CLI 0.61.0 sends (measured, testdata/real-agents/gemini-cli-*):
//   - POST /v1beta/models/MODEL:generateContent for its side calls (model
//     routing, the next-speaker check): it parses the reply's text as JSON;
//   - POST /v1beta/models/MODEL:streamGenerateContent?alt=sse for the turn:
//     SSE "data:" lines, each a GenerateContentResponse;
//   - POST .../MODEL:countTokens, sometimes.
// Anything else is answered 404, and every request is logged with t.Logf.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// geminiScript is what the fake answers to the turns whose user text holds
// its token.
type geminiScript struct {
	// Text is the reply, one SSE event per element.
	Text []string
	// WriteFile, when set, makes the first reply a write_file functionCall
	// (Gemini CLI's tool: it reads the file with fs/read_text_file, asks
	// session/request_permission, then calls fs/write_text_file). The
	// reply to the functionResponse is Text.
	WriteFile *geminiWrite
	// Call, when set, makes the first reply a call of this tool (read_file,
	// run_shell_command ...) with Args; the reply to its functionResponse
	// is Text.
	Call *geminiCall
	// Delay, when set, holds the stream after the first element of Text
	// for this long (or until the client goes away), then sends the rest:
	// a slow model, to cancel mid-stream.
	Delay time.Duration
}

type geminiCall struct {
	Name string
	Args map[string]any
}

type geminiWrite struct {
	Path    string // absolute
	Content string
}

// geminiScriptState is a script and what the fake saw of its turns.
type geminiScriptState struct {
	geminiScript
	token string

	mu          sync.Mutex
	streams     int      // :streamGenerateContent calls
	fnResponses []string // functionResponse parts received, as JSON
	userTexts   []string // the latest user content's text, per stream call
	// conversations are all the texts of the request's contents, per
	// stream call: what the model was given as the conversation so far.
	conversations []string
	// firstSent is closed when a delayed stream wrote its first event;
	// aborted when the client dropped it before the delay ran out.
	firstSent, aborted   chan struct{}
	firstOnce, abortOnce sync.Once
}

// FunctionResponses returns the functionResponse parts the fake received
// for this script, as JSON.
func (s *geminiScriptState) FunctionResponses() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.fnResponses...)
}

// Streams returns how many streamGenerateContent calls the script answered.
func (s *geminiScriptState) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams
}

// fakeGemini is one fake API server.
type fakeGemini struct {
	t    testing.TB
	srv  *httptest.Server
	done chan struct{} // closed at cleanup: delayed streams return

	mu      sync.Mutex
	n       int // requests received
	scripts []*geminiScriptState
	counts  map[string]int // requests by kind, for the tests of the fake
	// received is every request body, for tests that assert what never
	// reached the model.
	received []byte
}

// fakeGeminiText is the reply to a turn that matches no script.
var fakeGeminiText = []string{"Hello", " from the fake Gemini."}

// startFakeGemini starts a fake Gemini API on 127.0.0.1 (random port),
// closed in t.Cleanup. Register its cleanup before starting the agents that
// use it, so that it outlives them.
func startFakeGemini(t testing.TB) *fakeGemini {
	t.Helper()
	f := &fakeGemini{t: t, done: make(chan struct{}), counts: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.done)
		f.srv.Close()
	})
	return f
}

// URL is the base URL for GOOGLE_GEMINI_BASE_URL.
func (f *fakeGemini) URL() string { return f.srv.URL }

// Script registers s and returns the state the test inspects; put
// state.token in the prompt text to select it.
func (f *fakeGemini) Script(s geminiScript) *geminiScriptState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &geminiScriptState{
		geminiScript: s,
		// Brackets delimit it: "script 1" must not match "script 10".
		token:     fmt.Sprintf("[fake-gemini script %d]", len(f.scripts)+1),
		firstSent: make(chan struct{}),
		aborted:   make(chan struct{}),
	}
	f.scripts = append(f.scripts, st)
	return st
}

// Count returns how many requests of kind ("generateContent",
// "streamGenerateContent", "countTokens", "404") the fake answered.
func (f *fakeGemini) Count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[kind]
}

// Request bodies: only what the fake reads.
type geminiPart struct {
	Text             string          `json:"text,omitempty"`
	FunctionCall     json.RawMessage `json:"functionCall,omitempty"`
	FunctionResponse json.RawMessage `json:"functionResponse,omitempty"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

type geminiRequest struct {
	Contents []geminiContent `json:"contents"`
}

// scriptFor returns the script whose token is in the latest user text of
// the conversation (nil for none), and the functionResponse parts of the
// last content (this turn's tool results).
func (f *fakeGemini) scriptFor(req *geminiRequest) (*geminiScriptState, []json.RawMessage) {
	var fnResp []json.RawMessage
	if n := len(req.Contents); n > 0 {
		for _, p := range req.Contents[n-1].Parts {
			if len(p.FunctionResponse) > 0 {
				fnResp = append(fnResp, p.FunctionResponse)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(req.Contents) - 1; i >= 0; i-- {
		c := req.Contents[i]
		if c.Role != "user" {
			continue
		}
		// The newest token wins: a handoff brief before the prompt may
		// name earlier scripts' tokens.
		var found *geminiScriptState
		atPart, at := -1, -1
		for pi, p := range c.Parts {
			for _, s := range f.scripts {
				if i := strings.LastIndex(p.Text, s.token); i >= 0 && (pi > atPart || (pi == atPart && i > at)) {
					found, atPart, at = s, pi, i
				}
			}
		}
		if found != nil {
			return found, fnResp
		}
	}
	return nil, fnResp
}

func (f *fakeGemini) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.counts[kind]++
	return f.n
}

func (f *fakeGemini) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Logf("fake gemini: %s %s: reading the body: %v", r.Method, r.URL, err)
		return
	}
	f.mu.Lock()
	f.received = append(f.received, body...)
	f.mu.Unlock()
	var kind string
	switch {
	case r.Method != http.MethodPost:
	case strings.HasSuffix(r.URL.Path, ":countTokens"):
		kind = "countTokens"
	case strings.HasSuffix(r.URL.Path, ":generateContent"):
		kind = "generateContent"
	case strings.HasSuffix(r.URL.Path, ":streamGenerateContent") && r.URL.Query().Get("alt") == "sse":
		kind = "streamGenerateContent"
	}
	if kind == "" {
		n := f.count("404")
		f.t.Logf("fake gemini #%d: %s %s (%d bytes): 404", n, r.Method, r.URL, len(body))
		http.Error(w, `{"error":{"code":404,"message":"not in the fake Gemini API","status":"NOT_FOUND"}}`, http.StatusNotFound)
		return
	}
	n := f.count(kind)
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		f.t.Logf("fake gemini #%d: %s %s: bad JSON body: %v", n, r.Method, r.URL, err)
		http.Error(w, `{"error":{"code":400,"message":"bad JSON","status":"INVALID_ARGUMENT"}}`, http.StatusBadRequest)
		return
	}
	script, fnResp := f.scriptFor(&req)
	token := "(no script)"
	if script != nil {
		token = script.token
	}
	f.t.Logf("fake gemini #%d: %s %s (%d bytes, %d contents) %s functionResponses=%d",
		n, r.Method, r.URL, len(body), len(req.Contents), token, len(fnResp))

	switch kind {
	case "countTokens":
		writeGeminiJSON(w, map[string]any{"totalTokens": 8})
	case "generateContent":
		// Side calls (model routing, next speaker) parse the text as JSON;
		// these fields satisfy all of them (gemini.mjs).
		writeGeminiJSON(w, geminiCandidate([]any{map[string]any{"text": `{"reasoning":"fake","model_choice":"flash",` +
			`"complexity_reasoning":"fake","complexity_score":1,"next_speaker":"user"}`}}, true))
	case "streamGenerateContent":
		if script != nil {
			script.mu.Lock()
			script.userTexts = append(script.userTexts, latestUserText(&req))
			script.conversations = append(script.conversations, conversationText(&req))
			script.mu.Unlock()
		}
		f.stream(w, r, script, fnResp)
	}
}

// Received returns every request body the fake got, concatenated.
func (f *fakeGemini) Received() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.received...)
}

// latestUserText joins the text parts of the last user content.
func latestUserText(req *geminiRequest) string {
	for i := len(req.Contents) - 1; i >= 0; i-- {
		if c := req.Contents[i]; c.Role == "user" {
			var texts []string
			for _, p := range c.Parts {
				texts = append(texts, p.Text)
			}
			return strings.Join(texts, "\n")
		}
	}
	return ""
}

// conversationText joins the text parts of every content of the request.
func conversationText(req *geminiRequest) string {
	var texts []string
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// Conversations are the whole conversations the model got for the
// script's turns.
func (s *geminiScriptState) Conversations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.conversations...)
}

// UserTexts are the user texts the model got for the script's turns.
func (s *geminiScriptState) UserTexts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.userTexts...)
}

func (f *fakeGemini) stream(w http.ResponseWriter, r *http.Request, s *geminiScriptState, fnResp []json.RawMessage) {
	if s == nil {
		s = &geminiScriptState{geminiScript: geminiScript{Text: fakeGeminiText}}
	} else {
		s.mu.Lock()
		s.streams++
		for _, fr := range fnResp {
			s.fnResponses = append(s.fnResponses, string(fr))
		}
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	event := func(v any) {
		fmt.Fprintf(w, "data: %s\n\n", mustJSON(v))
		if flusher != nil {
			flusher.Flush()
		}
	}
	if s.WriteFile != nil && len(fnResp) == 0 {
		event(geminiCandidate([]any{map[string]any{"functionCall": map[string]any{
			"name": "write_file",
			"args": map[string]any{"file_path": s.WriteFile.Path, "content": s.WriteFile.Content},
		}}}, true))
		return
	}
	if s.Call != nil && len(fnResp) == 0 {
		event(geminiCandidate([]any{map[string]any{"functionCall": map[string]any{"name": s.Call.Name, "args": s.Call.Args}}}, true))
		return
	}
	for i, text := range s.Text {
		event(geminiCandidate([]any{map[string]any{"text": text}}, i == len(s.Text)-1))
		if i == 0 && s.Delay > 0 {
			s.firstOnce.Do(func() { close(s.firstSent) })
			select {
			case <-time.After(s.Delay):
			case <-r.Context().Done():
				f.t.Logf("fake gemini: the client dropped the stream of %s after its first event", s.token)
				s.abortOnce.Do(func() { close(s.aborted) })
				return
			case <-f.done:
				return
			}
		}
	}
}

// geminiCandidate is one GenerateContentResponse with parts from the model.
func geminiCandidate(parts []any, last bool) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
	if last {
		cand["finishReason"] = "STOP"
	}
	return map[string]any{
		"candidates":    []any{cand},
		"usageMetadata": map[string]any{"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8},
		"modelVersion":  "fake",
	}
}

func writeGeminiJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(mustJSON(v))
}

// TestFakeGeminiAPI pins the fake's wire format without Gemini CLI, so that
// a failure of TestGemini can be told apart from a broken fake.
func TestFakeGeminiAPI(t *testing.T) {
	t.Parallel()
	f := startFakeGemini(t)
	write := f.Script(geminiScript{WriteFile: &geminiWrite{Path: "/w/x.txt", Content: "new\n"}, Text: []string{"Done."}})
	slow := f.Script(geminiScript{Text: []string{"Hello", " (late)"}, Delay: 50 * time.Millisecond})
	client := &http.Client{Timeout: 10 * time.Second}

	post := func(path string, body any) (int, string, string) {
		t.Helper()
		resp, err := client.Post(f.URL()+path, "application/json", strings.NewReader(string(mustJSON(body))))
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
	user := func(parts ...any) map[string]any {
		return map[string]any{"contents": []any{map[string]any{"role": "user", "parts": parts}}}
	}
	const streamPath = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
	sse := func(events ...map[string]any) string {
		var b strings.Builder
		for _, e := range events {
			fmt.Fprintf(&b, "data: %s\n\n", mustJSON(e))
		}
		return b.String()
	}
	text := func(s string, last bool) map[string]any {
		return geminiCandidate([]any{map[string]any{"text": s}}, last)
	}

	t.Run("text", func(t *testing.T) {
		code, ctype, body := post(streamPath, user(map[string]any{"text": "Say hello"}))
		want := sse(text("Hello", false), text(" from the fake Gemini.", true))
		if code != 200 || ctype != "text/event-stream" || body != want {
			t.Errorf("got %d %q %q, want 200 text/event-stream %q", code, ctype, body, want)
		}
	})
	t.Run("write", func(t *testing.T) {
		_, _, body := post(streamPath, user(map[string]any{"text": "please " + write.token}))
		want := sse(geminiCandidate([]any{map[string]any{"functionCall": map[string]any{
			"name": "write_file", "args": map[string]any{"file_path": "/w/x.txt", "content": "new\n"}}}}, true))
		if body != want {
			t.Errorf("tool call: got %q, want %q", body, want)
		}
		// The follow-up carries the whole conversation, the tool result last.
		req := map[string]any{"contents": []any{
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "please " + write.token}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"functionCall": map[string]any{"name": "write_file"}}}},
			map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{"name": "write_file", "response": map[string]any{"output": "ok"}}}}},
		}}
		if _, _, body := post(streamPath, req); body != sse(text("Done.", true)) {
			t.Errorf("after the tool: got %q", body)
		}
		if got := write.FunctionResponses(); len(got) != 1 || !jsonEqual([]byte(got[0]), []byte(`{"name":"write_file","response":{"output":"ok"}}`)) {
			t.Errorf("function responses recorded: %q", got)
		}
		if write.Streams() != 2 {
			t.Errorf("streams = %d, want 2", write.Streams())
		}
	})
	t.Run("slow", func(t *testing.T) {
		start := time.Now()
		_, _, body := post(streamPath, user(map[string]any{"text": slow.token}))
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("the slow stream took %v, want at least its 50ms delay", d)
		}
		if want := sse(text("Hello", false), text(" (late)", true)); body != want {
			t.Errorf("got %q, want %q", body, want)
		}
	})
	t.Run("any tool", func(t *testing.T) {
		shell := f.Script(geminiScript{Call: &geminiCall{"run_shell_command", map[string]any{"command": "cat x"}}, Text: []string{"Ran."}})
		_, _, body := post(streamPath, user(map[string]any{"text": "run " + shell.token}))
		want := sse(geminiCandidate([]any{map[string]any{"functionCall": map[string]any{
			"name": "run_shell_command", "args": map[string]any{"command": "cat x"}}}}, true))
		if body != want {
			t.Errorf("tool call: got %q, want %q", body, want)
		}
		if !strings.Contains(string(f.Received()), "run "+shell.token) {
			t.Errorf("Received lacks the request")
		}
	})
	t.Run("side calls", func(t *testing.T) {
		code, ctype, body := post("/v1beta/models/gemini-x:generateContent", user(map[string]any{"text": "route this"}))
		var resp struct {
			Candidates []struct {
				Content struct {
					Parts []struct {
						Text string `json:"text"`
					} `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
		}
		if code != 200 || ctype != "application/json" || json.Unmarshal([]byte(body), &resp) != nil || len(resp.Candidates) != 1 {
			t.Fatalf("generateContent: %d %q %s", code, ctype, body)
		}
		var routing struct {
			ComplexityReasoning *string `json:"complexity_reasoning"`
			ComplexityScore     *int    `json:"complexity_score"`
			NextSpeaker         string  `json:"next_speaker"`
		}
		if err := json.Unmarshal([]byte(resp.Candidates[0].Content.Parts[0].Text), &routing); err != nil ||
			routing.ComplexityReasoning == nil || routing.ComplexityScore == nil || routing.NextSpeaker != "user" {
			t.Errorf("generateContent text is not the routing JSON: %s", body)
		}
		if code, _, body := post("/v1beta/models/gemini-x:countTokens", user()); code != 200 || !jsonEqual([]byte(body), []byte(`{"totalTokens":8}`)) {
			t.Errorf("countTokens: %d %s", code, body)
		}
		if code, _, _ := post("/v1beta/models", nil); code != 404 {
			t.Errorf("unknown path: %d, want 404", code)
		}
		if code, _, _ := post("/v1beta/models/gemini-x:streamGenerateContent", user()); code != 404 {
			t.Errorf("stream without alt=sse: %d, want 404", code)
		}
		if f.Count("404") != 2 || f.Count("countTokens") != 1 || f.Count("generateContent") != 1 {
			t.Errorf("counts: 404 %d, countTokens %d, generateContent %d; want 2, 1, 1",
				f.Count("404"), f.Count("countTokens"), f.Count("generateContent"))
		}
	})
}
