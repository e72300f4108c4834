package upstream

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envFakeRouter makes this test binary a router that only starts a watchdog
// (fakeRouter).
const envFakeRouter = "UPSTREAM_TEST_FAKE_ROUTER"

// fakeRouter starts a watchdog as the router does (its own executable, its
// process group, its Pdeathsig), handing it the lifeline and report it got
// as fds 3 and 4 and its own stderr, then blocks until it is killed. Its
// arguments are the agent's path and argv.
func fakeRouter() int {
	cmd := exec.Command("/proc/self/exe", append([]string{watchdogArg, "200ms", "/"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = watchdogSysProcAttr()
	cmd.ExtraFiles = []*os.File{os.NewFile(lifelineFD, "lifeline"), os.NewFile(reportFD, "report")}
	if err := cmd.Start(); err != nil {
		return 1
	}
	select {}
}

// TestWatchdogOrphanedBeforeEOF forces the order the router's death can take
// on a loaded machine: the watchdog's SIGHUP (its Pdeathsig) arrives while
// its lifeline is still open (here another process holds the write end, as
// a second router thread would for the time of its exit), and its stderr is
// a pipe nobody reads any more. The watchdog must still end the agent's
// tree and report the agent's status: a line about the signal written to
// that stderr killed it with SIGPIPE before it did (df40d8c), and the
// agent's child outlived the router.
func TestWatchdogOrphanedBeforeEOF(t *testing.T) {
	t.Parallel()
	if !watchdogHooked.Load() {
		t.Fatal("TestMain did not call RunWatchdogIfRequested")
	}
	childFile := filepath.Join(t.TempDir(), "child")
	script := fmt.Sprintf(`sleep 300 & echo $! > %s.tmp; mv %s.tmp %s; wait`, childFile, childFile, childFile)

	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR.Close() // nobody reads the watchdog's stderr: a write to it is EPIPE
	// The lifeline's write end stays open here until the test ends: only
	// the SIGHUP can tell the watchdog that the router is gone.
	defer lifeW.Close()
	defer repR.Close()

	router := exec.Command(testExecutable(t), "/bin/sh", "sh", "-c", script)
	router.Env = append(os.Environ(), envFakeRouter+"=1", "GORACE=atexit_sleep_ms=0")
	router.Stderr = errW
	router.ExtraFiles = []*os.File{lifeR, repW}
	if err := router.Start(); err != nil {
		t.Fatal(err)
	}
	lifeR.Close()
	repW.Close()
	errW.Close()

	report := bufio.NewReader(repR)
	repR.SetReadDeadline(time.Now().Add(waitTimeout))
	line, err := report.ReadString('\n')
	var agent int
	if _, serr := fmt.Sscanf(line, "pid %d\n", &agent); err != nil || serr != nil {
		router.Process.Kill()
		router.Wait()
		t.Fatalf("the watchdog's first report: %q (%v), want pid N", line, err)
	}
	child := readPid(t, childFile)
	t.Cleanup(func() {
		syscall.Kill(-agent, syscall.SIGKILL)
		syscall.Kill(child, syscall.SIGKILL)
	})

	router.Process.Kill() // the router dies; the watchdog's parent changes
	router.Wait()

	repR.SetReadDeadline(time.Now().Add(waitTimeout))
	line, err = report.ReadString('\n')
	if !strings.HasPrefix(line, "status ") {
		t.Fatalf("after the router died the watchdog reported %q (%v), want the agent's status: it died before it ended the agent's tree", line, err)
	}
	for name, p := range map[string]int{"agent": agent, "agent's child": child} {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) && !zombie(p) {
			t.Errorf("the %s (pid %d) is alive after the watchdog reported", name, p)
		}
	}
}

// testExecutable is this test binary.
func testExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}
