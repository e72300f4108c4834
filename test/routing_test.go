package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

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
