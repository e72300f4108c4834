package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/acp-router/acp-router/policy/budget"
	"github.com/acp-router/acp-router/policy/extract"
)

// Policy is the compiled policy of every layer: immutable, safe for
// concurrent use. Build it with Compile.
//
// A request becomes a list of evidence items: paths, commands, domains, or
// one bare item for a tool call that carries none of those. Every rule that
// matches an item is found; on each item the most severe decision wins
// (deny > ask > allow) and rule order never matters. An item no rule
// matches gets the effective default (the strictest default of the layers).
// The request's decision is the most severe decision of its items: deny and
// ask fire when any item matches, allow needs every item covered.
//
// Matching has two quantifiers, so that a second spelling of the same thing
// can only ever make a request stricter. An item may have several forms: a
// path is matched as written (cleaned) and with its symlinks resolved (a
// name that does not exist as written but does in another case resolves
// to the name the directory holds: a case-insensitive filesystem opens
// that file for .ENV or .Git/HOOKS; a symlink the command line itself
// makes with ln -s is resolved too, wherever it is in the line, and a
// path through a symlink it moves or copies, or through a directory it
// moves or copies with one below it, or below a directory an archive is
// extracted into (tar x, unzip: its members may be symlinks), is not
// allowable), a program by its
// basename and as written, a long flag also by its
// abbreviations. A deny or ask rule matches when any form matches; an allow
// rule only when every form does. `unless` uses the opposite quantifier of
// its rule: the exception of a deny must hold for every form, the exception
// of an allow fires on any form.
//
// A recursive read or copy (grep -r DIR, rg, cp -r) is decided by what is
// below its directory when the FS is an extract.Walker (the router's is;
// extract.MapFS is): a deny or ask rule that could match something below it
// applies only when an existing entry does (by its path, or for a symlink
// by its target too), and then asks (the item is not the file itself;
// explain and the audit log name the file). When none does, the rule does
// not apply, so an allow of ${roots}/** allows grep -rn TODO src in a clean
// project. A walk past its bounds (extract.MaxWalkEntries entries,
// extract.MaxWalkDepth levels, the router's time bound), through a symlink
// to a directory outside the tree, or without a Walker asks. What is below
// is what the program's own walk reaches (extract.Item.Walk, the spec's
// walk:, issue 27): rg, grep -r, tree, cp -r and tar c open no symlink
// below their operands (unless -L, -R, -l, -L/-l, -h), so a link there is
// matched by its own name only; the go command opens a symlink only to a
// file named like a package file.
type Policy struct {
	layers    []*Layer
	rules     []*Rule // rules in force, by layer (strongest first) then id
	dropped   []*Rule
	dflt      Effect
	dfltLayer string
	denyModes []ModeRef
	// families is the table of the agents' modes: the built-in one
	// extended by the org layer's agent_modes.
	families []*agentFamily
	// allowModes are the allow_modes in force; droppedModes those
	// lower_layers_may removed.
	allowModes   []ModeRef
	droppedModes []ModeRef
	// unknown is where unknown_agents: refuse is set; nil when no layer
	// sets it (warn).
	unknown  *SettingRef
	warnings []string
	hash     string
	idx      index
	// answeredBy are the ask rules in force with answered_by, by layer
	// and id; empty when none has one (Decide then looks no further).
	answeredBy map[string]*Rule
	// budgets are the budgets in force, strongest layer first (budget.go);
	// ignoredBudgets the user budgets an org budget makes moot.
	budgets        []*budget.Budget
	ignoredBudgets []*budget.Budget
	scratch        sync.Pool
}

// defaultEffect is the effective default when no layer sets one.
const defaultEffect = Ask

