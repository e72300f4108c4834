package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy/extract"
)

// Cond is a compiled when or unless: every key present must match, and a
// key matches when any of its entries does.
type Cond struct {
	agents   []textPattern
	modes    []textPattern
	methods  uint16 // bits of methodBit
	kinds    extract.KindSet
	titles   []textPattern
	tools    []textPattern
	paths    []pathPattern
	commands []commandPattern
	programs []cmdToken
	flags    []string
	domains  []domainPattern
	cwds     []pathPattern
	env      []textPattern

	// src holds each key's entries as written, for the hash, shadowing and
	// explain.
	src map[string][]string
}

// add compiles one entry of a matcher key.
func (c *Cond) add(key, s string) error {
	switch key {
	case "agent", "mode", "env", "tool":
		p, err := compileText(s)
		if err != nil {
			return err
		}
		switch key {
		case "agent":
			c.agents = append(c.agents, p)
		case "mode":
			c.modes = append(c.modes, p)
		case "tool":
			c.tools = append(c.tools, p)
		default:
			c.env = append(c.env, p)
		}
	case "kind":
		b := extract.KindBit(extract.Kind(s))
		if b == 0 {
			return fmt.Errorf("unknown kind %q (ACP tool kinds: %s)", s, joinKinds(extract.AllKinds))
		}
		c.kinds |= b
	case "method":
		b := methodBit(s)
		if b == 0 {
			return fmt.Errorf("unknown method %q (the policy decides %s)", s, methodNames())
		}
		c.methods |= b
	case "title":
		p, err := compileTitle(s)
		if err != nil {
			return err
		}
		c.titles = append(c.titles, p)
	case "paths", "cwd":
		p, err := compilePath(s)
		if err != nil {
			return err
		}
		if key == "cwd" {
			c.cwds = append(c.cwds, p)
		} else {
			c.paths = append(c.paths, p)
		}
	case "command":
		p, err := compileCommand(s)
		if err != nil {
			return err
		}
		c.commands = append(c.commands, p)
	case "program":
		if s == "" || strings.ContainsAny(s, " \t") {
			return fmt.Errorf("invalid program %q: one program name or path, no arguments (use command for those)", s)
		}
		p, err := compileText(s)
		if err != nil {
			return err
		}
		t := cmdToken{p: p, slash: strings.Contains(s, "/")}
		if t.slash {
			if t.path, err = compileProgramPath(s); err != nil {
				return err
			}
		}
		c.programs = append(c.programs, t)
	case "flags_any":
		switch {
		case len(s) == 2 && s[0] == '-' && s[1] != '-':
		case len(s) > 2 && strings.HasPrefix(s, "--") && !strings.ContainsAny(s, "= *"):
		case len(s) > 2 && s[0] == '-' && s[1] != '-':
			return fmt.Errorf("%q: list short flags one by one (-rf is -r and -f), or write a long --flag", s)
		default:
			return fmt.Errorf("invalid flag %q: write -x or --long", s)
		}
		c.flags = append(c.flags, s)
	case "domains":
		p, err := compileDomain(s)
		if err != nil {
			return err
		}
		c.domains = append(c.domains, p)
	default:
		return fmt.Errorf("unknown matcher %q", key)
	}
	if !slices.Contains(c.src[key], s) {
		c.src[key] = append(c.src[key], s)
	}
	return nil
}

