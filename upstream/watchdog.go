//go:build unix

package upstream

// The agent watchdog: agents, and the processes they start, never outlive
// the router, however it ends (DESIGN §7: stdin EOF, SIGTERM, SIGKILL of the
// router or of its process group, a panic).
//
// The router's own shutdown (stdin, SIGTERM, SIGKILL to the agent's group)
// cannot run when the router is killed, and an agent busy in a turn never
// reads the EOF of its stdin. The kernel's parent-death signal reaches only
// the direct child, and only when the thread that forked it exits. So each
// agent runs under a watchdog: the router's own executable re-run with
// watchdogArg (RunWatchdogIfRequested, called first thing in main), in a
// process group of its own so that a kill of the router's group spares it.
// It starts the agent as its child in the agent's own process group (its
// pid is the group id the router signals) and is handed two pipes:
//
//   - the lifeline: the router holds the write end and never writes. The
//     kernel closes it when the router ends, whatever the cause, so EOF
//     means the router is gone: the watchdog sends SIGTERM to what is left
//     of the agent's tree, waits the router's KillGrace, sends SIGKILL and
//     exits.
//   - the report: "pid N" once the agent started (or "error MSG"), and
//     "status N" (the agent's raw wait status) when it ended. The router
//     reports the agent's exit from it exactly as it did for a direct child.
//
// When the agent exits, the watchdog ends what the agent left behind the same
// way (SIGTERM, KillGrace, SIGKILL) before it exits itself: once the watchdog
// is gone nothing could clean up after it. A SIGTERM sent to the watchdog
// alone is forwarded to the agent's group; SIGINT and SIGHUP are ignored
// while the router lives. Each signal it handled is reported on stderr, once
// handled, with what it did.
//
// What holds where:
//   - every Unix: the lifeline and the agent's process group. Processes that
//     leave the group (setsid, a daemonizing tool) are out of reach.
//   - Linux, besides: the watchdog is a child subreaper
//     (PR_SET_CHILD_SUBREAPER), so the agent's orphans, those that left its
//     group included, are reparented to it and ended with the group. The
//     agent has Pdeathsig SIGKILL (it dies if the watchdog is killed; the
//     watchdog's main thread, which starts it, never exits). The watchdog
//     has Pdeathsig SIGHUP, a second line behind the lifeline: it takes a
//     SIGHUP for the router's death only when its parent changed, since the
//     signal also fires when the router thread that started it exits.
//     Not SIGKILL: that would kill the watchdog before it ends the agent.
//
// Only an executable whose main calls RunWatchdogIfRequested can be re-run
// as a watchdog; a process that did not call it (a test binary of another
// package) starts agents directly, as before.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/internal/owner"
	"github.com/acp-router/acp-router/sandbox"
)

// watchdogArg, as the first argument, makes the router's executable run as
// an agent's watchdog. Versioned: a router upgraded in place must not run a
// watchdog that speaks another protocol (on Linux the running executable
// itself is re-run, see watchdogExecutable).
const watchdogArg = "__acp-router-agent-watchdog-v1"

// The watchdog's file descriptors besides stdio (exec.Cmd.ExtraFiles).
const (
	lifelineFD = 3 // read end; EOF once the router is gone
	reportFD   = 4 // write end; see watchdogReport
)

// watchdogHooked is set once this process's main called
// RunWatchdogIfRequested, that is, once its executable can be re-run as a
// watchdog.
var watchdogHooked atomic.Bool

// RunWatchdogIfRequested runs this process as an agent's watchdog, and exits,
// when the router started it as one; otherwise it returns at once, and agents
// started by this process from then on run under a watchdog. Call it first
// in main (and in TestMain of tests whose binary starts agents), before flags
// are parsed.
func RunWatchdogIfRequested() {
	if len(os.Args) > 1 && os.Args[1] == watchdogArg {
		os.Exit(runWatchdog(os.Args[2:]))
	}
	watchdogHooked.Store(true)
}

// watchdogExecutable is what is re-run as a watchdog, "" for none. On Linux
// it is the running executable itself, even when its file was replaced since
// (an upgrade while the editor runs the router).
func watchdogExecutable() string {
	if !watchdogHooked.Load() {
		return ""
	}
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe"
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

// watchdog is the router's end of an agent's watchdog.
type watchdog struct {
	lifeline *os.File // write end, never written
	reportR  *os.File
	report   *bufio.Reader
	child    []*os.File // the watchdog's ends, closed once it started
}

// newWatchdog returns the command that runs agent under a watchdog, which
// sends SIGKILL grace after SIGTERM when it ends the agent's tree.
func newWatchdog(exe string, agent *exec.Cmd, grace time.Duration) (*watchdog, *exec.Cmd, error) {
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		closeAll(lifeR, lifeW)
		return nil, nil, err
	}
	// The agent's directory is changed into by the watchdog when it starts
	// the agent, so that an error names the agent as it did before.
	args := append([]string{watchdogArg, grace.String(), agent.Dir, agent.Path}, agent.Args...)
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = os.Args[0] // ps shows "acp-router __acp-router-agent-watchdog-v1 ... AGENT ARGS"
	cmd.Env = agent.Env
	cmd.SysProcAttr = watchdogSysProcAttr()
	cmd.ExtraFiles = []*os.File{lifeR, repW} // lifelineFD, reportFD
	return &watchdog{lifeline: lifeW, reportR: repR, report: bufio.NewReader(repR), child: []*os.File{lifeR, repW}}, cmd, nil
}

