//go:build linux

package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// envNoLandlock makes the test binary exec its arguments where the
// Landlock system calls fail with ENOSYS, as on a kernel built without
// Landlock (a seccomp filter, x86_64 only, inherited by everything the
// router starts).
const envNoLandlock = "ACP_TEST_NO_LANDLOCK"

func runWithoutLandlock(argv []string) int {
	runtime.LockOSThread()
	const (
		sysLandlockCreateRuleset = 444 // x86_64; landlock_add_rule 445, landlock_restrict_self 446
		auditArchX8664           = 0xc000003e
	)
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: auditArchX8664, Jt: 0, Jf: 4},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // nr
		{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: sysLandlockCreateRuleset, Jt: 0, Jf: 2},
		{Code: unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, K: sysLandlockCreateRuleset + 2, Jt: 1, Jf: 0},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no-landlock wrapper:", err)
		return 126
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no-landlock wrapper:", err)
		return 126
	}
	err := syscall.Exec(argv[0], argv, withoutEnv(os.Environ(), envNoLandlock))
	fmt.Fprintln(os.Stderr, "no-landlock wrapper:", err)
	return 126
}

// TestSandboxWithoutLandlock: on a kernel without Landlock, check says
// so and how to fix it (an error in enforce, a warning in best-effort);
// in enforce the editor gets -32603 with the same words and the agent is
// not started; in best-effort the agent starts, unconfined, and the log
// says why.
func TestSandboxWithoutLandlock(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("the seccomp filter that hides Landlock is written for x86_64")
	}
	const missing = "no Landlock (function not implemented): the sandbox needs Linux 6.2 or later with Landlock enabled"
	pidFile := filepath.Join(t.TempDir(), "pid")
	enforce, _ := sandboxYAML(t, "enforce", fakeOpts{}, nil, "**/.env")
	bestEffort, _ := sandboxYAML(t, "best-effort", fakeOpts{PidFile: pidFile}, nil, "**/.env")
	env := []string{envNoLandlock + "=1"}
	run := func(args ...string) (int, string) { return runUnder(t, needRouter(t), env, args...) }
	code, out := run("check", "--config", enforce)
	if code != 1 || !strings.Contains(out, "sandbox.mode is enforce but this kernel cannot enforce it: "+missing) {
		t.Errorf("check, enforce, without Landlock: exit %d\n%s", code, out)
	}
	code, out = run("check", "--config", bestEffort)
	if code != 0 || !strings.Contains(out, "sandbox.mode is best-effort but this kernel cannot enforce it: "+missing) {
		t.Errorf("check, best-effort, without Landlock: exit %d\n%s", code, out)
	}

	e := StartEditor(t, []string{testBin, needRouter(t), "--config", enforce, "--log-level", "debug"}, withEnv(env...))
	e.Initialize(t, capsAll)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, rpcErr := e.Call(ctx, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
	if rpcErr == nil || rpcErr.Code != -32603 || !strings.Contains(rpcErr.Message, "sandbox.mode is enforce and the agent cannot be confined: "+missing) {
		t.Errorf("session/new, enforce, without Landlock: %+v, want -32603 naming what is missing and the fix", rpcErr)
	}

	e = StartEditor(t, []string{testBin, needRouter(t), "--config", bestEffort, "--log-level", "debug"}, withEnv(env...))
	e.Initialize(t, capsAll)
	e.NewSession(t, t.TempDir())
	// Unconfined: the agent shares this process's mount namespace.
	agentNS, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", readPidFile(t, pidFile)))
	ownNS, err2 := os.Readlink("/proc/self/ns/mnt")
	if err1 != nil || err2 != nil || agentNS != ownNS {
		t.Errorf("best-effort without Landlock: the agent's mount namespace %s (%v), the test's %s (%v); want it unconfined", agentNS, err1, ownNS, err2)
	}
	waitFor(t, "the router's warning", func() bool {
		return strings.Contains(e.Stderr(), "agent starts unconfined: the kernel cannot hold its sandbox profile (sandbox.mode: best-effort)") &&
			strings.Contains(e.Stderr(), missing)
	})
}

