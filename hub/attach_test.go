package hub

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var phoneID = Identity{Name: "phone", Role: RoleController, AllSessions: true}

// editorSession connects the editor, initializes it and opens a session.
func (e *env) editorSession() (*tclient, string) {
	ed := e.connect(editorID)
	ed.initialize()
	return ed, ed.newSession()
}

// attached connects a client as id and attaches it to sid.
func (e *env) attached(id Identity, sid, role, policy string) (*tclient, json.RawMessage) {
	e.t.Helper()
	c := e.connect(id)
	c.initialize()
	return c, c.mustCall(MethodAttach, map[string]any{"sessionId": sid, "role": role, "historyPolicy": policy})
}

func resolvedOf(c *tclient, sid string) []map[string]any {
	var out []map[string]any
	for _, p := range c.updates(sid, "permission_resolved") {
		var v struct {
			Update map[string]any `json:"update"`
		}
		json.Unmarshal(p, &v)
		out = append(out, v.Update)
	}
	return out
}

// TestSecondControllerAnswers (issue 30's scenario): a session started by
// the editor, a second client attaches as controller, the agent asks, both
// are asked, the second answers: its answer reaches the agent, marked with
// who gave it; the editor is told it was resolved; the editor's late
// answer is dropped.
func TestSecondControllerAnswers(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	phone, res := e.attached(phoneID, sid, RoleController, historyNone)
	var ar struct {
		Role             string `json:"role"`
		ConnectedClients []struct {
			Name, Role string
		} `json:"connectedClients"`
	}
	json.Unmarshal(res, &ar)
	if ar.Role != RoleController || len(ar.ConnectedClients) != 1 || ar.ConnectedClients[0].Name != "editor" {
		t.Errorf("attach answer = %s", res)
	}
	done := ed.start("session/prompt", promptParams(sid, "say before\npermission t1\nsay after"))
	edReq, phoneReq := ed.request(), phone.request()
	if edReq.Method != "session/request_permission" || phoneReq.Method != "session/request_permission" {
		t.Fatalf("requests = %s, %s", edReq.Method, phoneReq.Method)
	}
	phone.answer(phoneReq.ID, allow("allow"))
	waitFor(t, "the editor told it was resolved", func() bool { return len(resolvedOf(ed, sid)) == 1 })
	ed.answer(edReq.ID, allow("reject")) // too late: dropped
	if r := <-done; r.Error != nil {
		t.Fatalf("prompt: %s", r.raw)
	}
	want := []string{"before", "permission t1: allow", "after"}
	for _, c := range []*tclient{ed, phone} {
		// The editor has its updates before the prompt's answer; the
		// phone's come on a queue of its own, which may still be writing.
		for deadline := time.Now().Add(5 * time.Second); !slices.Equal(c.texts(sid), want) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if got := c.texts(sid); !slices.Equal(got, want) {
			t.Errorf("chunks = %q, want %q", got, want)
		}
	}
	r := resolvedOf(ed, sid)[0]
	by, _ := r["resolvedBy"].(map[string]any)
	if r["type"] != "permission_resolved" || r["toolCallId"] != "t1" || r["chosenOptionId"] != "allow" || by["name"] != "phone" {
		t.Errorf("permission_resolved = %v", r)
	}
	if n := len(resolvedOf(phone, sid)); n != 0 {
		t.Errorf("the client that answered was told %d times it was resolved", n)
	}
	// The editor's dialog is withdrawn the standard way too.
	ed.mu.Lock()
	withdrawn := slices.ContainsFunc(ed.all, func(m msg) bool {
		return m.Method == "$/cancel_request" && strings.Contains(string(m.Params), string(edReq.ID))
	})
	ed.mu.Unlock()
	if !withdrawn {
		t.Error("the editor got no $/cancel_request of its copy of the request")
	}
	sent := e.tap.sentWith(metaAnsweredBy)
	if len(sent) != 1 || !strings.Contains(sent[0], `"name":"phone"`) || !strings.Contains(sent[0], `"editor":false`) {
		t.Errorf("answers to the Router with answeredBy = %q", sent)
	}
}

