package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func init() {
	// request METHOD JSON: a request (with an id) to the client, SESSION in
	// the JSON replaced by the session's id; say "answer: RESULT" or
	// "answer: error CODE".
	// say-bytes TEXT: an agent_message_chunk whose text is TEXT with each
	// "\xHH" written as that byte, whatever it makes of the line's UTF-8.
	fakeScriptExt["say-bytes"] = func(a *fakeAgent, s *fakeSession, rest string) {
		var text []byte
		for i := 0; i < len(rest); i++ {
			if strings.HasPrefix(rest[i:], `\x`) && i+4 <= len(rest) {
				if b, err := strconv.ParseUint(rest[i+2:i+4], 16, 8); err == nil {
					text = append(text, byte(b))
					i += 3
					continue
				}
			}
			text = append(text, rest[i])
		}
		line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + s.id + `","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + string(text) + `"}}}}` + "\n"
		a.writeRaw([]byte(line))
	}
	fakeScriptExt["request"] = func(a *fakeAgent, s *fakeSession, rest string) {
		method, params, _ := strings.Cut(rest, " ")
		res, rerr := a.call(method, json.RawMessage(strings.ReplaceAll(params, "SESSION", s.id)))
		if rerr != nil {
			a.say(s.id, fmt.Sprintf("answer: error %d", rerr.Code))
			return
		}
		a.say(s.id, "answer: "+string(res))
	}
}

// loggedSession starts a router with one fake agent, alpha, that logs the
// methods it gets to log, and opens a session.
func loggedSession(t *testing.T) (e *Editor, log, sid string) {
	t.Helper()
	log = filepath.Join(t.TempDir(), "alpha.log")
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{LogFile: log})}))
	e = StartRouter(t, cfg, nil)
	e.Initialize(t, nil)
	return e, log, e.NewSession(t, t.TempDir())
}

// TestNotificationAsRequest: a message with an id whose method the protocol
// sends only as a notification is a request for a method that has no
// request form. From either side the router answers it as an ACP peer does
// (-32601) and neither carries it out nor passes it on. Before, the
// editor's session/cancel or $/cancel_request with an id was never answered
// (the editor waited for ever), and an agent's session/update with an id
// went to the editor as a request its schema has no room for.
func TestNotificationAsRequest(t *testing.T) {
	t.Parallel()
	e, log, sid := loggedSession(t)

	for _, c := range []struct {
		method string
		params any
	}{
		{"session/cancel", map[string]any{"sessionId": sid}},
		{"$/cancel_request", map[string]any{"requestId": 1}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		_, rerr := e.Call(ctx, c.method, c.params)
		cancel()
		requireRPCError(t, c.method+" with an id", rerr, -32601, c.method+" is a notification")
	}
	// The same notifications without an id still work, and the requests
	// were not carried out: the agent got one session/cancel.
	if err := e.Notify("session/cancel", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	waitAgentLog(t, log, waitTimeout, "session/cancel at alpha", func(l string) bool { return l == "session/cancel" })

	e.MustPrompt(t, sid, `request session/update {"sessionId":"SESSION","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"smuggled"}}}`+
		"\n"+`request $/cancel_request {"requestId":99}`+
		"\n"+`request elicitation/complete {"elicitationId":"e-1"}`, "end_turn")
	texts := strings.Join(e.Texts(sid), "\n")
	if n := strings.Count(texts, "answer: error -32601"); n != 3 {
		t.Errorf("the agent's three notification methods sent as requests: %d answered -32601; the session's texts:\n%s", n, texts)
	}
	if strings.Contains(texts, "smuggled") {
		t.Errorf("an update sent as a request reached the editor: %q", texts)
	}
	for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.IsRequest() }) {
		switch m.Method {
		case "session/update", "$/cancel_request", "elicitation/complete":
			t.Errorf("the router sent the editor a request for a notification method: %s", m)
		}
	}
	if n := countLines(log, "session/cancel"); n != 1 {
		t.Errorf("the agent got %d session/cancel, want the one notification", n)
	}
}

