package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/policy/extract"
)

// Decision is the outcome of Decide: what to do, who decided, and the
// evidence with a decision for each piece (for the audit log and
// `policy explain`).
type Decision struct {
	// Effect is the decision: Allow, Ask or Deny.
	Effect Effect `json:"decision"`
	// Rule is the id of the deciding rule (a Rule* constant for a built-in
	// safeguard), "" when the default decided.
	Rule string `json:"rule,omitempty"`
	// Layer is the layer of the deciding rule or default.
	Layer string `json:"layer"`
	// Source is SourceRule, SourceDefault or SourceBuiltin.
	Source Source `json:"source"`
	// Message is the deciding rule's message (or the safeguard's reason).
	Message string `json:"message,omitempty"`
	// Method is the request's method.
	Method string `json:"method"`
	// Findings are the evidence items, each with its own decision.
	Findings []Finding `json:"evidence"`
	// PolicyHash is Policy.Hash of the policy that decided.
	PolicyHash string `json:"policyHash"`
	// Evidence is the extracted evidence (request-level facts included).
	Evidence *extract.Evidence `json:"-"`
	// Kernel: the request was decided with a kernel guard (Request.Kernel).
	Kernel bool `json:"kernel,omitempty"`
	// Answerers, for an ask, is who may answer it when a rule that asks
	// says so (answered_by); nil: any controller.
	Answerers *Answerers `json:"answeredBy,omitempty"`
}

// Finding is one evidence item and how it was decided.
type Finding struct {
	// Item points into Decision.Evidence.Items.
	Item    *extract.Item `json:"item"`
	Effect  Effect        `json:"decision"`
	Rule    string        `json:"rule,omitempty"`
	Layer   string        `json:"layer,omitempty"`
	Source  Source        `json:"source,omitempty"`
	Message string        `json:"message,omitempty"`
	// Matches are every rule that fired on the item.
	Matches []Match `json:"matches,omitempty"`
	// Excepted are the rules that matched but whose unless spared the item.
	Excepted []string `json:"excepted,omitempty"`
	// vouched: the item is a command an allow rule allowed although its
	// arguments are not understood, because the rule vouches for them
	// (arguments: any, or a literal pattern).
	vouched bool
	// Kernel are the rules that would ask for what is below a recursive
	// read but do not: the kernel keeps everything they match there away
	// (Request.Kernel).
	Kernel []KernelHold `json:"kernel,omitempty"`
	// Walked is, for a recursive item, how many entries below it were
	// looked at to decide the rules that could match something there
	// (Walker); 0 when none was walked.
	Walked int `json:"walked,omitempty"`
}

// Match is one rule that fired on an item.
type Match struct {
	Rule   string `json:"rule"`
	Layer  string `json:"layer"`
	Effect Effect `json:"decision"`
	// Possible: the rule matches something below a recursively read
	// directory, not the directory itself, so a deny only asks.
	Possible bool `json:"possible,omitempty"`
	// Below is, for a possible match decided by walking the directory
	// (Walker), the first existing path below it that the rule matches
	// ("LINK -> TARGET" for a symlink whose target it matches).
	Below string `json:"below,omitempty"`
	// Cut says why the walk below the directory was cut short before
	// finding what the rule matches: the rule asks, as it does without
	// knowing what is there.
	Cut string `json:"walkCut,omitempty"`
}

// ErrorMessage is the message of the JSON-RPC error a denied direct call
// gets (DESIGN §6): "acp-router: denied by RULE: MESSAGE".
func (d *Decision) ErrorMessage() string {
	by := d.Rule
	if by == "" {
		by = "the default policy (" + d.Layer + " layer)"
	}
	if d.Message == "" {
		return "acp-router: denied by " + by
	}
	return "acp-router: denied by " + by + ": " + d.Message
}

