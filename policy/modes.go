package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/yamlpos"
)

// Modes that approve by themselves (DESIGN §6, issue 13). While an agent is
// in such a mode it acts without sending the requests the policy decides,
// so the router never sees them. When a policy is in force, the modes of
// the table (agents.yaml, extended by the org layer's agent_modes) that
// approve by themselves are denied unless allow_modes allows them;
// deny_modes denies any mode, and deny wins. An agent the table does not
// know, or one with no mode that asks, is reported (Agent, Warnings), and
// refused when a layer says unknown_agents: refuse.

// unknown_agents values.
const (
	unknownWarn   = "warn"
	unknownRefuse = "refuse"
)

// AgentID is an agent as the built-in table recognises it.
type AgentID struct {
	Name string // the router's name for it (config agents[].name)
	Info string // agentInfo.name of its initialize result; "" if not known
}

// SettingRef is where a layer sets something.
type SettingRef struct {
	Pos   yamlpos.Pos
	Layer string
}

// agentFamily is one agent of the built-in table.
type agentFamily struct {
	id    string // what it is called in AGENT:MODE, and found in its names
	title string
	self  []selfMode
	// asking are the modes known to ask, in no particular order.
	asking []string
	// toAsk is the agent's own setting that makes it ask when it starts.
	toAsk string
	pos   yamlpos.Pos // where its entry is written
}

// selfMode is a mode that approves by itself.
type selfMode struct {
	mode  string
	kinds []extract.Kind // the tool calls it approves without asking
	how   string
}

// familyOf finds the agent in the table of p (the built-in one with the
// org layer's agent_modes): by the name it gives itself, else by the
// router's name for it.
func (p *Policy) familyOf(a AgentID) *agentFamily { return familyIn(p.families, a) }

func (p *Policy) familyNamed(name string) *agentFamily { return familyNamedIn(p.families, name) }

func familyIn(families []*agentFamily, a AgentID) *agentFamily {
	if f := familyNamedIn(families, a.Info); f != nil {
		return f
	}
	return familyNamedIn(families, a.Name)
}

func familyNamedIn(families []*agentFamily, name string) *agentFamily {
	name = strings.ToLower(name)
	for _, f := range families {
		if strings.Contains(name, f.id) {
			return f
		}
	}
	return nil
}

func (f *agentFamily) selfMode(mode string) *selfMode {
	if f == nil {
		return nil
	}
	for i := range f.self {
		if f.self[i].mode == mode {
			return &f.self[i]
		}
	}
	return nil
}

// knowsAsking: the table knows a mode of the agent that asks.
func (f *agentFamily) knowsAsking() bool { return f != nil && len(f.asking) > 0 }

// selfApproving returns the kinds of tool call the agent's mode approves
// by itself according to the built-in table (nil for a mode that asks or
// that the table does not list).
func selfApproving(a AgentID, mode string) []extract.Kind {
	if m := familyIn(builtinFamilies, a).selfMode(mode); m != nil {
		return m.kinds
	}
	return nil
}

// names: the entry is about agent a (fam is a's family).
func (m *ModeRef) names(a AgentID, fam *agentFamily) bool {
	return m.Agent == "*" || m.namesExactly(a, fam)
}

// namesExactly: the entry names a, not every agent.
func (m *ModeRef) namesExactly(a AgentID, fam *agentFamily) bool {
	return m.Agent == a.Name || fam != nil && m.Agent == fam.id
}

// ModeVerdict says whether the policy lets an agent be in a mode, and why.
type ModeVerdict struct {
	Agent  AgentID
	Mode   string
	Family string // the agent's entry in the table, "" if none
	Denied bool
	// Rule is what denies it: RuleDeniedMode (deny_modes),
	// RuleSelfApprovingMode (the table) or RuleUnlistedMode; "" when
	// allowed.
	Rule string
	// Layer is the layer of By, or LayerBuiltin for the table.
	Layer string
	// By is the deny_modes or allow_modes entry that decided; nil for the
	// table's default and for a mode nothing is said about.
	By *ModeRef
	// SelfApproving are the kinds the mode approves by itself (the
	// table); nil for a mode the table does not list as such.
	SelfApproving []extract.Kind
	how           string
	listed        []string // RuleUnlistedMode: the modes allow_modes lists
	asks          bool     // the table knows the mode to ask
}

