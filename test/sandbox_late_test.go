//go:build linux

package test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSandboxLateFiles: under the real router and watchdog, a .env written
// after the agent started is masked in the agent's view within the window
// (its mask keeper), and killing the keeper stops the agent (fail closed);
// the router reports it on its log and the next session restarts the
// agent, confined again.
func TestSandboxLateFiles(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	cwd := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cfg, _ := sandboxYAML(t, "enforce", fakeOpts{PidFile: pidFile}, nil, "**/.env")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	e.NewSession(t, cwd)
	pid := readPidFile(t, pidFile)

	late := filepath.Join(cwd, "late", ".env")
	if err := os.MkdirAll(filepath.Dir(late), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(late, []byte("LATE=1"), 0o600); err != nil {
		t.Fatal(err)
	}
	agentView := "/proc/" + strconv.Itoa(pid) + "/root" + late
	deadline := time.Now().Add(2 * time.Second)
	for {
		b, err := os.ReadFile(agentView)
		if err == nil && len(b) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent still reads %s: %q %v", late, b, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	keeper := keeperOf(t, pid)
	if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent %d outlived its mask keeper", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline = time.Now().Add(10 * time.Second)
	// "agent failed" is logged once the agent is marked failed, so
	// restartable: a session/new sent between the exit's first log line
	// and that goes to the instance that just died, and fails with it.
	for !strings.Contains(e.Stderr(), "mask keeper ended") || !strings.Contains(e.Stderr(), "agent exited unexpectedly") ||
		!strings.Contains(e.Stderr(), "agent failed") {
		if time.Now().After(deadline) {
			t.Fatalf("the router's log does not say why the agent stopped:\n%s", e.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}

	e.NewSession(t, cwd)
	pid2 := readPidFile(t, pidFile)
	if pid2 == pid {
		t.Fatalf("agent pid %d did not change: not restarted?", pid)
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid2) + "/root" + late); err != nil || len(b) != 0 {
		t.Errorf("the restarted agent reads %s: %q %v", late, b, err)
	}
	keeperOf(t, pid2)
}

// keeperOf is the mask keeper beside agent pid: its watchdog's other
// child.
func keeperOf(t *testing.T, pid int) int {
	t.Helper()
	watchdog := ppidOf(pid)
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil || ppidOf(n) != watchdog {
			continue
		}
		if b, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline"); strings.Contains(string(b), "mask-keeper") {
			return n
		}
	}
	t.Fatalf("no mask keeper beside agent %d (watchdog %d)", pid, watchdog)
	return 0
}

func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func ppidOf(pid int) int {
	if f := statFields(pid); len(f) > 1 {
		n, _ := strconv.Atoi(f[1])
		return n
	}
	return -1
}

func isZombie(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && f[0] == "Z"
}