// scratch is per-decision working memory, pooled.
type scratch struct {
	stamp  []uint32 // stamp[i] == gen: rule i already tried on this item
	gen    uint32
	reqW   []int8 // request-level keys of When: 0 unknown, 1 match, -1 no
	reqU   []int8 // the same for Unless
	cands  []int32
	matchs []Match

	// fs is the decision's filesystem, for walking recursive reads.
	fs extract.FS
	// kernel is the request's Kernel; held is, after walkBelow, the first
	// path it kept away from a rule's matches.
	kernel extract.KernelGuard
	held   string
	// walks are the directories walked in this decision (dir + "\x00" +
	// "h" when hidden names are skipped).
	walks     map[string]*extract.WalkResult
	forms     map[string][][]string // the forms of each entry of a walk, by walk key and item forms
	itemWalks []string              // the keys of walks the current item used
	entry     extract.Item          // a path below a walked directory, as an item
}

// maxWalks bounds the directories one decision walks: a request with more
// recursive reads than that asks about the others.
const maxWalks = 64

// Decide extracts the evidence of req and decides it. It never fails:
// what cannot be read is decided as DESIGN §6 says (refused → deny,
// opaque → at least ask).
func (p *Policy) Decide(req *extract.Request) Decision {
	return p.evaluate(extract.Extract(req), req.FS, req.Kernel)
}

// Evaluate decides extracted evidence. It has no filesystem: a recursive
// read that a deny or ask rule could match below asks.
func (p *Policy) Evaluate(ev *extract.Evidence) Decision { return p.evaluate(ev, nil, nil) }

func (p *Policy) evaluate(ev *extract.Evidence, fs extract.FS, kernel extract.KernelGuard) Decision {
	if extract.IsCommand(ev.Method) {
		return p.evaluateCommand(ev)
	}
	sc, _ := p.scratch.Get().(*scratch)
	if sc == nil || len(sc.stamp) != len(p.rules) {
		sc = &scratch{stamp: make([]uint32, len(p.rules)), reqW: make([]int8, len(p.rules)), reqU: make([]int8, len(p.rules))}
	} else {
		clear(sc.reqW)
		clear(sc.reqU)
	}
	sc.fs, sc.kernel = fs, kernel
	defer func() {
		sc.fs, sc.kernel, sc.walks, sc.forms, sc.entry = nil, nil, nil, nil, extract.Item{}
		p.scratch.Put(sc)
	}()

	d := Decision{Method: ev.Method, PolicyHash: p.hash, Evidence: ev, Findings: make([]Finding, len(ev.Items)), Kernel: kernel != nil}
	sc.matchs = make([]Match, 0, 2*len(ev.Items)+4) // one backing array for every finding's Matches
	var mode ModeVerdict
	if ev.Mode != "" {
		mode = p.Mode(AgentID{ev.Agent, ev.AgentInfo}, ev.Mode)
	}
	best := -1
	for i := range ev.Items {
		f := p.decideItem(ev, &ev.Items[i], sc)
		if it := &ev.Items[i]; shapeOf(it) > 0 && f.Source == SourceDefault && f.Effect != Allow {
			if g, ok := p.vouchedShape(ev, i, d.Findings[:i], sc); ok {
				f = g
			}
		}
		if mode.Denied && f.Effect == Allow {
			f.Effect, f.Rule, f.Layer, f.Source = Ask, mode.Rule, mode.Layer, SourceBuiltin
			f.Message = "the agent is in mode " + ev.Mode + ", which the policy does not allow: " + mode.Why()
		}
		d.Findings[i] = f
		if best < 0 || f.Effect > d.Findings[best].Effect {
			best = i
		}
	}
	if best < 0 || d.Findings[best].Effect == None {
		d.Effect, d.Layer, d.Source = p.dflt, p.dfltLayer, SourceDefault
		return d
	}
	f := &d.Findings[best]
	d.Effect, d.Rule, d.Layer, d.Source, d.Message = f.Effect, f.Rule, f.Layer, f.Source, f.Message
	if d.Effect == Ask && len(p.answeredBy) > 0 {
		d.Answerers = p.answerersOf(&d)
	}
	return d
}

