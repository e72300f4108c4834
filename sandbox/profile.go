// Package sandbox is the kernel's half of the permission policy (issue 29,
// DESIGN §6 "Kernel enforcement"): a confinement profile derived from the
// policy in force for each agent (Derive: pure, tested as data), and its
// Linux implementation (linux.go): the agent's process tree runs in a mount
// namespace where every path a deny rule hides is masked, under Landlock
// rules that allow writes only to the profile's writable set, with
// no_new_privs. The agent's watchdog (upstream/watchdog.go), a re-run of
// the router's executable, applies them to itself before it starts the
// agent (Handoff, Enter); a process without a watchdog is started through
// the helper, the same executable re-run (Wrap, RunIfRequested). Either way
// the agent's first instruction already runs confined, and every process it
// starts inherits the confinement and cannot drop it.
//
// What the wire decides (ask, allow rules, commands, domains) stays with
// guard; the kernel holds only what needs no question: hidden paths and
// where writes may go.
//
// Limits, each pinned by a test: the masks are resolved when a process
// starts. A glob that may match anywhere (**/.env) is searched in the
// roots (whole) and HomeDepth levels of home, and a rule's directory
// (~/.aws/**) is masked if it exists. For an agent's process, a mask
// keeper (keeper_linux.go) watches the same places from then on and masks
// what appears there (a .env a build writes, a new ~/.aws, a directory
// renamed into place, a new hard link to a hidden file) within a window
// of milliseconds (TestLateFiles, TestLateFilesWindow); a descriptor the
// agent opened before the mask keeps reading (TestLateFilesLimit). A
// command its terminals run resolves the masks when it is created, and
// has no keeper. A matching file outside the searched places is never
// masked. A mask hides a name, not a file: another hard link to a hidden
// file is masked only when the search finds it (Plan.Warnings names the
// others).
//
// An agent's own sandbox runs inside this one only if it needs no mount:
// Landlock forbids every mount to a confined process. Codex's (bubblewrap:
// a user namespace and mounts) cannot start, and Codex (0.156 and later)
// refuses its Landlock fallback for a restricted policy; so a command
// Codex would run in its own sandbox fails ("bwrap: setting up uid map:
// Permission denied"), nothing runs unasked, and a command it runs outside
// (require_escalated) is asked through session/request_permission: the
// router's policy decides it, and it runs under this profile
// (test/sandbox_agents_test.go).
//
// Sessions with different roots: a profile's roots are those of one agent
// process (its working directory, or config.Agent.Roots), and Landlock
// cannot widen a running process's rights. So a confined agent runs one
// process per distinct set of session roots (cwd and
// additionalDirectories), started on first use with the profile derived
// for exactly those roots (upstream.Agent.ForRoots); each session talks to
// the process of its own roots, which can write there and in no other
// session's roots. Unconfined agents keep one process.
//
// Commands an editor runs for a confined agent (terminal/create) run under
// the agent's plan too: the router rewrites the request so that the editor
// runs this executable as the terminal helper, which starts the original
// command confined and stays its parent (Plan.Terminal, terminal_linux.go).
//
// The network (network.go, net_linux.go): a profile whose policy holds
// hosts (a deny rule on domains:, or default: deny, an allow-list) runs
// the agent in a network namespace of its own with only loopback up, and
// its connections go through the router's egress proxy (package egress),
// which decides each host and resolves the names.
//
// On the wire (wire.go): the capability the router advertises in the
// shape of the draft ACP RFD "Sandbox Capability and Policy", and the
// acp.sandbox requirement of a session. For decisions (kernel.go): the
// masks each confined start applied, so that the policy does not ask
// about what the kernel already keeps from the agent's own tools.
package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
)

// Env is what a profile is derived for: the machine's and the agent
// process's places.
type Env struct {
	// Home is the user's home directory (~, ${home}).
	Home string
	// TempDir is the temporary directory ($TMPDIR, else /tmp).
	TempDir string
	// Roots are the directories the agent works in: its process's working
	// directory first (${cwd}, ${roots}). Writable.
	Roots []string
	// Getenv reads the agent's environment (CODEX_HOME, XDG_*).
	Getenv func(string) string
	// Executable is the agent's command resolved in PATH ("" if unknown);
	// ExecutableTarget the file it leads to when it is a symbolic link
	// (an npm bin).
	Executable, ExecutableTarget string
	// Links are the roots and home that are symbolic links, as the config
	// or the environment names them, each to the path it resolves to
	// (which Roots and Home hold: the kernel holds real paths, and a
	// search through a link would find nothing).
	Links map[string]string
}

