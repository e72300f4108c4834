package acp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// failRecorder counts OnFail calls.
type failRecorder struct {
	n    atomic.Int32
	errc chan error
}

func newFailRecorder() *failRecorder { return &failRecorder{errc: make(chan error, 8)} }

func (f *failRecorder) OnFail(err error) {
	f.n.Add(1)
	f.errc <- err
}

// wait returns the first failure or fails the test after d.
func (f *failRecorder) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-f.errc:
		return err
	case <-time.After(d):
		t.Fatalf("OnFail was not called within %s", d)
	}
	return nil
}

// once checks that OnFail ran exactly once. It runs in the test's bubble
// (synctest): the minute passes at once, firing every timer due in it,
// then every goroutine is blocked, so a second call that was coming has
// come.
func (f *failRecorder) once(t *testing.T) {
	t.Helper()
	time.Sleep(time.Minute)
	synctest.Wait()
	if n := f.n.Load(); n != 1 {
		t.Errorf("OnFail called %d times, want exactly once", n)
	}
}

// onceReal is once for a test on real pipes, which cannot run in a bubble
// (synctest.Wait panics outside one, after once's minute of real sleep):
// a second call that was coming gets 100 ms to come.
func (f *failRecorder) onceReal(t *testing.T) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	if n := f.n.Load(); n != 1 {
		t.Errorf("OnFail called %d times, want exactly once", n)
	}
}

// writeStream is a Stream whose input is empty and whose output goes to a
// pipe the test reads (or does not read) from Out.
func writeStream(t *testing.T, opts StreamOptions) (*Stream, *io.PipeReader) {
	t.Helper()
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	s := NewStream(inR, outW, opts)
	t.Cleanup(func() {
		s.Abort(errors.New("test over"))
		inW.Close()
		outR.Close()
		waitClosed(t, s.Done(), "the stream's writer to finish")
	})
	return s, outR
}

// checkSequences checks lines of the form {"w":…,"n":…}: n counts 0, 1, …
// per writer w, nothing lost, nothing reordered.
func checkSequences(t *testing.T, got [][]byte, writers, perWriter int) {
	t.Helper()
	if len(got) != writers*perWriter {
		t.Fatalf("got %d messages, want %d", len(got), writers*perWriter)
	}
	next := make([]int, writers)
	for i, line := range got {
		var m struct{ W, N int }
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("message %d is not JSON: %v: %.80s", i, err, line)
		}
		if m.W < 0 || m.W >= writers {
			t.Fatalf("message %d from unknown writer %d", i, m.W)
		}
		if m.N != next[m.W] {
			t.Fatalf("message %d: writer %d sent #%d, want #%d (lost or reordered)", i, m.W, m.N, next[m.W])
		}
		next[m.W]++
	}
}

// collect reads lines from r until it closes, bounded by waitTimeout.
func collect(t *testing.T, r io.Reader) <-chan [][]byte {
	t.Helper()
	res := make(chan [][]byte, 1)
	go func() {
		var out [][]byte
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				if len(line) > 0 {
					out = append(out, append(line, "<unterminated>"...))
				}
				res <- out
				return
			}
			out = append(out, line[:len(line)-1])
		}
	}()
	return res
}

func recvAll(t *testing.T, res <-chan [][]byte) [][]byte {
	t.Helper()
	select {
	case got := <-res:
		return got
	case <-time.After(waitTimeout):
		t.Fatal("timed out reading the stream's output")
	}
	return nil
}