// vouchedShape decides the path ev.Items[i], read by shape from the
// arguments of a program without a spec (a path-like word: the program may
// read or write it), when the rule that allowed the program vouches for its
// arguments (arguments: any, or a literal pattern): for the allow rules it
// is then a read (issue 27). The rule vouches for what the program does
// with its arguments, not for where they are: the path must still be one
// the policy lets the agent read. Only a path that no rule matched as
// read and written gets here, so every deny and ask rule saw it as both
// (./tools/x.sh ~/.aws/credentials is denied by a deny on the file, a path
// outside the roots by a deny on writes there); an edit a redirection or a
// known writer (tee, cp) makes is an item of its own.
func (p *Policy) vouchedShape(ev *extract.Evidence, i int, found []Finding, sc *scratch) (Finding, bool) {
	it := &ev.Items[i]
	of, key := it.Shape()
	c := int(of) - 1
	if c < 0 || c >= len(found) {
		return Finding{}, false
	}
	cmd := &ev.Items[c]
	if cmd.Type != extract.ItemCommand || extract.ShapeKey(cmd) != key || !found[c].vouched || found[c].Effect != Allow {
		return Finding{}, false
	}
	read := *it
	read.SetKinds([]extract.Kind{extract.KindRead}, extract.KindBit(extract.KindRead))
	g := p.decideItem(ev, &read, sc)
	if g.Effect != Allow {
		return Finding{}, false
	}
	g.Item = it
	return g, true
}

// decideItem finds every rule that fires on it and picks the most severe.
func (p *Policy) decideItem(ev *extract.Evidence, it *extract.Item, sc *scratch) (f Finding) {
	f = Finding{Item: it}
	if it.Refused != "" {
		f.Effect, f.Rule, f.Layer, f.Source, f.Message = Deny, RuleRefused, LayerBuiltin, SourceBuiltin, it.Refused
		return f
	}
	sc.gen++
	if sc.gen == 0 {
		clear(sc.stamp)
		sc.gen = 1
	}
	sc.cands = p.candidates(ev, it, sc.cands[:0])
	sc.itemWalks = sc.itemWalks[:0]
	defer func() {
		for _, k := range sc.itemWalks {
			f.Walked += len(sc.walks[k].Entries)
		}
	}()
	nMatch := 0
	bestRule := -1
	var bestEff Effect
	bestSure := false
	for _, ri := range sc.cands {
		if sc.stamp[ri] == sc.gen {
			continue
		}
		sc.stamp[ri] = sc.gen
		r := p.rules[ri]
		m, below, cut, ok := p.ruleFires(ev, it, ri, sc, &f)
		if !ok {
			continue
		}
		eff := r.Decision
		if m == possible && eff > Ask {
			eff = Ask
		}
		sc.matchs = append(sc.matchs, Match{Rule: r.ID, Layer: r.Layer, Effect: eff, Possible: m == possible, Below: below, Cut: cut})
		nMatch++
		// Of rules with the same effect, the first in p.rules (the
		// stronger layer, then the smaller id) decides and is the rule
		// the audit log names: of two identical deny rules of a layer,
		// the one with the smaller id, whatever their file order.
		// Shadowed reports the other as never deciding. A rule that only
		// may match (a walk cut short) decides only when no rule of the
		// same effect surely does.
		sure := cut == "" || below != ""
		if eff > bestEff || eff == bestEff && (sure && !bestSure || sure == bestSure && int(ri) < bestRule) {
			bestEff, bestRule, bestSure = eff, int(ri), sure
		}
	}
	if nMatch > 0 {
		n := len(sc.matchs)
		f.Matches = sc.matchs[n-nMatch : n : n]
	}
	p.settle(ev, it, &f, bestRule, bestEff, sc.kernel)
	return f
}

