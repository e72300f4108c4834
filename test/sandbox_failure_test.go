//go:build linux

package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

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
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to make a user namespace with nobody in it (CI runs as root)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	router := needRouter(t)
	// The router looks for its org policy directory (never there) in
	// binDir: nobody must be able to see that it is not there.
	must(t, os.Chmod(binDir, 0o711))
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
		cmd := exec.Command(testBin, append([]string{bin}, args...)...)
		cmd.Env = append(os.Environ(), envNoUserns+"=1", "HOME="+base)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
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