// closeChildEnds closes the watchdog's ends of its pipes in the router, once
// the watchdog has them (or failed to start). A nil watchdog does nothing.
func (w *watchdog) closeChildEnds() {
	if w != nil {
		closeAll(w.child...)
		w.child = nil
	}
}

// abandon gives up on a watchdog that did not start the agent: its pipes
// are closed (the lifeline too, so a watchdog that did start ends the agent)
// and cmd, if it started, is reaped on a goroutine of owner's (Agent.Stop
// waits for it): the watchdog takes up to KillGrace to end what it started.
// A nil watchdog does nothing.
func (w *watchdog) abandon(cmd *exec.Cmd, owner *owner.Group, log hclog.Logger) {
	if w == nil {
		return
	}
	w.closeChildEnds()
	w.close()
	if cmd != nil && cmd.Process != nil {
		owner.Go(func() {
			err := cmd.Wait()
			log.Debug("abandoned agent watchdog exited", "watchdog", cmd.Process.Pid, "status", err)
		})
	}
}

// agentPid waits for the watchdog to report the agent started, at most d.
func (w *watchdog) agentPid(d time.Duration) (int, error) {
	w.reportR.SetReadDeadline(time.Now().Add(d))
	line, err := w.report.ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	if err != nil {
		return 0, fmt.Errorf("the agent watchdog did not report: %w", err)
	}
	verb, arg, _ := strings.Cut(line, " ")
	switch verb {
	case "pid":
		if pid, err := strconv.Atoi(arg); err == nil && pid > 0 {
			return pid, nil
		}
	case "error":
		return 0, errors.New(arg)
	}
	return 0, fmt.Errorf("the agent watchdog reported %q", line)
}

// agentStatus is the agent's wait status as the watchdog reported it once
// the watchdog exited; false when it did not (it was killed).
func (w *watchdog) agentStatus() (syscall.WaitStatus, bool) {
	w.reportR.SetReadDeadline(time.Now().Add(time.Second))
	line, err := w.report.ReadString('\n')
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "status "), 10, 32)
	if err != nil || !strings.HasPrefix(line, "status ") {
		return 0, false
	}
	return syscall.WaitStatus(n), true
}

// close ends the lifeline: the watchdog, if still there, ends the agent's
// tree and exits. The router closes it once the watchdog has been reaped, or
// when it gives up on a watchdog that did not report.
func (w *watchdog) close() { closeAll(w.lifeline, w.reportR) }

// exitError is how the end of an agent is reported (the same words as
// os.ProcessState, so that the watchdog changes nothing the user reads).
func exitError(ws syscall.WaitStatus) error {
	if ws.Exited() && ws.ExitStatus() == 0 {
		return errors.New("exited with status 0")
	}
	return fmt.Errorf("exited: %s", waitStatusString(ws))
}

// waitStatusString is os.ProcessState.String for a Unix wait status.
func waitStatusString(ws syscall.WaitStatus) string {
	var s string
	switch {
	case ws.Exited():
		s = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s = "signal: " + ws.Signal().String()
	case ws.Stopped():
		s = "stop signal: " + ws.StopSignal().String()
	case ws.Continued():
		s = "continued"
	}
	if ws.CoreDump() {
		s += " (core dumped)"
	}
	return s
}