// ruleFires matches rule p.rules[ri] against it: whether it fires (surely, or
// possibly: m), and for a recursive item the entry below it that decided
// (below) or why the walk was cut short (cut). A rule whose unless spares
// the item is added to f.Excepted.
func (p *Policy) ruleFires(ev *extract.Evidence, it *extract.Item, ri int32, sc *scratch, f *Finding) (m matchResult, below, cut string, ok bool) {
	r := p.rules[ri]
	strict := r.Decision == Allow
	if strict && (it.Opaque != "" || it.Aux) {
		return noMatch, "", "", false // nothing allows what cannot be seen; aux items need no allow
	}
	if strict && it.Unknown != "" && !r.AnyArgs && !r.When.literalCommand(ev, it) {
		return noMatch, "", "", false // closed-world allow: the rule did not vouch for the arguments
	}
	if !cachedRequest(r.When, ev, strict, &sc.reqW[ri]) {
		return noMatch, "", "", false
	}
	m = r.When.matchItem(ev, it, strict)
	unlessReq := r.Unless != nil && cachedRequest(r.Unless, ev, !strict, &sc.reqU[ri])
	var unless *Cond // the exception for each path below a recursive item
	if unlessReq {
		unless = r.Unless
	}
	// The kernel is credited only for what a program reads: it keeps
	// a masked path from being read, and a read is all it does.
	kernel := !strict && it.KindSet()&^(extract.KindBit(extract.KindRead)|extract.KindBit(extract.KindSearch)) == 0
	switch {
	case m == noMatch && !strict && it.Recursive && r.When.mayMatchPathsBelow(it):
		// Nothing below the directory can match by its name, but a
		// symlink below it may lead where the rule matches.
		found, why, ok := sc.walkBelow(ev, it, r.When, unless, true, kernel)
		if ok && found == "" && why == "" && sc.held != "" {
			f.Kernel = append(f.Kernel, KernelHold{Rule: r.ID, Path: sc.held})
		}
		if !ok || found == "" && why == "" {
			return noMatch, "", "", false
		}
		m, below, cut = possible, found, why
	case m == noMatch:
		return noMatch, "", "", false
	default:
		if unlessReq {
			u := r.Unless.matchItem(ev, it, !strict)
			if u == possible {
				// The exception of an allow could match something
				// below: it does when something there really matches.
				if found, why, ok := sc.walkBelow(ev, it, r.Unless, nil, false, false); ok && found == "" && why == "" {
					u = noMatch
				}
			}
			if u != noMatch {
				f.Excepted = append(f.Excepted, r.ID)
				return noMatch, "", "", false
			}
		}
		if m == possible {
			// Decided by what is below the directory, when it can be
			// listed: an entry that the rule matches (and its unless
			// does not spare) makes it fire, none makes it not apply.
			found, why, ok := sc.walkBelow(ev, it, r.When, unless, false, kernel)
			if ok && found == "" && why == "" {
				if sc.held != "" {
					f.Kernel = append(f.Kernel, KernelHold{Rule: r.ID, Path: sc.held})
				}
				return noMatch, "", "", false
			}
			below, cut = found, why
		}
	}
	return m, below, cut, true
}

// settle gives f the decision of the most severe rule that fired
// (bestRule, -1 for none), else the built-in safeguard or the default.
func (p *Policy) settle(ev *extract.Evidence, it *extract.Item, f *Finding, bestRule int, bestEff Effect, kernel extract.KernelGuard) {
	switch {
	case bestRule >= 0:
		r := p.rules[bestRule]
		f.Effect, f.Rule, f.Layer, f.Source, f.Message = bestEff, r.ID, r.Layer, SourceRule, r.Message
		if bestEff == Deny && it.Type == extract.ItemPath && kernel != nil && slices.ContainsFunc(it.Forms, kernel.Hides) {
			f.Kernel = append(f.Kernel, KernelHold{Rule: r.ID, Path: it.Path, Decides: true})
		}
		f.vouched = bestEff == Allow && it.Type == extract.ItemCommand && it.Unknown != "" && (r.AnyArgs || r.When.literalCommand(ev, it))
	case it.Aux:
		// An auxiliary item only makes a decision stricter.
	case it.Opaque != "" && p.dflt <= Ask:
		// Nothing can allow it: at least ask, and say why.
		f.Effect, f.Rule, f.Layer, f.Source, f.Message = Ask, RuleOpaque, LayerBuiltin, SourceBuiltin, it.Opaque
	case it.Unknown != "" && p.dflt <= Ask:
		f.Effect, f.Rule, f.Layer, f.Source, f.Message = Ask, RuleUnknownArguments, LayerBuiltin, SourceBuiltin, it.Unknown
	default:
		f.Effect, f.Layer, f.Source = p.dflt, p.dfltLayer, SourceDefault
	}
}

