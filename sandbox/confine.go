package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/egress"
	"github.com/acp-router/acp-router/policy"
)

// Start is what happened to the sandbox at one agent start, for the audit
// log (issue 29 req. 6).
type Start struct {
	Agent string
	Mode  config.SandboxMode
	// Confined: the agent runs under Profile. Otherwise Reason says why
	// not (and, in enforce mode, the agent was not started).
	Confined bool
	Profile  *Profile // nil when none could be derived
	Plan     *Plan    // nil unless Confined
	Reason   string
}

// Confiner decides how each agent process starts: under its profile,
// unconfined (best-effort when the kernel cannot), or not at all (enforce
// when it cannot).
type Confiner struct {
	Mode config.SandboxMode
	// Policy returns the policy in force (nil: none).
	Policy func() *policy.Policy
	Logger hclog.Logger
	// Record is called at every start the sandbox is on for; nil: none.
	Record func(Start)
	// Agents are the agents the config declares: the network grade
	// advertised on the wire (Capability) is the one every one of them
	// gets.
	Agents []config.Agent
	// Env returns the environment of the derivation for an agent; nil:
	// AgentEnv.
	Env func(config.Agent) Env

	// NetRefused is called for each connection an agent's egress proxy
	// refused (the log has it too); nil: logged only.
	NetRefused func(agent string, r egress.Refusal)
	// Lookup resolves names for the egress proxies; nil: the system's
	// resolver (see egress.Proxy.Lookup).
	Lookup lookupFunc

	egressMu sync.Mutex
	egress   map[string]*agentEgress

	once sync.Map // best-effort warnings already logged, by agent and reason

	// required: a session required a sandbox (acp.sandbox, wire.go): from
	// then on best-effort refuses to start an agent it cannot confine, as
	// enforce does. Agent processes serve every session, so it is not
	// undone.
	required atomic.Bool
	// started is each agent's last start (*started, by agent name): the
	// plan it runs under, or nil when it started unconfined.
	started sync.Map
	// guards are each agent's kernel guard (*agentGuard, kernel.go).
	guards sync.Map
}

// started is what an agent's last start ran under.
type started struct {
	plan   *Plan // nil: unconfined
	reason string
}

func (c *Confiner) logger() hclog.Logger {
	if c.Logger == nil {
		return hclog.NewNullLogger()
	}
	return c.Logger
}

