package hub

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestPromptsOfTwoControllers: prompts sent by two controllers at once run
// one after the other, never interleaved in one turn (the Router's queue,
// reached through the hub), and a cancel from the controller that did not
// prompt cancels the running turn.
func TestPromptsOfTwoControllers(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	phone, _ := e.attached(phoneID, sid, RoleController, historyNone)
	a := ed.start("session/prompt", promptParams(sid, "say a1\nsleep 200ms\nsay a2"))
	waitFor(t, "a1", func() bool { return len(ed.texts(sid)) == 1 })
	b := phone.start("session/prompt", promptParams(sid, "say b1\nsay b2"))
	ra, rb := <-a, <-b
	if ra.Error != nil || rb.Error != nil {
		t.Fatalf("prompts: %s %s", ra.raw, rb.raw)
	}
	want := []string{"a1", "a2", "b1", "b2"}
	waitFor(t, "b's chunks at the editor", func() bool { return len(ed.texts(sid)) >= 4 })
	if got := ed.texts(sid); !slices.Equal(got, want) {
		t.Errorf("two controllers' turns = %q, want %q", got, want)
	}

	long := ed.start("session/prompt", promptParams(sid, "say c1\nsleep 20s\nsay c2"))
	waitFor(t, "c1", func() bool { return slices.Contains(ed.texts(sid), "c1") })
	phone.send(map[string]any{"jsonrpc": "2.0", "method": "session/cancel", "params": map[string]any{"sessionId": sid}})
	select {
	case r := <-long:
		if !strings.Contains(string(r.Result), "cancelled") {
			t.Errorf("the cancelled turn ended %s", r.raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("another controller's cancel did not end the turn")
	}
}

// TestSlowClient: a client that stops reading is dropped with a reason
// once its queue is full, and meanwhile the other client's round trips are
// as fast as without it.
func TestSlowClient(t *testing.T) {
	e := startHub(t, Options{QueueBytes: 4 << 20, QueueMessages: 100000})
	ed, sid := e.editorSession()
	roundTrips := func() time.Duration {
		var ds []time.Duration
		for range 15 {
			start := time.Now()
			ed.mustCall("session/prompt", promptParams(sid, "say ping"))
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	before := roundTrips()

	stuck := newPipeConn()
	stuck.block = make(chan struct{}) // never released: it reads nothing
	slow := e.connectConn(stuck, Identity{Name: "slow", Role: RoleObserver, AllSessions: true})
	slow.send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": MethodAttach, "params": map[string]any{"sessionId": sid, "role": "observer", "historyPolicy": "none"}})
	waitFor(t, "the slow client attached", func() bool {
		e.hub.mu.Lock()
		defer e.hub.mu.Unlock()
		return len(e.hub.sessions[sid].members) == 2
	})
	during := roundTrips()
	t.Logf("editor's prompt round trip, median of 15: %v alone, %v with a client that reads nothing attached", before, during)
	if during > 3*before+20*time.Millisecond {
		t.Errorf("a client that reads nothing slowed the editor: %v against %v", during, before)
	}

	start := time.Now()
	ed.mustCall("session/prompt", promptParams(sid, "big 600 10000")) // 6 MB: over the slow client's 4 MiB
	t.Logf("a 6 MB turn with the slow client overflowing: %v", time.Since(start))
	select {
	case err := <-slow.served:
		if !errors.Is(err, ErrSlowClient) {
			t.Errorf("Serve of the slow client = %v, want ErrSlowClient", err)
		}
		slow.served <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the slow client was not dropped")
	}
	if r := stuck.closeReason(); !errors.Is(r, ErrSlowClient) {
		t.Errorf("the slow client's connection closed with %v", r)
	}
	if got := len(ed.texts(sid)); got != 30+600 {
		t.Errorf("the editor got %d chunks, want %d", got, 30+600)
	}
}

// TestSlowEditorHoldsTheStream: the stdio editor is never dropped as a
// slow client (the router lives for it): while it reads nothing, the
// Router's stream waits for it, and when it reads again it gets the whole
// turn. Without the editor's exemption it is dropped with ErrSlowClient.
func TestSlowEditorHoldsTheStream(t *testing.T) {
	e := startHub(t, Options{QueueBytes: 1 << 20, QueueMessages: 100000})
	conn := newPipeConn()
	conn.block = make(chan struct{}, 1<<12) // a token a message the editor reads
	for range 50 {
		conn.block <- struct{}{}
	}
	ed := e.connectConn(conn, editorID)
	ed.initialize()
	sid := ed.newSession()
	answer := ed.start("session/prompt", promptParams(sid, "big 600 10000")) // 6 MB: over the 1 MiB bound
	time.Sleep(500 * time.Millisecond)                                       // the editor reads nothing meanwhile
	select {
	case err := <-ed.served:
		t.Fatalf("the editor was dropped while it read nothing: %v", err)
	default:
	}
	go func() {
		for range 1 << 11 {
			conn.block <- struct{}{}
		}
	}()
	select {
	case m := <-answer:
		if m.Error != nil {
			t.Fatalf("prompt: %s", m.Error.Message)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the turn did not end once the editor read again")
	}
	if got := len(ed.texts(sid)); got != 600 {
		t.Errorf("the editor got %d chunks, want 600", got)
	}
}

// TestClientsGoMidStream: clients that go while a turn streams to them are
// removed cleanly: the turn goes on for the others, every goroutine of
// theirs ends.
func TestClientsGoMidStream(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	ed.mustCall("session/prompt", promptParams(sid, "say warm"))
	base := hubGoroutines()
	var cs []*tclient
	for range 8 {
		c, _ := e.attached(phoneID, sid, RoleController, historyNone)
		cs = append(cs, c)
	}
	done := ed.start("session/prompt", promptParams(sid, "big 300 2000\npermission t1\nsay end"))
	waitFor(t, "the stream to start", func() bool { return len(cs[0].texts(sid)) > 10 })
	for _, c := range cs {
		c.conn.Close(nil)
	}
	for _, c := range cs {
		select {
		case err := <-c.served:
			if err != nil {
				t.Errorf("Serve of a client that closed = %v", err)
			}
			c.served <- err
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return for a client that went")
		}
	}
	ed.answer(ed.request().ID, allow("allow"))
	if r := <-done; r.Error != nil {
		t.Fatalf("the turn: %s", r.raw)
	}
	if got := ed.texts(sid); got[len(got)-1] != "end" {
		t.Errorf("the editor's stream ended with %q", got[len(got)-1])
	}
	for _, c := range cs {
		<-c.done
	}
	deadline := time.Now().Add(10 * time.Second)
	for hubGoroutines() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := hubGoroutines(); n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before the clients came:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
	e.hub.mu.Lock()
	n := len(e.hub.clients)
	e.hub.mu.Unlock()
	if n != 1 {
		t.Errorf("%d clients left, want the editor", n)
	}
}

// TestLastClientGoes: when the last client of a session goes mid-turn, the
// turn finishes and the session stays attachable, its history whole; with
// CancelOnLastDetach the turn is cancelled.
func TestLastClientGoes(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		name := "finish"
		if cancel {
			name = "cancel"
		}
		t.Run(name, func(t *testing.T) {
			e := startHub(t, Options{CancelOnLastDetach: cancel})
			ed, sid := e.editorSession()
			ed.start("session/prompt", promptParams(sid, "say a\nsleep 300ms\nsay b"))
			waitFor(t, "a", func() bool { return len(ed.texts(sid)) == 1 })
			ed.conn.Close(nil)
			time.Sleep(600 * time.Millisecond) // the turn's end, when it is let finish
			phone, _ := e.attached(phoneID, sid, RoleController, historyFull)
			want := []string{"a", "b"}
			if cancel {
				want = []string{"a"}
			}
			if got := phone.texts(sid); !slices.Equal(got, want) {
				t.Errorf("history after the last client went = %q, want %q", got, want)
			}
			if n := len(e.tap.sentWith(`"session/cancel"`)); (n == 1) != cancel {
				t.Errorf("session/cancel sent %d times", n)
			}
			phone.mustCall("session/prompt", promptParams(sid, "say again"))
			if got := phone.texts(sid); got[len(got)-1] != "again" {
				t.Errorf("the session does not go on: %q", got)
			}
		})
	}
}

// TestRouterMetaStripped: a client cannot speak for the router: the
// acp-router/* keys of any _meta it sends are dropped (its own keys kept),
// and the answeredBy the Router gets is the hub's, whatever the client
// wrote.
func TestRouterMetaStripped(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	p := promptParams(sid, "permission t1")
	p["_meta"] = map[string]any{"acp-router/answerers": []string{"mallory"}, "mine": 1}
	p["prompt"] = []any{map[string]any{"type": "text", "text": "permission t1", "_meta": map[string]any{"acp-router/x": true}}}
	done := ed.start("session/prompt", p)
	req := ed.request()
	res := allow("allow")
	res["_meta"] = map[string]any{metaAnsweredBy: map[string]any{"name": "lead", "editor": false}}
	ed.answer(req.ID, res)
	<-done
	sent := e.tap.sentWith(`"session/prompt"`)
	if len(sent) != 1 || strings.Contains(sent[0], "acp-router/") || !strings.Contains(sent[0], `"mine":1`) {
		t.Errorf("prompt as the Router got it: %q", sent)
	}
	ans := e.tap.sentWith(metaAnsweredBy)
	if len(ans) != 1 || strings.Contains(ans[0], "lead") || !strings.Contains(ans[0], `"name":"editor"`) {
		t.Errorf("answer as the Router got it: %q", ans)
	}
}

// hubGoroutines counts the goroutines running the hub's code (the Router's
// own come and go with its turns).
func hubGoroutines() int {
	buf := make([]byte, 4<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "acp-router/hub.(*Hub)") || strings.Contains(g, "acp-router/hub.(*client)") {
			n++
		}
	}
	return n
}

// TestWaitIdle: WaitIdle returns once the last client went (a router an
// editor started lives on while remote clients are connected), not before.
func TestWaitIdle(t *testing.T) {
	e := startHub(t, Options{})
	a, b := e.connect(editorID), e.connect(phoneID)
	a.initialize()
	b.initialize()
	idle := make(chan error, 1)
	go func() { idle <- e.hub.WaitIdle(t.Context()) }()
	a.conn.Close(nil)
	select {
	case <-idle:
		t.Fatal("WaitIdle returned with a client still connected")
	case <-time.After(200 * time.Millisecond):
	}
	b.conn.Close(nil)
	select {
	case err := <-idle:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitIdle did not return once every client went")
	}
}

// TestOwnersFileNull: an owners file that says null (valid JSON, no map)
// starts empty and can be written again; json.Unmarshal leaves a nil map
// for it, on which the first session's owner panicked.
func TestOwnersFileNull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "owners.json")
	if err := os.WriteFile(path, []byte("null"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := loadOwners(path, hclog.NewNullLogger())
	o.set("sess-1", "alice")
	o.write(o.snapshotLocked())
	if got := loadOwners(path, hclog.NewNullLogger()).get("sess-1"); got != "alice" {
		t.Errorf("owner after a null file: %q, want alice", got)
	}
}