// runWatchdog is the watchdog's main: args are KillGrace, the agent's
// directory, path and argv. Its stdin, stdout and stderr are the agent's.
func runWatchdog(args []string) int {
	// Caught, not ignored: the agent starts with these signals at their
	// default (an ignored signal would stay ignored across exec).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	var fst syscall.Stat_t
	if len(args) < 4 || syscall.Fstat(lifelineFD, &fst) != nil || syscall.Fstat(reportFD, &fst) != nil {
		fmt.Fprintln(os.Stderr, "acp-router: the agent watchdog runs only when the router starts it")
		return 2
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "acp-router: the agent watchdog runs only when the router starts it")
		return 2
	}
	syscall.CloseOnExec(lifelineFD)
	syscall.CloseOnExec(reportFD)
	lifeline := os.NewFile(lifelineFD, "lifeline")
	report := os.NewFile(reportFD, "report")
	// A confined agent's watchdog confines itself first (sandbox.Handoff):
	// the agent inherits it from its first instruction on. Its mask
	// keeper, started on the way, is this process's child: when it ends,
	// the agent is ended too (fail closed: files that appear from then on
	// would stay readable).
	keeper, warn, _, err := sandbox.EnterKeeping()
	if err != nil {
		fmt.Fprintf(report, "error sandbox: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 126
	}
	if warn != "" {
		fmt.Fprintf(os.Stderr, "acp-router sandbox: warning: %s\n", warn)
	}
	keeperPid := -1
	if keeper != nil {
		keeperPid = keeper.Pid
	}
	ppid := os.Getppid()
	setSubreaper()

	// The agent's Pdeathsig follows the thread that starts it: this one
	// stays locked to the main goroutine, which ends only with the process.
	runtime.LockOSThread()
	agent := &exec.Cmd{
		Path: args[2], Args: args[3:], Dir: args[1], Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: agentSysProcAttr(),
	}
	if err := agent.Start(); err != nil {
		fmt.Fprintf(report, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 127
	}
	pgid := agent.Process.Pid
	fmt.Fprintf(report, "pid %d\n", pgid)
	// The agent holds its stdin and stdout alone: EOF and EPIPE mean what
	// they meant without a watchdog. Stderr stays, for the lines above.
	os.Stdin.Close()
	os.Stdout.Close()

	routerGone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, lifeline)
		close(routerGone)
	}()
	// Everything is reaped here, the agent and (on Linux) the orphans of
	// its tree; ECHILD once the agent has been reaped means nothing is left
	// that the watchdog could wait for.
	status := make(chan syscall.WaitStatus, 1)
	noChildren := make(chan struct{})
	keeperGone := make(chan syscall.WaitStatus, 1)
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case err == syscall.EINTR:
			case err != nil:
				close(noChildren)
				return
			case pid == pgid:
				status <- ws
			case pid == keeperPid:
				keeperGone <- ws
			}
		}
	}()
	// exit reports the agent's status and exits with it (as a shell does:
	// 128+N for signal N).
	exit := func(ws syscall.WaitStatus) int {
		fmt.Fprintf(report, "status %d\n", uint32(ws))
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
		return 1
	}
	// endAll ends the agent's tree when the router is gone. Its status is
	// still reported: "gone" may be a closed lifeline in a router that lives.
	endAll := func() int {
		endTree(pgid, grace, noChildren)
		select {
		case ws := <-status:
			return exit(ws)
		default: // still there after SIGKILL: stuck in the kernel
			return 1
		}
	}
	// handled says, once it is done, what a signal to the watchdog did: on
	// stderr, which the router re-logs under the agent's name, so that a
	// signal that ended an agent, or did not, is in the router's log.
	handled := func(sig os.Signal, what string) {
		fmt.Fprintf(os.Stderr, "acp-router: agent watchdog: %s: %s\n", sig, what)
	}
	// The agent runs already (it does not inherit this): a write to the
	// stderr of a router that died meanwhile must fail with EPIPE, not end
	// the watchdog with SIGPIPE before it ends the agent's tree.
	signal.Ignore(syscall.SIGPIPE)
	for {
		select {
		case ws := <-status:
			endTree(pgid, grace, noChildren)
			return exit(ws)
		case <-routerGone:
			return endAll()
		case ws := <-keeperGone:
			fmt.Fprintf(os.Stderr, "acp-router: agent watchdog: the sandbox's mask keeper ended (%s): the agent is stopped, since files that appear from now on could not be masked\n", waitStatusString(ws))
			return endAll()
		case sig := <-sigs:
			if os.Getppid() != ppid { // the router is gone (its Pdeathsig, SIGHUP)
				// Nobody reads stderr any more: nothing to report.
				return endAll()
			}
			if sig == syscall.SIGTERM {
				syscall.Kill(-pgid, syscall.SIGTERM)
				handled(sig, "forwarded to the agent's process group")
			} else {
				handled(sig, "ignored while the router lives")
			}
		}
	}
}

// endTree ends what is left of the agent's tree: its process group and (on
// Linux) every process reparented to the watchdog. SIGTERM, up to grace for
// them to go, then SIGKILL until nothing is left; bounded, so that a process
// stuck in the kernel cannot keep the watchdog forever.
func endTree(pgid int, grace time.Duration, noChildren <-chan struct{}) {
	gone := func() bool {
		select {
		case <-noChildren:
			return syscall.Kill(-pgid, 0) == syscall.ESRCH
		default:
			return false
		}
	}
	waitGone := func(d time.Duration, each func()) bool {
		deadline := time.Now().Add(d)
		for {
			if gone() {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			if each != nil {
				each()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// An agent that exited usually left nothing behind: the reaper only has
	// to see it.
	if waitGone(50*time.Millisecond, nil) {
		return
	}
	// SIGTERM once to each: some programs take a second one as "quit now".
	termed := map[int]bool{pgid: true} // the agent: its group gets it below
	terminate := func() {
		for _, pid := range children() {
			if !termed[pid] {
				termed[pid] = true
				signalTree(pid, syscall.SIGTERM)
			}
		}
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	if waitGone(grace, terminate) {
		return
	}
	waitGone(5*time.Second, func() {
		syscall.Kill(-pgid, syscall.SIGKILL)
		for _, pid := range children() {
			signalTree(pid, syscall.SIGKILL)
		}
	})
}

// signalTree signals a child of the watchdog and, when it leads a process
// group of its own (it left the agent's), that group.
func signalTree(pid int, sig syscall.Signal) {
	if pg, err := syscall.Getpgid(pid); err == nil && pg == pid {
		syscall.Kill(-pid, sig)
	}
	syscall.Kill(pid, sig)
}
