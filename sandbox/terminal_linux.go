//go:build linux

package sandbox

// Commands an editor runs for an agent (terminal/create, issue 29 point
// 2). The editor starts them, not the agent, so they would run outside the
// agent's confinement. The router rewrites the request it forwards so that
// the editor runs this executable as the terminal helper (terminalArg)
// instead, with the path of the agent's plan and the original command
// line: the helper starts the command through the sandbox helper (Wrap),
// under the same masks, Landlock rules and no_new_privs as the agent, and
// stays its parent, so that the editor's terminal shows its output, sends
// it input and gets its exit status. The policy decided on the original
// command before the rewrite, and the audit records that one.
//
// The plan is written to a file named by its SHA-256 in a directory of
// this user's (planDir); the helper refuses a file whose content does not
// match its name, so a file planted or changed there can only make the
// command fail, never run it with a weaker plan.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/acp-router/acp-router/internal/atomicfile"
)

// terminalArg, as the first argument, runs the executable as the terminal
// helper. Versioned like helperArg.
const terminalArg = "__acp-router-terminal-v1"

// Terminal returns the command and arguments that make an editor's
// terminal run command with args under the plan. The plan's profile is
// resolved again first, so that a file matching a deny glob that appeared
// since the agent started is hidden from the command too; if that fails
// (a walk or mask limit reached since), the command runs under the plan
// the agent itself runs under.
func (pl *Plan) Terminal(command string, args []string) (string, []string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("sandbox: terminal: %w", err)
	}
	use := pl
	if pl.profile != nil {
		if fresh, err := Resolve(pl.profile, ResolveOptions{}); err == nil {
			use = fresh
		}
	}
	path, err := writePlan(use)
	if err != nil {
		return "", nil, fmt.Errorf("sandbox: terminal: %w", err)
	}
	return exe, append([]string{terminalArg, path, "--", command}, args...), nil
}

// planDir is this user's directory of plan files, private to the user.
func planDir() (string, error) {
	d := filepath.Join(os.TempDir(), fmt.Sprintf("acp-router-plans-%d", os.Geteuid()))
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is not a directory private to this user", d)
	}
	return d, nil
}

// writePlan writes pl to planDir, named by its digest, unless it is there
// already, and returns the file's path.
func writePlan(pl *Plan) (string, error) {
	b, err := json.Marshal(pl)
	if err != nil {
		return "", err
	}
	dir, err := planDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	path := filepath.Join(dir, hex.EncodeToString(sum[:])+".json")
	if have, err := os.ReadFile(path); err == nil && string(have) == string(b) {
		return path, nil
	}
	if err := atomicfile.Write(path, b); err != nil {
		return "", err
	}
	return path, nil
}

// readPlan reads a plan file, refusing one whose content is not what its
// name says.
func readPlan(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the sandbox plan: %w", err)
	}
	sum := sha256.Sum256(b)
	if filepath.Base(path) != hex.EncodeToString(sum[:])+".json" {
		return nil, fmt.Errorf("the sandbox plan %s does not match its digest", path)
	}
	var pl Plan
	if err := json.Unmarshal(b, &pl); err != nil {
		return nil, fmt.Errorf("the sandbox plan %s: %w", path, err)
	}
	return &pl, nil
}

// runTerminal is the terminal helper: args are the plan's path, "--" and
// the command line. It returns the command's exit status; a command ended
// by a signal ends the helper by the same signal.
func runTerminal(args []string) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "acp-router sandbox: "+format+"\n", a...)
		return code
	}
	if len(args) < 3 || args[1] != "--" {
		return fail(126, "the terminal helper runs only when the router asks an editor to run it")
	}
	pl, err := readPlan(args[0])
	if err != nil {
		return fail(126, "%v; the command did not run", err)
	}
	cmd := exec.Command(args[2], args[3:]...)
	if cmd.Err != nil {
		return fail(127, "%v", cmd.Err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := pl.Wrap(cmd); err != nil {
		return fail(126, "%v; the command did not run", err)
	}
	// The command dies with the helper (an editor's kill reaches the
	// helper): the parent-death signal fires when the thread that forked
	// it exits, so that thread is this one for good.
	runtime.LockOSThread()
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	// A signal sent to the helper alone is passed on. SIGINT and SIGQUIT
	// are handled (not ignored, which the command would inherit) and
	// dropped: a terminal sends them to the whole foreground group, the
	// command included.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	if err := cmd.Start(); err != nil {
		return fail(126, "start %s under the sandbox: %v", args[2], err)
	}
	go func() {
		for s := range sigs {
			if s != syscall.SIGINT && s != syscall.SIGQUIT {
				cmd.Process.Signal(s)
			}
		}
	}()
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		sig := ws.Signal()
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig)
		return 128 + int(sig)
	}
	return ws.ExitStatus()
}
