// Package upstream owns one downstream agent: its process (spawned in its own
// process group, under a watchdog so that it never outlives the router: see
// watchdog.go), the ACP connection to it, initialize, stderr re-logging,
// restart with a bounded budget, stall detection, stopping it when idle and
// the shutdown sequence (DESIGN §7).
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/internal/atomicfile"
	"github.com/acp-router/acp-router/internal/owner"
	"github.com/acp-router/acp-router/sandbox"
	"github.com/acp-router/acp-router/telemetry"
)

// Errors an agent reports; they are wrapped with the reason.
var (
	// ErrCrashLoop: the agent used up its restart budget.
	ErrCrashLoop = errors.New("restarted too often")
	// ErrStopped: the agent was stopped by the router.
	ErrStopped = errors.New("stopped")
	// ErrIdle: the agent was stopped because it was idle for its
	// idle_timeout (issue 5 req. 7); its next use starts it again.
	ErrIdle = errors.New("stopped when idle")
	// ErrNoProcess: the agent has no command to run (the conductor's
	// successor outside a proxy chain).
	ErrNoProcess = errors.New("not available outside a proxy chain")
)

// Options are shared by all agents of a router.
type Options struct {
	Logger   hclog.Logger
	StateDir string
	// Handler answers the agent's requests and notifications on a new
	// connection (the router's agent side).
	Handler func(*Instance) jsonrpc2.Handler
	// Intercept sees the agent's messages in the read path (the relay).
	Intercept func(*Instance, *acp.Message) bool
	// Batch is the agent streams' acp.StreamOptions.Batch.
	Batch func() (end func())
	// Prescan is the agent streams' acp.StreamOptions.Prescan.
	Prescan *acp.Prescan
	// InitParams returns the initialize params sent to the agent.
	InitParams func() json.RawMessage
	// OnExit is called once when a running or starting instance ends.
	OnExit func(*Instance, error)
	// Telemetry records process starts, exits and restarts; nil: off.
	Telemetry *telemetry.Telemetry
	// Confine returns the sandbox plan an agent's process starts under
	// (sandbox.Confiner.Confine): nil to start it unconfined, an error to
	// refuse the start. nil: every agent starts unconfined.
	Confine func(config.Agent) (*sandbox.Plan, error)

	// Shutdown timings (DESIGN §7): after stdin is closed the group gets
	// ShutdownGrace to go away, then SIGTERM and KillGrace, then SIGKILL.
	ShutdownGrace time.Duration
	KillGrace     time.Duration
	// StopWait bounds how long Stop waits, once the process is gone, for
	// the agent's goroutines (an abandoned watchdog's reaper among them)
	// [2s].
	StopWait time.Duration
	// At most RestartLimit restarts per RestartWindow.
	RestartLimit  int
	RestartWindow time.Duration

	// idleTicks, set by tests, replaces the idle watch's ticker: it is
	// called, with the tick, before the instance is reported ready, and
	// each value received on the channel is one check, with its time.
	idleTicks func(tick time.Duration) (ticks <-chan time.Time, stop func())
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 2 * time.Second
	}
	if o.KillGrace == 0 {
		o.KillGrace = 2 * time.Second
	}
	if o.StopWait == 0 {
		o.StopWait = 2 * time.Second
	}
	if o.RestartLimit == 0 {
		o.RestartLimit = 5
	}
	if o.RestartWindow == 0 {
		o.RestartWindow = time.Minute
	}
	if o.idleTicks == nil {
		o.idleTicks = func(tick time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(tick)
			return t.C, t.Stop
		}
	}
}

// State of an agent.
type State int

const (
	Stopped State = iota
	Starting
	Running
	Failed
)

func (s State) String() string {
	return [...]string{"stopped", "starting", "running", "failed"}[s]
}

