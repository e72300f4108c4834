package router

// Guards on the memory a flood of large updates costs with the session
// store on, the configuration users run (issue 16 parts 2 and 4): how many
// times a 1 MiB update is copied on its way to the editor and the disk, and
// how far the heap grows above its start while 32 of them are relayed.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/store"
)

// Bounds of the guards below, measured on the code they guard (issue 16
// part 2). Before it, the store copied each update into its queue and
// queued a flood up to MaxQueueBytes, and each line was a new allocation:
// 2.02 copies allocated per 1 MiB update, and a peak heap of 34–37 MiB
// above the start for 32 of them. With the store keeping the relayed
// bytes (1.01 copies: the reader's; peak 8–13 MiB, following the garbage
// collector's timing), then the reader's long lines in pooled buffers
// (0.00 copies allocated: the buffers come back; peak 7.2–10.3 MiB, six
// to nine buffers of 1.125 MiB: the reader's, the editor's lane, the
// batch being written, the store's room). The bounds fail on the code
// before (checked: 2.02 copies, 34.2 MiB).
const (
	// maxCopies1MiBStore: bytes allocated per relayed 1 MiB update with
	// the store on, in multiples of its size. Less than one: the line's
	// pooled buffer is shared by the editor's queue and the store's and
	// reused once both wrote it.
	maxCopies1MiBStore = 0.5
	// maxFloodPeakMiB: the peak heap in use above the start while 32
	// updates of 1 MiB are relayed with the store on, in MiB.
	maxFloodPeakMiB = 12
	// With -race, sync.Pool drops a quarter of what it is given, at
	// random: 0.07–0.42 copies, peaks of 10.2–13.3 MiB measured.
	maxCopies1MiBRace   = 0.75
	maxFloodPeakMiBRace = 16
)

// copiesBound and peakBound are the bounds for this build.
func copiesBound() float64 {
	if raceEnabled {
		return maxCopies1MiBRace
	}
	return maxCopies1MiBStore
}

func peakBound() float64 {
	if raceEnabled {
		return maxFloodPeakMiBRace
	}
	return maxFloodPeakMiB
}