// Why says in a few words why the mode is denied or allowed.
func (v *ModeVerdict) Why() string {
	self := ""
	if v.SelfApproving != nil {
		self = fmt.Sprintf("it approves %s by itself (%s)", kindsText(v.SelfApproving), v.how)
	}
	switch {
	case v.Rule == RuleDeniedMode:
		return fmt.Sprintf("deny_modes %q (%s)", v.By.String(), v.By.Pos)
	case v.Rule == RuleSelfApprovingMode:
		return fmt.Sprintf("%s; the policy allows it only with allow_modes: [%q]", self, v.Family+":"+v.Mode)
	case v.Rule == RuleUnlistedMode:
		return fmt.Sprintf("allow_modes lists the modes of %s the policy allows (%s: %s), and not this one", v.Agent.Name, strings.Join(v.listed, ", "), v.By.Pos)
	case v.By != nil && self != "":
		return fmt.Sprintf("%s; allowed by allow_modes %q (%s)", self, v.By.String(), v.By.Pos)
	case v.By != nil:
		return fmt.Sprintf("allow_modes %q (%s)", v.By.String(), v.By.Pos)
	case v.asks:
		return "it asks"
	}
	return "the router does not know what it approves"
}

func (f *agentFamily) askingModes() []string {
	if f == nil {
		return nil
	}
	return f.asking
}

func kindsText(ks []extract.Kind) string {
	if len(ks) == len(extract.AllKinds) {
		return "every tool call"
	}
	return joinKinds(ks)
}

// Mode decides whether agent a may be in mode: deny_modes first (deny
// wins), then the built-in table (denied unless allow_modes allows it),
// then, for an agent the table does not know (or knows no asking mode
// of), the modes allow_modes lists for it, if it lists any.
func (p *Policy) Mode(a AgentID, mode string) ModeVerdict {
	fam := p.familyOf(a)
	v := ModeVerdict{Agent: a, Mode: mode, asks: slices.Contains(fam.askingModes(), mode)}
	if fam != nil {
		v.Family = fam.id
	}
	if m := fam.selfMode(mode); m != nil {
		v.SelfApproving, v.how = m.kinds, m.how
	}
	for i := range p.denyModes {
		if m := &p.denyModes[i]; m.Mode == mode && m.names(a, fam) {
			v.Denied, v.Rule, v.Layer, v.By = true, RuleDeniedMode, m.Layer, m
			return v
		}
	}
	var allow, vet *ModeRef
	var listed []string
	for i := range p.allowModes {
		m := &p.allowModes[i]
		if m.Mode == mode && m.names(a, fam) && (allow == nil || allow.Agent == "*") {
			allow = m
		}
		if m.namesExactly(a, fam) {
			if vet == nil {
				vet = m
			}
			listed = append(listed, m.Mode)
		}
	}
	switch {
	case allow != nil:
		v.By, v.Layer = allow, allow.Layer
	case v.SelfApproving != nil:
		v.Denied, v.Rule, v.Layer = true, RuleSelfApprovingMode, LayerBuiltin
	case !fam.knowsAsking() && vet != nil:
		v.Denied, v.Rule, v.Layer, v.By, v.listed = true, RuleUnlistedMode, vet.Layer, vet, listed
	}
	return v
}

// ModeDenied reports whether the policy keeps agent a out of mode.
func (p *Policy) ModeDenied(a AgentID, mode string) bool { return p.Mode(a, mode).Denied }

// MayDenyModes: some mode of agent a may be denied (false: every mode is
// allowed, and a filter of modes can be skipped).
func (p *Policy) MayDenyModes(a AgentID) bool {
	fam := p.familyOf(a)
	if len(p.denyModes) > 0 || fam != nil && len(fam.self) > 0 {
		return true
	}
	return slices.ContainsFunc(p.allowModes, func(m ModeRef) bool { return m.namesExactly(a, fam) })
}

