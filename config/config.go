// Package config owns acp-router's configuration file: strict YAML loading
// (unknown keys, empty files and extra documents are errors with
// file:line:col), defaults, ${ENV} expansion and validation.
//
// Every section of the format is implemented; a key this build does not
// know is an error, never silently ignored.
package config

import (
	"path/filepath"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/acp-router/acp-router/yamlpos"
)

// Version is the only config format version this build understands.
const Version = 1

// Defaults applied by Load when a key is absent.
const (
	DefaultStartupTimeout = 30 * time.Second
	DefaultStallTimeout   = 10 * time.Second
	DefaultCancelTimeout  = 10 * time.Second
)

// Config is a loaded, validated configuration.
type Config struct {
	// File is the absolute path the config was loaded from ("" when parsed
	// from memory).
	File    string
	Version int
	Agents  []Agent
	Routing Routing
	// Commands are the slash commands of `commands:`.
	Commands []Command
	Handoff  Handoff
	// StateDir holds caches (initialize results, login markers). Absolute,
	// with ~ expanded. Default: $XDG_STATE_HOME/acp-router, else
	// ~/.local/state/acp-router.
	StateDir string
	// Permissions is the user layer of the policy; nil without permissions:.
	Permissions *Permissions
	// Audit is where decisions are logged (always set: File has its
	// default).
	Audit Audit
	// History configures the session store in StateDir/sessions.
	History History
	// Telemetry configures OpenTelemetry export (off by default): the
	// user's block; EffectiveTelemetry merges it with OrgTelemetry.
	Telemetry Telemetry
	// OrgTelemetry are the telemetry: blocks of the org policy files, in
	// file name order; set by guard.LoadPolicy, which reads them.
	OrgTelemetry []Telemetry
	// Sandbox is the user's sandbox: block; OrgSandbox the org files'
	// (set by guard.LoadPolicy). EffectiveSandbox merges them.
	Sandbox    Sandbox
	OrgSandbox []Sandbox
	// Listen is the listen: block (issue 30): where the router also
	// serves ACP's remote transport; Address "" without it.
	Listen Listen
	// Sessions is the sessions: block (issue 30): a session whose last
	// client went.
	Sessions Sessions
	// Compare is the compare: block (issue 32): /compare's default agents
	// and limit.
	Compare Compare
}

// EnvInherit selects which of the router's environment variables an agent
// process inherits.
type EnvInherit string

const (
	// EnvInheritAll passes the router's whole environment (the default).
	EnvInheritAll EnvInherit = "all"
	// EnvInheritMinimal passes only PATH, HOME, LANG, TERM, TMPDIR and XDG_*.
	EnvInheritMinimal EnvInherit = "minimal"
)

// AuthMode says whether an agent's authMethods reach the editor.
type AuthMode string

const (
	AuthAdvertise AuthMode = "advertise" // the default
	AuthHide      AuthMode = "hide"
)

// SuccessorName is the agent that stands for the conductor's successor when
// the router runs as a proxy in an ACP proxy chain (rfds/proxy-chains): its
// traffic goes through proxy/successor on the router's own stdio instead of
// a child process. It may be listed without a command; a config that does
// not list it gets it implicitly in a proxy chain.
const SuccessorName = "successor"

// Agent is one downstream ACP agent, run as a child process (or, for
// SuccessorName in a proxy chain, reached through the conductor).
type Agent struct {
	Name  string // [a-z0-9-]+, unique, not a reserved command name
	Title string // display name; defaults to Name
	// Command is the program, looked up in PATH when it has no slash.
	// ${ENV} is expanded. Empty only for SuccessorName, which then exists
	// only in a proxy chain.
	Command string
	Args    []string          // ${ENV} expanded
	Env     map[string]string // added to the inherited environment; values ${ENV} expanded
	// EnvInherit defaults to EnvInheritAll.
	EnvInherit EnvInherit
	// Cwd is the process working directory ("" = the router's). ~ and ${ENV}
	// expanded.
	Cwd            string
	Lazy           bool
	StartupTimeout time.Duration // default DefaultStartupTimeout
	// StallTimeout: how long the agent's input may make no progress before
	// it is declared hung. Default DefaultStallTimeout.
	StallTimeout time.Duration
	// CancelTimeout: how long after session/cancel the router waits for the
	// agent's answer before answering "cancelled" itself. Default
	// DefaultCancelTimeout.
	CancelTimeout time.Duration
	// IdleTimeout: an agent that has had no session activity for this long
	// (no message either way, no request outstanding) is stopped; its next
	// use starts it again and re-attaches its sessions (issue 5 req. 7).
	// 0, the default, keeps it running.
	IdleTimeout time.Duration
	Auth        AuthMode // default AuthAdvertise
	// StateDirs are where the agent keeps its own state, writable under
	// the sandbox (issue 29). nil: the built-in defaults for known agents
	// (sandbox.DefaultStateDirs); an empty list declares none.
	StateDirs []string
	// StateDirsPos is where state_dirs: is written.
	StateDirsPos Pos
	// Roots, when set, are the directories a process of the agent works
	// in, instead of Cwd alone: never read from the file, set for the
	// process the router starts for a set of session roots
	// (upstream.Agent.ForRoots), so that its sandbox profile may write
	// there and nowhere else.
	Roots []string
	// Network is the agent's network: block (model API hosts, loopback
	// ports) for its sandbox.
	Network Network

	// Pos is where the agent's entry starts in the config file, for
	// messages ("config.yaml:12:5").
	Pos Pos
}

// Routing decides which agent a new session runs on.
type Routing struct {
	Default string // agent name; default: the first agent
	// DefaultSet: routing.default was written in the file. In a proxy
	// chain, an unset default becomes SuccessorName.
	DefaultSet bool
	Fallback   string // agent name or ""
	Rules      []Rule
}

// Rule routes sessions whose cwd matches one of When.Cwd to Agent.
type Rule struct {
	// When.Cwd globs (doublestar syntax), with ~ expanded to the home
	// directory; matched against the session's absolute, cleaned cwd.
	// "DIR/**" also matches DIR itself (doublestar semantics).
	Cwd     []string
	Agent   string
	Enforce bool
	Pos     Pos
}

// Pos is a position in a config file.
type Pos = yamlpos.Pos

// ReservedNames are names an agent may not take because they are built-in
// slash commands or subcommands.
var ReservedNames = []string{"agent", "agents", "help", "router", "login", "logout", "compare", "pick"}

// Agent returns the agent called name.
func (c *Config) Agent(name string) (*Agent, bool) {
	for i := range c.Agents {
		if c.Agents[i].Name == name {
			return &c.Agents[i], true
		}
	}
	return nil, false
}

// Match reports whether the session directory cwd matches one of r.Cwd.
func (r *Rule) Match(cwd string) bool {
	cwd = filepath.Clean(cwd)
	for _, glob := range r.Cwd {
		// The globs were validated when the config was loaded: no error.
		if ok, _ := doublestar.Match(glob, cwd); ok {
			return true
		}
	}
	return false
}
