//go:build linux

package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/internal/slowtest"
)

// lockedBuffer is an agent's output, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// agent is a process started as the router starts an agent: under the
// (mini) watchdog, which confines itself and starts the mask keeper.
type agent struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

func startAgent(t *testing.T, plan *Plan, dir string, argv ...string) *agent {
	t.Helper()
	return startAgentEnv(t, plan, dir, nil, argv...)
}

// waitFor waits until the agent printed s, or ended.
func (a *agent) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(a.out.String(), s) {
		select {
		case <-a.done:
			if strings.Contains(a.out.String(), s) {
				return
			}
			t.Fatalf("the agent ended before %q: %s", s, a.out.String())
		case <-deadline:
			t.Fatalf("no %q from the agent: %s", s, a.out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (a *agent) wait(t *testing.T) string {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not end: %s", a.out.String())
	}
	return a.out.String()
}

// latePlan is the fixture's plan with ~/.aws/** hidden too (it does not
// exist at the start).
func latePlan(t *testing.T, home, proj string) *Plan {
	t.Helper()
	pol := compile(t, fixturePolicy+"  - {id: no-aws, decision: deny, when: {paths: [\"~/.aws/**\"]}}\n")
	prof, _ := Derive(pol, config.Agent{Name: "gemini", Command: "gemini"}, Env{Home: home, TempDir: os.TempDir(), Roots: []string{proj}})
	plan, err := Resolve(prof, ResolveOptions{})
	must(t, err)
	return plan
}

// lateWindow is how long TestLateFiles gives the keeper to mask what
// appeared: TestLateFilesWindow measures the window (p99 well below).
const lateWindow = 500 * time.Millisecond

// checkLateFiles is TestLateFiles' body, also run as nobody: files that
// appear after the agent started, each as issue 29 point 4 lists them,
// are masked within the window, for the agent's own process and what it
// starts.
func checkLateFiles(t *testing.T, base, home, proj string) {
	must(t, os.MkdirAll(proj+"/watched/inner", 0o755))
	must(t, os.MkdirAll(proj+"/deep", 0o755))
	plan := latePlan(t, home, proj)
	script := `echo STARTED; while [ ! -e ` + base + `/go ]; do sleep 0.01; done; sleep ` + fmt.Sprint(lateWindow.Seconds()) + `
for f in late/.env ` + home + `/.aws/credentials moved/sub/.env deep/renamed/inner/.env hl .env; do printf '%s=[' $f; cat $f 2>&1; echo ']'; done
ls -A ` + home + `/.aws; echo END`
	a := startAgent(t, plan, proj, "/bin/sh", "-c", script)
	a.waitFor(t, "STARTED")

	// A .env a build writes.
	must(t, os.MkdirAll(proj+"/late", 0o755))
	must(t, os.WriteFile(proj+"/late/.env", []byte("LATE-ENV"), 0o644))
	// A new ~/.aws/credentials (a directory a rule hides, absent at the
	// start).
	must(t, os.MkdirAll(home+"/.aws", 0o755))
	must(t, os.WriteFile(home+"/.aws/credentials", []byte("LATE-AWS"), 0o644))
	// A directory renamed into place, holding a .env.
	must(t, os.MkdirAll(base+"/staging/sub", 0o755))
	must(t, os.WriteFile(base+"/staging/sub/.env", []byte("LATE-MOVED"), 0o644))
	must(t, os.Rename(base+"/staging", proj+"/moved"))
	// A directory watched since the start, renamed inside the tree, then
	// a .env written in it (its events now name another path).
	must(t, os.Rename(proj+"/watched", proj+"/deep/renamed"))
	time.Sleep(lateWindow / 2) // the rename handled before the write
	must(t, os.WriteFile(proj+"/deep/renamed/inner/.env", []byte("LATE-RENAMED"), 0o644))
	// A new hard link to a file hidden at the start.
	must(t, os.Link(home+"/keys/k1", proj+"/hl"))
	// A hidden .env replaced by an editor's save (write aside, rename
	// over): the start's mask went with the old file.
	must(t, os.WriteFile(proj+"/.env.tmp", []byte("LATE-SAVED"), 0o644))
	must(t, os.Rename(proj+"/.env.tmp", proj+"/.env"))
	must(t, os.WriteFile(base+"/go", nil, 0o644))

	out := a.wait(t)
	t.Logf("agent: %s", out)
	for _, s := range []string{"LATE-ENV", "LATE-AWS", "LATE-MOVED", "LATE-RENAMED", "LATE-SAVED", secretKey, secretEnv} {
		if strings.Contains(out, s) {
			t.Errorf("the agent read %s after the window:\n%s", s, out)
		}
	}
	for _, want := range []string{"late/.env=[]", "moved/sub/.env=[]", "deep/renamed/inner/.env=[]", "hl=[]", ".env=[]", "END"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q (an empty file, as a start's mask reads):\n%s", want, out)
		}
	}
	if !strings.Contains(out, "/.aws/credentials: No such file or directory") {
		t.Errorf("~/.aws should read as an empty directory, as a start's mask reads:\n%s", out)
	}
	// The masks are the agent's only.
	for p, want := range map[string]string{proj + "/late/.env": "LATE-ENV", home + "/.aws/credentials": "LATE-AWS", proj + "/moved/sub/.env": "LATE-MOVED", proj + "/.env": "LATE-SAVED"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s changed outside the agent: %q %v", p, b, err)
		}
	}
}

// TestLateFilesUnprivileged runs TestLateFiles' checks as nobody: the
// keeper then mounts in the agent's user namespace.
func TestLateFilesUnprivileged(t *testing.T) {
	if dir := os.Getenv("ACP_SANDBOX_LATE_BASE"); dir != "" {
		if err := Available(); err != nil {
			t.Fatalf("as uid %d: %v", os.Getuid(), err)
		}
		checkLateFiles(t, dir, filepath.Join(dir, "home"), filepath.Join(dir, "home", "proj"))
		checkKeeperOutOfReach(t, filepath.Join(dir, "home"), filepath.Join(dir, "home", "proj"))
		return
	}
	slowtest.Require(t, "TestLateFiles and TestKeeperOutOfReach again as nobody in a user namespace")
	asNobody(t, "late", "^TestLateFilesUnprivileged$", "ACP_SANDBOX_LATE_BASE")
}

// asNobody runs this test binary's test run as nobody over a fresh
// fixture, passing the fixture's directory in env.
func asNobody(t *testing.T, name, run, env string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run the checks as nobody (CI runs as root)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-%s-nobody-%d", name, os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	fixture(t, base)
	bin := filepath.Join(base, "sandbox.test")
	copyFile(t, os.Args[0], bin)
	must(t, exec.Command("chown", "-R", "65534:65534", base).Run())
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", bin, "-test.run="+run, "-test.v")
	cmd.Env = append(os.Environ(), env+"="+base, "HOME="+filepath.Join(base, "home"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+strings.Trim(run, "^$")) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("as nobody:\n%s", out)
	}
}

// TestKeeperOutOfReach: the confined agent cannot trace the mask keeper
// or reach it through /proc (Landlock scopes ptrace to the agent's own
// domain; the keeper is outside it), and killing it stops the agent (fail
// closed: the watchdog ends the agent when its keeper ends).
func TestKeeperOutOfReach(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-reach-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(t, base)
	checkKeeperOutOfReach(t, home, proj)
}

func checkKeeperOutOfReach(t *testing.T, home, proj string) {
	plan := latePlan(t, home, proj)
	t.Run("ptrace", func(t *testing.T) {
		a := startAgent(t, plan, proj, "python3", "-c", `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pid = int(os.environ["KEEPER_PID"])
print("keeper", pid > 0)
r = libc.ptrace(16, pid, 0, 0)
print("attach", r, ctypes.get_errno())
if r == 0:
    libc.ptrace(17, pid, 0, 0)
for p in ("mem", "root/etc/hostname", "fd/0", "cwd/."):
    try:
        open("/proc/%d/%s" % (pid, p), "rb").read(64)
        print("opened", p)
    except OSError as e:
        print("refused", p, e.errno)
# Readable to any process of the user's, Landlock or not: the keeper's
# environment is only these two variables.
try:
    print("environ", sorted(v.split(b"=")[0].decode() for v in open("/proc/%d/environ" % pid, "rb").read().split(b"\0") if v))
except OSError as e:
    print("environ refused")
`)
		out := a.wait(t)
		t.Logf("%s", out)
		if !strings.Contains(out, "keeper True") {
			t.Fatalf("no keeper: %s", out)
		}
		if !strings.Contains(out, "attach -1 1") { // EPERM
			t.Errorf("ptrace of the mask keeper: %s", out)
		}
		if strings.Contains(out, "opened") {
			t.Errorf("the agent reached the keeper through /proc: %s", out)
		}
		if !strings.Contains(out, "environ refused") && !strings.Contains(out, "environ ['PATH', 'TMPDIR']") {
			t.Errorf("the keeper's environment holds more than PATH and TMPDIR: %s", out)
		}
	})
	t.Run("kill", func(t *testing.T) {
		a := startAgent(t, plan, proj, "/bin/sh", "-c", `[ "${KEEPER_PID:-0}" -gt 1 ] || { echo NO-KEEPER; exit 1; }; kill -9 $KEEPER_PID; sleep 5; echo AGENT-STILL-RUNS`)
		out := a.wait(t)
		if strings.Contains(out, "AGENT-STILL-RUNS") || !strings.Contains(out, "KEEPER-ENDED") {
			t.Errorf("the agent outlived its mask keeper: %s", out)
		}
	})
}

// TestLateFilesLimit pins what is left (docs/policy.md, Limits): a mask
// hides a name, not an open file. An agent that opened a file before a
// rule's name came to it (here: it creates a file, keeps it open, renames
// it to .env) reads through that descriptor what is written to it later,
// mask or not; a fresh open reads the mask.
func TestLateFilesLimit(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-limit-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(t, base)
	plan := latePlan(t, home, proj)
	a := startAgent(t, plan, proj, "/bin/sh", "-c", `mkdir held && : > held/x && exec 3<held/x && mv held/x held/.env && echo HELD
while [ ! -e `+base+`/go ]; do sleep 0.01; done
printf 'fd=['; cat <&3; echo ']'; printf 'path=['; cat held/.env; echo ']'`)
	a.waitFor(t, "HELD")
	time.Sleep(lateWindow)
	// The user writes the secret into the file the agent holds.
	must(t, os.WriteFile(proj+"/held/.env", []byte("WRITTEN-LATER"), 0o644))
	must(t, os.WriteFile(base+"/go", nil, 0o644))
	out := a.wait(t)
	if !strings.Contains(out, "fd=[WRITTEN-LATER]") {
		t.Errorf("a descriptor opened before the mask no longer reads what is written later (%q): update the limits in the docs", out)
	}
	if !strings.Contains(out, "path=[]") {
		t.Errorf("the path itself is not masked: %q", out)
	}
}

// envPoller makes the test binary, started as the agent, watch for the
// window files: for each DIR/N/.env (N from 0), the monotonic time it
// first saw it masked, and whether it read the content before.
const envPoller = "ACP_SANDBOX_POLLER"

func poll(spec string) int {
	dir, nStr, _ := strings.Cut(spec, ":")
	n, _ := strconv.Atoi(nStr)
	fmt.Println("POLLING")
	for i := range n {
		p := fmt.Sprintf("%s/%d/.env", dir, i)
		leaked := false
		deadline := time.Now().Add(20 * time.Second)
		for {
			var st unix.Statx_t
			if unix.Statx(unix.AT_FDCWD, p, 0, 0, &st) == nil {
				if st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
					var ts unix.Timespec
					unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
					fmt.Printf("masked %d %d %v\n", i, ts.Nano(), leaked)
					break
				}
				if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
					leaked = true
				}
			}
			if time.Now().After(deadline) {
				fmt.Printf("unmasked %d\n", i)
				return 1
			}
		}
	}
	return 0
}

