package acp

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/internal/leaktest"
)

// TestStreamWaitJoins: every goroutine a stream starts is its own: once
// its owner gave up on a peer that does not read (Close, then Abort),
// Wait returns when the writer, the stall watchdog, the close of the
// write side and OnFail have all ended.
func TestStreamWaitJoins(t *testing.T) {
	pr, pw := io.Pipe() // nobody reads pr: the writer blocks in its write
	defer pr.Close()
	release := make(chan struct{})
	s := NewStream(io.NopCloser(strings.NewReader("")), pw, StreamOptions{
		StallTimeout: time.Hour, // a watchdog that ticks rarely
		OnFail:       func(error) { <-release },
	})
	if err := s.WriteRaw([]byte(`{"jsonrpc":"2.0","method":"m"}`)); err != nil {
		t.Fatal(err)
	}
	for s.Queued() == 0 || !s.writingNow() {
		runtime.Gosched()
	}
	// This stream's: its methods and w's show their receivers; OnFail is
	// this test's.
	marks := []string{fmt.Sprintf("%p", s), fmt.Sprintf("%p", pw), "TestStreamWaitJoins.func"}
	if n := leaktest.Count(marks...); n != 2 {
		t.Fatalf("%d goroutines of the stream, want 2: the writer and the stall watchdog", n)
	}
	s.Close()
	s.Abort(errors.New("the peer does not read"))
	time.AfterFunc(100*time.Millisecond, func() { close(release) }) // OnFail takes a while
	if n := s.Wait(10 * time.Second); n != 0 {
		t.Fatalf("Wait: %d goroutines still run", n)
	}
	if n := leaktest.Count(marks...); n != 0 {
		t.Errorf("%d goroutines of the stream still run after Wait returned", n)
	}
}

// writingNow: the writer goroutine has taken a batch and is writing it.
func (s *Stream) writingNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writing
}