// TestObserver: an observer sees the same stream, in the same order, as the
// controller; it is never asked anything; its prompt, set_mode and cancel
// are refused, and so is an attempt to attach as controller with an
// observer's identity.
func TestObserver(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	obs, _ := e.attached(Identity{Name: "watcher", Role: RoleObserver, AllSessions: true}, sid, RoleObserver, historyNone)
	done := ed.start("session/prompt", promptParams(sid, "say 1\nbig 20 3000\npermission t1\nsay 2"))
	ed.answer(ed.request().ID, allow("allow"))
	<-done
	waitFor(t, "the observer's stream", func() bool { return len(obs.texts(sid)) == len(ed.texts(sid)) })
	if got, want := obs.texts(sid), ed.texts(sid); !slices.Equal(got, want) {
		t.Errorf("observer's chunks differ:\n%q\n%q", got, want)
	}
	notResolved := func(c *tclient) []string {
		var out []string
		for _, p := range c.updates(sid, "") {
			if !strings.Contains(string(p), "permission_resolved") {
				out = append(out, string(p))
			}
		}
		return out
	}
	// The editor also had what came before the observer attached.
	if got, want := notResolved(obs), notResolved(ed); len(got) < 20 || len(got) > len(want) || !slices.Equal(got, want[len(want)-len(got):]) {
		t.Errorf("observer's updates are not the controller's since it attached: %d against %d", len(got), len(want))
	}
	if len(resolvedOf(obs, sid)) != 1 {
		t.Errorf("the observer was not told the permission was resolved")
	}
	select {
	case m := <-obs.reqs:
		t.Errorf("the observer was asked %s", m.raw)
	default:
	}
	for _, m := range []struct {
		method string
		params any
	}{
		{"session/prompt", promptParams(sid, "say no")},
		{"session/set_mode", map[string]any{"sessionId": sid, "modeId": "x"}},
	} {
		r := obs.call(m.method, m.params)
		if r.Error == nil || r.Error.Code != codeNotAuthorised || !strings.Contains(r.Error.Message, "observer") {
			t.Errorf("%s from an observer = %s", m.method, r.raw)
		}
	}
	obs.send(map[string]any{"jsonrpc": "2.0", "method": "session/cancel", "params": map[string]any{"sessionId": sid}})
	c2 := e.connect(Identity{Name: "watcher", Role: RoleObserver, AllSessions: true})
	c2.initialize()
	if r := c2.call(MethodAttach, map[string]any{"sessionId": sid, "role": RoleController}); r.Error == nil || r.Error.Code != codeNotAuthorised {
		t.Errorf("an observer's identity attached as controller: %s", r.raw)
	}
	if r := c2.call("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}); r.Error == nil {
		t.Errorf("an observer's identity started a session: %s", r.raw)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(e.tap.sentWith(`"session/cancel"`)); n != 0 {
		t.Errorf("an observer's cancel reached the Router (%d)", n)
	}
}

// TestAttachHistoryPolicies: detach and re-attach with each history
// policy. full replays the session's updates as the live stream had them,
// then the answer, then live; pending_only replays nothing but the pending
// permission requests (asked to a controller, listed in the answer); none
// replays nothing.
func TestAttachHistoryPolicies(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	ed.mustCall("session/prompt", promptParams(sid, "say a\nsay b"))
	phone, _ := e.attached(phoneID, sid, RoleController, historyFull)
	if got := phone.texts(sid); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("full: replayed %q", got)
	}
	// The replay comes before the answer.
	phone.mu.Lock()
	last := phone.all[len(phone.all)-1]
	phone.mu.Unlock()
	if !strings.Contains(string(last.Result), `"role":"controller"`) {
		t.Errorf("full: the last message is not the attach answer: %s", last.raw)
	}
	ed.mustCall("session/prompt", promptParams(sid, "say c"))
	waitFor(t, "c live", func() bool { return len(phone.texts(sid)) == 3 })
	if got := phone.texts(sid); !slices.Equal(got, ed.texts(sid)) {
		t.Errorf("full then live = %q, editor had %q", got, ed.texts(sid))
	}

	phone.mustCall(MethodDetach, map[string]any{"sessionId": sid})
	ed.mustCall("session/prompt", promptParams(sid, "say d"))
	if got := phone.texts(sid); len(got) != 3 {
		t.Errorf("a detached client got %q", got)
	}

	// A permission request pending while nobody else is attached.
	done := ed.start("session/prompt", promptParams(sid, "permission t9\nsay e"))
	edReq := ed.request()
	res := phone.mustCall(MethodAttach, map[string]any{"sessionId": sid, "role": RoleController, "historyPolicy": historyPendingOnly})
	if !strings.Contains(string(res), `"toolCallId":"t9"`) || !strings.Contains(string(res), `"status":"pending"`) {
		t.Errorf("pending_only answer = %s", res)
	}
	phoneReq := phone.request()
	if got := phone.texts(sid); len(got) != 3 {
		t.Errorf("pending_only replayed updates: %q", got)
	}
	phone.answer(phoneReq.ID, allow("allow"))
	waitFor(t, "the editor told it was resolved", func() bool { return len(resolvedOf(ed, sid)) == 1 })
	ed.answer(edReq.ID, allow("reject"))
	<-done
	phone.mustCall(MethodDetach, map[string]any{"sessionId": sid})

	res = phone.mustCall(MethodAttach, map[string]any{"sessionId": sid, "role": RoleObserver, "historyPolicy": historyNone})
	if strings.Contains(string(res), `"history"`) {
		t.Errorf("none: the answer has a history: %s", res)
	}
	ed.mustCall("session/prompt", promptParams(sid, "say f"))
	waitFor(t, "f live", func() bool { return slices.Contains(phone.texts(sid), "f") })
	want := []string{"a", "b", "c", "permission t9: allow", "e", "f"}
	if got := phone.texts(sid); !slices.Equal(got, want) {
		t.Errorf("after every policy: %q, want %q", got, want)
	}
}