// walkBelow looks for an existing path below the recursive item it that
// when matches (with the any quantifier of deny and ask) and unless, if
// not nil, does not spare (with the every quantifier). A symlink below it
// is such a path when its own path or its target is. It returns the first
// one found, else why the walk was cut short, else both "": nothing below
// matches. With links, only the symlinks below it are looked at. ok is
// false when the decision's FS cannot walk: then nothing is known. With
// kernel, a path the request's kernel guard hides is not such a path
// (sc.held names the first one), nor is a symlink to a directory it hides
// a cut.
func (sc *scratch) walkBelow(ev *extract.Evidence, it *extract.Item, when, unless *Cond, links, kernel bool) (found, cut string, ok bool) {
	sc.held = ""
	if sc.kernel == nil {
		kernel = false
	}
	w, _ := sc.fs.(extract.Walker)
	if w == nil {
		return "", "", false
	}
	if it.Unresolved {
		return "", "its symlinks cannot be resolved", true
	}
	// The forms of the item, grouped by the directory they really are.
	type group struct {
		real  string
		forms []string
	}
	var groups []group
	for _, f := range it.Forms {
		r, err := w.Resolve(f)
		if err != nil {
			return "", fmt.Sprintf("cannot resolve %s: %v", f, err), true
		}
		r = path.Clean(r)
		i := slices.IndexFunc(groups, func(g group) bool { return g.real == r })
		if i < 0 {
			groups = append(groups, group{real: r})
			i = len(groups) - 1
		}
		groups[i].forms = append(groups[i].forms, f)
	}
	e := &sc.entry
	for _, g := range groups {
		key := g.real + "\x00"
		if it.SkipsHidden {
			key += "h"
		}
		res := sc.walks[key]
		if res == nil {
			if len(sc.walks) >= maxWalks {
				return "", fmt.Sprintf("more than %d directories to walk in one request", maxWalks), true
			}
			r := w.Walk(g.real, it.SkipsHidden)
			res = &r
			if sc.walks == nil {
				sc.walks = map[string]*extract.WalkResult{}
			}
			sc.walks[key] = res
		}
		if !slices.Contains(sc.itemWalks, key) {
			sc.itemWalks = append(sc.itemWalks, key)
		}
		// Each entry's forms, built once per decision: every rule that
		// may match below the item looks at them.
		fkey := key + "\x00" + strings.Join(g.forms, "\x00")
		forms, done := sc.forms[fkey]
		if !done {
			forms = make([][]string, len(res.Entries))
			if sc.forms == nil {
				sc.forms = map[string][][]string{}
			}
			sc.forms[fkey] = forms
		}
		for i := range res.Entries {
			en := &res.Entries[i]
			if links && !en.Link {
				continue
			}
			if forms[i] == nil {
				fs := make([]string, 0, len(g.forms)+1)
				for _, f := range g.forms {
					fs = append(fs, f+"/"+en.Rel)
				}
				if en.Target != "" && !slices.Contains(fs, en.Target) {
					fs = append(fs, en.Target)
				}
				forms[i] = fs
			}
			// A symlink the program does not open is an entry it sees by
			// its own name: its target is not read (the forms before the
			// target are the entry's names).
			follows := !en.Link || it.Walk.Follows(en.Rel, en.TargetDir)
			ef := forms[i]
			if !follows {
				ef = ef[:len(g.forms)]
			}
			*e = extract.Item{Type: extract.ItemPath, Forms: ef, Path: ef[0]}
			e.SetKinds(it.Kinds, it.KindSet())
			if when.matchItem(ev, e, false) != noMatch && (unless == nil || unless.matchItem(ev, e, true) == noMatch) {
				if kernel {
					// What the program opens: the target of a symlink it
					// follows, else the entry itself (a symlink it only
					// lists is read by name; the guard resolves it).
					real := g.real + "/" + en.Rel
					if en.Link && follows && en.Target != "" {
						real = en.Target
					}
					if sc.kernel.Hides(real) {
						if sc.held == "" {
							sc.held = e.Path
							if real != e.Path {
								sc.held += " -> " + real
							}
						}
						continue
					}
				}
				found = e.Path
				if en.Link && follows && en.Target != "" && en.Target != e.Path {
					found += " -> " + en.Target
				}
				return found, "", true
			}
			if en.Link && en.TargetDir && follows && cut == "" {
				// A symlink to a directory the walk does not cover: a
				// command that follows it reads what is there, which is
				// not known. It matters when the rule could match
				// something below the target.
				rel, in := extract.Below(g.real, en.Target)
				if !in || it.SkipsHidden && hasHiddenSegment(rel) {
					*e = extract.Item{Type: extract.ItemPath, Forms: []string{en.Target}, Path: en.Target, Recursive: true}
					e.SetKinds(it.Kinds, it.KindSet())
					switch {
					case when.matchItem(ev, e, false) == noMatch:
					case kernel && sc.kernel.Hides(en.Target):
						if sc.held == "" {
							sc.held = g.forms[0] + "/" + en.Rel + " -> " + en.Target
						}
					default:
						cut = fmt.Sprintf("%s/%s is a symlink to the directory %s, outside it", g.forms[0], en.Rel, en.Target)
					}
				}
			}
		}
		if res.Cut != "" && cut == "" {
			cut = "the walk below " + g.real + " stopped at " + res.Cut
		}
	}
	return "", cut, true
}