// Agent is one configured agent and its current process, if any.
type Agent struct {
	Config config.Agent
	opts   Options
	log    hclog.Logger
	tail   *tail
	// owned are the agent's goroutines (its processes' lives, stderr,
	// idle watch): Stop waits for them, bounded.
	owned owner.Group

	mu       sync.Mutex
	inst     *Instance // the current or last instance
	state    State
	err      error       // why the last instance failed
	restarts []time.Time // restarts within the window
	// idle: the last instance was stopped for being idle. Starting again is
	// not a restart: it is not counted against the budget.
	idle bool
	gen  int
	auth string // remembered authenticate methodId, replayed on restart
	// connect, when set, reaches the agent through a Link instead of its
	// command (SetConnect).
	connect Connect
	// fam: its processes for other session roots (roots.go).
	fam family
}

// Link is a connection to an agent that is not a child process of the
// router: the conductor's successor in an ACP proxy chain
// (rfds/proxy-chains), spoken to through proxy/successor on the router's
// own stdio. Out carries the agent's messages and In what it is sent, one
// message a line, as a process's stdout and stdin would. Everything above
// the connection (initialize, the Peer, stall detection, idle stops,
// restarts, errors naming the agent) is the same as for a process.
type Link struct {
	Out io.ReadCloser
	In  io.WriteCloser
	// Done is closed when the link has ended; Err then says why.
	Done <-chan struct{}
	Err  func() error
	// Close ends the link. It may be called more than once.
	Close func()
}

// Connect opens a new link to an agent: one per instance.
type Connect func() (*Link, error)

// SetConnect makes the agent reached through links from c instead of its
// command, from its next start on.
func (a *Agent) SetConnect(c Connect) {
	a.mu.Lock()
	a.connect = c
	a.mu.Unlock()
}

// New returns a stopped agent.
func New(cfg config.Agent, opts Options) *Agent {
	opts.defaults()
	return &Agent{Config: cfg, opts: opts, log: opts.Logger.Named(cfg.Name), tail: newTail(20, 512)}
}

// Name is the agent's configured name.
func (a *Agent) Name() string { return a.Config.Name }

// Title is the agent's display name.
func (a *Agent) Title() string {
	if a.Config.Title != "" {
		return a.Config.Title
	}
	return a.Config.Name
}

// Instance is one run of the agent process.
type Instance struct {
	Agent *Agent
	Gen   int // increases with every start
	// Restart: a previous instance failed or was restarted (not a start
	// after an idle stop).
	Restart bool

	cmd     *exec.Cmd // the agent, or its watchdog
	link    *Link     // instead of cmd: an agent reached through a Link
	wd      *watchdog // nil when the agent runs without one
	pgid    int       // the agent's pid and process group
	peer    *acp.Peer
	started time.Time
	ready   chan struct{} // closed when initialize finished (either way)
	exited  chan struct{} // closed when the process has been reaped

	stderrDone chan struct{} // closed when its stderr reached EOF

	// plan is the sandbox it runs under; nil: unconfined (Plan).
	plan *sandbox.Plan

	mu       sync.Mutex
	init     *acp.InitializeResult
	initRaw  json.RawMessage
	err      error // first failure of this instance
	stopping bool
	// reason, when set, is why the router stopped the instance; it is
	// reported as its end instead of the exit status.
	reason error
}

// Peer is the connection to the agent.
func (i *Instance) Peer() *acp.Peer { return i.peer }

// Init is the agent's initialize result (nil until it answered).
func (i *Instance) Init() *acp.InitializeResult {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.init
}

// InitRaw is the agent's initialize result as sent.
func (i *Instance) InitRaw() json.RawMessage {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.initRaw
}

// linked is the instance's link, or nil for a process.
func (i *Instance) linked() *Link {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.link
}

// Exited is closed once the process has exited and been reaped.
func (i *Instance) Exited() <-chan struct{} { return i.exited }

func (i *Instance) fail(err error) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.err != nil {
		return false
	}
	i.err = err
	return true
}

// Status reports the agent's state and, when failed, why.
func (a *Agent) Status() (State, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state, a.err
}

// Current returns the running instance, or nil.
func (a *Agent) Current() *Instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != Running {
		return nil
	}
	return a.inst
}

// Start begins starting the agent unless it is starting or running. It does
// not wait; Ready does. A restart counts against the restart budget.
func (a *Agent) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err := a.startLocked()
	return err
}

