package test

import (
	"fmt"
	"sync"
)

// The fake model APIs (fakeanthropic, fakeresponses, fakechat) answer a
// request by the script whose token its prompt carries. scriptLog is what
// each keeps of one script: its token, the tool calls its model made and
// the tool results it was given (R: as that API reports them).
type scriptLog[R any] struct {
	token string

	mu      sync.Mutex
	calls   int // tool calls made
	results []R // tool results received
}

// newScriptLog is the log of the n-th script of the fake named api.
func newScriptLog[R any](api string, n int) scriptLog[R] {
	return scriptLog[R]{token: fmt.Sprintf("[fake-%s script %d]", api, n)}
}

// Results returns the tool results the model got for this script.
func (s *scriptLog[R]) Results() []R {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]R(nil), s.results...)
}

// ToolCalls returns how many tool calls the script's model made.
func (s *scriptLog[R]) ToolCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}
