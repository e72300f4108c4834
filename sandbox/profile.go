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
// Limits, each pinned by a test: a glob that may match anywhere (**/.env)
// is resolved when the agent starts, in its roots (whole) and HomeDepth
// levels of home; a matching file created later, or elsewhere, is not
// masked. A mask hides a name, not a file: another hard link to a hidden
// file is masked only when the search finds it (Plan.Warnings names the
// others). The roots are the agent process's working directory: sessions
// whose cwd lies elsewhere cannot write there.
//
// On the wire (wire.go): the capability the router advertises in the
// shape of the draft ACP RFD "Sandbox Capability and Policy", and the
// acp.sandbox requirement of a session. For decisions (kernel.go): the
// masks each confined start applied, so that the policy does not ask
// about what the kernel already keeps from the agent's own tools.
//
// Not built yet (issue 29): the network egress proxy, terminal/create under
// the profile, one agent process per set of roots.
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
	// Executable is the agent's command resolved in PATH ("" if unknown).
	Executable string
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
	}
	return nil
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
	state := agent.StateDirs
	if state == nil {
		state = DefaultStateDirs(agent.Command, home, env.Getenv)
	}
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
			if env.Executable != "" && k.Hides(agent.Name, env.Executable, home, p.Roots) {
				probs = append(probs, Problem{Error: true, Msg: fmt.Sprintf("%s: deny rule %q hides %s, the command of agent %q: it cannot start under the sandbox",
					k.Pos, k.Rule, env.Executable, agent.Name)})
			}
		}
	}
	for _, r := range p.Roots {
		switch r {
		case "/", home:
			probs = append(probs, Problem{Msg: fmt.Sprintf("agent %q works in %s: everything below it is writable under the sandbox; set the agent's cwd: to a project", agent.Name, r)})
		}
	}
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
	return fmt.Sprintf("%s; writable: %s; everything else read-only", hidden, strings.Join(p.Writable, ", "))
}