// Compile builds the policy from its layers, strongest first (the org
// layer, then the user layer); nil layers are skipped. The effective
// default is the strictest of the layers' defaults (Ask when none sets
// one); deny_modes of every layer apply; the org layer's lower_layers_may
// drops the rules of later layers whose decision it does not list, and
// their allow_modes when it does not list allow (each drop is a warning);
// unknown_agents: refuse in any layer applies.
func Compile(layers ...*Layer) (*Policy, error) {
	p := &Policy{}
	var allowed []Effect // nil: everything
	ids := map[string]*Rule{}
	var orgAgents []*agentFamily
	for _, l := range layers {
		if l == nil {
			continue
		}
		p.layers = append(p.layers, l)
		if l.Default > p.dflt {
			p.dflt, p.dfltLayer = l.Default, l.Name
		}
		p.denyModes = append(p.denyModes, l.DenyModes...)
		if l.Name == LayerOrg {
			orgAgents = append(orgAgents, l.agents...)
		}
		if allowed != nil && !slices.Contains(allowed, Allow) {
			// An allowed mode is wider than any allow rule: the agent
			// acts on everything that mode covers without the router
			// seeing it. A layer that may not allow may not do that.
			for _, m := range l.AllowModes {
				p.droppedModes = append(p.droppedModes, m)
				p.warnings = append(p.warnings, fmt.Sprintf("%s: allow_modes %q is dropped: the org layer allows lower layers only %s",
					m.Pos, m.String(), effectList(allowed)))
			}
		} else {
			p.allowModes = append(p.allowModes, l.AllowModes...)
		}
		if l.UnknownAgents == unknownRefuse && p.unknown == nil {
			p.unknown = &SettingRef{Pos: l.UnknownAgentsPos, Layer: l.Name}
		}
		var kept []*Rule
		for _, r := range l.Rules {
			if r.When == nil || r.Decision == None {
				return nil, fmt.Errorf("policy: rule %q at %s is incomplete", r.ID, r.Pos)
			}
			if allowed != nil && !slices.Contains(allowed, r.Decision) {
				p.dropped = append(p.dropped, r)
				p.warnings = append(p.warnings, fmt.Sprintf("%s: rule %q (%s) is dropped: the org layer allows lower layers only %s",
					r.Pos, r.ID, r.Decision, effectList(allowed)))
				continue
			}
			if first := ids[r.ID]; first != nil {
				p.warnings = append(p.warnings, fmt.Sprintf("%s: rule id %q is also used by the %s layer (%s); the decision names the layer",
					r.Pos, r.ID, first.Layer, first.Pos))
			} else {
				ids[r.ID] = r
			}
			kept = append(kept, r)
		}
		for _, r := range kept {
			if r.Decision == Ask && len(r.AnsweredBy) > 0 {
				if p.answeredBy == nil {
					p.answeredBy = map[string]*Rule{}
				}
				p.answeredBy[r.Layer+"\x00"+r.ID] = r
			}
		}
		slices.SortStableFunc(kept, func(a, b *Rule) int { return strings.Compare(a.ID, b.ID) })
		p.rules = append(p.rules, kept...)
		if l.LowerLayersMay != nil {
			if allowed == nil {
				allowed = slices.Clone(l.LowerLayersMay)
			} else {
				allowed = slices.DeleteFunc(allowed, func(e Effect) bool { return !slices.Contains(l.LowerLayersMay, e) })
			}
		}
	}
	if p.dflt == None {
		p.dflt, p.dfltLayer = defaultEffect, LayerBuiltin
	}
	var err error
	if p.families, err = extendFamilies(builtinFamilies, orgAgents); err != nil {
		return nil, err
	}
	p.compileBudgets()
	p.hash = p.computeHash()
	p.idx = buildIndex(p.rules)
	return p, nil
}

