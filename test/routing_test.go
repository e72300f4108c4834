package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitializeAndRouting pins the router's initialize answer (protocol 1,
// agentInfo.name "acp-router"), routing by routing.default and cwd rules,
// and session ids: the first downstream id passes unchanged, a colliding one
// from a second agent is rewritten and translated back.
func TestInitializeAndRouting(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	cfg := writeConfig(t, routerYAML(t,
		[]string{
			fakeAgentYAML("alpha", fakeOpts{}),
			fakeAgentYAML("beta", fakeOpts{}), // same "sess-" prefix: ids collide
		},
		"default: alpha",
		"rules:",
		cwdRule(dirB, "beta"),
	))
	e := StartRouter(t, cfg, nil)

	res := e.Initialize(t, capsAll)
	requireJSON(t, "protocolVersion", jsonPath(res, "protocolVersion"), `1`)
	if got := jsonString(res, "agentInfo", "name"); got != "acp-router" {
		t.Fatalf("agentInfo.name = %q, want acp-router (result %s)", got, res)
	}

	sidA := e.NewSession(t, dirA)
	if sidA != "sess-1" {
		t.Errorf("first session id = %q, want the downstream id sess-1 unchanged", sidA)
	}
	sidB := e.NewSession(t, dirB)
	sidB2 := e.NewSession(t, filepath.Join(dirB, "sub", "dir")) // "DIR/**" matches below DIR
	sidA2 := e.NewSession(t, t.TempDir())                       // no rule matches: default
	ids := map[string]bool{}
	for _, id := range []string{sidA, sidB, sidB2, sidA2} {
		if ids[id] {
			t.Fatalf("session ids %q, %q, %q, %q are not distinct", sidA, sidB, sidB2, sidA2)
		}
		ids[id] = true
	}

	for sid, want := range map[string]string{sidA: "alpha", sidB: "beta", sidB2: "beta", sidA2: "alpha"} {
		e.MustPrompt(t, sid, "whoami", "end_turn")
		if got := e.Texts(sid); len(got) != 1 || got[0] != want {
			t.Errorf("session %s answered by %q, want %q", sid, got, want)
		}
	}
	// Updates carry the editor's ids, never a downstream id that the router
	// rewrote.
	for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.Method == "session/update" }) {
		if !ids[m.SessionID()] {
			t.Errorf("update for unknown session %q: %s", m.SessionID(), m)
		}
	}
}

// requireAgentError checks the error the router returns for a failed agent:
// -32603, the agent named in message, data.agent = agent.
func requireAgentError(t testing.TB, what string, e *RPCError, agent string) {
	t.Helper()
	switch {
	case e == nil:
		t.Fatalf("%s succeeded, want an error naming agent %q", what, agent)
	case e.Code == codeNoResponse:
		t.Fatalf("%s: %s", what, e.Message)
	}
	if e.Code != -32603 {
		t.Errorf("%s: error code %d, want -32603 (%v)", what, e.Code, e)
	}
	if !strings.Contains(e.Message, agent) {
		t.Errorf("%s: error message %q does not name agent %q", what, e.Message, agent)
	}
	if got := jsonString(e.Data, "agent"); got != agent {
		t.Errorf("%s: data.agent = %q, want %q (data %s)", what, got, agent, truncate(string(e.Data), 1000))
	}
}

// stderrTail returns data.stderrTail as text, whether the router sends a
// string or a list of lines.
func stderrTail(e *RPCError) string {
	raw := jsonPath(e.Data, "stderrTail")
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, "\n")
	}
	return string(raw)
}

// TestUnknownMethodsForwarded pins DESIGN §5: methods the router does not
// know (requests and notifications) go to the agent of the session they
// name, else to the routing default agent, and the agent's answer (result
// or error) is relayed.
func TestUnknownMethodsForwarded(t *testing.T) {
	t.Parallel()
	dirB := t.TempDir()
	logA := filepath.Join(t.TempDir(), "alpha.log")
	logB := filepath.Join(t.TempDir(), "beta.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("alpha", fakeOpts{LogFile: logA}), fakeAgentYAML("beta", fakeOpts{LogFile: logB})},
		"default: alpha",
		"rules:",
		cwdRule(dirB, "beta"),
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sidB := e.NewSession(t, dirB)

	// No session: the default agent answers.
	res := e.MustCall(t, "_fake/echo", map[string]any{"a": []any{1, "two"}, "b": map[string]any{"c": nil}})
	requireJSON(t, "_fake/echo result", res, `{"a":[1,"two"],"b":{"c":null}}`)
	waitAgentLog(t, logA, waitTimeout, "_fake/echo on alpha", func(l string) bool { return l == "_fake/echo" })

	// A session of beta: beta answers.
	e.MustCall(t, "_fake/echo", map[string]any{"sessionId": sidB, "n": 1})
	waitAgentLog(t, logB, waitTimeout, "_fake/echo on beta", func(l string) bool { return l == "_fake/echo" })

	// The agent's own -32601 is relayed.
	_, rerr := e.Call(context.Background(), "_no/such_method", map[string]any{"sessionId": sidB})
	if rerr == nil || rerr.Code != -32601 || jsonString(rerr.Data, "method") != "_no/such_method" {
		t.Errorf("_no/such_method: %v, want the agent's -32601 with data.method", rerr)
	}
	waitAgentLog(t, logB, waitTimeout, "_no/such_method on beta", func(l string) bool { return l == "_no/such_method" })

	// Notifications take the same way.
	e.Notify("_fake/ping", map[string]any{"sessionId": sidB})
	waitAgentLog(t, logB, waitTimeout, "_fake/ping on beta", func(l string) bool { return l == "_fake/ping" })
	e.Notify("_fake/pong", map[string]any{})
	waitAgentLog(t, logA, waitTimeout, "_fake/pong on alpha", func(l string) bool { return l == "_fake/pong" })
}
