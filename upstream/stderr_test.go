package upstream

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestStderrWatchdogLinesWarn: what the watchdog and the sandbox say on
// the agent's stderr (a mask keeper that could not start under
// best-effort, one that ended and stopped the agent) is a warning in the
// router's log; the agent's own lines stay at info.
func TestStderrWatchdogLinesWarn(t *testing.T) {
	var buf bytes.Buffer
	a := &Agent{log: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug}), tail: newTail(10, 400)}
	a.relayStderr(io.NopCloser(strings.NewReader("agent says hello\n" +
		"acp-router sandbox: warning: files matching a hidden rule that appear from now on are not masked: x\n" +
		"acp-router: agent watchdog: the sandbox's mask keeper ended (signal: killed): the agent is stopped\n")))
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		want := "[WARN]"
		if strings.Contains(l, "agent says hello") {
			want = "[INFO]"
		}
		if !strings.Contains(l, want) {
			t.Errorf("want %s: %s", want, l)
		}
	}
	if !strings.Contains(a.StderrTail(), "mask keeper ended") {
		t.Errorf("tail: %q", a.StderrTail())
	}
}