func (a *Agent) startLocked() (*Instance, error) {
	if a.state == Starting || a.state == Running {
		return a.inst, nil
	}
	var delay time.Duration
	var prev *Instance // the instance to wait for
	restart := a.inst != nil && !a.idle
	if a.idle {
		// Stopped when idle: not a failure, so no budget and no backoff,
		// but the new process starts once the old one is gone (two at once
		// could fight over the agent's own state files).
		prev, a.idle = a.inst, false
	} else if a.inst != nil { // a restart
		now := time.Now()
		kept := a.restarts[:0]
		for _, t := range a.restarts {
			if now.Sub(t) < a.opts.RestartWindow {
				kept = append(kept, t)
			}
		}
		a.restarts = kept
		if len(a.restarts) >= a.opts.RestartLimit {
			next := a.restarts[0].Add(a.opts.RestartWindow)
			return nil, fmt.Errorf("%w: %d restarts within %s; the last failure was: %v; the router tries again after %s",
				ErrCrashLoop, len(a.restarts), a.opts.RestartWindow, a.err, next.Format(time.TimeOnly))
		}
		delay = min(100*time.Millisecond<<len(a.restarts), 2*time.Second)
		a.restarts = append(a.restarts, now)
	}
	a.gen = a.nextGen()
	inst := &Instance{Agent: a, Gen: a.gen, Restart: restart, ready: make(chan struct{}), exited: make(chan struct{}), stderrDone: make(chan struct{})}
	a.inst, a.state, a.err = inst, Starting, nil
	a.owned.Go(func() { a.run(inst, prev, delay) })
	return inst, nil
}

