// Package slowtest gates the tests that take minutes on a 2-core machine
// (the policy's evidence and the sandbox checked against the kernel, the
// store crashed at every write boundary) behind an environment variable
// that scripts/test.sh sets, so that CI runs them and a contributor's
// `go test ./guard` or `go test -short ./...` does not wait for them; and
// under -short it lets a package whose tests wait on processes run more of
// them at once (ShortParallel). It is test support: only _test.go files
// import it.
package slowtest

import (
	"flag"
	"os"
	"runtime"
	"strconv"
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

// ShortParallel sets -test.parallel to perCore tests a core under -short,
// unless the command line gives it; call it from TestMain. For packages
// whose parallel tests wait on processes, agents and timers far more than
// they compute: at go test's default of one a core such a package holds
// one of go test's two package slots of a 2-core machine mostly idle, and
// the whole of `go test -short ./...` waits for it. Without -short (CI) the
// default stands.
func ShortParallel(perCore int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if !testing.Short() {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(perCore*runtime.GOMAXPROCS(0)))
	}
}
