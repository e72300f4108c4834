//go:build linux

package acp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pipeStream is a Stream writing to an OS pipe, as to an agent's stdin:
// non-blocking, so WriteRaw writes itself when nothing is queued.
func pipeStream(t *testing.T, opts StreamOptions) (*Stream, *os.File) {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	s := NewStream(inR, outW, opts)
	if s.direct == nil {
		t.Fatal("no direct writes to a non-blocking pipe")
	}
	t.Cleanup(func() {
		s.Abort(errors.New("test over"))
		inW.Close()
		outR.Close()
		waitClosed(t, s.Done(), "the stream's writer to finish")
	})
	return s, outR
}

func TestDirectWriterOnlyWhenNonBlocking(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if newDirectWriter(w) == nil {
		t.Error("os.Pipe's write end: no direct writes")
	}
	w.Fd() // makes it blocking, as for a child's stdio
	if newDirectWriter(w) != nil {
		t.Error("a blocking descriptor was chosen for direct writes")
	}
	_, pw := io.Pipe()
	if newDirectWriter(pw) != nil {
		t.Error("an io.Pipe was chosen for direct writes")
	}
}

// TestStreamDirectPartial: a message the pipe takes only in part is
// finished by the writer goroutine, before anything written later, and
// Close still drains it.
func TestStreamDirectPartial(t *testing.T) {
	f := newFailRecorder()
	s, out := pipeStream(t, StreamOptions{OnFail: f.OnFail})
	capacity, page := pipeSize(t, out), os.Getpagesize()
	line := func(n int, size int) []byte { // size bytes with its "\n"
		head := fmt.Sprintf(`{"w":0,"n":%d,"pad":"`, n)
		return []byte(head + strings.Repeat("x", size-len(head)-3) + `"}`)
	}
	// Nobody reads yet. The first leaves one page of the pipe free; the
	// second is written in part (that page); the third is larger than a
	// direct write; the fourth comes in a burst: both are queued.
	msgs := [][]byte{line(0, capacity-page), line(1, 2*page+100), line(2, maxDirect+1), line(3, 100)}
	for i, m := range msgs {
		if i < 3 {
			time.Sleep(2 * directGap) // not a burst
		}
		if err := s.WriteRaw(m); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			// The pipe is full; the rest of the second is queued, or
			// already taken by the writer goroutine (which then waits
			// for the pipe): either way nothing more is written, and the
			// end of the test checks that it arrives whole and in order.
			s.mu.Lock()
			queue := slices.Clone(s.shared.msgs[s.shared.head:])
			s.mu.Unlock()
			if s.Written() != int64(capacity) || len(queue) > 1 || len(queue) == 1 && !bytes.Equal(queue[0].msg, m[page:]) {
				t.Fatalf("after the second message, %d bytes written and %d queued; want %d written and at most the rest of the second queued", s.Written(), len(queue), capacity)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := recvAll(t, collect(t, out))
	checkSequences(t, got, 1, len(msgs))
	for i, line := range got {
		if !bytes.Equal(line, msgs[i]) {
			t.Fatalf("message %d arrived as %d bytes, want %d", i, len(line), len(msgs[i]))
		}
	}
	waitClosed(t, s.Done(), "Done after draining")
	if f.n.Load() != 0 {
		t.Errorf("OnFail: %v", <-f.errc)
	}
}

// pipeSize is the capacity of the pipe f belongs to.
func pipeSize(t *testing.T, f *os.File) int {
	t.Helper()
	const getPipeSize = 1032 // F_GETPIPE_SZ
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size uintptr
	var errno syscall.Errno
	rc.Control(func(fd uintptr) { size, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, getPipeSize, 0) })
	if errno != 0 || size < uintptr(2*os.Getpagesize()) {
		t.Fatalf("pipe size %d: %v", size, errno)
	}
	return int(size)
}

// TestStreamDirectOrder: concurrent writers through direct writes, partial
// writes and the queue, with a reader that lags: nothing lost or
// reordered. With lanes, the writers share three session lanes and wait for
// room after each message, as the router's agent read paths do.
func TestStreamDirectOrder(t *testing.T) {
	for _, opts := range []StreamOptions{{}, {Blocking: true, QueueBytes: 16 << 10}, {LaneBytes: 16 << 10, QueueBytes: 64 << 10}} {
		t.Run(fmt.Sprintf("blocking=%v,lanes=%v", opts.Blocking, opts.LaneBytes > 0), func(t *testing.T) {
			s, out := pipeStream(t, opts)
			slow := &slowReader{r: out, until: time.Now().Add(100 * time.Millisecond)}
			res := collect(t, slow)
			const writers, perWriter = 8, 200
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for n := range perWriter {
						pad := strings.Repeat("p", (n*7919)%(20<<10)) // up to 20 KiB
						if n%50 == 49 {
							pad = strings.Repeat("q", 70<<10) // over the direct bound
						}
						if n%10 == 0 {
							time.Sleep(2 * directGap) // a pause: the next may be written directly
						}
						var err error
						sid := fmt.Sprint("s", w%3)
						if n%2 == 0 {
							err = s.WriteRaw(fmt.Appendf(nil, `{"method":"m","params":{"sessionId":%q},"w":%d,"n":%d,"pad":"%s"}`, sid, w, n, pad))
						} else {
							err = s.WriteObject(map[string]any{"method": "m", "params": map[string]any{"sessionId": sid}, "w": w, "n": n, "pad": pad})
						}
						if err == nil && opts.LaneBytes > 0 {
							err = s.WaitRoom(sid)
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
			checkSequences(t, recvAll(t, res), writers, perWriter)
		})
	}
}

// slowReader reads a little at a time until a deadline, then at full
// speed.
type slowReader struct {
	r     io.Reader
	until time.Time
}

func (s *slowReader) Read(p []byte) (int, error) {
	if time.Now().Before(s.until) {
		time.Sleep(time.Millisecond)
		p = p[:min(len(p), 1000)]
	}
	return s.r.Read(p)
}

// TestStreamDirectStall: a peer that stops reading is declared hung when
// what direct writes could not finish stays queued.
func TestStreamDirectStall(t *testing.T) {
	const stall = 200 * time.Millisecond
	f := newFailRecorder()
	s, _ := pipeStream(t, StreamOptions{StallTimeout: stall, OnFail: f.OnFail})
	start := time.Now()
	for i := range 10 {
		time.Sleep(2 * directGap)
		if err := s.WriteRaw([]byte(`"` + strings.Repeat(fmt.Sprint(i), 10<<10) + `"`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.wait(t, waitTimeout); !errors.Is(err, ErrStalled) {
		t.Errorf("OnFail(%v), want ErrStalled", err)
	}
	if elapsed := time.Since(start); elapsed < stall {
		t.Errorf("declared stalled after %s, before the %s timeout", elapsed, stall)
	}
	waitClosed(t, s.Done(), "the writer to stop after the stall")
	f.onceReal(t)
}

// TestStreamDirectWriteError: a direct write to a pipe nobody reads any
// more fails the stream at once.
func TestStreamDirectWriteError(t *testing.T) {
	f := newFailRecorder()
	s, out := pipeStream(t, StreamOptions{OnFail: f.OnFail})
	out.Close()
	err := s.WriteRaw([]byte(`{}`))
	if !errors.Is(err, syscall.EPIPE) {
		t.Errorf("WriteRaw = %v, want EPIPE", err)
	}
	if err := f.wait(t, waitTimeout); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("OnFail(%v), want EPIPE", err)
	}
	if err := s.WriteRaw([]byte(`{}`)); err == nil {
		t.Error("a write after the failure succeeded")
	}
	waitClosed(t, s.Done(), "the writer to stop")
	f.onceReal(t)
}

// TestStreamLaneDirectPartial: the rest of a message a direct write began
// is written before anything else, whatever lane came first meanwhile.
func TestStreamLaneDirectPartial(t *testing.T) {
	s, out := pipeStream(t, StreamOptions{LaneBytes: 1 << 20})
	capacity, page := pipeSize(t, out), os.Getpagesize()
	msgs := [][]byte{laneMsg("a", 0, 0, capacity-page-1), laneMsg("b", 1, 0, 2*page+100), laneMsg("c", 2, 0, 100), laneMsg("a", 0, 1, 100)}
	for i, m := range msgs {
		if i < 2 {
			time.Sleep(2 * directGap) // not a burst: written directly
		}
		if err := s.WriteRaw(m); err != nil {
			t.Fatal(err)
		}
	}
	if n := laneHeld(s, "b"); n == 0 || s.Written() != int64(capacity) {
		t.Fatalf("%d bytes written, %d queued in lane b: want the pipe full and the rest of b's message queued", s.Written(), n)
	}
	res := collect(t, out)
	s.Close()
	got := recvAll(t, res)
	if len(got) != len(msgs) {
		t.Fatalf("got %d messages, want %d", len(got), len(msgs))
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d: %.60s… (%d bytes), want %.60s… (%d bytes)", i, got[i], len(got[i]), msgs[i], len(msgs[i]))
		}
	}
}

// TestStreamCork: what is written between Cork and Uncork is held back
// (nothing reaches the pipe, the writer goroutine is not woken) and leaves
// with one direct write at the last Uncork; a write that does not fit the
// pipe is finished by the writer goroutine, whole and in order; a WaitRoom
// that must wait lets the writer write what a Cork holds back.
func TestStreamCork(t *testing.T) {
	line := func(w, n, size int) []byte {
		head := fmt.Sprintf(`{"w":%d,"n":%d,"pad":"`, w, n)
		return []byte(head + strings.Repeat("x", max(size-len(head)-3, 0)) + `"}`)
	}
	t.Run("held", func(t *testing.T) {
		s, out := pipeStream(t, StreamOptions{LaneBytes: 1 << 20, QueueBytes: 4 << 20})
		time.Sleep(20 * time.Millisecond) // the writer goroutine waits (an awake one takes what is queued)
		s.Cork()
		s.Cork() // two agents' read loops at once
		for n := range 3 {
			if err := s.WriteRawLane("a", line(0, n, 100)); err != nil {
				t.Fatal(err)
			}
		}
		s.Uncork()
		time.Sleep(20 * time.Millisecond) // a woken writer would write now
		if s.Written() != 0 {
			t.Fatalf("%d bytes written while corked", s.Written())
		}
		s.Uncork()
		if want := int64(3 * 100); s.Written() != want { // by the Uncork itself
			t.Fatalf("after the last Uncork %d bytes written, want %d", s.Written(), want)
		}
		s.Close()
		checkSequences(t, recvAll(t, collect(t, out)), 1, 3)
	})
	t.Run("partial", func(t *testing.T) {
		s, out := pipeStream(t, StreamOptions{LaneBytes: 1 << 20, QueueBytes: 4 << 20})
		capacity, page := pipeSize(t, out), os.Getpagesize()
		// Nobody reads: the pipe keeps one page and a half free.
		if err := s.WriteRawLane("b", line(1, 0, capacity-page-page/2)); err != nil {
			t.Fatal(err)
		}
		s.Cork()
		var msgs [][]byte
		for n := range 4 { // the second one is cut by the pipe
			m := line(0, n, page)
			msgs = append(msgs, m)
			if err := s.WriteRawLane("a", m); err != nil {
				t.Fatal(err)
			}
		}
		s.Uncork()
		s.Close()
		got := recvAll(t, collect(t, out))
		var a [][]byte
		for _, l := range got {
			if bytes.HasPrefix(l, []byte(`{"w":0`)) {
				a = append(a, l)
			}
		}
		if len(got) != len(msgs)+1 {
			t.Fatalf("%d messages arrived, want %d", len(got), len(msgs)+1)
		}
		if len(a) != len(msgs) {
			t.Fatalf("%d of %d corked messages arrived", len(a), len(msgs))
		}
		for i := range a {
			if !bytes.Equal(a[i], msgs[i]) {
				t.Fatalf("message %d arrived as %d bytes, want %d", i, len(a[i]), len(msgs[i]))
			}
		}
	})
	t.Run("waitroom", func(t *testing.T) {
		s, out := pipeStream(t, StreamOptions{LaneBytes: 4 << 10, QueueBytes: 1 << 20})
		res := collect(t, out)
		s.Cork()
		n := 0
		for ; n < 20; n++ { // 20 KiB into a 4 KiB lane, corked
			if err := s.WriteRawLane("a", line(0, n, 1000)); err != nil {
				t.Fatal(err)
			}
		}
		if err := returnsWithin(t, 5*time.Second, "WaitRoom while corked", func() error { return s.WaitRoom("a") }); err != nil {
			t.Fatal(err)
		}
		s.Uncork()
		s.Close()
		checkSequences(t, recvAll(t, res), 1, n)
	})
}
