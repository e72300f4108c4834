package policy

import (
	"path"
	"strings"

	"github.com/acp-router/acp-router/policy/extract"
)

// DenyRoot is a literal path under which a deny or ask rule's paths may
// match: the part of a pattern before its first meta character, anchored
// at / or the home directory (~/.ssh for ~/.ssh/**, /etc/shadow for
// /etc/shadow). The files under it can be enumerated, to know them under
// another name (a hard link). Patterns anchored anywhere (**/.env) or at
// the session's directories have none.
type DenyRoot struct {
	Path    string
	Rule    string
	Layer   string
	Effect  Effect
	Message string
	// Kinds are the rule's kind matcher; nil: any kind.
	Kinds []extract.Kind
}

// DenyRoots returns the DenyRoots of the deny and ask rules of p, with ~
// and ${home} as home (skipped when home is not absolute). A root of "/"
// alone is skipped: it cannot be enumerated. A rule's unless is not
// applied: a file it carves out is still under the root.
func (p *Policy) DenyRoots(home string) []DenyRoot {
	var out []DenyRoot
	for _, r := range p.rules {
		if r.Decision != Deny && r.Decision != Ask || r.When == nil {
			continue
		}
		c := r.When
		var kinds []extract.Kind
		for i, k := range extract.AllKinds {
			if c.kinds&(1<<i) != 0 {
				kinds = append(kinds, k)
			}
		}
		for i := range c.paths {
			pp := &c.paths[i]
			base := "/"
			switch pp.anchor {
			case anchorRoot:
			case anchorHome:
				if !path.IsAbs(home) {
					continue
				}
				base = path.Clean(home)
			default:
				continue
			}
			lit := base
			for _, comp := range strings.Split(pp.rest, "/") {
				if comp == "" || strings.ContainsAny(comp, `*?[{\`) {
					break
				}
				lit = path.Join(lit, comp)
			}
			if lit == "/" {
				continue
			}
			out = append(out, DenyRoot{Path: lit, Rule: r.ID, Layer: r.Layer, Effect: r.Decision, Message: r.Message, Kinds: kinds})
		}
	}
	return out
}