// Profile is one agent's confinement.
type Profile struct {
	Agent string   `json:"agent"`
	Home  string   `json:"home"`
	Roots []string `json:"roots"`
	// Hidden are the deny rules whose paths the agent can neither read nor
	// write.
	Hidden []Hidden `json:"hidden"`
	// Writable are the paths below which the agent may write; everything
	// else is read-only (read and execute).
	Writable []string `json:"writable"`
	// StateDirs are the agent's own state (part of Writable).
	StateDirs []string `json:"stateDirs"`
	// WireOnly are the deny rules naming paths that the kernel cannot
	// hold: they are decided on the wire only.
	WireOnly []policy.KernelSkip `json:"-"`
	// Network is what the agent reaches (network.go).
	Network *Network `json:"network"`

	rules []policy.KernelDeny
}

// Hidden is one kernel-held deny rule in a profile.
type Hidden struct {
	Rule   string   `json:"rule"`
	Layer  string   `json:"layer"`
	Paths  []string `json:"paths"`
	Except []string `json:"except,omitempty"`
}

// Problem is something wrong with a profile, for check: Error problems
// make the profile unusable (the agent would not work under it).
type Problem struct {
	Error bool
	Msg   string
}

func (p Problem) String() string {
	if p.Error {
		return "error: " + p.Msg
	}
	return "warning: " + p.Msg
}

// DefaultStateDirs are the built-in state directories of the agents the
// router knows, by the base name of their command: where they keep
// settings, sessions and credentials. getenv reads the agent's
// environment; nil for an agent the router does not know.
func DefaultStateDirs(command, home string, getenv func(string) string) []string {
	h := func(rel ...string) string { return filepath.Join(append([]string{home}, rel...)...) }
	switch filepath.Base(command) {
	case "claude-agent-acp", "claude-code-acp", "claude":
		return []string{h(".claude"), h(".claude.json")}
	case "codex-acp", "codex":
		if d := getenv("CODEX_HOME"); filepath.IsAbs(d) {
			return []string{filepath.Clean(d)}
		}
		return []string{h(".codex")}
	case "gemini":
		return []string{h(".gemini")}
	case "opencode":
		return []string{h(".local", "share", "opencode"), h(".config", "opencode"), h(".cache", "opencode"), h(".local", "state", "opencode")}
	case "go":
		// An agent run by `go run PKG@VERSION` (the example config's):
		// go downloads the module into its module cache and builds into
		// its build cache before the agent runs a line.
		return goCaches(h, getenv)
	}
	return nil
}

// goCaches are the go command's module cache (GOMODCACHE, else the first
// GOPATH's pkg/mod, else ~/go/pkg/mod) and its build cache when GOCACHE
// names one (else ~/.cache/go-build, which toolCaches covers).
func goCaches(h func(...string) string, getenv func(string) string) []string {
	mod := h("go", "pkg", "mod")
	if d := getenv("GOMODCACHE"); filepath.IsAbs(d) {
		mod = filepath.Clean(d)
	} else if gp, _, _ := strings.Cut(getenv("GOPATH"), string(filepath.ListSeparator)); filepath.IsAbs(gp) {
		mod = filepath.Join(gp, "pkg", "mod")
	}
	dirs := []string{mod}
	if d := getenv("GOCACHE"); filepath.IsAbs(d) {
		dirs = append(dirs, filepath.Clean(d))
	}
	return dirs
}

// toolCaches are written by the package managers and runtimes the agents
// are (npm, node) or start: every profile may write them.
func toolCaches(home string) []string {
	return []string{filepath.Join(home, ".npm"), filepath.Join(home, ".cache"), filepath.Join(home, ".node-gyp")}
}

// devices are written by ordinary programs (a redirect to /dev/null, a
// terminal): writable in every profile.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm"}