func effectList(es []Effect) string {
	if len(es) == 0 {
		return "nothing"
	}
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// Hash is a stable digest of the normalised compiled policy ("sha256:HEX"),
// for the audit log: it changes exactly when a decision could change
// (rules in force, defaults, deny_modes), not with file order, rule order,
// positions or tests.
func (p *Policy) Hash() string { return p.hash }

// Hash is the digest of the layer on its own (what `acp-router check`
// prints per layer), computed like Policy.Hash.
func (l *Layer) Hash() string {
	p, err := Compile(l)
	if err != nil {
		return ""
	}
	return p.hash
}

// Default returns the effective default and the layer that set it
// (LayerBuiltin when none did).
func (p *Policy) Default() (Effect, string) { return p.dflt, p.dfltLayer }

// Layers returns the layers the policy was compiled from, strongest first.
func (p *Policy) Layers() []*Layer { return p.layers }

// Rules returns the rules in force, strongest layer first, by id.
func (p *Policy) Rules() []*Rule { return p.rules }

// Dropped returns the rules lower_layers_may removed.
func (p *Policy) Dropped() []*Rule { return p.dropped }

// computeHash digests the normalised policy.
func (p *Policy) computeHash() string {
	type ruleDoc struct {
		ID, Layer, Decision, Message string
		When, Unless                 map[string][]string
		// AnsweredBy changes who may answer: the decision.
		AnsweredBy []string `json:",omitempty"`
	}
	norm := func(c *Cond) map[string][]string {
		if c == nil {
			return nil
		}
		m := map[string][]string{}
		for k, v := range c.src {
			v = slices.Clone(v)
			slices.Sort(v)
			m[k] = v
		}
		return m
	}
	var doc struct {
		Default       string
		DenyModes     []string
		AllowModes    []string `json:",omitempty"`
		RefuseUnknown bool     `json:",omitempty"`
		// AgentModes are the org layer's agent_modes: what they say of
		// a mode changes which modes are denied.
		AgentModes []string `json:",omitempty"`
		Rules      []ruleDoc
		// Budgets decide prompts: a change to one changes decisions.
		Budgets []string `json:",omitempty"`
	}
	doc.Default = p.dflt.String()
	refs := func(ms []ModeRef) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.String())
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	doc.DenyModes, doc.AllowModes = refs(p.denyModes), refs(p.allowModes)
	doc.RefuseUnknown = p.unknown != nil
	for _, l := range p.layers {
		if l.Name != LayerOrg {
			continue
		}
		for _, f := range l.agents {
			for _, m := range f.self {
				doc.AgentModes = append(doc.AgentModes, f.id+":"+m.mode+" approves "+joinKinds(m.kinds))
			}
			for _, m := range f.asking {
				doc.AgentModes = append(doc.AgentModes, f.id+":"+m+" asks")
			}
		}
	}
	slices.Sort(doc.AgentModes)
	for _, r := range p.rules {
		by := slices.Clone(r.AnsweredBy)
		slices.Sort(by)
		doc.Rules = append(doc.Rules, ruleDoc{r.ID, r.Layer, r.Decision.String(), r.Message, norm(r.When), norm(r.Unless), by})
	}
	for _, b := range p.budgets {
		d, _ := json.Marshal(struct {
			*budget.Budget
			Pos any `json:"-"`
		}{Budget: b})
		doc.Budgets = append(doc.Budgets, string(d))
	}
	b, _ := json.Marshal(doc) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// index finds the rules that may match an item without trying all of
// them. A rule is filed under a key every item it matches must have (a
// literal path segment, a program name, a domain); rules without such a
// key are tried on every item of their type.
type index struct {
	generic   []int32     // no item-specific key and no kind: every item
	byKind    [16][]int32 // no item-specific key, filed under each of their kinds
	pathAll   []int32     // every rule with paths (recursive items)
	pathAny   []int32
	pathSeg   map[string][]int32
	pathExt   map[string][]int32
	pathVar   map[anchor][]int32
	cmdAny    []int32
	cmdProg   map[string][]int32
	domAny    []int32
	domExact  map[string][]int32
	domSuffix map[string][]int32
}

func buildIndex(rules []*Rule) index {
	ix := index{pathSeg: map[string][]int32{}, pathExt: map[string][]int32{}, pathVar: map[anchor][]int32{},
		cmdProg: map[string][]int32{}, domExact: map[string][]int32{}, domSuffix: map[string][]int32{}}
	for n, r := range rules {
		i := int32(n)
		c := r.When
		if !c.agentRequests() {
			continue // about the router's commands only (command.go)
		}
		t, _ := c.itemType()
		switch t {
		case extract.ItemPath:
			ix.pathAll = append(ix.pathAll, i)
			for _, pp := range c.paths {
				addKey := func(m map[string][]int32, k string) {
					if l := m[k]; len(l) == 0 || l[len(l)-1] != i {
						m[k] = append(l, i)
					}
				}
				if seg := literalSegment(pp.rest); seg != "" {
					addKey(ix.pathSeg, seg)
				} else if pp.anchor == anchorCwd || pp.anchor == anchorRoots || pp.anchor == anchorHome {
					if l := ix.pathVar[pp.anchor]; len(l) == 0 || l[len(l)-1] != i {
						ix.pathVar[pp.anchor] = append(l, i)
					}
				} else if ext := globExt(pp.rest); ext != "" {
					addKey(ix.pathExt, ext)
				} else {
					ix.pathAny = appendOnce(ix.pathAny, i)
				}
			}
		case extract.ItemCommand:
			keys, ok := programKeys(c)
			if !ok {
				ix.cmdAny = append(ix.cmdAny, i)
				continue
			}
			for _, k := range keys {
				if l := ix.cmdProg[k]; len(l) == 0 || l[len(l)-1] != i {
					ix.cmdProg[k] = append(l, i)
				}
			}
		case extract.ItemDomain:
			for _, d := range c.domains {
				switch {
				case d.any:
					ix.domAny = appendOnce(ix.domAny, i)
				case d.exact != "":
					ix.domExact[d.exact] = appendOnce(ix.domExact[d.exact], i)
				default:
					ix.domSuffix[d.suffix[1:]] = appendOnce(ix.domSuffix[d.suffix[1:]], i)
				}
			}
		default:
			if c.kinds == 0 {
				ix.generic = append(ix.generic, i)
				continue
			}
			for k := range extract.AllKinds {
				if c.kinds&(1<<k) != 0 {
					ix.byKind[k] = append(ix.byKind[k], i)
				}
			}
		}
	}
	return ix
}

func appendOnce(l []int32, i int32) []int32 {
	if len(l) > 0 && l[len(l)-1] == i {
		return l
	}
	return append(l, i)
}

// literalSegment returns the last segment of a glob without meta
// characters (every matching path has that segment), or "".
func literalSegment(rest string) string {
	segs := strings.Split(rest, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		if s := segs[i]; s != "" && !strings.ContainsAny(s, `*?[{\`) {
			return s
		}
	}
	return ""
}

// globExt returns ".ext" when the glob's last segment is *.ext.
func globExt(rest string) string {
	last := rest[strings.LastIndexByte(rest, '/')+1:]
	tail, ok := strings.CutPrefix(last, "*")
	if !ok || strings.ContainsAny(tail, `*?[{\`) {
		return ""
	}
	if ext := path.Ext(tail); ext != "" && ext == tail[strings.LastIndexByte(tail, '.'):] && ext != "." {
		return ext
	}
	return ""
}

// programKeys returns the program names a command rule can match, when
// all of them are literal.
func programKeys(c *Cond) ([]string, bool) {
	var keys []string
	if c.programs != nil {
		for _, t := range c.programs {
			if !t.p.exact {
				return nil, false
			}
			keys = append(keys, extract.ProgramName(t.p.lit))
		}
		return keys, true
	}
	if c.commands != nil {
		for _, cp := range c.commands {
			t := cp.toks[0]
			if t.kind != tokLit || !t.p.exact {
				return nil, false
			}
			keys = append(keys, extract.ProgramName(t.p.lit))
		}
		return keys, true
	}
	return nil, false
}
