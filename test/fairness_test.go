package test

// The editor's write queue under a flood (STYLE.md: a peer that stops
// reading never freezes a read loop; DESIGN §7: an agent that floods fails
// only its own sessions). A fake agent runs "flood": updates without pause
// until session/cancel.

import (
	"context"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// editorGate sits between the router's stdout and the editor's reader: it
// can stop the editor's reading for a while (Pause) and bound its speed
// (rate bytes a second; 0: no bound), as an editor busy rendering does.
type editorGate struct {
	r    io.Reader
	rate int

	mu    sync.Mutex
	until time.Time // no read starts before this
}

func (g *editorGate) wrap(r io.Reader) io.Reader { g.r = r; return g }

// Pause stops the reading for d from now: a read in progress ends, the
// next one waits.
func (g *editorGate) Pause(d time.Duration) {
	g.mu.Lock()
	g.until = time.Now().Add(d)
	g.mu.Unlock()
}

func (g *editorGate) Read(p []byte) (int, error) {
	g.mu.Lock()
	until := g.until
	g.mu.Unlock()
	time.Sleep(time.Until(until))
	if g.rate > 0 && len(p) > 16<<10 {
		p = p[:16<<10]
	}
	n, err := g.r.Read(p)
	if g.rate > 0 {
		time.Sleep(time.Duration(n) * time.Second / time.Duration(g.rate))
	}
	return n, err
}

// isFlood matches the flood's chunks in session sid.
func isFlood(sid string) func(*Msg) bool {
	return func(m *Msg) bool {
		txt, ok := m.ChunkText(sid)
		return ok && strings.HasPrefix(txt, "#")
	}
}

// checkFlood checks that the flood's chunks in sid reached the editor in
// order, none lost, all before the prompt's response, and returns how many
// there were.
func checkFlood(t *testing.T, e *Editor, sid string, resp *Msg) int {
	t.Helper()
	next := 0
	for _, m := range e.Rec.Filter(isFlood(sid)) {
		txt, _ := m.ChunkText(sid)
		n, err := strconv.Atoi(txt[1:strings.IndexByte(txt, ' ')])
		if err != nil || n != next {
			t.Fatalf("session %s: flood chunk %q where #%06d was expected (reordered or lost)", sid, truncate(txt, 12), next)
		}
		if m.Seq > resp.Seq {
			t.Fatalf("session %s: flood chunk #%06d (#%d) after the prompt's response (#%d)", sid, n, m.Seq, resp.Seq)
		}
		next++
	}
	return next
}

// TestFairnessCancelDuringFlood: while an agent floods the editor and the
// editor has stopped reading its stdout for a second, the editor's
// session/cancel reaches the agent within 50 ms (the router used to hold
// the session's lock while it waited for room in the editor's queue, and
// the cancel waited for that lock: until the editor read again). The flood
// then ends "cancelled", with nothing lost or reordered.
func TestFairnessCancelDuringFlood(t *testing.T) {
	skipShort(t, "floods the editor and measures a cancel's way through it (50 ms)")
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "agent.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("flooder", fakeOpts{LogFile: logFile, LogRecvTimes: true})},
		"default: flooder",
	))
	gate := &editorGate{}
	e := StartRouter(t, cfg, nil, withStdout(gate.wrap))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	_, wait, err := e.Go("session/prompt", promptReq(sid, "flood 4096"))
	if err != nil {
		t.Fatal(err)
	}
	e.Rec.WaitFor(t, waitTimeout, "the flood", isFlood(sid))
	gate.Pause(time.Second)
	// Every queue between the agent and the editor fills up meanwhile.
	time.Sleep(400 * time.Millisecond)
	sent := time.Now()
	if err := e.Notify("session/cancel", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	line := waitAgentLog(t, logFile, waitTimeout, "session/cancel", func(l string) bool { return strings.HasPrefix(l, "recv session/cancel ") })
	ns, err := strconv.ParseInt(line[strings.LastIndexByte(line, ' ')+1:], 10, 64)
	if err != nil {
		t.Fatalf("bad log line %q", line)
	}
	took := time.Unix(0, ns).Sub(sent)
	t.Logf("session/cancel reached the agent %v after the editor wrote it", took)
	if took > 50*time.Millisecond {
		t.Errorf("session/cancel reached the agent %v after the editor wrote it, want at most 50 ms", took)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, resp, "cancelled")
	t.Logf("%d flood chunks before the answer", checkFlood(t, e, sid, resp))
}

// TestFairnessPromptDuringFlood: session A floods the editor on one agent;
// a prompt in session B, on another agent, is answered within a second,
// and behind less than 1 MiB of A's flood, while the flood goes on (one
// write queue for the editor put B's answer behind all of A's queued
// updates). The editor reads all the time, at 2 MiB/s: how long "behind
// the queue" takes depends on how fast the editor reads.
func TestFairnessPromptDuringFlood(t *testing.T) {
	skipShort(t, "floods the editor and measures another session's answer through it (1 s)")
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	cfg := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{})},
		"default: alpha",
		"rules:",
		cwdRule(dirB, "beta"),
	))
	gate := &editorGate{rate: 2 << 20}
	e := StartRouter(t, cfg, nil, withStdout(gate.wrap))
	e.Initialize(t, capsAll)
	a := e.NewSession(t, dirA)
	b := e.NewSession(t, dirB)

	_, waitA, err := e.Go("session/prompt", promptReq(a, "flood 4096"))
	if err != nil {
		t.Fatal(err)
	}
	e.Rec.WaitFor(t, waitTimeout, "the flood", isFlood(a))
	// The flood outruns the editor: the router's queue for it fills up.
	time.Sleep(500 * time.Millisecond)
	before := len(e.Rec.All())
	sent := time.Now()
	mb, err := e.Prompt(waitTimeout, b, "say hello from b")
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, mb, "end_turn")
	took := mb.At.Sub(sent)
	behind := 0
	for _, m := range e.Rec.All()[before:mb.Seq] {
		if isFlood(a)(m) {
			behind += len(m.Raw) + 1
		}
	}
	t.Logf("B's answer came %v after its prompt, behind %d bytes of A's flood", took, behind)
	if took > time.Second || behind > 1<<20 {
		t.Errorf("B's answer came %v after its prompt, behind %d bytes of A's flood; want within 1 s and 1 MiB", took, behind)
	}
	if texts := e.Texts(b); len(texts) != 1 || texts[0] != "hello from b" {
		t.Errorf("session B chunks %q", texts)
	}
	e.Rec.WaitFor(t, waitTimeout, "A's flood after B's answer", func(m *Msg) bool { return m.Seq > mb.Seq && isFlood(a)(m) })

	if err := e.Notify("session/cancel", map[string]any{"sessionId": a}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ma, err := waitA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, ma, "cancelled")
	t.Logf("%d flood chunks before A's answer", checkFlood(t, e, a, ma))
}
