package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// SandboxMode says whether each agent's process tree runs confined by the
// policy's kernel profile (issue 29; DESIGN §6 "Kernel enforcement").
type SandboxMode string

const (
	// SandboxEnforce: an agent whose profile this kernel cannot apply is
	// not started.
	SandboxEnforce SandboxMode = "enforce"
	// SandboxBestEffort: such an agent starts unconfined, logged once.
	SandboxBestEffort SandboxMode = "best-effort"
	// SandboxOff: no agent is confined.
	SandboxOff SandboxMode = "off"
)

// DefaultSandboxWithPolicy is the mode when a policy is in force and no
// layer sets sandbox.mode: a user who writes a deny rule the kernel can
// hold gets it held without a second opt-in (issue 29), and a kernel that
// cannot hold it still runs the agents (logged once, warned by check).
// The real agents complete turns confined (test/sandbox_agents_test.go).
const DefaultSandboxWithPolicy = SandboxBestEffort

// Sandbox is a sandbox: block, the user's (the config) or the org's (a
// policy directory file).
type Sandbox struct {
	Mode SandboxMode // "" when the block does not set it
	// Lock (org layer only): the org's mode is final; the user's
	// sandbox: is ignored with a warning.
	Lock bool
	Pos  Pos
	// ModePos, LockPos: where the keys are written.
	ModePos, LockPos Pos
}

var sandboxKeys = []string{"mode", "lock"}

// ParseOrgSandbox parses the sandbox: block n of an org policy file.
func ParseOrgSandbox(file string, n *yaml.Node) (Sandbox, error) {
	p := &parser{file: file, org: true}
	s := p.sandbox(n)
	return s, p.err()
}

func (p *parser) sandbox(n *yaml.Node) Sandbox {
	s := Sandbox{Pos: p.pos(n)}
	f := p.fields("sandbox", n, sandboxKeys)
	if v := f["mode"]; v != nil {
		s.Mode = SandboxMode(p.enum("sandbox.mode", v, string(SandboxEnforce), string(SandboxBestEffort), string(SandboxOff)))
		s.ModePos = p.pos(v)
	}
	if v := f["lock"]; v != nil {
		if !p.org {
			p.errorf(v, "sandbox.lock", "only the org layer (a policy directory file) can lock the sandbox mode")
		} else {
			s.Lock = p.boolean("sandbox.lock", v)
			s.LockPos = p.pos(v)
		}
	}
	return s
}

// EffectiveSandbox is the sandbox mode in force and where it comes from.
type EffectiveSandbox struct {
	Mode SandboxMode
	// From names where Mode was set ("org policy FILE:L:C", "config
	// FILE:L:C", or the default's reason).
	From string
	// Ignored: a warning when the org's lock overrides the user's mode.
	Ignored string
}

// EffectiveSandbox merges the org's sandbox: blocks and the user's:
// a later org file overrides an earlier one, the user overrides the org
// unless an org file locks it; without any mode set, the default is
// DefaultSandboxWithPolicy when a policy is in force, else off.
func (c *Config) EffectiveSandbox(policyInForce bool) EffectiveSandbox {
	var e EffectiveSandbox
	var lock *Sandbox
	for i, o := range c.OrgSandbox {
		if o.Mode != "" {
			e.Mode, e.From = o.Mode, "org policy "+o.ModePos.String()
		}
		if o.Lock && lock == nil {
			lock = &c.OrgSandbox[i]
		}
	}
	if u := c.Sandbox; u.Mode != "" {
		if lock != nil {
			e.Ignored = fmt.Sprintf("%s: sandbox.mode is ignored: the org locks it (%s)", u.ModePos, lock.LockPos)
		} else {
			e.Mode, e.From = u.Mode, "config "+u.ModePos.String()
		}
	}
	if e.Mode == "" {
		if policyInForce {
			e.Mode, e.From = DefaultSandboxWithPolicy, "default with a policy"
		} else {
			e.Mode, e.From = SandboxOff, "default without a policy"
		}
	}
	return e
}

// stateDirs reads an agent's state_dirs: paths the agent writes its own
// state to (issue 29), ~ and ${ENV} expanded; an empty list declares none.
func (p *parser) stateDirs(path string, n *yaml.Node) []string {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "expected a list of paths, got %s", yamlpos.Describe(n))
		return nil
	}
	dirs := []string{}
	for i, item := range n.Content {
		if d := p.path(fmt.Sprintf("%s[%d]", path, i), yamlpos.Deref(item), true); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