// TestLateFilesWindow measures the window between a file's creation and
// its mask, as the agent sees it: a confined process spins on each new
// .env until it is a mask. The figures of docs/policy.md come from
//
//	ACP_TEST_SLOW=1 go test -run TestLateFilesWindow -v ./sandbox/
//
// It pins the window's bound (p99 below lateWindow), and that the window
// exists: a process spinning on the file reads it before the mask in some
// of the tries (the limit the docs state).
func TestLateFilesWindow(t *testing.T) {
	slowtest.Require(t, "measures the late files' window over 200 files, 10 s")
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-window-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(t, base)
	const n = 200
	for _, newDir := range []bool{false, true} {
		name := "file"
		if newDir {
			name = "dir+file"
		}
		t.Run(name, func(t *testing.T) {
			w := filepath.Join(proj, "w-"+name)
			if !newDir {
				for i := range n {
					must(t, os.MkdirAll(fmt.Sprintf("%s/%d", w, i), 0o755))
				}
			}
			plan := latePlan(t, home, proj)
			a := startAgentEnv(t, plan, proj, []string{envPoller + "=" + w + ":" + strconv.Itoa(n)}, os.Args[0])
			a.waitFor(t, "POLLING")
			created := make([]int64, n)
			for i := range n {
				time.Sleep(10 * time.Millisecond)
				if newDir {
					must(t, os.MkdirAll(fmt.Sprintf("%s/%d", w, i), 0o755))
				}
				var ts unix.Timespec
				unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
				created[i] = ts.Nano()
				must(t, os.WriteFile(fmt.Sprintf("%s/%d/.env", w, i), []byte("WINDOW"), 0o644))
			}
			out := a.wait(t)
			var windows []time.Duration
			leaks := 0
			for _, l := range strings.Split(out, "\n") {
				var i int
				var at int64
				var leaked bool
				if _, err := fmt.Sscanf(l, "masked %d %d %t", &i, &at, &leaked); err == nil {
					windows = append(windows, time.Duration(at-created[i]))
					if leaked {
						leaks++
					}
				}
			}
			if len(windows) != n {
				t.Fatalf("%d of %d files masked: %s", len(windows), n, out)
			}
			slices.Sort(windows)
			p50, p90, p99, max := windows[n/2], windows[n*9/10], windows[n*99/100], windows[n-1]
			t.Logf("%s: window median %v, p90 %v, p99 %v, max %v; the spinning agent read the content first in %d of %d", name, p50, p90, p99, max, leaks, n)
			if p99 > lateWindow {
				t.Errorf("p99 window %v is over %v (TestLateFiles' wait)", p99, lateWindow)
			}
			if leaks == 0 {
				t.Errorf("no file was read before its mask in %d tries: the window may be closed, update the limits in the docs", n)
			}
		})
	}
}

