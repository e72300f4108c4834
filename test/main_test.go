// Package test holds acp-router's end-to-end tests: the real router binary,
// driven by a scripted editor, in front of fake agents (this test binary
// re-executed, see fakeagent_test.go) and real third-party ACP peers.
//
// TestMain builds ./cmd/acp-router (or uses the binary named by
// $ACP_E2E_ROUTER_BIN) and the ACP Go SDK's example peers at once, into a
// directory kept from run to run where the go command relinks only what
// changed (buildBinaries). Tests that need the router fail, never skip, when
// it does not build.
//
// Run the ordering, callback and cancellation tests many times, with the
// race detector:
//
//	go test -race -count=200 -run 'TestOrdering' ./test/
//	go test -race -count=20 -run 'TestOrdering|TestCallbacks|TestCancel' ./test/
package test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acp-router/acp-router/internal/slowtest"
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

func runTests(m *testing.M) int {
	// The end-to-end tests wait on their routers and fake agents far more
	// than they compute (at go test's default of one a core this package
	// alone took 105 s of a quiet 2-core machine for 64 s of CPU; at 4 a
	// core 21 s against 17 s at 8, for the same CPU), and those that
	// measure time skip under -short (skipShort).
	slowtest.ShortParallel(8)
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
	buildBinaries()
	return m.Run()
}

// Where the ACP Go SDK's example peers are built from (go.mod tools).
const (
	sdkAgentPkg  = "github.com/coder/acp-go-sdk/example/agent"
	sdkClientPkg = "github.com/coder/acp-go-sdk/example/client"
)

// buildBinaries builds the router and the ACP Go SDK's example agent and
// client, the two go commands at once, into keptDir: the go command
// relinks a binary it finds there only when its sources or flags changed
// (it compares build ids), so a run after one that changed nothing skips
// the router's link (5 s of CPU of a 2-core machine, with everything else
// waiting on it). The router is linked without its symbol table and
// DWARF (-s -w, 40 % less CPU): no test reads them, and a panic's trace
// still names functions and lines.
func buildBinaries() {
	out, unlock := keptDir()
	defer unlock()
	sdkAgent, sdkClient = filepath.Join(out, "sdk", "agent"), filepath.Join(out, "sdk", "client")
	var wg sync.WaitGroup
	if bin := os.Getenv(envRouterBin); bin != "" {
		// A prebuilt router (a release build, or a mutant to check that
		// the tests catch a bug).
		routerBin = bin
	} else {
		// The org policy directory is set at build time; this one never
		// exists (a machine's own /etc/acp-router must not change the
		// tests).
		orgPolicyDir = filepath.Join(out, "no-org-policy")
		bin := filepath.Join(out, "acp-router")
		wg.Go(func() {
			if err := goBuild("-ldflags", "-s -w -X main.orgPolicyDir="+orgPolicyDir, "-o", bin, "./cmd/acp-router"); err != nil {
				// Tests that need the router fail with this error (they do
				// not skip); the harness self-tests still run.
				routerBuildErr = err
			} else {
				routerBin = bin
			}
		})
	}
	wg.Go(func() {
		// One go command links both (-o names a directory).
		peersErr = goBuild("-o", filepath.Dir(sdkAgent)+string(filepath.Separator), sdkAgentPkg, sdkClientPkg)
	})
	wg.Wait()
}

// goBuild runs go build in the module root.
func goBuild(args ...string) error {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// keptDir returns the directory of the binaries kept from one run of this
// package to the next, locked until unlock is called: one per user and
// checkout, in the temporary directory. Two runs of one checkout build in
// turn; a binary one of them runs stays whole while the other replaces it,
// as the go command replaces a file rather than writing into it. Anyone
// may traverse it (0711): the router looks for its org directory there,
// and TestSandboxWithoutUserns runs it as nobody. When the directory is
// not this user's own (another owner, a link, writable by others) this run
// builds into binDir afresh.
func keptDir() (dir string, unlock func()) {
	sum := sha256.Sum256([]byte(moduleRoot))
	dir = filepath.Join(os.TempDir(), fmt.Sprintf("acp-router-e2e-%d-%x", os.Getuid(), sum[:6]))
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return binDir, func() {}
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return binDir, func() {}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return binDir, func() {}
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return binDir, func() {}
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return binDir, func() {}
	}
	return dir, func() { lock.Close() }
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
	// sdkAgent and sdkClient are the ACP Go SDK's example agent and client
	// (buildBinaries); peersErr says why they did not build.
	sdkAgent, sdkClient string
	peersErr            error
	// orgPolicyDir is the org policy directory the router was built with
	// ("" for $ACP_E2E_ROUTER_BIN's).
	orgPolicyDir string
)

// goSDKPeers returns the paths of the acp-go-sdk example agent and client
// (go.mod tool dependencies), failing t when they did not build.
func goSDKPeers(t testing.TB) (agent, client string) {
	t.Helper()
	if peersErr != nil {
		t.Fatal(peersErr)
	}
	return sdkAgent, sdkClient
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