// ModeTarget is the mode to move agent a to from a denied one: the first
// of modes (the agent's, in its order) that the policy allows and the
// table knows to ask, else the first the policy allows; "" when it allows
// none.
func (p *Policy) ModeTarget(a AgentID, modes []string) string {
	asking := p.familyOf(a).askingModes()
	first := ""
	for _, m := range modes {
		if p.ModeDenied(a, m) {
			continue
		}
		if slices.Contains(asking, m) {
			return m
		}
		if first == "" {
			first = m
		}
	}
	return first
}

// DenyModes returns the deny_modes of every layer.
func (p *Policy) DenyModes() []ModeRef { return p.denyModes }

// AllowModes returns the allow_modes in force (DroppedModes: those the
// org layer's lower_layers_may drops).
func (p *Policy) AllowModes() []ModeRef   { return p.allowModes }
func (p *Policy) DroppedModes() []ModeRef { return p.droppedModes }

// AgentStatus is what the policy makes of an agent as a whole: whether
// the router can keep it asking, and what to do when it cannot.
type AgentStatus struct {
	Agent  AgentID
	Family string
	// Problem is why the router cannot keep the agent asking; "" when it
	// can: the table knows a mode of it that asks, or allow_modes lists
	// the modes the policy allows it (VettedBy).
	Problem  string
	VettedBy *ModeRef
	// Fix says what makes the agent ask.
	Fix string
	// Refused: a layer says unknown_agents: refuse (By), and there is a
	// problem.
	Refused bool
	By      *SettingRef
}

// Agent says whether the router can keep agent a asking.
func (p *Policy) Agent(a AgentID) AgentStatus {
	fam := p.familyOf(a)
	st := AgentStatus{Agent: a}
	if fam != nil {
		st.Family = fam.id
	}
	if fam.knowsAsking() {
		return st
	}
	for i := range p.allowModes {
		if m := &p.allowModes[i]; m.namesExactly(a, fam) {
			st.VettedBy = m
			return st
		}
	}
	name := a.Name
	if fam == nil {
		st.Problem = "the router does not know its modes, so it cannot keep it out of those that approve by themselves"
		st.Fix = fmt.Sprintf("make it ask with its own settings, then list the modes that ask in allow_modes (e.g. %q; its other modes are then denied), or deny those that do not in deny_modes",
			name+":default")
	} else {
		st.Problem = fmt.Sprintf("%s asks nothing under its default permissions, in any mode", fam.title)
		st.Fix = fmt.Sprintf("%s, then list the modes you allow in allow_modes (e.g. %q)", fam.toAsk, fam.id+":build")
	}
	if p.unknown != nil {
		st.Refused, st.By = true, p.unknown
	}
	return st
}

