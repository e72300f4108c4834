package router

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/store"
)

// Unit tests of the bounds (bounds.go, DESIGN §7): what an agent sends
// that the router parks or keeps ids for stays within a bound, and what is
// dropped is counted and logged once.

// logBuffer is a logger's output, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count is the number of lines that contain s.
func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t *testing.T) (hclog.Logger, *logBuffer) {
	t.Helper()
	buf := &logBuffer{}
	return hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Debug}), buf
}

// message classifies one line as the agent's stream would.
func message(t *testing.T, line string) *acp.Message {
	t.Helper()
	m, err := acp.Classify([]byte(line))
	if err != nil {
		t.Fatalf("classify %s: %v", line, err)
	}
	return m
}

// toolUpdate is a tool_call or tool_call_update line of session sid.
func toolUpdate(t *testing.T, sid, kind, id, status string) *acp.Message {
	t.Helper()
	return message(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%q,"update":{"sessionUpdate":%q,"toolCallId":%q,"status":%q,"title":"Run"}}}`, sid, kind, id, status))
}

// bindNew binds a new router session to the agent's session sid on f's
// instance, as a session/new answer does, and opens it.
func bindNew(t *testing.T, f *relayFixture, sid string) *Session {
	t.Helper()
	s := &Session{Cwd: "/", r: f.r, active: benchAgent, down: map[string]*downstream{},
		toolIDs: merge.NewIDTable(), msgIDs: merge.NewIDTable()}
	if !f.r.bind(s, f.inst, message(t, `{"jsonrpc":"2.0","id":7,"result":{"sessionId":"`+sid+`"}}`)) {
		t.Fatalf("bind %s failed", sid)
	}
	s.openNow()
	return s
}

// TestParkedUpdatesBounded: updates for session ids the router does not
// know are parked (an agent may announce a session before answering
// session/new) within maxUnboundIDs ids, maxUnbound updates per id and
// maxUnboundBytes, newest kept; what is dropped is logged once; an id
// bound later gets its parked updates.
func TestParkedUpdatesBounded(t *testing.T) {
	t.Parallel()
	log, logs := testLogger(t)
	f := newRelayFixtureOpts(t, false, Options{Logger: log})
	r, inst := f.r, f.inst
	park := func(sid string, size int) { r.interceptAgent(inst, message(t, string(updateLine(t, sid, size)))) }

	const ids = 1000
	for i := range ids {
		park(fmt.Sprintf("ghost-%d", i), 1000)
	}
	p := r.parked[inst]
	if len(p.ids) != maxUnboundIDs || p.count() != maxUnboundIDs {
		t.Fatalf("parked %d ids, %d updates; want %d ids, one update each", len(p.ids), p.count(), maxUnboundIDs)
	}
	for _, c := range []struct {
		id   int
		kept bool
	}{{0, false}, {ids - maxUnboundIDs - 1, false}, {ids - maxUnboundIDs, true}, {ids - 1, true}} {
		if _, ok := p.ids[fmt.Sprintf("ghost-%d", c.id)]; ok != c.kept {
			t.Errorf("ghost-%d parked = %v, want %v (the newest ids are kept)", c.id, ok, c.kept)
		}
	}
	if len(p.order) > 2*maxUnboundIDs+1 {
		t.Errorf("order holds %d ids for %d parked", len(p.order), len(p.ids))
	}

	// The agent answers session/new for an id it announced: its update
	// reaches the editor.
	bindNew(t, f, fmt.Sprintf("ghost-%d", ids-1))
	if _, ok := p.ids[fmt.Sprintf("ghost-%d", ids-1)]; ok {
		t.Error("a bound id is still parked")
	}

	for range maxUnbound + 100 {
		park("chatty", 200)
	}
	if n := len(p.ids["chatty"]); n != maxUnbound {
		t.Errorf("chatty: %d updates parked, want %d", n, maxUnbound)
	}
	for range 20 {
		park("huge", 1<<20)
	}
	if p.bytes > maxUnboundBytes {
		t.Errorf("%d bytes parked, more than %d", p.bytes, maxUnboundBytes)
	}
	if n := len(p.ids["huge"]); n != maxUnboundBytes>>20 || len(p.ids) != 1 {
		t.Errorf("huge: %d updates of 1 MiB parked, %d ids; want %d, only it", n, len(p.ids), maxUnboundBytes>>20)
	}
	want := 0
	for _, list := range p.ids {
		for _, m := range list {
			want += len(m.Raw)
		}
	}
	if p.bytes != want {
		t.Errorf("parking counts %d bytes, holds %d", p.bytes, want)
	}
	if n := logs.count("updates for unknown sessions dropped"); n != 1 {
		t.Errorf("%d log lines about dropped updates, want 1 (then a count a minute):\n%s", n, logs)
	}
	total := p.drops.total

	// The instance exits: what it parked goes, counted, with a final line.
	r.agentExited(inst, nil)
	waitFor(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.parked[inst] == nil })
	waitFor(t, func() bool { return logs.count("final=true") == 1 })
	if p.drops.total <= total {
		t.Errorf("drops at exit not counted: %d, %d before", p.drops.total, total)
	}
	f.stop()
	if f.lines != 1 {
		t.Errorf("the editor got %d lines, want the bound session's one parked update", f.lines)
	}
}

// TestClosedSessionUpdatesDropped: once a session is closed (session/close
// forgets it before its running turn is cancelled), what its agent still
// sends for it is dropped at once, counted, not parked; the same agent
// session bound again (reopened on the same process) is relayed again.
func TestClosedSessionUpdatesDropped(t *testing.T) {
	log, logs := testLogger(t)
	f := newRelayFixtureOpts(t, false, Options{Logger: log})
	r, inst := f.r, f.inst
	update := func() { r.interceptAgent(inst, message(t, string(updateLine(t, f.sid, 500)))) }

	update() // relayed
	r.forget(f.s)
	for range 100 {
		update()
	}
	r.mu.Lock()
	parked := 0
	if p := r.parked[inst]; p != nil {
		parked = p.count()
	}
	r.mu.Unlock()
	if parked != 0 {
		t.Errorf("%d updates of a closed session parked", parked)
	}
	if r.closedDrops.total != 100 {
		t.Errorf("%d updates of a closed session counted as dropped, want 100", r.closedDrops.total)
	}
	if n := logs.count("updates for closed sessions dropped"); n != 1 {
		t.Errorf("%d log lines about them, want 1:\n%s", n, logs)
	}

	bindNew(t, f, f.sid) // session/load on the same process, same id
	update()
	f.stop()
	if f.lines != 2 {
		t.Errorf("the editor got %d lines, want 2 (before the close, after the reopen)", f.lines)
	}

	// Tombstones are bounded: the oldest are forgotten.
	var ts tombstones
	for i := range 3 * maxTombstones {
		ts.add(fmt.Sprint(i))
	}
	if len(ts.set) != maxTombstones || len(ts.ring) != maxTombstones || ts.has("0") || !ts.has(fmt.Sprint(3*maxTombstones-1)) {
		t.Errorf("tombstones: %d keys, ring %d", len(ts.set), len(ts.ring))
	}
}

// TestToolCallIDsRetired: a session's tool call and message ids are
// retired when done: a finished tool call's id stays for the updates that
// follow it within its turn, and goes at the turn's end (a later update for
// it is not forwarded: the editor would draw an unknown tool call); a flood
// of tool calls never finished keeps at most maxToolIDs ids, the rest
// retired and logged once.
func TestToolCallIDsRetired(t *testing.T) {
	log, logs := testLogger(t)
	f := newRelayFixtureOpts(t, false, Options{Logger: log})
	r, inst, s, sid := f.r, f.inst, f.s, f.sid
	relay := func(m *acp.Message) { r.interceptAgent(inst, m) }
	turnEnd := func() {
		s.mu.Lock()
		s.retireTurnIDsLocked()
		s.mu.Unlock()
	}
	lenIDs := func() (int, int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.toolIDs.Len(), s.msgIDs.Len()
	}

	want := 0
	relay(toolUpdate(t, sid, "tool_call", "call-1", "pending"))
	relay(toolUpdate(t, sid, "tool_call_update", "call-1", "completed"))
	relay(toolUpdate(t, sid, "tool_call_update", "call-1", "")) // content after completion
	want += 3
	for i := range 3 {
		relay(message(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%q,"update":{"sessionUpdate":"agent_message_chunk","messageId":"msg-%d","content":{"type":"text","text":"hi"}}}}`, sid, i)))
	}
	want += 3
	if tools, msgs := lenIDs(); tools != 1 || msgs != 3 {
		t.Fatalf("during the turn: %d tool ids, %d message ids; want 1, 3", tools, msgs)
	}
	turnEnd()
	if tools, msgs := lenIDs(); tools != 0 || msgs != 0 {
		t.Errorf("after the turn: %d tool ids, %d message ids; want none", tools, msgs)
	}
	relay(toolUpdate(t, sid, "tool_call_update", "call-1", "completed")) // retired: not forwarded

	// Finished tool calls beyond maxDoneTools are retired during the turn.
	const finished = 3 * maxDoneTools
	for i := range finished {
		id := fmt.Sprintf("done-%d", i)
		relay(toolUpdate(t, sid, "tool_call", id, "pending"))
		relay(toolUpdate(t, sid, "tool_call_update", id, "failed"))
	}
	want += 2 * finished
	if tools, _ := lenIDs(); tools != maxDoneTools {
		t.Errorf("%d tool ids after %d finished tool calls, want %d", tools, finished, maxDoneTools)
	}
	if logs.count("retired before their tool call finished") != 0 {
		t.Errorf("finished tool calls logged as dropped:\n%s", logs)
	}
	turnEnd()

	// Tool calls never finished: at most maxToolIDs ids.
	const flood = 5000
	for i := range flood {
		relay(toolUpdate(t, sid, "tool_call", fmt.Sprintf("flood-%d", i), "pending"))
	}
	want += flood
	if tools, _ := lenIDs(); tools != maxToolIDs {
		t.Errorf("%d tool ids after %d unfinished tool calls, want %d", tools, flood, maxToolIDs)
	}
	if r.toolDrops.total != flood-maxToolIDs {
		t.Errorf("%d tool ids counted as retired early, want %d", r.toolDrops.total, flood-maxToolIDs)
	}
	if n := logs.count("retired before their tool call finished"); n != 1 {
		t.Errorf("%d log lines about early retired tool ids, want 1:\n%s", n, logs)
	}
	relay(toolUpdate(t, sid, "tool_call_update", "flood-0", "completed"))            // retired early: not forwarded
	relay(toolUpdate(t, sid, "tool_call_update", fmt.Sprint("flood-", flood-1), "")) // kept: forwarded
	want++
	s.mu.Lock()
	tools := len(s.turn.rec.Tools)
	s.mu.Unlock()
	if tools != maxBriefTools {
		t.Errorf("the turn's record holds %d tool calls, want %d", tools, maxBriefTools)
	}
	f.stop()
	if f.lines != int64(want) {
		t.Errorf("the editor got %d lines, want %d", f.lines, want)
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}