// Derive computes agent's profile under pol (nil: no policy, nothing
// hidden). Problems are for check; Error problems mean the agent cannot
// work under the profile.
func Derive(pol *policy.Policy, agent config.Agent, env Env) (*Profile, []Problem) {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	home := filepath.Clean(env.Home)
	p := &Profile{Agent: agent.Name, Home: home}
	for _, r := range env.Roots {
		p.Roots = appendPath(p.Roots, filepath.Clean(r))
	}
	var probs []Problem
	at := ""
	if agent.Pos.Line > 0 {
		at = agent.Pos.String() + ": "
	}
	state := agent.StateDirs
	if state == nil {
		state = DefaultStateDirs(agent.Command, home, env.Getenv)
		if state == nil && pol != nil {
			probs = append(probs, Problem{Msg: fmt.Sprintf("%sagent %q: the router does not know where %s keeps its state: under the sandbox it can write only in its cwd, the temp dir and the npm and node caches; declare its state_dirs (an empty list if it keeps none)",
				at, agent.Name, filepath.Base(agent.Command))})
		}
	}
	for link, real := range env.Links {
		probs = append(probs, Problem{Msg: fmt.Sprintf("%sagent %q: %s is a symbolic link to %s: the sandbox holds %s", at, agent.Name, link, real, real)})
	}
	slices.SortFunc(probs, func(a, b Problem) int { return strings.Compare(a.Msg, b.Msg) })
	for _, d := range state {
		p.StateDirs = appendPath(p.StateDirs, filepath.Clean(d))
	}
	if pol != nil {
		held, skipped := pol.KernelDenies()
		p.WireOnly = skipped
		for _, k := range held {
			if !k.AppliesTo(agent.Name) {
				continue
			}
			p.rules = append(p.rules, k)
			p.Hidden = append(p.Hidden, Hidden{Rule: k.Rule, Layer: k.Layer, Paths: k.Paths, Except: k.Except})
			for _, d := range p.StateDirs {
				if k.Hides(agent.Name, d, home, p.Roots) || namesBelow(k, d, home, p.Roots) {
					probs = append(probs, Problem{Error: true, Msg: fmt.Sprintf("%s: deny rule %q hides %s or files in it, the state of agent %q: the agent cannot run under the sandbox; narrow the rule, or declare the agent's state_dirs",
						k.Pos, k.Rule, d, agent.Name)})
				}
			}
			if exe := executableNames(env); slices.ContainsFunc(exe, func(e string) bool { return k.Hides(agent.Name, e, home, p.Roots) }) {
				probs = append(probs, Problem{Error: true, Msg: fmt.Sprintf("%s: deny rule %q hides %s, the command of agent %q: it cannot start under the sandbox",
					k.Pos, k.Rule, strings.Join(exe, " -> "), agent.Name)})
			}
		}
	}
	for _, r := range p.Roots {
		switch r {
		case "/", home:
			probs = append(probs, Problem{Msg: fmt.Sprintf("%sagent %q works in %s: everything below it is writable under the sandbox; set the agent's cwd: to a project", at, agent.Name, r)})
		}
	}
	var nprobs []Problem
	p.Network, nprobs = deriveNetwork(pol, agent)
	probs = append(probs, nprobs...)
	w := slices.Clone(p.Roots)
	if env.TempDir != "" {
		w = appendPath(w, filepath.Clean(env.TempDir))
	}
	w = appendPath(w, "/tmp")
	w = append(w, p.StateDirs...)
	w = append(w, toolCaches(home)...)
	w = append(w, devices...)
	for _, d := range w {
		p.Writable = appendPath(p.Writable, d)
	}
	return p, probs
}

// executableNames are the agent's command as resolved in PATH and, when
// that is a symbolic link (an npm bin), the file it leads to: a deny rule
// that hides either keeps the agent from starting.
func executableNames(env Env) []string {
	if env.Executable == "" {
		return nil
	}
	names := []string{env.Executable}
	if env.ExecutableTarget != "" && env.ExecutableTarget != env.Executable {
		names = append(names, env.ExecutableTarget)
	}
	return names
}

// namesBelow reports whether one of k's globs starts inside dir (a rule
// on ~/.claude/settings.json names the state dir ~/.claude).
func namesBelow(k policy.KernelDeny, dir, home string, roots []string) bool {
	for _, b := range k.Bases(home, roots) {
		if !b.AnyDir && (b.Base == dir || strings.HasPrefix(b.Base, dir+"/")) {
			return true
		}
	}
	return false
}

func appendPath(l []string, p string) []string {
	if p == "" || slices.Contains(l, p) {
		return l
	}
	return append(l, p)
}

// Rules are the kernel-held deny rules of the profile.
func (p *Profile) Rules() []policy.KernelDeny { return p.rules }

// Hides reports whether the profile hides path (an absolute path).
func (p *Profile) Hides(path string) bool {
	for i := range p.rules {
		if p.rules[i].Hides(p.Agent, path, p.Home, p.Roots) {
			return true
		}
	}
	return false
}

// Hash is a digest of the profile ("sha256:HEX", 16 hex digits), for the
// audit log: it changes exactly when what the kernel holds changes.
func (p *Profile) Hash() string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Summary says in one line what the profile holds.
func (p *Profile) Summary() string {
	var ids []string
	for _, h := range p.Hidden {
		ids = append(ids, h.Rule)
	}
	hidden := "nothing hidden"
	if len(ids) > 0 {
		hidden = "hidden by " + strings.Join(ids, ", ")
	}
	net := ""
	if p.Network != nil && p.Network.Confined {
		net = "; network: " + p.Network.Reachable()
	}
	return fmt.Sprintf("%s; writable: %s; everything else read-only%s", hidden, strings.Join(p.Writable, ", "), net)
}