// TestSessionParamsNeedSessionID: a request about one session whose params
// name none (no sessionId, one that is not a string, params that are an
// array) is -32602 saying so, for every such method. Before, session/close
// and session/delete answered {} having closed or deleted nothing, and the
// others said `unknown session ""`.
func TestSessionParamsNeedSessionID(t *testing.T) {
	t.Parallel()
	e, log, sid := loggedSession(t)
	for _, method := range []string{"session/prompt", "session/close", "session/delete", "session/set_mode", "session/set_config_option", "session/set_model"} {
		for _, p := range []any{map[string]any{}, map[string]any{"sessionId": 5}, []any{sid}} {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			_, rerr := e.Call(ctx, method, p)
			cancel()
			requireRPCError(t, fmt.Sprintf("%s %v", method, p), rerr, -32602, "params need a sessionId")
		}
	}
	// The session is still there: nothing was closed or deleted.
	e.MustPrompt(t, sid, "say still here", "end_turn")
	for _, l := range agentLog(log) {
		if l == "session/close" || l == "session/delete" {
			t.Errorf("the agent got %s", l)
		}
	}
}

// TestPolicyAmbiguousMembers: an agent's fs/read_text_file whose params
// name the path twice, as "path" (a secret) and "PATH" (a project file), is
// denied and never reaches the editor. Go's encoding/json reads the last of
// the two (the project file, which the policy allows); the editor reads
// "path". Before, the policy allowed it and the editor read the secret.
func TestPolicyAmbiguousMembers(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main"), 0o644)
	os.WriteFile(filepath.Join(cwd, ".env"), []byte("KEY=secret"), 0o644)
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	var mu sync.Mutex
	var read []string
	e.Handle("fs/read_text_file", func(p json.RawMessage) (any, *RPCError) {
		// As an editor in JavaScript or Rust reads it: the member named
		// exactly "path" (a map decode matches names exactly).
		var m map[string]json.RawMessage
		var path string
		json.Unmarshal(p, &m)
		json.Unmarshal(m["path"], &path)
		mu.Lock()
		read = append(read, path)
		mu.Unlock()
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &RPCError{Code: -32603, Message: err.Error()}
		}
		return map[string]string{"content": string(b)}, nil
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, fmt.Sprintf(`request fs/read_text_file {"sessionId":"SESSION","path":"%[1]s/.env","PATH":"%[1]s/main.go"}`+"\n"+
		`request fs/read_text_file {"sessionId":"SESSION","path":"%[1]s/main.go"}`, cwd), "end_turn")
	texts := strings.Join(e.Texts(sid), "\n")
	if !strings.Contains(texts, "answer: error -32603") || !strings.Contains(texts, `answer: {"content":"package main"}`) {
		t.Errorf("the agent was told:\n%s\nwant the ambiguous read refused and the plain one answered", texts)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(read) != 1 || read[0] != cwd+"/main.go" {
		t.Errorf("the editor read %q, want only %s/main.go", read, cwd)
	}
	var decisions []string
	for _, r := range readAudit(t, auditFile) {
		decisions = append(decisions, fmt.Sprintf("%s %s %s", r.Method, r.Decision, r.rule()))
	}
	if want := "fs/read_text_file deny acp-router:refused\nfs/read_text_file allow reads-in-project"; strings.Join(decisions, "\n") != want {
		t.Errorf("audit\n%s\nwant\n%s", strings.Join(decisions, "\n"), want)
	}
}

// TestAgentBytesNotUTF8: an agent's update whose text holds bytes that are
// not UTF-8 reaches the editor with them read as U+FFFD, as valid UTF-8 (a
// Rust editor reading lines as UTF-8, Zed among them, would end its whole
// connection to the router on the raw bytes), and the session goes on.
func TestAgentBytesNotUTF8(t *testing.T) {
	t.Parallel()
	e, _, sid := loggedSession(t)
	e.MustPrompt(t, sid, `say-bytes caf\xc3 au lait \xff\xfe!`+"\nsay after", "end_turn")
	for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.Method == "session/update" && m.Update() == "agent_message_chunk" }) {
		if !utf8.Valid(m.Raw) {
			t.Errorf("the editor got a line that is not UTF-8: %q", m.Raw)
		}
	}
	if texts := strings.Join(e.Texts(sid), "|"); texts != "caf\uFFFD au lait \uFFFD!|after" {
		t.Errorf("the editor read %q", texts)
	}
}