// Ready starts the agent if needed (a failed or exited agent is restarted,
// within the budget; a successful `acp-router login` since the last start
// restarts it too; one stopped when idle starts again outside the budget)
// and waits until it answered initialize, at most the startup timeout.
func (a *Agent) Ready(ctx context.Context) (*Instance, error) {
	a.mu.Lock()
	if a.state == Running && a.loginSince(a.inst.started) {
		a.log.Info("login finished; restarting agent")
		old := a.inst
		a.state = Stopped
		a.mu.Unlock()
		a.stopInstance(old)
		a.mu.Lock()
	}
	inst, err := a.startLocked()
	a.mu.Unlock()
	if err != nil {
		return nil, a.wrap(err)
	}
	timer := time.NewTimer(a.Config.StartupTimeout)
	defer timer.Stop()
	select {
	case <-inst.ready:
	case <-timer.C:
		err := fmt.Errorf("did not answer initialize within %s", a.Config.StartupTimeout)
		a.failInstance(inst, err)
		return nil, a.wrap(err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	inst.mu.Lock()
	err = inst.err
	inst.mu.Unlock()
	if err != nil {
		return nil, a.wrap(err)
	}
	return inst, nil
}

// Wait returns once the current start attempt has finished, or ctx ends.
func (a *Agent) Wait(ctx context.Context) {
	a.mu.Lock()
	inst := a.inst
	a.mu.Unlock()
	if inst == nil {
		return
	}
	select {
	case <-inst.ready:
	case <-ctx.Done():
	}
}

func (a *Agent) wrap(err error) error {
	return fmt.Errorf("agent %q: %w", a.Config.Name, err)
}

// run starts the process, once prev (if any) has exited, and initializes
// it.
func (a *Agent) run(inst, prev *Instance, delay time.Duration) {
	if prev != nil {
		<-prev.exited
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if err := a.spawn(inst); err != nil {
		// No process: nothing to reap or to wait for.
		a.markFailed(inst, err)
		close(inst.exited)
		close(inst.ready)
		return
	}
	inst.mu.Lock()
	stopped := inst.stopping // Stop came while the process was starting
	inst.mu.Unlock()
	if stopped {
		a.markFailed(inst, ErrStopped)
		close(inst.ready)
		a.terminate(inst)
		return
	}
	if err := a.initialize(inst); err != nil {
		a.failInstance(inst, err)
		close(inst.ready)
		return
	}
	a.mu.Lock()
	running := a.inst == inst && a.state == Starting
	if running {
		a.state = Running
	}
	a.mu.Unlock()
	if running && a.Config.IdleTimeout > 0 {
		// The stop comes between timeout and timeout+tick after the last
		// activity, never earlier.
		timeout := a.Config.IdleTimeout
		ticks, stop := a.opts.idleTicks(min(max(timeout/8, 10*time.Millisecond), 5*time.Second))
		a.owned.Go(func() {
			defer stop()
			a.watchIdle(inst, timeout, ticks)
		})
	}
	close(inst.ready)
}

// watchIdle stops inst once nothing has passed on its connection, in either
// direction, and no request has been outstanding, for timeout (issue 5
// req. 7: idle_timeout). A running turn is a session/prompt awaiting its
// answer, so it keeps the agent. The next use starts the agent again and
// the router re-attaches its sessions. It ends with the instance.
// Each value on ticks is one check.
func (a *Agent) watchIdle(inst *Instance, timeout time.Duration, ticks <-chan time.Time) {
	peer := inst.peer
	last, written, quiet := peer.Activity(), peer.Stream().Written(), time.Now()
	for {
		var now time.Time
		select {
		case <-inst.exited:
			return
		case <-peer.Done():
			return // stopping or failed
		case now = <-ticks:
		}
		act, w := peer.Activity(), peer.Stream().Written()
		if act != last || w != written || act.Busy() {
			last, written, quiet = act, w, now
			continue
		}
		if now.Sub(quiet) >= timeout && a.stopIdle(inst, last, timeout) {
			return
		}
	}
}

// stopIdle stops inst, still running and idle since last, with the
// shutdown sequence. It reports false when activity came in meanwhile.
func (a *Agent) stopIdle(inst *Instance, last acp.Activity, timeout time.Duration) bool {
	a.mu.Lock()
	if a.inst != inst || a.state != Running {
		a.mu.Unlock()
		return true // stopped, failed or replaced meanwhile
	}
	// Under a.mu, so that nobody is handed this instance (Current, Ready)
	// once its connection is closed: callers get a new one instead.
	if !inst.peer.CloseIfIdle(last) {
		a.mu.Unlock()
		return false
	}
	err := fmt.Errorf("%w for %s", ErrIdle, timeout)
	a.state, a.err, a.idle = Stopped, err, true
	inst.mu.Lock()
	inst.stopping, inst.reason = true, err
	inst.mu.Unlock()
	a.mu.Unlock()
	a.log.Info("agent idle; stopped", "idle_for", timeout)
	a.terminate(inst)
	return true
}

func (a *Agent) spawn(inst *Instance) error {
	began := time.Now()
	inst.mu.Lock()
	stopped := inst.stopping
	inst.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	a.mu.Lock()
	connect := a.connect
	a.mu.Unlock()
	if connect != nil {
		return a.spawnLink(inst, connect)
	}
	cfg := a.Config
	if cfg.Command == "" {
		return fmt.Errorf("%w: it has no command: it is the conductor's successor, reachable only when the router runs in an ACP proxy chain (proxy/initialize)", ErrNoProcess)
	}
	cmd := exec.Command(cfg.Command, cfg.Args...)
	if cmd.Err != nil { // not found in PATH
		return fmt.Errorf("start %q: %w", cfg.Command, cmd.Err)
	}
	cmd.Dir = cfg.Cwd
	cmd.Env = Environ(cfg, os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Confined before its first instruction (issue 29).
	var plan *sandbox.Plan
	if a.opts.Confine != nil {
		var err error
		if plan, err = a.opts.Confine(cfg); err != nil {
			return fmt.Errorf("start %q: %w", cfg.Command, err)
		}
	}
	// Under a watchdog, so that the agent and its children do not outlive
	// the router however it ends (watchdog.go).
	var wd *watchdog
	if exe := watchdogExecutable(); exe != "" {
		var err error
		if wd, cmd, err = newWatchdog(exe, cmd, a.opts.KillGrace); err != nil {
			return fmt.Errorf("start %q: %w", cfg.Command, err)
		}
	}
	if plan != nil {
		// The watchdog confines itself before it starts the agent; without
		// one, the sandbox helper runs in the agent's place and execs it.
		confine := plan.Wrap
		if wd != nil {
			confine = plan.Handoff
		}
		if err := confine(cmd); err != nil {
			wd.abandon(nil, nil, nil)
			return fmt.Errorf("start %q: %w", cfg.Command, err)
		}
	}

	// Our own pipes rather than cmd.StdoutPipe: Wait would close those as
	// soon as the process exits, losing output still buffered in them.
	inR, inW, err := os.Pipe()
	if err != nil {
		wd.abandon(nil, nil, nil)
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		wd.abandon(nil, nil, nil)
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		wd.abandon(nil, nil, nil)
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	closeAll(inR, outW, errW)
	wd.closeChildEnds()
	pid := 0
	if err == nil {
		pid = cmd.Process.Pid
		if wd != nil {
			timeout := cfg.StartupTimeout
			if timeout <= 0 {
				timeout = config.DefaultStartupTimeout
			}
			pid, err = wd.agentPid(timeout)
		}
	}
	if err != nil {
		closeAll(inW, outR, errR)
		wd.abandon(cmd, &a.owned, a.log)
		return fmt.Errorf("start %q: %w", cfg.Command, err)
	}
	inst.mu.Lock()
	inst.cmd, inst.wd, inst.pgid, inst.started, inst.plan = cmd, wd, pid, time.Now(), plan
	inst.mu.Unlock()
	a.opts.Telemetry.AgentStarted(a.Name(), began, inst.Restart, nil)
	if wd != nil {
		a.log.Info("agent started", "pid", pid, "command", cfg.Command, "watchdog", cmd.Process.Pid)
	} else {
		a.log.Info("agent started", "pid", pid, "command", cfg.Command)
	}

	a.owned.Go(func() {
		a.relayStderr(errR)
		close(inst.stderrDone)
	})
	a.connectPeer(inst, outR, inW)
	a.owned.Go(func() { a.reap(inst) })
	return nil
}

// spawnLink starts inst over a link instead of a process.
func (a *Agent) spawnLink(inst *Instance, connect Connect) error {
	link, err := connect()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	inst.mu.Lock()
	inst.link, inst.started = link, time.Now()
	inst.mu.Unlock()
	close(inst.stderrDone) // no stderr
	a.log.Info("agent connected through the conductor")
	a.connectPeer(inst, link.Out, link.In)
	a.owned.Go(func() {
		<-link.Done
		a.ended(inst, link.Err())
	})
	return nil
}

// connectPeer speaks ACP to inst over out (what it says) and in (what it
// is told).
func (a *Agent) connectPeer(inst *Instance, out io.ReadCloser, in io.WriteCloser) {
	cfg := a.Config
	var handler jsonrpc2.Handler = noHandler{}
	if a.opts.Handler != nil {
		handler = a.opts.Handler(inst)
	}
	var intercept func(*acp.Message) bool
	if a.opts.Intercept != nil {
		intercept = func(m *acp.Message) bool { return a.opts.Intercept(inst, m) }
	}
	inst.peer = acp.NewPeer(context.Background(), out, in, acp.StreamOptions{
		StallTimeout: cfg.StallTimeout,
		OnFail: func(err error) {
			if errors.Is(err, syscall.EPIPE) {
				// Its stdin is closed: it is probably exiting, and how it
				// exited says more than the broken pipe.
				select {
				case <-inst.exited:
					return
				case <-time.After(time.Second):
				}
			}
			a.failInstance(inst, err)
		},
		Intercept: intercept,
		Batch:     a.opts.Batch,
		Prescan:   a.opts.Prescan,
		Logger:    a.log,
	}, handler)
	if o := a.opts.Telemetry.AgentCalls(a.Name()); o != nil {
		inst.peer.ObserveCalls(o)
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// initialize sends initialize and, if the editor authenticated with this
// agent before, replays authenticate.
func (a *Agent) initialize(inst *Instance) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.Config.StartupTimeout)
	defer cancel()
	var params json.RawMessage
	if a.opts.InitParams != nil {
		params = a.opts.InitParams()
	}
	if params == nil {
		params = json.RawMessage(`{"protocolVersion":1,"clientCapabilities":{}}`)
	}
	raw, err := a.call(ctx, inst, acp.MethodInitialize, params)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var res acp.InitializeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("initialize: malformed result: %w", err)
	}
	if res.ProtocolVersion != acp.ProtocolVersion {
		return fmt.Errorf("initialize: the agent speaks ACP version %d; acp-router speaks %d", res.ProtocolVersion, acp.ProtocolVersion)
	}
	inst.mu.Lock()
	inst.init, inst.initRaw = &res, raw
	inst.mu.Unlock()
	a.saveInit(raw)
	a.mu.Lock()
	method := a.auth
	a.mu.Unlock()
	if method != "" {
		if _, err := a.call(ctx, inst, acp.MethodAuthenticate, map[string]string{"methodId": method}); err != nil {
			a.log.Warn("replaying authenticate failed", "method", method, "error", err)
		}
	}
	return nil
}

// call sends a request and waits, giving up when the process exits; then
// the error says how it exited.
func (a *Agent) call(ctx context.Context, inst *Instance, method string, params any) (json.RawMessage, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.owned.Go(func() {
		select {
		case <-inst.exited:
			cancel()
		case <-ctx.Done():
		}
	})
	c, err := inst.peer.Call(ctx, method, params, nil, nil)
	var res json.RawMessage
	if err == nil {
		// Past StartupTimeout (a replayed authenticate the agent does not
		// answer) the call is cancelled at the agent, not left pending.
		res, err = c.WaitOrCancel(ctx)
	}
	var rpcErr *jsonrpc2.Error
	switch {
	case err == nil, errors.As(err, &rpcErr): // the agent answered
		return res, err
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("no answer: %w", err)
	}
	select { // the connection or the process ended
	case <-inst.exited:
		inst.mu.Lock()
		defer inst.mu.Unlock()
		if inst.err != nil {
			return nil, inst.err
		}
	case <-time.After(time.Second):
	}
	return nil, err
}

// SetAuth remembers the method the editor authenticated with, so that it is
// replayed after a restart.
func (a *Agent) SetAuth(methodID string) {
	for _, c := range a.children() {
		c.SetAuth(methodID)
	}
	a.mu.Lock()
	a.auth = methodID
	a.mu.Unlock()
}

// reap waits for the process and records how it ended.
func (a *Agent) reap(inst *Instance) {
	err := inst.cmd.Wait()
	var ws syscall.WaitStatus
	waited := inst.cmd.ProcessState != nil
	if waited {
		ws = inst.cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	if inst.wd != nil {
		// The agent's own status, unless the watchdog was killed before
		// it could tell (then its own status says how).
		if st, ok := inst.wd.agentStatus(); ok {
			ws = st
		}
		inst.wd.close()
	}
	if waited {
		err = exitError(ws)
	}
	// Its last stderr lines belong in the error report; a grandchild may
	// keep the pipe open, so do not wait for EOF long.
	select {
	case <-inst.stderrDone:
	case <-time.After(500 * time.Millisecond):
	}
	a.ended(inst, err)
}

// ended records how inst ended (err, unless the router stopped it for a
// reason of its own) and closes its connection.
func (a *Agent) ended(inst *Instance, err error) {
	if err == nil {
		err = errors.New("connection closed")
	}
	// Under a.mu too: stopIdle closes the connection (the agent exits at
	// EOF) before it marks the instance stopping, both under a.mu.
	a.mu.Lock()
	inst.mu.Lock()
	stopping, reason := inst.stopping, inst.reason
	inst.mu.Unlock()
	a.mu.Unlock()
	a.opts.Telemetry.AgentExited(a.Name(), !stopping, err)
	if stopping {
		a.log.Debug("agent exited", "status", err)
	} else {
		a.log.Error("agent exited unexpectedly", "status", err)
	}
	if reason != nil {
		err = reason
	}
	// Marked failed before exited is closed: whoever waits for the exit to
	// explain a failed call finds the agent failed and restartable.
	a.markFailed(inst, err)
	close(inst.exited)
	// Give the reader a moment to drain what the agent wrote before it
	// exited; a grandchild may keep the pipe open, so do not wait for EOF.
	time.AfterFunc(200*time.Millisecond, func() { inst.peer.Close() })
}

// failInstance records the first failure of a live instance (hung, broken
// or timed out), marks the agent failed and ends the process: its
// connection is unusable, so pending calls fail now.
func (a *Agent) failInstance(inst *Instance, err error) {
	if !a.markFailed(inst, err) || inst.peer == nil {
		return
	}
	inst.mu.Lock()
	stopping := inst.stopping
	inst.mu.Unlock()
	select {
	case <-inst.exited:
	default:
		if !stopping {
			inst.peer.Stream().Abort(err)
			a.owned.Go(func() { a.kill(inst) })
		}
	}
}

// markFailed records the first failure of inst and marks the agent failed
// (unless it was stopped on purpose). It reports whether err was the first.
func (a *Agent) markFailed(inst *Instance, err error) bool {
	if !inst.fail(err) {
		return false
	}
	a.mu.Lock()
	if a.inst == inst && a.state != Stopped {
		a.state, a.err = Failed, err
	}
	a.mu.Unlock()
	inst.mu.Lock()
	stopping := inst.stopping
	inst.mu.Unlock()
	if !stopping {
		a.log.Error("agent failed", "error", err)
	}
	if a.opts.OnExit != nil {
		a.opts.OnExit(inst, err)
	}
	return true
}

// Stop shuts the agent down (DESIGN §7) and leaves it stopped. When it is
// already stopped, Stop waits until that process is gone.
func (a *Agent) Stop() {
	a.stopChildren()
	a.mu.Lock()
	inst := a.inst
	if inst == nil {
		a.mu.Unlock()
		return
	}
	if a.state == Stopped {
		a.mu.Unlock()
		<-inst.exited
		return
	}
	a.state, a.err = Stopped, ErrStopped
	a.mu.Unlock()
	a.stopInstance(inst)
	// The process is gone: what still runs for it ends now.
	if n := a.owned.Wait(a.opts.StopWait); n > 0 {
		a.log.Warn("goroutines still running after the agent stopped", "count", n)
	}
}

// Restart ends the current instance as failed (reason); the next Ready
// starts a new one.
func (a *Agent) Restart(reason error) {
	for _, c := range a.children() {
		c.Restart(reason)
	}
	a.mu.Lock()
	inst := a.inst
	a.mu.Unlock()
	if inst != nil {
		a.failInstance(inst, reason)
	}
}

// RestartInstance ends inst as failed (reason), when it is a's process;
// the next Ready starts a new one. Unlike Restart it leaves the family's
// other processes alone: what one process did (a hung turn) is no reason
// to end the sessions of other roots.
func (a *Agent) RestartInstance(inst *Instance, reason error) {
	if inst != nil && inst.Agent == a {
		a.failInstance(inst, reason)
	}
}

// stopInstance shuts an instance down and waits until it is gone. An
// instance still being spawned is ended by run once its process exists.
func (a *Agent) stopInstance(inst *Instance) {
	inst.mu.Lock()
	first := !inst.stopping
	inst.stopping = true
	spawned := inst.cmd != nil || inst.link != nil
	inst.mu.Unlock()
	if first && spawned {
		a.terminate(inst)
	}
	<-inst.exited
}

// terminate: close stdin, give the group ShutdownGrace to go away, then
// SIGTERM the group, KillGrace, SIGKILL. The group is signalled even when
// the agent itself already exited, for what it left behind (DESIGN §7).
// Its stdout is read until it has exited (reap closes the rest): an agent
// that writes while it shuts down (a last notification, a flush of its
// log to stdout) must not die of SIGPIPE for it.
func (a *Agent) terminate(inst *Instance) {
	if link := inst.linked(); link != nil {
		inst.peer.Close()
		link.Close()
		<-inst.exited
		return
	}
	inst.peer.CloseWrite()
	if a.waitGroupGone(inst, a.opts.ShutdownGrace) {
		return
	}
	a.log.Info("agent did not exit after stdin was closed; sending SIGTERM", "pgid", inst.pgid)
	syscall.Kill(-inst.pgid, syscall.SIGTERM)
	if a.waitGroupGone(inst, a.opts.KillGrace) {
		return
	}
	a.log.Warn("agent did not exit after SIGTERM; sending SIGKILL", "pgid", inst.pgid)
	syscall.Kill(-inst.pgid, syscall.SIGKILL)
	<-inst.exited
}

// kill ends a broken instance without the stdin grace period: SIGTERM to
// the group, KillGrace, SIGKILL.
func (a *Agent) kill(inst *Instance) {
	inst.mu.Lock()
	if inst.stopping || (inst.cmd == nil && inst.link == nil) {
		inst.mu.Unlock()
		return
	}
	inst.stopping = true
	link := inst.link
	inst.mu.Unlock()
	inst.peer.Close()
	if link != nil {
		link.Close()
		return
	}
	syscall.Kill(-inst.pgid, syscall.SIGTERM)
	if !a.waitGroupGone(inst, a.opts.KillGrace) {
		syscall.Kill(-inst.pgid, syscall.SIGKILL)
	}
}

// waitGroupGone waits until the agent has been reaped and nothing is left
// in its process group.
func (a *Agent) waitGroupGone(inst *Instance, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-inst.exited:
			if syscall.Kill(-inst.pgid, 0) == syscall.ESRCH {
				return true
			}
		default:
		}
		select {
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// Error turns a failure of a call to this agent into the JSON-RPC error the
// editor gets: it names the agent in message and carries data.agent and the
// redacted stderr tail (DESIGN §7). An agent's own *jsonrpc2.Error is
// returned unchanged.
func (a *Agent) Error(inst *Instance, err error) *jsonrpc2.Error {
	var rpcErr *jsonrpc2.Error
	if errors.As(err, &rpcErr) {
		return rpcErr
	}
	if inst != nil && errors.Is(err, jsonrpc2.ErrClosed) {
		// The connection closed: say why, once the process is gone.
		select {
		case <-inst.exited:
		case <-time.After(time.Second):
		}
		inst.mu.Lock()
		if inst.err != nil {
			err = inst.err
		}
		inst.mu.Unlock()
	}
	msg := err.Error()
	if !strings.Contains(msg, a.Config.Name) {
		msg = fmt.Sprintf("agent %q: %s", a.Config.Name, msg)
	}
	return acp.NewError(acp.CodeInternalError, "acp-router: "+msg, map[string]string{
		"agent":      a.Config.Name,
		"stderrTail": a.tail.String(),
	})
}

// StderrTail is the agent's last stderr lines, secrets redacted.
func (a *Agent) StderrTail() string { return a.tail.String() }

type noHandler struct{}

func (noHandler) Handle(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) {
	if !r.Notif {
		c.ReplyWithError(ctx, r.ID, &jsonrpc2.Error{Code: acp.CodeMethodNotFound, Message: "method not found"})
	}
}

// Environ builds an agent's environment (DESIGN §4 env_inherit).
func Environ(cfg config.Agent, parent []string) []string {
	var env []string
	for _, kv := range parent {
		name, _, _ := strings.Cut(kv, "=")
		if cfg.EnvInherit == config.EnvInheritMinimal && !minimalVar(name) {
			continue
		}
		if _, override := cfg.Env[name]; override {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	return env
}

func minimalVar(name string) bool {
	switch name {
	case "PATH", "HOME", "LANG", "TERM", "TMPDIR":
		return true
	}
	return strings.HasPrefix(name, "XDG_")
}

// CachedInit is the agent's last initialize result saved in the state dir,
// or nil.
func (a *Agent) CachedInit() json.RawMessage {
	if a.opts.StateDir == "" {
		return nil
	}
	b, err := os.ReadFile(a.initFile())
	if err != nil || !json.Valid(b) {
		return nil
	}
	return b
}

func (a *Agent) initFile() string {
	return filepath.Join(a.opts.StateDir, "agents", a.Config.Name+".initialize.json")
}

func (a *Agent) saveInit(raw json.RawMessage) {
	if a.opts.StateDir == "" {
		return
	}
	if err := WriteFileAtomic(a.initFile(), raw); err != nil {
		a.log.Warn("cannot cache initialize result", "error", err)
	}
}

// WriteFileAtomic writes a state file (0600 in a 0700 directory) so that
// readers never see half of it.
func WriteFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data)
}