// TestAttachSeam: a client that attaches with historyPolicy full while the
// agent floods the session gets exactly what the editor got: every update
// once, in order, none lost and none twice where the replay meets the
// live stream. It fails without the Router's mark (the lines in flight
// when the history is read come twice) and without holding the live
// stream during the replay (they come out of order).
func TestAttachSeam(t *testing.T) {
	for i := range 5 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			e := startHubSlow(t, Options{}, 200*time.Microsecond)
			ed, sid := e.editorSession()
			ed.mustCall("session/prompt", promptParams(sid, "say first"))
			done := ed.start("session/prompt", promptParams(sid, "big 400 200\nsay last"))
			waitFor(t, "the flood to start", func() bool { return len(ed.texts(sid)) > 20+i*40 })
			phone, _ := e.attached(phoneID, sid, RoleObserver, historyFull)
			<-done
			waitFor(t, "the end of the flood", func() bool { return slices.Contains(phone.texts(sid), "last") })
			got, want := phone.texts(sid), ed.texts(sid)
			if !slices.Equal(got, want) {
				t.Errorf("attached mid-flood: %d chunks, the editor had %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestAnswersAtOnce: two controllers answer the same permission request at
// the same instant: exactly one answer wins, the agent gets one, and only
// the other client is told it was resolved.
func TestAnswersAtOnce(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	phone, _ := e.attached(phoneID, sid, RoleController, historyNone)
	for i := range 20 {
		tool := fmt.Sprintf("t%d", i)
		done := ed.start("session/prompt", promptParams(sid, "permission "+tool))
		a, b := ed.request(), phone.request()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ed.answer(a.ID, allow("allow")) }()
		go func() { defer wg.Done(); phone.answer(b.ID, allow("reject")) }()
		wg.Wait()
		if r := <-done; r.Error != nil {
			t.Fatalf("prompt: %s", r.raw)
		}
	}
	texts := ed.texts(sid)
	if len(texts) != 20 {
		t.Fatalf("the agent said %d answers for 20 requests: %q", len(texts), texts)
	}
	waitFor(t, "the resolutions", func() bool { return len(resolvedOf(ed, sid))+len(resolvedOf(phone, sid)) == 20 })
	for i, text := range texts {
		tool := fmt.Sprintf("t%d", i)
		winner := ed
		if strings.HasSuffix(text, "reject") {
			winner = phone
		}
		for _, c := range []*tclient{ed, phone} {
			told := slices.ContainsFunc(resolvedOf(c, sid), func(r map[string]any) bool { return r["toolCallId"] == tool })
			if told == (c == winner) {
				t.Errorf("%s: the winner told, or the loser not (%q)", tool, text)
			}
		}
	}
	if n := len(e.tap.sentWith(metaAnsweredBy)); n != 20 {
		t.Errorf("%d answers reached the Router for 20 requests", n)
	}
}

// TestAttachRefused: a session never opened, one closed, and one the
// identity may not see are refused with RFD #533's codes; a session an
// identity may not see is not listed to it, its own are, across a restart
// of the hub (the owners file).
func TestAttachRefused(t *testing.T) {
	owners := t.TempDir() + "/owners.json"
	e := startHub(t, Options{OwnersFile: owners})
	ed, sid := e.editorSession()
	bob := e.connect(Identity{Name: "bob", Role: RoleController})
	bob.initialize()
	for _, tt := range []struct {
		name, sid string
		code      int
	}{
		{"unknown", "no-such-session", codeNotFound},
		{"not visible", sid, codeNotAuthorised},
	} {
		if r := bob.call(MethodAttach, map[string]any{"sessionId": tt.sid}); r.Error == nil || r.Error.Code != tt.code {
			t.Errorf("%s: attach = %s, want code %d", tt.name, r.raw, tt.code)
		}
	}
	if r := bob.call("session/load", map[string]any{"sessionId": sid, "cwd": t.TempDir(), "mcpServers": []any{}}); r.Error == nil || r.Error.Code != codeNotAuthorised {
		t.Errorf("load of a session bob may not see = %s", r.raw)
	}
	if r := bob.call("session/prompt", promptParams(sid, "say x")); r.Error == nil {
		t.Errorf("prompt to a session bob is not attached to = %s", r.raw)
	}
	own := bob.newSession()
	list := func(c *tclient) []string {
		var r struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
			} `json:"sessions"`
		}
		json.Unmarshal(c.mustCall("session/list", map[string]any{}), &r)
		var ids []string
		for _, s := range r.Sessions {
			ids = append(ids, s.SessionID)
		}
		slices.Sort(ids)
		return ids
	}
	if got := list(bob); !slices.Equal(got, []string{own}) {
		t.Errorf("bob's list = %q, want only %q", got, own)
	}
	if got := list(ed); len(got) != 2 {
		t.Errorf("the editor's list = %q, want both", got)
	}
	ed.mustCall("session/close", map[string]any{"sessionId": sid})
	ph := e.connect(phoneID)
	ph.initialize()
	if r := ph.call(MethodAttach, map[string]any{"sessionId": sid}); r.Error == nil || r.Error.Code != codeNotFound {
		t.Errorf("attach to a closed session = %s", r.raw)
	}

	h2 := New(Options{OwnersFile: owners})
	if h2.owners.get(own) != "bob" || h2.owners.get(sid) != "editor" {
		t.Errorf("owners after a restart = %v", h2.owners.m)
	}
}