// openStore opens a session store in a temporary directory, closed when
// the test ends.
func openStore(tb testing.TB) *store.Store {
	tb.Helper()
	st, err := store.Open(filepath.Join(tb.TempDir(), "sessions"), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// TestCopies1MiBStore is TestCopies1MiB with the session store on: the
// update goes to the editor's queue and the store's, and is written to
// both, without a second copy.
func TestCopies1MiBStore(t *testing.T) {
	copies := copiesStored(t, false)
	t.Logf("%.2f copies per 1 MiB update, store on (bound %.2f)", copies, copiesBound())
	if copies > copiesBound() {
		t.Errorf("%.2f× the message allocated per relayed 1 MiB update with the store on, want at most %.2f×", copies, copiesBound())
	}
}

// copiesStored is copiesPerSend of 1 MiB updates through a router with a
// session store, translated or not; it checks that the store got them all,
// with the router's session id.
func copiesStored(t *testing.T, translate bool) float64 {
	st := openStore(t)
	ro := newRelayOneOn(t, newRelayFixtureOpts(t, translate, Options{Store: st}))
	if err := st.TurnStart(ro.f.s.ID); err != nil {
		t.Fatal(err)
	}
	line := append(updateLine(t, ro.f.sid, 1<<20), '\n')
	copies := copiesPerSend(ro, line)
	if err := st.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	h, err := st.Load(t.Context(), ro.f.s.ID)
	if err != nil || len(h.Updates) != 3+3*copiesSends || !bytes.Contains(h.Updates[0][:200], []byte(`"sessionId":"`+ro.f.s.ID+`"`)) {
		t.Fatalf("the store has %d updates (%v), want %d with the router's session id", len(h.Updates), err, 3+3*copiesSends)
	}
	return copies
}

// TestFloodPeakStore bounds the heap during a flood of 32 updates of 1 MiB
// from an agent, relayed as fast as the editor reads them, with the store
// on: the peak of the heap in use (objects and the free space of spans in
// use: what the process keeps of it) above the start, sampled every 100 µs.
// The queues are bounded in bytes (the editor's lane, the store's room);
// what remains is the garbage collector's lag behind the readers' copies.
func TestFloodPeakStore(t *testing.T) {
	if testing.Short() {
		t.Skip("a 32 MiB flood; -short skips it")
	}
	const n = 32
	peak, perMessage := 0.0, 0.0
	for i := range 3 { // the least of three: the peak follows the GC's timing
		p, inFlight := floodPeak(t, n)
		if i == 0 || p < peak {
			peak = p
		}
		t.Logf("run %d: peak heap %.1f MiB above the start; at most %d updates in flight: %.2f× the message per message in flight", i, p, inFlight, p/float64(inFlight))
		if x := p / float64(inFlight); i == 0 || x < perMessage {
			perMessage = x
		}
	}
	t.Logf("peak heap %.1f MiB above the start during %d × 1 MiB updates, store on (bound %.0f MiB)", peak, n, peakBound())
	if peak > peakBound() {
		t.Errorf("peak heap %.1f MiB above the start during a flood of %d × 1 MiB updates with the store on, want at most %.0f MiB", peak, n, peakBound())
	}
	// Issue 16's target: at most 4× the message per message in flight.
	bound := maxPerMessageInFlight
	if raceEnabled {
		bound = maxPerMessageInFlightRace
	}
	if perMessage > bound {
		t.Errorf("peak heap %.2f× the message per 1 MiB update in flight, want at most %.0f×", perMessage, bound)
	}
}

// maxPerMessageInFlight bounds the peak heap of a flood above its start,
// divided by the most updates in flight at once (read from the agent and
// not yet both read by the editor and written by the store) and their size:
// issue 16's target, 4×; measured 1.2–2.8× (the pooled buffers the
// reader's next lines will use make the rest). With -race (sync.Pool drops
// buffers at random, the relay is slower so fewer are in flight): 4.2–5.1×.
const (
	maxPerMessageInFlight     = 4.0
	maxPerMessageInFlightRace = 6.0
)

// floodPeak relays n updates of 1 MiB through a router with a store and
// returns the peak heap in use above the start, in MiB, and the most
// updates in flight at one sample: read whole from the agent but not yet
// read by the editor, or queued for the store's writer (at least one: the
// reader's).
func floodPeak(t *testing.T, n int) (float64, int) {
	st := openStore(t)
	f := newRelayFixtureOpts(t, false, Options{Store: st})
	if err := st.TurnStart(f.s.ID); err != nil {
		t.Fatal(err)
	}
	line := updateLine(t, f.sid, 1<<20)
	src := &repeatReader{line: append(line, '\n'), n: n}
	agent := acp.NewStream(io.NopCloser(src), discardCloser{}, acp.StreamOptions{
		Intercept: func(m *acp.Message) bool { return f.r.interceptAgent(f.inst, m) },
		Prescan:   f.r.uopts.Prescan,
	})
	inUse := func(s []metrics.Sample) uint64 {
		metrics.Read(s)
		return s[0].Value.Uint64() + s[1].Value.Uint64()
	}
	newSamples := func() []metrics.Sample {
		return []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	}
	runtime.GC()
	start := inUse(newSamples())
	var peak atomic.Uint64
	inFlight := 1
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		s := newSamples()
		for {
			if v := inUse(s); v > peak.Load() {
				peak.Store(v)
			}
			stored := int((st.Stats().Queued + int64(len(line))) / int64(len(line)+1))
			inFlight = max(inFlight, int(src.sent.Load()-f.got.Load()), stored)
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	var v json.RawMessage
	err := agent.ReadObject(&v)
	f.stop()
	close(stop)
	<-sampled
	agent.Close()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("ReadObject: %v (the router let a message through)", err)
	}
	if f.lines != int64(n) {
		t.Fatalf("the editor got %d lines, want %d", f.lines, n)
	}
	if err := st.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h, err := st.Load(t.Context(), f.s.ID); err != nil || len(h.Updates) != n {
		t.Fatalf("the store has %d updates (%v), want %d", len(h.Updates), err, n)
	}
	return float64(peak.Load()-min(start, peak.Load())) / (1 << 20), inFlight
}

// TestFloodIntactStore relays updates of many sizes, most past the
// reader's buffer (pooled, shared by the editor's queue and the store,
// reused once both wrote them), to an editor that reads slowly at times,
// and checks that each arrives byte for byte, in order, and is stored so:
// a buffer reused too early would show here. Translated: the same with
// each update rewritten for a session whose id is not its agent's (the
// reader's buffer goes back to the pool once the new line is made).
func TestFloodIntactStore(t *testing.T) {
	t.Parallel()
	for _, translate := range []bool{false, true} {
		t.Run(map[bool]string{false: "verbatim", true: "translated"}[translate], func(t *testing.T) {
			t.Parallel()
			testFloodIntactStore(t, translate)
		})
	}
}

func testFloodIntactStore(t *testing.T, translate bool) {
	const n = 96
	const sid = "0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90"
	lines := make([][]byte, n)
	var routerID atomic.Value // the router's session id, once the fixture has made it
	want := func(i int64) []byte {
		id, _ := routerID.Load().(string)
		return bytes.Replace(lines[i], []byte(`"sessionId":"`+sid+`"`), []byte(`"sessionId":"`+id+`"`), 1)
	}
	var src bytes.Buffer
	rng := rand.New(rand.NewPCG(16, 2))
	for i := range lines {
		size := 200 + rng.IntN(3<<20/2)
		if i%7 == 0 {
			size = 60<<10 + rng.IntN(10<<10) // around the reader's buffer
		}
		if i%5 == 1 {
			// Pooled lines that fit the reader's buffer, below and above
			// the store's MinSharedBytes (copied there, or kept).
			size = 2<<10 + rng.IntN(30<<10)
		}
		lines[i] = floodLine(t, sid, i, size)
		src.Write(lines[i])
		src.WriteByte('\n')
	}
	var bad atomic.Value
	read := func(r io.Reader) int64 {
		br := bufio.NewReaderSize(r, 64<<10)
		got := int64(0)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return got
			}
			if got < n && !bytes.Equal(line[:len(line)-1], want(got)) && bad.Load() == nil {
				bad.Store(fmt.Sprintf("line %d: %d bytes, want %d (%.60q…)", got, len(line)-1, len(want(got)), line))
			}
			got++
			if got%5 == 0 {
				time.Sleep(2 * time.Millisecond) // let the queues fill
			}
		}
	}
	st := openStore(t)
	f := newRelayFixtureEditor(t, translate, Options{Store: st}, read)
	routerID.Store(f.s.ID)
	if err := st.TurnStart(f.s.ID); err != nil {
		t.Fatal(err)
	}
	agent := acp.NewStream(io.NopCloser(&src), discardCloser{}, acp.StreamOptions{
		Intercept: func(m *acp.Message) bool { return f.r.interceptAgent(f.inst, m) },
		Prescan:   f.r.uopts.Prescan,
	})
	var v json.RawMessage
	err := agent.ReadObject(&v)
	f.stop()
	agent.Close()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("ReadObject: %v", err)
	}
	if msg := bad.Load(); msg != nil {
		t.Fatalf("the editor got a damaged update: %s", msg)
	}
	if f.lines != n {
		t.Fatalf("the editor got %d lines, want %d", f.lines, n)
	}
	if err := st.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	h, err := st.Load(t.Context(), f.s.ID)
	if err != nil || len(h.Updates) != n {
		t.Fatalf("the store has %d updates (%v), want %d", len(h.Updates), err, n)
	}
	for i, u := range h.Updates {
		if !bytes.Equal(u, want(int64(i))) {
			t.Fatalf("stored update %d: %d bytes, want %d (%.60q…)", i, len(u), len(want(int64(i))), u)
		}
	}
}

