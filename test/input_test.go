package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// nullIDErrors returns the error responses with id null (or no id).
func nullIDErrors(e *Editor) []*Msg {
	return e.Rec.Filter(func(m *Msg) bool { return m.IsResponse() && !hasID(m.ID) })
}

// TestMalformedInput pins DESIGN §7: a malformed line from the editor gets
// -32700 with id null, valid JSON that is not JSON-RPC gets -32600, empty
// lines are ignored, and the connection stays up.
func TestMalformedInput(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)

	cases := []struct {
		line string
		code int
	}{
		{`{this is not json`, -32700},
		{`{"jsonrpc":"2.0","id":"x1","method":"session/new","params":`, -32700},
		{`{"foo":1}`, -32600},
	}
	last := -1
	for _, c := range cases {
		if err := e.SendLine(""); err != nil { // ignored
			t.Fatal(err)
		}
		if err := e.SendLine(c.line); err != nil {
			t.Fatal(err)
		}
		m := e.Rec.WaitFor(t, 5*time.Second, fmt.Sprintf("error %d for %q", c.code, c.line), func(m *Msg) bool {
			return m.Seq > last && m.IsResponse() && !hasID(m.ID)
		})
		last = m.Seq
		if m.Error == nil || m.Error.Code != c.code {
			t.Errorf("answer to %q: %s, want error %d", c.line, m, c.code)
		}
		var obj map[string]json.RawMessage
		_ = json.Unmarshal(m.Raw, &obj)
		if id, ok := obj["id"]; !ok || string(id) != "null" {
			t.Errorf("answer to %q has no \"id\":null member: %s", c.line, m.Raw)
		}
	}

	// Still up: a normal session works.
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say fine", "end_turn")
	if n := len(nullIDErrors(e)); n != len(cases) {
		t.Errorf("%d id-less error responses, want %d (empty lines must be ignored)", n, len(cases))
	}
}

// TestHugeMessages pins DESIGN §7 "no size limit below 64 MiB per message"
// in both directions: a 20 MiB prompt reaches the agent whole, and a 20 MiB
// update reaches the editor before the prompt response.
func TestHugeMessages(t *testing.T) {
	skipShort(t, "relays 20 MiB messages both ways, 12 s of CPU")
	t.Parallel()
	const size = 20 << 20
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	m, err := e.Prompt(time.Minute, sid, "echo-size", strings.Repeat("x", size))
	if err != nil {
		t.Fatalf("%v (errors without id: %v)", err, nullIDErrors(e))
	}
	requireStop(t, m, "end_turn")
	var got int
	if texts := e.Texts(sid); len(texts) != 1 || func() bool { _, err := fmt.Sscanf(texts[0], "size: %d", &got); return err != nil }() {
		t.Fatalf("chunks %q", truncate(strings.Join(texts, "|"), 200))
	}
	if got < size || got > size+4096 {
		t.Errorf("the agent received params of %d bytes, want a little more than %d", got, size)
	}

	m, err = e.Prompt(time.Minute, sid, fmt.Sprintf("big %d", size))
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "end_turn")
	big := e.Rec.Filter(func(x *Msg) bool { txt, ok := x.ChunkText(sid); return ok && len(txt) == size })
	if len(big) != 1 {
		t.Fatalf("%d chunks of %d bytes reached the editor, want 1", len(big), size)
	}
	if big[0].Seq > m.Seq {
		t.Errorf("the 20 MiB update arrived after the prompt response")
	}
	if txt, _ := big[0].ChunkText(sid); strings.Trim(txt, "b") != "" {
		t.Errorf("the 20 MiB update was altered")
	}
}

// TestIdlessErrorAgent pins STYLE "ids": an agent that writes error
// responses without id (Codex does, even to notifications) must not break
// its other calls: initialize (the agent writes one such error while it is
// pending, and the editor sends a notification meanwhile) and prompts
// succeed, and the stray errors never reach the editor.
func TestIdlessErrorAgent(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("codexy", fakeOpts{IdlessErrorAfterNotification: true, IdlessErrorBeforeInit: true, InitDelay: "500ms"})},
		"default: codexy",
	))
	e := StartRouter(t, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	initDone := make(chan *RPCError, 1)
	go func() {
		_, rerr := e.Call(ctx, "initialize", map[string]any{
			"protocolVersion": 1, "clientCapabilities": capsAll,
			"clientInfo": map[string]any{"name": "e2e-editor", "version": "1"},
		})
		initDone <- rerr
	}()
	// An extension notification goes to the default agent, which answers it
	// with an id-less error while initialize is still pending.
	time.Sleep(50 * time.Millisecond)
	_ = e.Notify("_e2e/ping", map[string]any{})
	if rerr := <-initDone; rerr != nil {
		t.Fatalf("initialize: %v", rerr)
	}

	sid := e.NewSession(t, t.TempDir())
	for i := range 3 {
		_ = e.Notify("session/cancel", map[string]any{"sessionId": sid}) // idle session: only provokes the error
		e.MustPrompt(t, sid, fmt.Sprintf("sleep 100ms\nsay ok %d", i), "end_turn")
		e.WaitText(t, sid, fmt.Sprintf("ok %d", i))
	}
	if errs := nullIDErrors(e); len(errs) > 0 {
		t.Errorf("the agent's id-less error reached the editor: %s", errs[0])
	}
}

// TestSlowAgentStartup pins DESIGN §7 startup: the router answers
// initialize once the routing default agent is up, without waiting for a
// slow one; a session/new routed to the slow agent right after waits for it
// (the fake agent refuses session/new before its initialize is answered) and
// succeeds.
func TestSlowAgentStartup(t *testing.T) {
	skipShort(t, "measures that initialize does not wait for a slow agent (1.5 s)")
	t.Parallel()
	dirS := t.TempDir()
	cfg := writeConfig(t, routerYAML(t,
		[]string{
			fakeAgentYAML("quick", fakeOpts{}),
			fakeAgentYAML("sleepy", fakeOpts{InitDelay: "1500ms"}),
		},
		"default: quick",
		"rules:",
		cwdRule(dirS, "sleepy"),
	))
	e := StartRouter(t, cfg, nil)
	start := time.Now()
	e.Initialize(t, capsAll)
	if d := time.Since(start); d >= 1500*time.Millisecond {
		t.Errorf("initialize answered after %v: the router waited for the slow non-default agent", d)
	}
	sid := e.NewSession(t, dirS)
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Errorf("session/new on sleepy answered after %v, before sleepy could be initialized", d)
	}
	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := e.Texts(sid); len(got) != 1 || got[0] != "sleepy" {
		t.Errorf("chunks %q, want sleepy", got)
	}
}
