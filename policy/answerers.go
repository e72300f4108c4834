package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Who may answer an ask (issue 30, point 4). With the router listening,
// several clients may answer a permission request of a session (ACP RFD
// #533, session attach: every controller is asked, the first answer wins).
// A rule may narrow that to some of them:
//
//	- id: push-needs-lead
//	  decision: ask
//	  when: {command: ["git push **"]}
//	  answered_by: [lead, editor]   # token names; editor: the editor that launched the router (stdio)
//
// Only an ask rule may have answered_by: a deny or an allow is never
// answered. What a request's answer needs is found from every ask rule
// that fired on it (Decision.Answerers): the rules of the strongest layer
// among those that say who answers decide, so the org's list holds over
// a user rule's, which can neither widen nor replace it; the lists of
// several rules of that layer are intersected, since the one answer must
// satisfy each of them (none in common: no one can answer, the router
// refuses). An ask no such rule fired on may be answered by any
// controller, as before.

// AnswererEditor is the name answered_by gives the editor that launched the
// router over stdio. It is not a token name: it matches only the editor
// (Answerers.Allows), so a token named "editor" is not the editor.
const AnswererEditor = "editor"

// answererName is what a name in answered_by may be: a token name as
// `acp-router token create` takes it (token.CheckName: letters, digits,
// '.', '_', '@', '-', not first), or editor.
var answererName = regexp.MustCompile(`^[A-Za-z0-9._@][A-Za-z0-9._@-]*$`)

// maxAnswererName is the longest token name (token.MaxNameLen).
const maxAnswererName = 64

// Answerers is who may answer a request the policy asks about, when a rule
// says so (answered_by).
type Answerers struct {
	// Names are the names that may answer, sorted; empty: the rules that
	// ask name no one in common, and no answer can be taken.
	Names []string `json:"names"`
	// Rules are the ids of the rules whose answered_by made Names, sorted.
	Rules []string `json:"rules"`
	// Layer is the layer of those rules.
	Layer string `json:"layer"`
}

// Allows reports whether the client named name (a token name), or the
// stdio editor when editor is set, may answer.
func (a *Answerers) Allows(name string, editor bool) bool {
	if a == nil {
		return true
	}
	if editor {
		return slices.Contains(a.Names, AnswererEditor)
	}
	return name != "" && name != AnswererEditor && slices.Contains(a.Names, name)
}

// String is how explain and errors name who may answer.
func (a *Answerers) String() string {
	if a == nil {
		return "any controller"
	}
	if len(a.Names) == 0 {
		return "no one"
	}
	return strings.Join(a.Names, ", ")
}

// Why is where a comes from: "answered_by of RULE (LAYER layer)".
func (a *Answerers) Why() string {
	noun := "rule"
	if len(a.Rules) > 1 {
		noun = "rules"
	}
	return fmt.Sprintf("answered_by of %s %s (%s layer)", noun, strings.Join(a.Rules, ", "), a.Layer)
}

// answerers reads a rule's or a test's answered_by: a non-empty list of
// names, each once.
func (p *parser) answerers(path string, n *yaml.Node) []string {
	var out []string
	for i, item := range p.list(path, n, true) {
		ip := fmt.Sprintf("%s[%d]", path, i)
		if n.Kind != yaml.SequenceNode {
			ip = path
		}
		s, ok := p.str(ip, item)
		switch {
		case !ok:
		case strings.EqualFold(s, AnswererEditor) && s != AnswererEditor:
			p.errorf(item, ip, "%q: the stdio editor is written %s (no token may be named so)", s, AnswererEditor)
		case len(s) > maxAnswererName || !answererName.MatchString(s):
			p.errorf(item, ip, "invalid name %q: a token name (letters, digits, '.', '_', '@', '-' but not first) or %s", s, AnswererEditor)
		case slices.Contains(out, s):
			p.errorf(item, ip, "%q is listed twice", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

// answerersOf is who may answer d, an ask: nil when no ask rule that fired
// says who answers.
func (p *Policy) answerersOf(d *Decision) *Answerers {
	var a *Answerers
	rank := len(p.layers)
	for i := range d.Findings {
		f := &d.Findings[i]
		if f.Effect != Ask {
			continue
		}
		for _, m := range f.Matches {
			if m.Effect != Ask {
				continue
			}
			r := p.answeredBy[m.Layer+"\x00"+m.Rule]
			if r == nil {
				continue // no answered_by, or a deny that only asks below a directory
			}
			k := slices.IndexFunc(p.layers, func(l *Layer) bool { return l.Name == r.Layer })
			switch {
			case a == nil || k < rank:
				a = &Answerers{Names: slices.Clone(r.AnsweredBy), Rules: []string{r.ID}, Layer: r.Layer}
				rank = k
			case k == rank:
				a.Names = slices.DeleteFunc(a.Names, func(n string) bool { return !slices.Contains(r.AnsweredBy, n) })
				if !slices.Contains(a.Rules, r.ID) {
					a.Rules = append(a.Rules, r.ID)
				}
			}
		}
	}
	if a != nil {
		slices.Sort(a.Names)
		slices.Sort(a.Rules)
	}
	return a
}
