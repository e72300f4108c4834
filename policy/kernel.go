package policy

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/yamlpos"
)

// The kernel's half of the policy (issue 29, DESIGN §6 "Kernel
// enforcement"): the sandbox package derives each agent's confinement
// from the deny rules listed here, without importing guard. Only what the
// kernel can hold without seeing a request is listed: a deny rule whose
// when: names paths and nothing else the kernel cannot see.

// KernelHold is a rule a recursive read is not asked for because the
// kernel keeps what it matched below the directory away (Finding.Kernel).
type KernelHold struct {
	Rule string `json:"rule"`
	// Path is one of the paths below the directory the rule matches and
	// the kernel hides.
	Path string `json:"path"`
	// Decides: the rule decides the item too (a deny on a path the
	// kernel also hides): both guards hold it.
	Decides bool `json:"decides,omitempty"`
}

// KernelDeny is a deny rule the kernel can hold: every path it matches is
// hidden from an agent it applies to.
type KernelDeny struct {
	Rule  string // the rule's id
	Layer string
	Pos   yamlpos.Pos
	// Paths are the rule's path globs as written (anchored at /, **, ~,
	// ${home}, ${cwd} or ${roots}).
	Paths []string
	// Except are the unless: path globs: paths they match stay visible.
	Except []string

	when, unless *Cond
}

// KernelSkip is a deny rule that names paths the kernel cannot hold, and
// why: it stays on the wire only.
type KernelSkip struct {
	Rule   string
	Layer  string
	Pos    yamlpos.Pos
	Reason string
}

// KernelDenies splits the deny rules in force that name paths into those
// the kernel can hold and those it cannot.
func (p *Policy) KernelDenies() (held []KernelDeny, skipped []KernelSkip) {
	for _, r := range p.rules {
		if r.Decision != Deny || r.When == nil || r.When.paths == nil {
			continue
		}
		if reason := kernelReason(r); reason != "" {
			skipped = append(skipped, KernelSkip{Rule: r.ID, Layer: r.Layer, Pos: r.Pos, Reason: reason})
			continue
		}
		k := KernelDeny{Rule: r.ID, Layer: r.Layer, Pos: r.Pos, when: r.When, unless: r.Unless}
		k.Paths = append(k.Paths, r.When.src["paths"]...)
		if r.Unless != nil {
			k.Except = append(k.Except, r.Unless.src["paths"]...)
		}
		held = append(held, k)
	}
	return held, skipped
}

// kernelReason says why a deny rule with paths cannot be held by the
// kernel; "" when it can.
func kernelReason(r *Rule) string {
	c := r.When
	for _, k := range matcherKeys {
		if _, ok := c.src[k]; !ok {
			continue
		}
		switch k {
		case "paths", "agent":
		case "kind":
			if c.kinds&(extract.KindBit(extract.KindRead)|extract.KindBit(extract.KindSearch)) == 0 {
				return "it denies only " + c.kindNames() + ", not reading"
			}
		default:
			return fmt.Sprintf("its when: also has %s, which the kernel cannot see", k)
		}
	}
	if u := r.Unless; u != nil {
		for _, k := range matcherKeys {
			if _, ok := u.src[k]; ok && k != "paths" && k != "agent" {
				return fmt.Sprintf("its unless: has %s, which the kernel cannot see", k)
			}
		}
	}
	return ""
}

func (c *Cond) kindNames() string {
	var s []string
	for i, k := range extract.AllKinds {
		if c.kinds&(1<<i) != 0 {
			s = append(s, string(k))
		}
	}
	return strings.Join(s, ", ")
}

// AppliesTo reports whether the rule is in agent's profile: its agent:
// matches (or it has none), and no unless: that names agents without
// paths exempts the agent as a whole.
func (k *KernelDeny) AppliesTo(agent string) bool {
	if k.when.agents != nil && !anyText(k.when.agents, agent) {
		return false
	}
	if u := k.unless; u != nil && u.paths == nil && u.agents != nil && anyText(u.agents, agent) {
		return false
	}
	return true
}

// Hides reports whether the absolute path p is hidden from agent by the
// rule: one of Paths matches it and no applicable Except does. home and
// roots expand ~, ${home}, ${cwd} (the first root) and ${roots}.
func (k *KernelDeny) Hides(agent, p, home string, roots []string) bool {
	p = filepath.Clean(p)
	v := kernelVars(home, roots)
	if !anyPath(k.when.paths, p, v) {
		return false
	}
	u := k.unless
	if u == nil || u.paths == nil {
		return true
	}
	if u.agents != nil && !anyText(u.agents, agent) {
		return true
	}
	return !anyPath(u.paths, p, v)
}

// ExceptFor are the rule's Except globs that apply to agent: an unless:
// that names other agents exempts nothing for this one. A rule rebuilt
// from Paths and ExceptFor(agent) hides, for agent, exactly what this one
// does (the sandbox's mask keeper rebuilds it in another process).
func (k *KernelDeny) ExceptFor(agent string) []string {
	if u := k.unless; u == nil || u.paths == nil || u.agents != nil && !anyText(u.agents, agent) {
		return nil
	}
	return k.Except
}

// KernelPath is one of a rule's globs, split where a walk starts: Base is
// the deepest directory without glob characters (after expanding its
// variable), Literal says the whole glob is that path, Subtree that it is
// Base/** (Base and everything below).
type KernelPath struct {
	Base    string
	Literal bool
	Subtree bool
	// AnyDir: the glob starts with ** (it may match below any directory);
	// Base is then "/".
	AnyDir bool
}

// Bases expands each of the rule's globs for home and roots.
func (k *KernelDeny) Bases(home string, roots []string) []KernelPath {
	v := kernelVars(home, roots)
	var out []KernelPath
	for i := range k.when.paths {
		pp := &k.when.paths[i]
		if pp.anchor == anchorAny {
			out = append(out, KernelPath{Base: "/", AnyDir: true})
			continue
		}
		lit, rest := literalPrefix(pp.rest)
		for _, base := range pp.bases(v) {
			kp := KernelPath{Base: filepath.Join(base, lit)}
			switch {
			case rest == "":
				kp.Literal = true
			case rest == "**":
				kp.Subtree = true
			}
			out = append(out, kp)
		}
	}
	return out
}

// literalPrefix splits a glob into its leading segments without meta
// characters and the rest.
func literalPrefix(glob string) (lit, rest string) {
	if glob == "" {
		return "", ""
	}
	segs := strings.Split(glob, "/")
	i := 0
	for i < len(segs) && !strings.ContainsAny(segs[i], `*?[{\`) {
		i++
	}
	return strings.Join(segs[:i], "/"), strings.Join(segs[i:], "/")
}

func kernelVars(home string, roots []string) *extract.Vars {
	v := &extract.Vars{Roots: roots}
	if home != "" {
		v.Home = []string{filepath.Clean(home)}
	}
	if len(roots) > 0 {
		v.Cwd = roots[:1]
	}
	return v
}

func anyPath(ps []pathPattern, p string, v *extract.Vars) bool {
	for i := range ps {
		if ps[i].match(p, v) {
			return true
		}
	}
	return false
}