func joinKinds(ks []extract.Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// String writes the cond as YAML flow mapping, keys in schema order.
func (c *Cond) String() string {
	var parts []string
	for _, k := range matcherKeys {
		if v, ok := c.src[k]; ok {
			q := make([]string, len(v))
			for i, s := range v {
				q[i] = fmt.Sprintf("%q", s)
			}
			parts = append(parts, k+": ["+strings.Join(q, ", ")+"]")
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func (c *Cond) has(key string) bool { _, ok := c.src[key]; return ok }

// itemType returns the item type the cond's keys require (0: any), and
// "" or why no item can have them all.
func (c *Cond) itemType() (extract.ItemType, string) {
	var groups []string
	var t extract.ItemType
	if c.has("paths") {
		groups, t = append(groups, "paths"), extract.ItemPath
	}
	for _, k := range []string{"command", "program", "flags_any", "env"} {
		if c.has(k) {
			groups, t = append(groups, k), extract.ItemCommand
			break
		}
	}
	if c.has("domains") {
		groups, t = append(groups, "domains"), extract.ItemDomain
	}
	if len(groups) > 1 {
		return 0, fmt.Sprintf("%s apply to different pieces of evidence (a path, a command, a domain); write one rule for each",
			strings.Join(groups, " and "))
	}
	return t, ""
}

// possibleKinds lists, for each method, the kinds each item type can have.
var possibleKinds = map[string]map[extract.ItemType]extract.KindSet{
	acp.MethodRequestPermission: {extract.ItemPath: ^extract.KindSet(0), extract.ItemCommand: extract.KindBit(extract.KindExecute),
		extract.ItemDomain: extract.KindBit(extract.KindFetch), extract.ItemTool: ^extract.KindSet(0)},
	acp.MethodReadTextFile:  {extract.ItemPath: extract.KindBit(extract.KindRead), extract.ItemTool: extract.KindBit(extract.KindRead)},
	acp.MethodWriteTextFile: {extract.ItemPath: extract.KindBit(extract.KindEdit), extract.ItemTool: extract.KindBit(extract.KindEdit)},
	acp.MethodTerminalCreate: {extract.ItemCommand: extract.KindBit(extract.KindExecute), extract.ItemPath: extract.KindBit(extract.KindRead) | extract.KindBit(extract.KindEdit),
		extract.ItemDomain: extract.KindBit(extract.KindFetch), extract.ItemTool: extract.KindBit(extract.KindExecute)},
	acp.MethodMcpMessage: {extract.ItemPath: ^extract.KindSet(0), extract.ItemCommand: extract.KindBit(extract.KindExecute),
		extract.ItemDomain: extract.KindBit(extract.KindFetch), extract.ItemTool: ^extract.KindSet(0)},
}

// infeasible says why no request can ever satisfy the cond ("" if some
// can): keys about different pieces of evidence, a kind a method never
// has, a title or tool name on a method without one.
func (c *Cond) infeasible() string {
	if c.methods&commandMethodBits != 0 {
		if k := c.notCommandKey(); k != "" {
			return fmt.Sprintf("method names the router's commands, which have no %s: a rule about them has only agent, cwd and method (write another rule for what agents ask)", k)
		}
		return ""
	}
	t, why := c.itemType()
	if why != "" {
		return why
	}
	for _, m := range decidedMethods {
		if c.methods != 0 && c.methods&methodBit(m) == 0 {
			continue
		}
		if (c.has("title") && m != acp.MethodRequestPermission) || (c.has("tool") && m != acp.MethodRequestPermission && m != acp.MethodMcpMessage) {
			continue
		}
		for it, ks := range possibleKinds[m] {
			if (t == 0 || t == it) && (c.kinds == 0 || c.kinds&ks != 0) {
				return ""
			}
		}
	}
	var parts []string
	for _, k := range []string{"method", "kind", "title", "tool", "paths", "command", "program", "flags_any", "env", "domains"} {
		if c.has(k) {
			parts = append(parts, k)
		}
	}
	return fmt.Sprintf("no request has this combination of %s", strings.Join(parts, ", "))
}

// notCommandKey is the first key of c, in schema order, that a router
// command has nothing for ("" when it has only agent, cwd and method).
func (c *Cond) notCommandKey() string {
	for _, k := range matcherKeys {
		if c.has(k) && k != "agent" && k != "cwd" && k != "method" {
			return k
		}
	}
	return ""
}

// agentRequests: the cond can match a request an agent makes (it names no
// method, or one of decidedMethods).
func (c *Cond) agentRequests() bool {
	return c.methods == 0 || c.methods&agentMethodBits != 0
}

// sameAs reports whether two conds are written the same.
func (c *Cond) sameAs(o *Cond) bool {
	if len(c.src) != len(o.src) {
		return false
	}
	for k, v := range c.src {
		w, ok := o.src[k]
		if !ok || len(v) != len(w) {
			return false
		}
		a, b := slices.Clone(v), slices.Clone(w)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			return false
		}
	}
	return true
}

// matchResult is how a cond matches an item.
type matchResult uint8

const (
	noMatch  matchResult = iota
	matched              // it matches
	possible             // something below a recursively read path matches
)

// matchRequest checks the keys about the request rather than an item.
func (c *Cond) matchRequest(ev *extract.Evidence, strict bool) bool {
	if c.agents != nil && !anyText(c.agents, ev.Agent) {
		return false
	}
	if c.modes != nil && !anyText(c.modes, ev.Mode) {
		return false
	}
	if c.methods != 0 && c.methods&methodBit(ev.Method) == 0 {
		return false
	}
	if c.titles != nil && !quantify(ev.Titles, strict, func(t string) bool { return anyText(c.titles, t) }) {
		return false
	}
	if c.tools != nil && !quantify(ev.Tools, strict, func(t string) bool { return anyText(c.tools, t) }) {
		return false
	}
	return c.cwdsMatch(ev, strict)
}

// cwdsMatch: c has no cwd condition, or the session's directories match
// it (any or every of them, by strict).
func (c *Cond) cwdsMatch(ev *extract.Evidence, strict bool) bool {
	return c.cwds == nil || quantify(ev.Cwds, strict, func(d string) bool {
		for i := range c.cwds {
			if c.cwds[i].match(d, ev.Vars()) {
				return true
			}
		}
		return false
	})
}

// quantify applies the any (loose) or every (strict) quantifier; an empty
// set matches nothing.
func quantify(xs []string, strict bool, f func(string) bool) bool {
	if len(xs) == 0 {
		return false
	}
	for _, x := range xs {
		if f(x) != strict {
			return !strict
		}
	}
	return strict
}

func anyText(ps []textPattern, s string) bool {
	for i := range ps {
		if ps[i].match(s) {
			return true
		}
	}
	return false
}

// matchItem checks the keys about the item. strict is the allow
// quantifier (every form must match), loose the deny/ask one (any form).
func (c *Cond) matchItem(ev *extract.Evidence, it *extract.Item, strict bool) matchResult {
	if c.kinds != 0 {
		if strict && (it.KindSet() == 0 || it.KindSet()&^c.kinds != 0) || !strict && it.KindSet()&c.kinds == 0 {
			return noMatch
		}
	}
	res := matched
	if c.paths != nil {
		if it.Type != extract.ItemPath {
			return noMatch
		}
		res = c.matchPath(ev, it, strict)
		if res == noMatch {
			return noMatch
		}
	}
	if c.commands != nil || c.programs != nil || c.flags != nil || c.env != nil {
		if it.Type != extract.ItemCommand {
			return noMatch
		}
		if c.commands != nil && !slices.ContainsFunc(c.commands, func(p commandPattern) bool { return p.match(it, ev.Vars(), strict) }) {
			return noMatch
		}
		if c.programs != nil && !slices.ContainsFunc(c.programs, func(t cmdToken) bool { return matchProgram(&t, it, ev.Vars(), strict) }) {
			return noMatch
		}
		if c.flags != nil && !slices.ContainsFunc(it.Flags, func(f string) bool {
			return slices.ContainsFunc(c.flags, func(w string) bool { return flagMatch(w, f, strict) })
		}) {
			return noMatch
		}
		if c.env != nil && !quantify(it.Env, strict, func(n string) bool { return anyText(c.env, n) }) {
			return noMatch
		}
	}
	if c.domains != nil {
		if it.Type != extract.ItemDomain || strict && it.DomainInvalid {
			return noMatch
		}
		if !slices.ContainsFunc(c.domains, func(p domainPattern) bool { return p.match(it.Domain) }) {
			return noMatch
		}
	}
	return res
}

// matchPath applies the paths key to a path item.
func (c *Cond) matchPath(ev *extract.Evidence, it *extract.Item, strict bool) matchResult {
	v := ev.Vars()
	if strict {
		if it.Unresolved {
			return noMatch
		}
		for _, f := range it.Forms {
			ok := false
			for i := range c.paths {
				if it.Recursive && c.paths[i].covers(f, v) || !it.Recursive && c.paths[i].match(f, v) {
					ok = true
					break
				}
			}
			if !ok {
				return noMatch
			}
		}
		return matched
	}
	for _, f := range it.Forms {
		for i := range c.paths {
			if c.paths[i].match(f, v) {
				return matched
			}
		}
	}
	if it.Recursive {
		for _, f := range it.Forms {
			for i := range c.paths {
				if c.paths[i].mayMatchBelow(f, v, it.SkipsHidden) {
					return possible
				}
			}
		}
	}
	return noMatch
}

// mayMatchPathsBelow reports whether the cond has paths and its kinds
// allow it to match a path below the recursive item it (with the any
// quantifier): a symlink below it may lead anywhere.
func (c *Cond) mayMatchPathsBelow(it *extract.Item) bool {
	return c.paths != nil && (c.kinds == 0 || it.KindSet()&c.kinds != 0)
}

// literalCommand reports whether a literal command pattern of c (one that
// names every argument) matches the command item: such a rule vouches for
// arguments the router does not understand.
func (c *Cond) literalCommand(ev *extract.Evidence, it *extract.Item) bool {
	return slices.ContainsFunc(c.commands, func(p commandPattern) bool { return p.literal && p.matchWritten(it, ev.Vars()) })
}
