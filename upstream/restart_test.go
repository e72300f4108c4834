package upstream

import (
	"errors"
	"testing"
	"time"
)

// TestRestartMarked: the first start is not a restart, a start after the
// instance was restarted (failed) is; telemetry counts restarts by it.
func TestRestartMarked(t *testing.T) {
	t.Parallel()
	ia := newIdleAgent(t, 0, 5, false)
	first, _ := ia.ready(t)
	if first.Restart {
		t.Error("the first start is marked a restart")
	}
	ia.Restart(errors.New("restarted by the test"))
	select {
	case <-first.exited:
	case <-time.After(waitTimeout):
		t.Fatal("the first instance did not exit")
	}
	second, _ := ia.ready(t)
	if second == first || !second.Restart {
		t.Errorf("the start after a restart: new instance %v, Restart %v; want a new one marked a restart", second != first, second.Restart)
	}
	ia.Stop()
}