// floodLine is an agent_message_chunk of exactly size bytes whose text
// tells update i from any other.
func floodLine(tb testing.TB, sid string, i, size int) []byte {
	tb.Helper()
	head := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + sid + `","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`
	tail := `"}}}}`
	unit := fmt.Sprintf("update %d of the flood; ", i)
	text := strings.Repeat(unit, (size-len(head)-len(tail))/len(unit)+1)[:max(size-len(head)-len(tail), 0)]
	line := []byte(head + text + tail)
	if !json.Valid(line) {
		tb.Fatalf("flood line %d is not JSON", i)
	}
	return line
}

// TestCopies1MiBTranslated is TestCopies1MiBStore on the path of a session
// whose id is not its agent's (after a switch of agent, a subagent's
// session): the update is rewritten into a new line, which the editor's
// queue and the store get; the reader's pooled buffer goes back to the pool
// once the new line is made, so one copy is allocated per update, not two.
func TestCopies1MiBTranslated(t *testing.T) {
	copies := copiesStored(t, true)
	bound := maxCopies1MiBTranslated
	if raceEnabled {
		bound += copiesBound() - maxCopies1MiBStore
	}
	t.Logf("%.2f copies per translated 1 MiB update, store on (bound %.2f)", copies, bound)
	if copies > bound {
		t.Errorf("%.2f× the message allocated per translated 1 MiB update with the store on, want at most %.2f×", copies, bound)
	}
}

// maxCopies1MiBTranslated: the new line, and nothing else.
const maxCopies1MiBTranslated = 1.5