func startAgentEnv(t *testing.T, plan *Plan, dir string, env []string, argv ...string) *agent {
	t.Helper()
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Env = append(append(os.Environ(), env...), "ROUTER_PID="+strconv.Itoa(os.Getpid()), envMiniWatchdog+"=1")
	cmd.Dir = dir
	must(t, plan.Handoff(cmd))
	a := &agent{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = a.out, a.out
	must(t, cmd.Start())
	go func() { cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-a.done
	})
	return a
}

// TestKeeperCannotWatch: a keeper that cannot watch every searched
// directory (here its own bound; the kernel's fs.inotify.max_user_watches
// acts the same) fails closed. At the start, enforce (Required) refuses
// the agent and best-effort runs it with the start's masks, saying so;
// while the agent runs, the keeper exits and the agent is stopped.
func TestKeeperCannotWatch(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-nowatch-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(t, base)
	t.Run("start/enforce", func(t *testing.T) {
		plan := latePlan(t, home, proj)
		plan.Keeper.MaxWatches, plan.Keeper.Required = 2, true
		out := startAgent(t, plan, proj, "/bin/sh", "-c", "echo AGENT-RAN").wait(t)
		if strings.Contains(out, "AGENT-RAN") || !strings.Contains(out, "directories are watched already") {
			t.Errorf("enforce: the agent ran without its keeper: %s", out)
		}
	})
	t.Run("start/best-effort", func(t *testing.T) {
		plan := latePlan(t, home, proj)
		plan.Keeper.MaxWatches = 2
		out := startAgent(t, plan, proj, "/bin/sh", "-c", "cat .env; echo AGENT-RAN").wait(t)
		if !strings.Contains(out, "AGENT-RAN") || !strings.Contains(out, "appear from now on are not masked") || strings.Contains(out, secretEnv) {
			t.Errorf("best-effort: want the agent run under the start's masks, with a warning: %s", out)
		}
	})
	t.Run("running", func(t *testing.T) {
		plan := latePlan(t, home, proj)
		plan.Keeper.MaxWatches = 40
		a := startAgent(t, plan, proj, "/bin/sh", "-c", "echo STARTED; sleep 20; echo AGENT-STILL-RUNS")
		a.waitFor(t, "STARTED")
		for i := range 60 {
			must(t, os.MkdirAll(fmt.Sprintf("%s/many/%d", proj, i), 0o755))
		}
		out := a.wait(t)
		if strings.Contains(out, "AGENT-STILL-RUNS") || !strings.Contains(out, "KEEPER-ENDED") || !strings.Contains(out, "directories are watched already") {
			t.Errorf("the agent outlived a keeper that could not watch: %s", out)
		}
	})
}