// TestAgentRequestsToOneController: an agent's fs request goes to one
// controller: the editor while it is attached, else the first other
// controller; with none left it fails at once (the agent is not left
// waiting), and one asked of a client that detaches fails too.
func TestAgentRequestsToOneController(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	phone, _ := e.attached(phoneID, sid, RoleController, historyNone)
	watcher, _ := e.attached(Identity{Name: "watcher", Role: RoleObserver, AllSessions: true}, sid, RoleObserver, historyNone)
	done := phone.start("session/prompt", promptParams(sid, "read /a"))
	req := ed.request()
	if req.Method != "fs/read_text_file" {
		t.Fatalf("the editor was asked %s", req.Method)
	}
	ed.answer(req.ID, map[string]string{"content": "from the editor"})
	await(t, done)
	ed.mustCall(MethodDetach, map[string]any{"sessionId": sid})
	done = phone.start("session/prompt", promptParams(sid, "read /b"))
	phone.answer(phone.request().ID, map[string]string{"content": "from the phone"})
	await(t, done)
	done = phone.start("session/prompt", promptParams(sid, "read /c"))
	phone.request() // not answered: the phone leaves the session
	phone.mustCall(MethodDetach, map[string]any{"sessionId": sid})
	if r := await(t, done); r.Error != nil {
		t.Fatalf("prompt: %s", r.raw)
	}
	phone.mustCall(MethodAttach, map[string]any{"sessionId": sid, "role": RoleController, "historyPolicy": historyNone})
	phone.start("session/prompt", promptParams(sid, "sleep 200ms\nread /d"))
	phone.mustCall(MethodDetach, map[string]any{"sessionId": sid}) // no controller left
	want := []string{"read /a: from the editor", "read /b: from the phone", "read /c: error", "read /d: error"}
	waitFor(t, "read /d", func() bool { return len(watcher.texts(sid)) == 4 })
	if got := watcher.texts(sid); !slices.Equal(got, want) {
		t.Errorf("the observer's stream = %q, want %q", got, want)
	}
	select {
	case m := <-watcher.reqs:
		t.Errorf("an observer was asked %s", m.raw)
	default:
	}
}