// cachedRequest evaluates the request-level keys of c once per decision.
func cachedRequest(c *Cond, ev *extract.Evidence, strict bool, memo *int8) bool {
	if *memo == 0 {
		*memo = -1
		if c.matchRequest(ev, strict) {
			*memo = 1
		}
	}
	return *memo > 0
}

// candidates appends the rules that may match the item.
func (p *Policy) candidates(ev *extract.Evidence, it *extract.Item, out []int32) []int32 {
	ix := &p.idx
	out = append(out, ix.generic...)
	for k := range extract.AllKinds {
		if it.KindSet()&(1<<k) != 0 {
			out = append(out, ix.byKind[k]...)
		}
	}
	switch it.Type {
	case extract.ItemPath:
		if it.Recursive {
			return append(out, ix.pathAll...)
		}
		out = append(out, ix.pathAny...)
		for _, f := range it.Forms {
			rest := f
			for rest != "" {
				var seg string
				rest = strings.TrimPrefix(rest, "/")
				seg, rest, _ = strings.Cut(rest, "/")
				out = append(out, ix.pathSeg[seg]...)
			}
			out = append(out, ix.pathExt[path.Ext(f)]...)
			for a, rules := range ix.pathVar {
				var bases []string
				switch a {
				case anchorCwd:
					bases = ev.Vars().Cwd
				case anchorRoots:
					bases = ev.Vars().Roots
				default:
					bases = ev.Vars().Home
				}
				for _, b := range bases {
					if _, ok := extract.Below(b, f); ok {
						out = append(out, rules...)
						break
					}
				}
			}
		}
	case extract.ItemCommand:
		out = append(out, ix.cmdAny...)
		if it.Program != "" {
			out = append(out, ix.cmdProg[it.Program]...)
		}
	case extract.ItemDomain:
		out = append(out, ix.domAny...)
		out = append(out, ix.domExact[it.Domain]...)
		for d := it.Domain; ; {
			i := strings.IndexByte(d, '.')
			if i < 0 {
				break
			}
			d = d[i+1:]
			out = append(out, ix.domSuffix[d]...)
		}
	}
	return out
}

// shapeOf is 1 + the index of the command item whose arguments it read a
// path from by shape, 0 for any other item.
func shapeOf(it *extract.Item) int32 { of, _ := it.Shape(); return of }
