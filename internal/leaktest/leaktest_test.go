package leaktest

import (
	"fmt"
	"runtime"
	"testing"
)

//go:noinline
func parked(ch chan struct{}) { <-ch }

// TestCount: a goroutine is counted by the function it runs and by a
// pointer it was passed, once when it holds both, and no longer once it
// has returned.
func TestCount(t *testing.T) {
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() { parked(ch); close(done) }()
	for Count("leaktest.parked(") == 0 {
		runtime.Gosched() // not parked yet
	}
	ptr := fmt.Sprintf("%p", ch)
	if n := Count("leaktest.parked(", ptr); n != 1 {
		t.Errorf("Count(function, its argument) = %d, want 1", n)
	}
	if n := Count("leaktest.noSuchFunction("); n != 0 {
		t.Errorf("Count(a name nothing runs) = %d, want 0", n)
	}
	close(ch)
	<-done
	for Count("leaktest.parked(") != 0 {
		runtime.Gosched() // closed done, not returned yet
	}
}
