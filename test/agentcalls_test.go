package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAgentCallsTranslated pins agent → editor traffic other than updates
// (DESIGN §5): extension requests and notifications reach the editor with
// the router's session id, URL elicitation ids of two agents are kept apart
// (also in elicitation/complete), a request-scoped elicitation names the
// editor's own request id, and an editor without elicitation never sees one.
func TestAgentCallsTranslated(t *testing.T) {
	t.Parallel()
	dirB := t.TempDir()
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{})}, // colliding session ids
		"default: alpha", "rules:", cwdRule(dirB, "beta"),
	))
	e := StartRouter(t, cfg, nil)
	var mu sync.Mutex
	var asks, elicits []json.RawMessage
	e.Handle("_fake/ask", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		defer mu.Unlock()
		asks = append(asks, p)
		return map[string]string{"answer": "42"}, nil
	})
	e.Handle("elicitation/create", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		defer mu.Unlock()
		elicits = append(elicits, p)
		return map[string]string{"action": "decline"}, nil
	})
	e.Initialize(t, map[string]any{"elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}}})
	sidA := e.NewSession(t, t.TempDir())
	sidB := e.NewSession(t, dirB)
	if sidA == sidB {
		t.Fatalf("colliding session ids not rewritten: %q", sidA)
	}

	// Both agents use URL elicitation id e1 while both are outstanding.
	e.MustPrompt(t, sidB, "ext-request\next-notify\nelicit-url e1", "end_turn")
	promptA, err := e.Prompt(waitTimeout, sidA, "elicit-url e1\nelicit-complete e1\nelicit-request")
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, promptA, "end_turn")
	e.MustPrompt(t, sidB, "elicit-complete e1", "end_turn")

	mu.Lock()
	defer mu.Unlock()
	if len(asks) != 1 || jsonString(asks[0], "sessionId") != sidB {
		t.Errorf("_fake/ask params %s, want one with sessionId %q", asks, sidB)
	}
	if !strings.Contains(strings.Join(e.Texts(sidB), "\n"), `ext: {"answer":"42"}`) {
		t.Errorf("the agent did not get the editor's answer: %q", e.Texts(sidB))
	}
	notes := e.Rec.Filter(func(m *Msg) bool { return m.Method == "_fake/note" })
	if len(notes) != 1 || jsonString(notes[0].Params, "sessionId") != sidB {
		t.Errorf("_fake/note: %v, want one with sessionId %q", notes, sidB)
	}

	if len(elicits) != 3 {
		t.Fatalf("editor got %d elicitations, want 3: %s", len(elicits), elicits)
	}
	idB, idA := jsonString(elicits[0], "elicitationId"), jsonString(elicits[1], "elicitationId")
	if idB == "" || idA == "" || idA == idB {
		t.Errorf("URL elicitation ids of two agents: %q and %q, want distinct", idB, idA)
	}
	if jsonString(elicits[0], "sessionId") != sidB || jsonString(elicits[1], "sessionId") != sidA {
		t.Errorf("elicitation session ids not translated: %s", elicits[:2])
	}
	var completes []string
	for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.Method == "elicitation/complete" }) {
		completes = append(completes, jsonString(m.Params, "elicitationId"))
	}
	if strings.Join(completes, ",") != idA+","+idB {
		t.Errorf("elicitation/complete ids %q, want %q (alpha's) then %q (beta's)", completes, idA, idB)
	}
	requireJSON(t, "request-scoped elicitation requestId", jsonPath(elicits[2], "requestId"), string(promptA.ID))
}

// TestElicitationNotAdvertised pins that an agent's elicitation is answered
// by the router (-32601) when the editor did not advertise elicitation.
func TestElicitationNotAdvertised(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}))
	e := StartRouter(t, cfg, nil)
	e.Handle("elicitation/create", func(p json.RawMessage) (any, *RPCError) {
		t.Errorf("elicitation reached an editor that did not advertise it: %s", p)
		return map[string]string{"action": "decline"}, nil
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "elicit-url e1", "end_turn")
	if got := strings.Join(e.Texts(sid), "\n"); !strings.Contains(got, "elicit error: -32601") {
		t.Errorf("agent got %q, want the router's -32601", got)
	}
}