// TestLoadedHistoryBounded: a stored session with far more turns than a
// brief tells is loaded with the live bound on its history (record): at
// most twice the brief's size, the newest turns, numbered as stored.
func TestLoadedHistoryBounded(t *testing.T) {
	f := newRelayFixture(t, false)
	max := f.r.cfg.Handoff.MaxBytes
	const turns = 200
	reply := strings.Repeat("x", 4000)
	var lines [][]byte
	for i := range turns {
		lines = append(lines,
			fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"question %d"},"_meta":{"acpRouter":{"agent":%q}}}}}`, i, benchAgent),
			fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"answer %d %s"}}}}`, i, reply))
	}
	s := f.r.emptySession("s")
	meta := store.Meta{ID: "s", Cwd: "/tmp", ActiveAgent: benchAgent, Agents: map[string]store.Agent{benchAgent: {SessionID: "down-1"}}}
	finish := f.r.fillFromStore(s, &store.History{Meta: meta, Updates: lines}, "/tmp", nil)
	// The agents are known at once (a request racing the replay finds
	// the agent's session to re-attach); what they have seen, at finish.
	s.mu.Lock()
	if got := s.stored[benchAgent].SessionID; got != "down-1" {
		t.Errorf("before finish: the stored agent's session is %q", got)
	}
	s.mu.Unlock()
	finish()
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.stored[benchAgent]; a.SessionID != "down-1" || string(a.Extra) != fmt.Sprint(turns) {
		t.Errorf("after finish: stored agent %+v, want session down-1 having seen %d turns", a, turns)
	}
	if s.histBytes > 2*max || len(s.history) == 0 || len(s.history) >= turns {
		t.Fatalf("loaded history: %d turns, %d bytes (brief bound %d)", len(s.history), s.histBytes, max)
	}
	size := 0
	for _, rec := range s.history {
		size += recordSize(&rec)
	}
	last := s.history[len(s.history)-1]
	if size != s.histBytes || s.nextSeq != turns || last.Seq != turns-1 || last.User != fmt.Sprint("question ", turns-1) {
		t.Fatalf("histBytes %d (counted %d), nextSeq %d, newest turn %d %q", s.histBytes, size, s.nextSeq, last.Seq, last.User)
	}
	if brief := merge.Brief(s.history, 0, max); !strings.Contains(brief, fmt.Sprint("answer ", turns-1)) {
		t.Fatalf("the brief lacks the newest turn: %.200s", brief)
	}
}
