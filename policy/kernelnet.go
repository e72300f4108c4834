package policy

import (
	"fmt"

	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/yamlpos"
)

// The network half of the kernel's policy (issue 29): which hosts the
// router's egress proxy refuses whatever the request, without asking.
// Like KernelDenies, only what holds in every request is listed: a host a
// deny rule names with no other condition than agent: is always denied;
// under default: deny, a host no allow or ask rule could ever cover is
// always denied too.

// KernelHosts is what the kernel can hold of the policy's domains: rules.
type KernelHosts struct {
	// Deny are the deny rules on hosts the kernel holds.
	Deny []HostRule
	// AllowOnly: the effective default is deny, so that a host none of
	// Allow names is never reachable. DefaultLayer set it.
	AllowOnly    bool
	DefaultLayer string
	// Allow are the allow and ask rules that may let a host through (any
	// other condition they have is ignored: the kernel cannot see it, so
	// the host stays reachable). Meaningful with AllowOnly.
	Allow []HostRule
	// Skipped are deny rules on hosts the kernel cannot hold, and why.
	Skipped []KernelSkip
}

// HostRule is a rule naming hosts.
type HostRule struct {
	Rule     string
	Layer    string
	Pos      yamlpos.Pos
	Decision Effect
	// Hosts are the domains: entries as written; Except the unless:
	// domains: (deny rules only).
	Hosts  []string
	Except []string
	// Any: an allow or ask rule that may cover any host (no domains:,
	// and nothing else rules a domain out; or "*"): for the agents it
	// applies to, AllowOnly holds nothing.
	Any bool

	when, unless *Cond
}

// KernelHosts splits the policy's rules on hosts into what the kernel can
// hold.
func (p *Policy) KernelHosts() KernelHosts {
	var kh KernelHosts
	kh.AllowOnly, kh.DefaultLayer = p.dflt == Deny, p.dfltLayer
	for _, r := range p.rules {
		if r.When == nil {
			continue
		}
		switch r.Decision {
		case Deny:
			if r.When.domains == nil {
				continue
			}
			if reason := hostReason(r); reason != "" {
				kh.Skipped = append(kh.Skipped, KernelSkip{Rule: r.ID, Layer: r.Layer, Pos: r.Pos, Reason: reason})
				continue
			}
			h := HostRule{Rule: r.ID, Layer: r.Layer, Pos: r.Pos, Decision: Deny, Hosts: r.When.src["domains"], when: r.When, unless: r.Unless}
			if r.Unless != nil {
				h.Except = r.Unless.src["domains"]
			}
			kh.Deny = append(kh.Deny, h)
		case Allow, Ask:
			if !mayCoverDomain(r.When) {
				continue
			}
			kh.Allow = append(kh.Allow, HostRule{Rule: r.ID, Layer: r.Layer, Pos: r.Pos, Decision: r.Decision, Hosts: r.When.src["domains"],
				Any: r.When.domains == nil || anyDomain(r.When.domains), when: r.When})
		}
	}
	return kh
}

// hostReason says why a deny rule on hosts cannot be held by the kernel;
// "" when it can: its when: has only domains:, agent: and a kind: that
// covers fetch (a domain's kind), its unless: only domains: and agent:.
func hostReason(r *Rule) string {
	for _, k := range matcherKeys {
		if _, ok := r.When.src[k]; !ok {
			continue
		}
		switch k {
		case "domains", "agent":
		case "kind":
			if r.When.kinds&extract.KindBit(extract.KindFetch) == 0 {
				return "it denies only " + r.When.kindNames() + ", not a connection"
			}
		default:
			return fmt.Sprintf("its when: also has %s, which the kernel cannot see", k)
		}
	}
	if u := r.Unless; u != nil {
		for _, k := range matcherKeys {
			if _, ok := u.src[k]; ok && k != "domains" && k != "agent" {
				return fmt.Sprintf("its unless: has %s, which the kernel cannot see", k)
			}
		}
	}
	return ""
}

// mayCoverDomain reports whether a rule with when: c can match some
// domain item: it names no path or command, and its kind: (if any)
// includes fetch.
func mayCoverDomain(c *Cond) bool {
	if c.paths != nil || c.commands != nil || c.programs != nil || c.flags != nil || c.env != nil {
		return false
	}
	return c.kinds == 0 || c.kinds&extract.KindBit(extract.KindFetch) != 0
}

func anyDomain(ds []domainPattern) bool {
	for _, d := range ds {
		if d.any {
			return true
		}
	}
	return false
}

// AppliesTo reports whether the rule can hold for agent: its agent:
// matches (or it has none), and (a deny rule) no unless: naming agents
// without domains exempts the agent as a whole.
func (h *HostRule) AppliesTo(agent string) bool {
	if h.when.agents != nil && !anyText(h.when.agents, agent) {
		return false
	}
	if u := h.unless; u != nil && u.domains == nil && u.agents != nil && anyText(u.agents, agent) {
		return false
	}
	return true
}

// Matches reports whether the rule names host (for agent), after the
// unless: exceptions of a deny rule. A host that is not a valid name
// never matches an exception.
func (h *HostRule) Matches(agent, host string) bool {
	d, valid := extract.NormDomain(host)
	if !h.AppliesTo(agent) || !h.Any && !matchDomains(h.when.domains, d) {
		return false
	}
	u := h.unless
	if u == nil || u.domains == nil {
		return true
	}
	if u.agents != nil && !anyText(u.agents, agent) {
		return true
	}
	return !valid || !matchDomains(u.domains, d)
}

func matchDomains(ds []domainPattern, d string) bool {
	for i := range ds {
		if ds[i].match(d) {
			return true
		}
	}
	return false
}