// envNoUserns makes the test binary run its arguments as nobody on a
// machine without user namespaces: in a user namespace of its own (root
// and nobody mapped) whose user.max_user_namespaces is 0, what
// kernel.unprivileged_userns_clone=0 or a distribution's default does to
// an unprivileged router. The machine's own setting is left alone.
const envNoUserns = "ACP_TEST_NO_USERNS"

func runWithoutUserns(argv []string) int {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		fmt.Fprintln(os.Stderr, "no-userns wrapper:", err)
		return 127
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c",
		`echo 0 >/proc/sys/user/max_user_namespaces && exec "$0" --reuid=65534 --regid=65534 --clear-groups -- "$@"`, setpriv}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = withoutEnv(os.Environ(), envNoUserns)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: 65534, HostID: 65534, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: 65534, HostID: 65534, Size: 1}},
		GidMappingsEnableSetgroups: true,
	}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "no-userns wrapper:", err)
		return 126
	}
	return 0
}

// TestSandboxWithoutUserns: an unprivileged router on a machine without
// user namespaces (the helper cannot mount the masks): check says what is
// missing and the sysctl that fixes it, an error in enforce mode and a
// warning in best-effort; the router in enforce mode refuses to start the
// agent and the editor gets -32603 with the same words.
func TestSandboxWithoutUserns(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to make a user namespace with nobody in it (CI runs as root)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	router := needRouter(t)
	// The router looks for its org policy directory (never there):
	// nobody must be able to see that it is not there.
	if orgPolicyDir != "" {
		must(t, os.Chmod(filepath.Dir(orgPolicyDir), 0o711))
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-nouserns-%d", os.Getpid()))
	must(t, os.MkdirAll(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	bin := filepath.Join(base, "acp-router")
	copyBinary(t, router, bin)
	project := filepath.Join(base, "project")
	must(t, os.MkdirAll(project, 0o755))
	config := func(mode string) string {
		cfg := filepath.Join(base, mode+".yaml")
		must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 1
state_dir: %s
agents:
  - name: cat
    command: /bin/cat
    cwd: %s
routing:
  default: cat
permissions:
  default: ask
  rules:
    - id: no-secrets
      decision: deny
      when: {paths: ["**/.env"]}
audit: {file: %s}
sandbox: {mode: %s}
`, yamlQuote(filepath.Join(base, "state-"+mode)), yamlQuote(project), yamlQuote(filepath.Join(base, mode+".audit")), mode)), 0o644))
		return cfg
	}
	enforce, bestEffort := config("enforce"), config("best-effort")
	must(t, exec.Command("chown", "-R", "65534:65534", base).Run())
	const missing = "unprivileged user namespaces are disabled (/proc/sys/user/max_user_namespaces is 0): fix with sysctl -w user.max_user_namespaces="

	run := func(args ...string) (int, string) {
		return runUnder(t, bin, []string{envNoUserns + "=1", "HOME=" + base}, args...)
	}
	code, out := run("check", "--config", enforce)
	if code != 1 || !strings.Contains(out, "sandbox.mode is enforce but this kernel cannot enforce it: "+missing) {
		t.Errorf("check, enforce, as nobody without user namespaces: exit %d\n%s", code, out)
	}
	code, out = run("check", "--config", bestEffort)
	if code != 0 || !strings.Contains(out, "sandbox.mode is best-effort but this kernel cannot enforce it: "+missing) ||
		!strings.Contains(out, "agents start unconfined") {
		t.Errorf("check, best-effort, as nobody without user namespaces: exit %d\n%s", code, out)
	}

	e := StartEditor(t, []string{testBin, bin, "--config", enforce, "--log-level", "debug"}, withEnv(envNoUserns+"=1", "HOME="+base))
	e.Initialize(t, capsAll)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, rpcErr := e.Call(ctx, "session/new", map[string]any{"cwd": project, "mcpServers": []any{}})
	if rpcErr == nil || rpcErr.Code != -32603 || !strings.Contains(rpcErr.Message, "sandbox.mode is enforce and the agent cannot be confined: "+missing) {
		t.Errorf("session/new, enforce, as nobody without user namespaces: %+v, want -32603 naming what is missing and the fix", rpcErr)
	}
}

func copyBinary(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o755))
}

// runUnder runs the router binary bin with args through this test binary,
// which takes away the kernel feature env names before it execs bin, and
// returns its exit code and output.
func runUnder(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testBin, append([]string{bin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}