// Warnings returns what `acp-router check` should warn about: rules and
// allow_modes dropped by lower_layers_may, rule ids used in two layers,
// and for each of the given agents (the config's; one per agent of the
// built-in table when none are given): an agent the router cannot keep
// asking, and each mode of the table that allow_modes allows although
// deny or ask rules exist for a kind it approves by itself.
func (p *Policy) Warnings(agents ...AgentID) []string {
	out := slices.Clone(p.warnings)
	for _, m := range p.allowModes {
		if f := p.familyNamed(m.Agent); f != nil && f.id == m.Agent && f.knowsAsking() && f.selfMode(m.Mode) == nil {
			out = append(out, fmt.Sprintf("%s: allow_modes %q has no effect: the built-in table does not list %q as a mode of %s that approves by itself",
				m.Pos, m.String(), m.Mode, f.id))
		}
	}
	if len(agents) == 0 {
		for _, f := range p.families {
			agents = append(agents, AgentID{Name: f.id})
		}
	}
	for _, a := range agents {
		if st := p.Agent(a); st.Problem != "" {
			w := fmt.Sprintf("agent %q: %s; %s", a.Name, st.Problem, st.Fix)
			if st.Refused {
				w += fmt.Sprintf("; until then the router refuses its sessions (unknown_agents: refuse, %s)", st.By.Pos)
			}
			out = append(out, w)
		}
		fam := p.familyOf(a)
		if fam == nil {
			continue
		}
		for _, sm := range fam.self {
			v := p.Mode(a, sm.mode)
			if v.Denied {
				continue
			}
			var kinds extract.KindSet
			for _, k := range sm.kinds {
				kinds |= extract.KindBit(k)
			}
			var ids []string
			for _, r := range p.rules {
				if r.Decision == Allow || !r.When.agentRequests() || r.When.agents != nil && !anyText(r.When.agents, a.Name) {
					continue
				}
				if r.When.modes != nil && !anyText(r.When.modes, sm.mode) {
					continue
				}
				if ruleKinds(r.When)&kinds != 0 {
					ids = append(ids, r.ID)
				}
			}
			if len(ids) > 0 {
				out = append(out, fmt.Sprintf("agent %q: mode %q approves %s without asking, and allow_modes %q (%s) allows it, so deny/ask rules (%s) are not enforced while it is on",
					a.Name, sm.mode, kindsText(sm.kinds), v.By.String(), v.By.Pos, strings.Join(ids, ", ")))
			}
		}
	}
	return out
}

// ruleKinds returns the kinds of the items a cond can match.
func ruleKinds(c *Cond) extract.KindSet {
	if c.kinds != 0 {
		return c.kinds
	}
	switch t, _ := c.itemType(); t {
	case extract.ItemCommand:
		return extract.KindBit(extract.KindExecute)
	case extract.ItemDomain:
		return extract.KindBit(extract.KindFetch)
	}
	return ^extract.KindSet(0)
}

// ExplainModes writes what `check` and `policy explain` print about agent
// a's modes: its entry in the table, each mode the table or the policy
// names for it (and the extra modes given, e.g. the agent's own) with the
// verdict and why, and what to do when the router cannot keep it asking.
func (p *Policy) ExplainModes(a AgentID, extra ...string) string {
	var b strings.Builder
	fam := p.familyOf(a)
	who := fmt.Sprintf("agent %q", a.Name)
	switch {
	case fam == nil && a.Info != "":
		fmt.Fprintf(&b, "%s (%s): not in the built-in table of modes\n", who, a.Info)
	case fam == nil:
		fmt.Fprintf(&b, "%s: not in the built-in table of modes\n", who)
	default:
		from := "its name"
		if p.familyNamed(a.Info) == fam {
			from = "agentInfo " + a.Info
		}
		asks := "no mode that asks under its default permissions"
		if len(fam.asking) > 0 {
			asks = "asks in " + strings.Join(fam.asking, ", ")
		}
		fmt.Fprintf(&b, "%s: %s (from %s): %s\n", who, fam.title, from, asks)
	}
	var modes []string
	add := func(m string) {
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	if fam != nil {
		for _, sm := range fam.self {
			add(sm.mode)
		}
	}
	for _, ms := range [][]ModeRef{p.denyModes, p.allowModes} {
		for _, m := range ms {
			if m.names(a, fam) {
				add(m.Mode)
			}
		}
	}
	for _, m := range extra {
		add(m)
	}
	for _, m := range modes {
		v := p.Mode(a, m)
		verdict := "allowed"
		if v.Denied {
			verdict = "denied"
		}
		fmt.Fprintf(&b, "  %-7s %-18s %s\n", verdict, m, v.Why())
	}
	if st := p.Agent(a); st.Problem != "" {
		fmt.Fprintf(&b, "  %s; %s\n", st.Problem, st.Fix)
		if st.Refused {
			fmt.Fprintf(&b, "  the router refuses its sessions: unknown_agents: refuse (%s layer, %s)\n", st.By.Layer, st.By.Pos)
		}
	} else if st.VettedBy != nil {
		fmt.Fprintf(&b, "  its modes are vetted by allow_modes %q (%s): the modes it lists are allowed, the others denied\n", st.VettedBy.String(), st.VettedBy.Pos)
	}
	return b.String()
}