// TestStreamWriteOrder: WriteRaw and WriteObject share one FIFO; each
// writer's messages come out in the order written, newline-terminated.
func TestStreamWriteOrder(t *testing.T) {
	tests := []struct {
		name      string
		writers   int
		perWriter int
		opts      StreamOptions
	}{
		{"one writer", 1, 2000, StreamOptions{}},
		{"one writer, tiny blocking queue", 1, 500, StreamOptions{Blocking: true, QueueBytes: 64}},
		{"eight writers", 8, 300, StreamOptions{}},
		{"eight writers, blocking queue", 8, 300, StreamOptions{Blocking: true, QueueBytes: 4096}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, out := writeStream(t, tt.opts)
			res := collect(t, out)
			var wg sync.WaitGroup
			for w := range tt.writers {
				wg.Go(func() {
					for n := range tt.perWriter {
						var err error
						if n%2 == 0 {
							err = s.WriteRaw(fmt.Appendf(nil, `{"w":%d,"n":%d,"pad":"%s"}`, w, n, strings.Repeat("r", n%37)))
						} else {
							err = s.WriteObject(map[string]any{"w": w, "n": n, "pad": strings.Repeat("o", n%41)})
						}
						if err != nil {
							t.Errorf("writer %d message %d: %v", w, n, err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			checkSequences(t, recvAll(t, res), tt.writers, tt.perWriter)
		})
	}
}

// TestStreamQueueFull: a non-blocking stream whose peer never reads fails
// with ErrQueueFull once QueueBytes is exceeded, calls OnFail once and
// drops what was queued.
func TestStreamQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFailRecorder()
		s, out := writeStream(t, StreamOptions{QueueBytes: 1000, OnFail: f.OnFail})
		msg := []byte(`"` + strings.Repeat("q", 297) + `"`) // 300 bytes + "\n"
		for i := range 3 {
			if err := s.WriteRaw(msg); err != nil {
				t.Fatalf("write %d (%d bytes queued) failed: %v", i, (i+1)*301, err)
			}
		}
		err := s.WriteRaw(msg)
		if !errors.Is(err, ErrQueueFull) {
			t.Fatalf("write over the bound = %v, want ErrQueueFull", err)
		}
		if got := f.wait(t, waitTimeout); !errors.Is(got, ErrQueueFull) {
			t.Errorf("OnFail(%v), want ErrQueueFull", got)
		}
		if !errors.Is(s.Err(), ErrQueueFull) {
			t.Errorf("Err() = %v, want ErrQueueFull", s.Err())
		}
		for range 3 {
			if err := s.WriteRaw([]byte(`1`)); !errors.Is(err, ErrQueueFull) {
				t.Errorf("write after the failure = %v, want ErrQueueFull", err)
			}
		}
		if err := s.WriteObject(1); !errors.Is(err, ErrQueueFull) {
			t.Errorf("WriteObject after the failure = %v, want ErrQueueFull", err)
		}
		s.Abort(errors.New("owner gives up"))
		f.once(t)
		waitClosed(t, s.Done(), "the writer to stop")
		if got := recvAll(t, collect(t, out)); len(got) != 0 {
			t.Errorf("%d queued messages were written after the failure", len(got))
		}
	})
}

// TestStreamQueueOversized: one message bigger than the whole bound is
// still accepted when nothing is queued (a blocking writer waits for the
// queue to empty first).
func TestStreamQueueOversized(t *testing.T) {
	tests := []struct {
		name     string
		blocking bool
		n        int
	}{
		{"non-blocking", false, 1},
		{"blocking", true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFailRecorder()
			s, out := writeStream(t, StreamOptions{QueueBytes: 100, Blocking: tt.blocking, OnFail: f.OnFail})
			res := collect(t, out)
			big := `"` + strings.Repeat("b", 10000) + `"`
			for i := range tt.n {
				if err := s.WriteRaw([]byte(big)); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			s.Close()
			got := recvAll(t, res)
			if len(got) != tt.n {
				t.Fatalf("got %d messages, want %d", len(got), tt.n)
			}
			for _, l := range got {
				if string(l) != big {
					t.Errorf("message changed: %.40s…", l)
				}
			}
			if f.n.Load() != 0 {
				t.Errorf("OnFail(%v)", <-f.errc)
			}
		})
	}
}

// TestStreamBlocking: a blocking stream holds writers back while the peer
// does not read and loses or reorders nothing once it does.
func TestStreamBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const writers, perWriter = 4, 100
		f := newFailRecorder()
		s, out := writeStream(t, StreamOptions{Blocking: true, QueueBytes: 1000, OnFail: f.OnFail})
		var written atomic.Int32
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for n := range perWriter {
					if err := s.WriteRaw(fmt.Appendf(nil, `{"w":%d,"n":%d,"pad":"%s"}`, w, n, strings.Repeat("p", 150))); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
					written.Add(1)
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()

		synctest.Wait() // every writer is blocked (or done)
		blockedAt := written.Load()
		if blockedAt >= writers*perWriter {
			t.Fatal("all writes returned although nobody reads: the stream does not block")
		}
		// 1000 bytes of queue hold at most 6 of these messages.
		if blockedAt > 10 {
			t.Errorf("%d writes returned with 1000 bytes of queue", blockedAt)
		}
		select {
		case <-done:
			t.Fatal("writers finished without a reader")
		default:
		}

		res := collect(t, out)
		waitClosed(t, done, "the blocked writers to finish once the peer reads")
		s.Close()
		checkSequences(t, recvAll(t, res), writers, perWriter)
		if f.n.Load() != 0 {
			t.Errorf("OnFail called on a blocking stream: %v", <-f.errc)
		}
	})
}