// TestSessionMethodsRouted pins that session-scoped requests reach the
// session's agent with the agent's own session id (here a rewritten one),
// that session/close goes to an agent that supports it and is answered by
// the router for one that does not, and that a closed session is gone.
func TestSessionMethodsRouted(t *testing.T) {
	t.Parallel()
	dirB := t.TempDir()
	logA := filepath.Join(t.TempDir(), "alpha.log")
	logB := filepath.Join(t.TempDir(), "beta.log")
	withClose := json.RawMessage(`{"protocolVersion":1,"agentCapabilities":{"sessionCapabilities":{"close":{}}},"authMethods":[]}`)
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("alpha", fakeOpts{LogFile: logA}), fakeAgentYAML("beta", fakeOpts{LogFile: logB, InitResult: withClose})},
		"default: alpha", "rules:", cwdRule(dirB, "beta"),
	))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sidA := e.NewSession(t, t.TempDir())
	sidB := e.NewSession(t, dirB)
	if sidB == "sess-1" {
		t.Fatalf("beta's colliding id was not rewritten")
	}
	for _, c := range []struct {
		method string
		params map[string]any
	}{
		{"session/set_mode", map[string]any{"sessionId": sidB, "modeId": "plan"}},
		{"session/set_config_option", map[string]any{"sessionId": sidB, "configId": "model", "value": "big"}},
		{"session/set_model", map[string]any{"sessionId": sidB, "modelId": "big"}},
		{"session/close", map[string]any{"sessionId": sidB}},
	} {
		if _, rerr := e.Call(context.Background(), c.method, c.params); rerr != nil {
			t.Errorf("%s: %v", c.method, rerr)
		}
		waitAgentLog(t, logB, waitTimeout, c.method+" on beta", func(l string) bool { return l == c.method })
	}
	if _, rerr := e.Call(context.Background(), "session/close", map[string]any{"sessionId": sidA}); rerr != nil {
		t.Errorf("session/close on an agent without close: %v", rerr)
	}
	for _, sid := range []string{sidA, sidB} {
		_, rerr := e.Call(context.Background(), "session/prompt", promptReq(sid, "say hi"))
		if rerr == nil || rerr.Code != -32602 {
			t.Errorf("prompt after close: %v, want -32602 unknown session", rerr)
		}
	}
	for _, l := range agentLog(logA) {
		if l == "session/close" {
			t.Errorf("alpha got session/close though it does not advertise close")
		}
	}
}

// TestPendingRequestsBounded pins STYLE.md "bound everything": an agent can
// have at most 1024 requests waiting for the editor; more are refused by the
// router with -32603 and never reach the editor.
func TestPendingRequestsBounded(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}))
	e := StartRouter(t, cfg, nil)
	release := make(chan struct{})
	e.Handle("_fake/ask", func(json.RawMessage) (any, *RPCError) {
		<-release
		return map[string]any{}, nil
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	_, wait, err := e.Go("session/prompt", promptReq(sid, "ext-flood 1100 76"))
	if err != nil {
		t.Fatal(err)
	}
	// The agent says so once the router refused 76, so once it read all
	// 1100: every request it relayed was on the editor's lane before
	// that text, and so recorded before it.
	e.WaitText(t, sid, "flood: 76 refused")
	if n := len(e.Rec.Filter(func(m *Msg) bool { return m.Method == "_fake/ask" })); n != 1024 {
		t.Errorf("the editor got %d requests, want the bound, 1024", n)
	}
	close(release)
	if _, err := wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.Texts(sid), "\n"); !strings.Contains(got, "flood: refused=76") {
		t.Errorf("agent says %q, want 76 refused", got)
	}
}
