package hub

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// pushed are the session lists a client was pushed, in order.
func (c *tclient) pushed() [][]entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]entry
	for _, m := range c.all {
		if m.Method != MethodSessionsChanged {
			continue
		}
		var p struct{ Sessions []entry }
		json.Unmarshal(m.Params, &p)
		out = append(out, p.Sessions)
	}
	return out
}

// states are the states (and agents) session sid had in the lists pushed
// to c, each change once.
func (c *tclient) states(sid string) []string {
	var out []string
	for _, list := range c.pushed() {
		s := "gone"
		for _, e := range list {
			if e.SessionID == sid {
				s = e.State + "@" + e.Agent
			}
		}
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// A client that asked (MethodWatch sessions) is pushed the live list
// whenever a session it may see appears, changes state (running, waiting
// for an answer, idle), moves to another agent, or ends; a client that may
// see only its own sessions is not told of the others'; a client that did
// not ask is sent nothing of it.
func TestWatchSessions(t *testing.T) {
	e := startHubAgents(t, Options{}, 0, []string{"other"})
	watcher := e.connect(Identity{Name: "page", Role: RoleObserver, AllSessions: true})
	watcher.initialize()
	if res := watcher.mustCall(MethodWatch, map[string]any{"sessions": true}); string(res) != `{"chunkIntervalMs":0,"sessions":[]}` {
		t.Errorf("watch answered %s", res)
	}
	bob := e.connect(Identity{Name: "bob", Role: RoleController})
	bob.initialize()
	bob.mustCall(MethodWatch, map[string]any{"sessions": true})
	plain := e.connect(Identity{Name: "sdk", Role: RoleController, AllSessions: true})
	plain.initialize()

	ed, sid := e.editorSession()
	waitFor(t, "the new session pushed", func() bool { return slices.Contains(watcher.states(sid), "idle@fake") })
	done := ed.start("session/prompt", promptParams(sid, "say a\npermission t1\nsay b"))
	req := ed.request()
	waitFor(t, "waiting pushed", func() bool { return slices.Contains(watcher.states(sid), "waiting@fake") })
	ed.answer(req.ID, allow("allow"))
	<-done
	waitFor(t, "idle again", func() bool {
		s := watcher.states(sid)
		return len(s) > 0 && s[len(s)-1] == "idle@fake" && len(s) > 2
	})
	res := ed.mustCall("session/set_config_option", map[string]any{"sessionId": sid, "configId": "agent", "value": "other"})
	if !strings.Contains(string(res), `"currentValue":"other"`) {
		t.Fatalf("switch answered %s", res)
	}
	waitFor(t, "the switch pushed", func() bool { return slices.Contains(watcher.states(sid), "idle@other") })
	// Back with the slash command: the router says so with a
	// config_option_update, not in an answer.
	ed.mustCall("session/prompt", promptParams(sid, "/agent fake"))
	waitFor(t, "the switch back pushed", func() bool { s := watcher.states(sid); return s[len(s)-1] == "idle@fake" })
	ed.mustCall("session/close", map[string]any{"sessionId": sid})
	waitFor(t, "the end pushed", func() bool { s := watcher.states(sid); return s[len(s)-1] == "gone" })
	got := strings.Join(watcher.states(sid), " ")
	if !strings.HasPrefix(got, "idle@fake running@fake waiting@fake running@fake idle@fake idle@other running@other ") || !strings.HasSuffix(got, " idle@fake gone") {
		t.Errorf("the watcher saw the session %s", got)
	}
	for _, list := range watcher.pushed() {
		for _, en := range list {
			if en.SessionID == sid && en.State != StateWaiting && en.Agent == "fake" && en.AgentTitle != "Fake agent" {
				t.Errorf("entry %+v: want the agent's title", en)
			}
		}
	}

	// bob sees his own session, never the editor's.
	bsid := bob.newSession()
	waitFor(t, "bob's session pushed", func() bool { return slices.Contains(bob.states(bsid), "idle@fake") })
	for _, list := range bob.pushed() {
		for _, en := range list {
			if en.SessionID != bsid {
				t.Errorf("bob was pushed session %s", en.SessionID)
			}
		}
	}
	plain.mu.Lock()
	defer plain.mu.Unlock()
	for _, m := range plain.all {
		if strings.HasPrefix(m.Method, "_acp-router/") {
			t.Errorf("a client that did not ask was sent %s", m.raw)
		}
	}
}
