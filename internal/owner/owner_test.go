package owner

import (
	"testing"
	"time"
)

// TestGroup: Wait waits for every goroutine, also for those started while
// it waits, and gives up after its bound naming how many still run.
func TestGroup(t *testing.T) {
	var o Group
	release := make(chan struct{})
	o.Go(func() {
		<-release
		o.Go(func() { time.Sleep(10 * time.Millisecond) }) // started during Wait
	})
	if n := o.Wait(20 * time.Millisecond); n != 1 {
		t.Fatalf("Wait with one blocked goroutine = %d, want 1", n)
	}
	close(release)
	if n := o.Wait(time.Second); n != 0 {
		t.Fatalf("Wait after release = %d, want 0", n)
	}
	if n := o.Wait(time.Millisecond); n != 0 {
		t.Fatalf("Wait with none = %d", n)
	}
}
