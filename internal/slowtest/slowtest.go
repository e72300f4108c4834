// Package slowtest gates the tests that take minutes on a 2-core machine
// (the policy's evidence and the sandbox checked against the kernel, the
// store crashed at every write boundary) behind an environment variable
// that scripts/test.sh sets, so that CI runs them and a contributor's
// `go test ./guard` or `go test -short ./...` does not wait for them. It is
// test support: only _test.go files import it.
package slowtest

import (
	"os"
	"testing"
)

// Env is the variable that, set to 1, runs the slow tests.
const Env = "ACP_TEST_SLOW"

// Enabled reports whether the slow tests run: Env is 1 and -short is not
// given.
func Enabled() bool { return os.Getenv(Env) == "1" && !testing.Short() }

// Require skips t, saying what it does and how to run it, unless Enabled.
func Require(t testing.TB, what string) {
	t.Helper()
	if !Enabled() {
		t.Skipf("%s; runs with %s=1 and without -short (scripts/test.sh, CI)", what, Env)
	}
}