// AgentEnv is the machine's environment for agent's profile: the home
// directory, the temp dir, the agent's working directory as its root (or
// config.Agent.Roots, set for a process of a set of session roots), its
// environment and resolved command.
func AgentEnv(a config.Agent) Env {
	home, _ := os.UserHomeDir()
	root := a.Cwd
	if root == "" {
		root, _ = os.Getwd()
	}
	getenv := func(k string) string {
		if v, ok := a.Env[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
	exe, _ := exec.LookPath(a.Command)
	if exe != "" {
		if abs, err := filepath.Abs(exe); err == nil {
			exe = abs
		}
	}
	links := map[string]string{}
	roots := []string{root}
	if len(a.Roots) > 0 {
		roots = a.Roots
	}
	real := make([]string, len(roots))
	for i, r := range roots {
		real[i] = realPath(r, links)
	}
	env := Env{Home: realPath(home, links), TempDir: realPath(os.TempDir(), nil), Roots: real, Getenv: getenv, Links: links}
	// The executable keeps its name (the agent runs it by that name); a
	// deny rule on either name stops the start (Derive).
	env.Executable, env.ExecutableTarget = exe, realPath(exe, nil)
	return env
}

// realPath is path with its symbolic links resolved, noted in links when
// it differs: the masks and Landlock hold real paths, and a search of a
// root that is a link would find nothing below it.
func realPath(path string, links map[string]string) string {
	if path == "" {
		return path
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil || real == filepath.Clean(path) {
		return path
	}
	if links != nil {
		links[path] = real
	}
	return real
}

// Profile derives agent's profile and the problems check reports.
func (c *Confiner) Profile(a config.Agent) (*Profile, []Problem) {
	var pol *policy.Policy
	if c.Policy != nil {
		pol = c.Policy()
	}
	envFn := c.Env
	if envFn == nil {
		envFn = AgentEnv
	}
	return Derive(pol, a, envFn(a))
}

// Confine returns the plan agent a starts under: nil to start it
// unconfined (mode off, or best-effort on a kernel that cannot), or an
// error to refuse the start (enforce on a kernel that cannot), saying what
// is missing and how to fix it.
func (c *Confiner) Confine(a config.Agent) (*Plan, error) {
	if c == nil || c.Mode == config.SandboxOff || c.Mode == "" {
		return nil, nil
	}
	mode := c.Mode
	if c.required.Load() {
		mode = config.SandboxEnforce
	}
	st := Start{Agent: a.Name, Mode: c.Mode}
	prof, probs := c.Profile(a)
	st.Profile = prof
	var err error
	for _, p := range probs {
		if p.Error {
			err = errors.New(p.Msg)
			break
		}
	}
	if err == nil {
		err = Available()
	}
	if err == nil {
		st.Plan, err = Resolve(prof, ResolveOptions{CreateStateDirs: true})
	}
	if err == nil && st.Plan.Keeper != nil {
		// enforce: no agent runs without the keeper of its late files.
		st.Plan.Keeper.Required = mode == config.SandboxEnforce
	}
	if err == nil && prof.Network != nil && prof.Network.Confined {
		if err = netAvailable(); err == nil {
			st.Plan.Net, err = c.egressFor(a, prof.Network)
		}
	}
	log := c.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err != nil {
		st.Reason = err.Error()
		if mode == config.SandboxEnforce {
			st.Mode = mode
			c.started.Delete(a.Name)
			c.record(st)
			if c.Mode != config.SandboxEnforce {
				return nil, fmt.Errorf("a session of this editor requires a sandbox (acp.sandbox) and the agent cannot be confined: %w; fix that (acp-router check shows the profile)", err)
			}
			return nil, fmt.Errorf("sandbox.mode is enforce and the agent cannot be confined: %w; fix that, or set sandbox.mode: best-effort to start it unconfined (acp-router check shows the profile)", err)
		}
		c.started.Store(a.Name, &started{reason: st.Reason})
		c.noteStart(a.Name, nil)
		c.record(st)
		if _, seen := c.once.LoadOrStore(a.Name+"\x00"+st.Reason, true); !seen {
			log.Warn("agent starts unconfined: the kernel cannot hold its sandbox profile (sandbox.mode: best-effort)", "agent", a.Name, "reason", st.Reason)
		}
		return nil, nil
	}
	st.Confined = true
	c.started.Store(a.Name, &started{plan: st.Plan})
	c.noteStart(a.Name, st.Plan)
	c.record(st)
	for _, w := range st.Plan.Warnings {
		log.Warn("sandbox limit", "agent", a.Name, "warning", w)
	}
	log.Info("agent confined", "agent", a.Name, "profile", prof.Hash(), "hiddenFiles", len(st.Plan.HideFiles),
		"hiddenDirs", len(st.Plan.HideDirs), "writable", len(st.Plan.WritableDirs)+len(st.Plan.WritableFiles), "searched", st.Plan.Visited,
		"network", prof.Network.Reachable())
	return st.Plan, nil
}

// Func is Confine, or nil when the mode is off: then no agent is ever
// confined, and the router keeps one process per agent (not one per set
// of session roots, upstream.Agent.ForRoots).
func (c *Confiner) Func() func(config.Agent) (*Plan, error) {
	if c == nil || c.Mode == config.SandboxOff || c.Mode == "" {
		return nil
	}
	return c.Confine
}

func (c *Confiner) record(st Start) {
	if c.Record != nil {
		c.Record(st)
	}
}
