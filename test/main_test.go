// Package test holds acp-router's end-to-end tests: the real router binary,
// driven by a scripted editor, in front of fake agents (this test binary
// re-executed, see fakeagent_test.go) and real third-party ACP peers.
//
// TestMain builds ./cmd/acp-router once (or uses the binary named by
// $ACP_E2E_ROUTER_BIN). Tests that need the router fail, never skip, when it
// does not build.
//
// Run the ordering, callback and cancellation tests many times, with the
// race detector:
//
//	go test -race -count=200 -run 'TestOrdering' ./test/
//	go test -race -count=20 -run 'TestOrdering|TestCallbacks|TestCancel' ./test/
package test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// envFakeAgent makes the test binary run as a fake ACP agent; its value
	// is the JSON of fakeOpts.
	envFakeAgent = "ACP_FAKE_AGENT"
	// envFakeSleeper makes the test binary ignore SIGTERM and sleep forever
	// (a stubborn grandchild of the router). Its value is a file to write
	// the pid to once SIGTERM is ignored ("" for none).
	envFakeSleeper = "ACP_FAKE_SLEEPER"
	// envRouterBin, when set, names a router binary to test instead of
	// building ./cmd/acp-router.
	envRouterBin = "ACP_E2E_ROUTER_BIN"
)

var (
	// routerBin is the router binary built once by TestMain ("" when the
	// build failed; routerBuildErr then says why).
	routerBin      string
	routerBuildErr error
	// testBin is this test binary, re-executed as fake agents.
	testBin string
	// moduleRoot is the repository root (the parent of test/).
	moduleRoot string
)

func TestMain(m *testing.M) {
	if opts, ok := os.LookupEnv(envFakeAgent); ok {
		if code, ok := fakeLogin(os.Args[1:]); ok {
			os.Exit(code)
		}
		os.Exit(runFakeAgent(opts))
	}
	if _, ok := os.LookupEnv(envNoLandlock); ok {
		os.Exit(runWithoutLandlock(os.Args[1:]))
	}
	if _, ok := os.LookupEnv(envNoUserns); ok {
		os.Exit(runWithoutUserns(os.Args[1:]))
	}
	if pidFile, ok := os.LookupEnv(envFakeSleeper); ok {
		runSleeper(pidFile)
		return
	}
	os.Exit(runTests(m))
}

// shortParallel sets -parallel to 4 tests a core under -short, unless the
// command line gives one: the end-to-end tests wait on their routers and
// fake agents far more than they compute (at go test's default of one a
// core this package alone took 105 s of a quiet 2-core machine for 64 s of
// CPU), and those that measure time skip under -short (skipShort).
func shortParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	if !testing.Short() {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0)))
	}
}

func runTests(m *testing.M) int {
	shortParallel()
	var err error
	if testBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cannot find the test binary:", err)
		return 1
	}
	if moduleRoot, err = filepath.Abs(".."); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "acp-router-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir

	if bin := os.Getenv(envRouterBin); bin != "" {
		// A prebuilt router (a release build, or a mutant to check that
		// the tests catch a bug).
		routerBin = bin
		return m.Run()
	}
	bin := filepath.Join(dir, "acp-router")
	// The org policy directory is set at build time; this one never exists
	// (a machine's own /etc/acp-router must not change the tests).
	cmd := exec.Command("go", "build", "-ldflags", "-X main.orgPolicyDir="+filepath.Join(dir, "no-org-policy"), "-o", bin, "./cmd/acp-router")
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		// Tests that need the router fail with this error (they do not skip);
		// the harness self-tests still run.
		routerBuildErr = fmt.Errorf("go build ./cmd/acp-router: %v\n%s", err, out)
	} else {
		routerBin = bin
	}
	return m.Run()
}

// skipShort skips a test under -short: running a real agent from npm,
// building Jaeger or measuring memory takes minutes on a 2-core machine, and
// a test that waits out a timeout or measures one would make -short slow,
// or flaky at -short's parallelism (shortParallel). scripts/test.sh (CI)
// does not pass -short and runs them all.
func skipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s; scripts/test.sh runs it", what)
	}
}

// binDir is the temporary directory of binaries built for this run.
var binDir string

// needRouter returns the router binary, failing the test when it did not build.
func needRouter(t testing.TB) string {
	t.Helper()
	if routerBin == "" {
		t.Fatalf("the router binary is not available: %v", routerBuildErr)
	}
	return routerBin
}

var (
	peersOnce sync.Once
	peersErr  error
)

// goSDKPeers builds the acp-go-sdk example agent and client (go.mod tool
// dependencies) once and returns their paths.
func goSDKPeers(t testing.TB) (agent, client string) {
	t.Helper()
	agent = filepath.Join(binDir, "sdk-agent")
	client = filepath.Join(binDir, "sdk-client")
	peersOnce.Do(func() {
		for bin, pkg := range map[string]string{
			agent:  "github.com/coder/acp-go-sdk/example/agent",
			client: "github.com/coder/acp-go-sdk/example/client",
		} {
			cmd := exec.Command("go", "build", "-o", bin, pkg)
			cmd.Dir = moduleRoot
			if out, err := cmd.CombinedOutput(); err != nil {
				peersErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if peersErr != nil {
		t.Fatal(peersErr)
	}
	return agent, client
}

// runSleeper is a grandchild that only SIGKILL ends. It exits by itself when
// it has been orphaned for a while, so a failing test leaks nothing for long.
func runSleeper(pidFile string) {
	signal.Ignore(syscall.SIGTERM)
	orphanWatchdog()
	if pidFile != "" {
		writeFileAtomic(pidFile, strconv.Itoa(os.Getpid()))
	}
	for {
		time.Sleep(time.Hour)
	}
}

// orphanWatchdog exits the process 10 s after its parent went away. This is
// only hygiene for failed runs: it is far later than any test's "process is
// gone" check, so it cannot hide a router that leaks processes.
func orphanWatchdog() {
	ppid := os.Getppid()
	go func() {
		var orphanSince time.Time
		for {
			time.Sleep(250 * time.Millisecond)
			if os.Getppid() == ppid {
				continue
			}
			if orphanSince.IsZero() {
				orphanSince = time.Now()
			}
			if time.Since(orphanSince) > 10*time.Second {
				os.Exit(0)
			}
		}
	}()
}
