// Package leaktest counts live goroutines by what their stacks name, for the
// tests that pin that a Close, Stop or shutdown leaves none of its own
// goroutines behind. It is test support: only _test.go files import it.
package leaktest

import (
	"runtime"
	"strings"
)

// Count returns how many goroutines have a stack (the frame that created the
// goroutine included) that holds one of marks: a function's name such as
// "(*Store).fsyncSealed", or a pointer passed as an argument, formatted with
// %p. A goroutine that holds several marks counts once.
func Count(marks ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, m := range marks {
			if strings.Contains(g, m) {
				count++
				break
			}
		}
	}
	return count
}