// TestStreamBlockingClose: Close releases writers blocked on a full queue.
func TestStreamBlockingClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, out := writeStream(t, StreamOptions{Blocking: true, QueueBytes: 10})
		if err := s.WriteRaw([]byte(`"first"`)); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- s.WriteRaw([]byte(`"second"`)) }()
		// A minute passes at once (synctest), then every goroutine is
		// blocked: the second write has returned, or waits for the test.
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("second write returned %v while the queue is full", err)
		default:
		}
		s.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("blocked write after Close = %v, want ErrClosed", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("Close did not release the blocked writer")
		}
		got := recvAll(t, collect(t, out))
		if len(got) != 1 || string(got[0]) != `"first"` {
			t.Errorf("output %q, want the first message only", got)
		}
	})
}

// TestStreamBlockingStall: writers blocked on a full queue are released
// with ErrStalled when the peer is declared hung.
func TestStreamBlockingStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFailRecorder()
		s, _ := writeStream(t, StreamOptions{Blocking: true, QueueBytes: 10, StallTimeout: 100 * time.Millisecond, OnFail: f.OnFail})
		if err := s.WriteRaw([]byte(`"first"`)); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- s.WriteRaw([]byte(`"second"`)) }()
		select {
		case err := <-errc:
			if !errors.Is(err, ErrStalled) {
				t.Errorf("blocked write = %v, want ErrStalled", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the stall did not release the blocked writer")
		}
		if err := f.wait(t, waitTimeout); !errors.Is(err, ErrStalled) {
			t.Errorf("OnFail(%v), want ErrStalled", err)
		}
		f.once(t)
	})
}

// TestStreamStall: with a stall timeout, a peer that stops reading is
// declared hung, and one that reads slowly but steadily is not.
func TestStreamStall(t *testing.T) {
	const stall = 200 * time.Millisecond
	tests := []struct {
		name     string
		blocking bool
		size     int           // one message of this many bytes
		chunk    int           // the reader takes this much at a time
		pause    time.Duration // between reads
		stopAt   int           // the reader stops after this many bytes (-1: never)
		stalled  bool
	}{
		{name: "never reads", size: 1000, stopAt: 0, stalled: true},
		{name: "never reads, blocking", blocking: true, size: 1000, stopAt: 0, stalled: true},
		{name: "stops mid message", size: 5 << 20, chunk: 32 << 10, stopAt: 1 << 20, stalled: true},
		{name: "5 MiB in 32 KiB reads every 5ms", size: 5 << 20, chunk: 32 << 10, pause: 5 * time.Millisecond, stopAt: -1},
		{name: "1 MiB in 64 KiB reads every 120ms", size: 1 << 20, chunk: 64 << 10, pause: 120 * time.Millisecond, stopAt: -1},
		// 64 KiB take 640ms at this pace: progress must be seen within
		// a write, not only when it completes.
		{name: "256 KiB in 4 KiB reads every 40ms, blocking", blocking: true, size: 256 << 10, chunk: 4 << 10, pause: 40 * time.Millisecond, stopAt: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFailRecorder()
				s, out := writeStream(t, StreamOptions{StallTimeout: stall, Blocking: tt.blocking, OnFail: f.OnFail})
				msg := []byte(`"` + strings.Repeat("s", tt.size-2) + `"`)
				start := time.Now()
				if err := s.WriteRaw(msg); err != nil {
					t.Fatal(err)
				}
				readDone := make(chan int, 1)
				go func() {
					// Reads chunk bytes (however the writer slices them), then
					// pauses.
					buf := make([]byte, max(tt.chunk, 1))
					total, want := 0, len(msg)+1
					for tt.stopAt < 0 || total < tt.stopAt {
						n, err := io.ReadFull(out, buf[:min(len(buf), want-total)])
						total += n
						if err != nil || total == want {
							break
						}
						time.Sleep(tt.pause)
					}
					readDone <- total
				}()

				if tt.stalled {
					err := f.wait(t, waitTimeout)
					elapsed := time.Since(start)
					if !errors.Is(err, ErrStalled) {
						t.Errorf("OnFail(%v), want ErrStalled", err)
					}
					if elapsed < stall {
						t.Errorf("declared stalled after %s, before the %s timeout", elapsed, stall)
					}
					if tt.stopAt == 0 && elapsed > stall+time.Second {
						t.Errorf("declared stalled only after %s (timeout %s)", elapsed, stall)
					}
					if err := s.WriteRaw([]byte(`1`)); !errors.Is(err, ErrStalled) {
						t.Errorf("write after the stall = %v, want ErrStalled", err)
					}
					waitClosed(t, s.Done(), "the writer to stop after the stall")
					f.once(t)
					return
				}
				select {
				case total := <-readDone:
					if total != len(msg)+1 {
						t.Fatalf("reader got %d bytes, want %d", total, len(msg)+1)
					}
				case err := <-f.errc:
					t.Fatalf("a steady reader was declared hung after %s: %v", time.Since(start), err)
				case <-time.After(30 * time.Second):
					t.Fatal("timed out waiting for the slow reader")
				}
				// An idle stream with nothing queued never stalls.
				select {
				case err := <-f.errc:
					t.Fatalf("OnFail(%v) on an idle stream", err)
				case <-time.After(3 * stall):
				}
			})
		})
	}
}