// await waits for an answer, up to 20 s.
func await(t testing.TB, ch <-chan msg) msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no answer")
	}
	return msg{}
}

// TestLoadOfLiveSession: a session/load of a session other clients hold
// live replays its history to the loading client alone (the Router would
// replay it to every client of the session), before the answer, then
// live; the Router gets a session/resume.
func TestLoadOfLiveSession(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	ed.mustCall("session/prompt", promptParams(sid, "say a\nsay b"))
	phone := e.connect(phoneID)
	phone.initialize()
	phone.mustCall("session/load", map[string]any{"sessionId": sid, "cwd": t.TempDir(), "mcpServers": []any{}})
	if got := phone.texts(sid); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("the loading client got %q before the answer", got)
	}
	ed.mustCall("session/prompt", promptParams(sid, "say c"))
	waitFor(t, "c", func() bool { return len(phone.texts(sid)) == 3 })
	if got := ed.texts(sid); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("the editor's stream = %q: the load was replayed to it", got)
	}
	if n := len(e.tap.sentWith(`"session/load"`)); n != 0 {
		t.Errorf("the Router got %d session/load", n)
	}
	// The loader is a controller: it may prompt.
	phone.mustCall("session/prompt", promptParams(sid, "say d"))
	waitFor(t, "d", func() bool { return len(ed.texts(sid)) == 4 })
}

// TestLiveSessions: _acp-router/sessions lists the live sessions a client
// may see with their state: idle, running during a turn, waiting while a
// permission request is unanswered; attached says whether the asker is
// one of its clients.
func TestLiveSessions(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	bob := e.connect(Identity{Name: "bob", Role: RoleController})
	bob.initialize()
	own := bob.newSession()
	type live struct {
		SessionID, State string
		Clients          int
		Attached         bool
	}
	states := func(c *tclient) []live {
		var r struct{ Sessions []live }
		json.Unmarshal(c.mustCall(MethodSessions, map[string]any{}), &r)
		return r.Sessions
	}
	phone := e.connect(phoneID)
	phone.initialize()
	state := func() string {
		for _, s := range states(phone) {
			if s.SessionID == sid {
				return s.State
			}
		}
		return "absent"
	}
	if got := states(bob); len(got) != 1 || got[0].SessionID != own || got[0].State != StateIdle || !got[0].Attached {
		t.Errorf("bob sees %+v, want only his own, idle", got)
	}
	if got := state(); got != StateIdle {
		t.Errorf("before a prompt: %s", got)
	}
	if got := states(phone); len(got) != 2 || slices.ContainsFunc(got, func(l live) bool { return l.Attached }) {
		t.Errorf("the phone sees %+v, want both, attached to none", got)
	}
	done := ed.start("session/prompt", promptParams(sid, "sleep 300ms\npermission t1\nsay after"))
	waitFor(t, "running during the turn", func() bool { return state() == StateRunning })
	req := ed.request()
	if got := state(); got != StateWaiting {
		t.Errorf("while the agent asks: %s", got)
	}
	ed.answer(req.ID, allow("allow"))
	if r := <-done; r.Error != nil {
		t.Fatalf("prompt: %s", r.raw)
	}
	waitFor(t, "idle after the turn", func() bool { return state() == StateIdle })
}
