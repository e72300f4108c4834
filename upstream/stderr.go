package upstream

import (
	"bufio"
	"errors"
	"io"
	"regexp"
	"strings"
	"sync"
)

// secretPattern matches NAME=value and NAME: value where NAME looks like a
// credential (…KEY, …TOKEN, …SECRET, …PASSWORD), and bearer tokens.
var secretPattern = regexp.MustCompile(`(?i)(\b[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]*["']?\s*[=:]\s*["']?)[^\s"',;]+|(\bbearer\s+)[A-Za-z0-9._~+/=-]+`)

// Redact hides credential values in a line of agent output.
func Redact(line string) string {
	return secretPattern.ReplaceAllString(line, "${1}${2}[REDACTED]")
}

// tail keeps the last lines of an agent's stderr, redacted.
type tail struct {
	mu    sync.Mutex
	lines []string
	max   int
	width int
}

func newTail(lines, width int) *tail { return &tail{max: lines, width: width} }

func (t *tail) add(line string) {
	if len(line) > t.width {
		line = line[:t.width] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:t.max-1]
	}
	t.lines = append(t.lines, line)
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// relayStderr re-logs the agent's stderr line by line under its name and
// keeps the tail for error reports. It always drains the pipe, so that a
// chatty agent never blocks on it; very long lines are cut.
func (a *Agent) relayStderr(r io.ReadCloser) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 4<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			line := strings.TrimRight(string(chunk), "\r\n")
			for errors.Is(err, bufio.ErrBufferFull) { // skip the rest of a long line
				line += "…"
				_, err = br.ReadSlice('\n')
			}
			line = Redact(line)
			a.tail.add(line)
			if watchdogLine(line) {
				a.log.Warn("stderr", "line", line)
			} else {
				a.log.Info("stderr", "line", line)
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// watchdogLine: a line the agent's watchdog or its sandbox wrote (a mask
// keeper that could not start, or ended and stopped the agent; a signal
// handled), logged as a warning. The agent shares the stream and could
// write such a line too: that changes only its level.
func watchdogLine(line string) bool {
	return strings.HasPrefix(line, "acp-router sandbox: ") || strings.HasPrefix(line, "acp-router: agent watchdog: ")
}