// TestStreamCloseDrains: Close lets the writer flush what is queued, then
// closes the output; later writes fail with ErrClosed.
func TestStreamCloseDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFailRecorder()
		s, out := writeStream(t, StreamOptions{OnFail: f.OnFail})
		const n = 50
		for i := range n {
			if err := s.WriteObject(map[string]int{"w": 0, "n": i}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteRaw([]byte(`{}`)); !errors.Is(err, ErrClosed) {
			t.Errorf("write after Close = %v, want ErrClosed", err)
		}
		time.Sleep(time.Minute) // at once (synctest), every timer due fired
		synctest.Wait()         // the writer is blocked on the output, or done
		select {
		case <-s.Done():
			t.Fatal("Done before the queue was drained")
		default:
		}
		// Only now does the peer read: everything queued arrives, then EOF.
		checkSequences(t, recvAll(t, collect(t, out)), 1, n)
		waitClosed(t, s.Done(), "Done after draining")
		if f.n.Load() != 0 {
			t.Errorf("OnFail called by Close: %v", <-f.errc)
		}
		if s.Written() == 0 {
			t.Error("Written() = 0 after writing")
		}
	})
}

// TestStreamAbort: Abort drops what is queued, closes both sides, makes
// ReadObject fail and reports its error once through OnFail.
func TestStreamAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFailRecorder()
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		t.Cleanup(func() { inW.Close(); outR.Close() })
		s := NewStream(inR, outW, StreamOptions{OnFail: f.OnFail})
		readErr := make(chan error, 1)
		go func() {
			var v json.RawMessage
			readErr <- s.ReadObject(&v)
		}()
		for i := range 10 {
			if err := s.WriteRaw(fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
		boom := errors.New("agent killed")
		s.Abort(boom)
		waitClosed(t, s.Done(), "the writer to stop")
		if got := recvAll(t, collect(t, outR)); len(got) != 0 {
			t.Errorf("%d messages written after Abort", len(got))
		}
		select {
		case err := <-readErr:
			if err == nil {
				t.Error("ReadObject returned nil after Abort")
			}
		case <-time.After(waitTimeout):
			t.Fatal("ReadObject still blocked after Abort")
		}
		if err := s.WriteRaw([]byte(`1`)); !errors.Is(err, boom) {
			t.Errorf("write after Abort = %v, want %v", err, boom)
		}
		if got := f.wait(t, waitTimeout); !errors.Is(got, boom) {
			t.Errorf("OnFail(%v), want %v", got, boom)
		}
		s.Abort(errors.New("again"))
		s.Close()
		f.once(t)
	})
}

// TestStreamWriteObjectError: a value that cannot be encoded fails that
// write only.
func TestStreamWriteObjectError(t *testing.T) {
	s, out := writeStream(t, StreamOptions{})
	res := collect(t, out)
	if err := s.WriteObject(func() {}); err == nil {
		t.Error("WriteObject(func) succeeded")
	}
	if err := s.WriteObject(map[string]int{"w": 0, "n": 0}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	checkSequences(t, recvAll(t, res), 1, 1)
}

// TestStreamWriteError: a write error on the output fails the stream.
func TestStreamWriteError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFailRecorder()
		outR, outW := io.Pipe()
		outR.CloseWithError(errors.New("stdin gone"))
		s := NewStream(io.NopCloser(strings.NewReader("")), outW, StreamOptions{OnFail: f.OnFail})
		if err := s.WriteRaw([]byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		err := f.wait(t, waitTimeout)
		if err == nil || !strings.Contains(err.Error(), "stdin gone") {
			t.Errorf("OnFail(%v), want the write error", err)
		}
		waitClosed(t, s.Done(), "the writer to stop")
		f.once(t)
	})
}
