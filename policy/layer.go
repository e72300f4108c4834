package policy

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/policy/budget"
	"github.com/acp-router/acp-router/yamlpos"
)

// Layer is the parsed policy of one layer: the org layer (every file of
// the policy directory, folded together with Merge) or the user layer (the
// config's permissions: and its include files, folded with AddInclude).
//
// An org policy file (ParseFile) and the config's permissions: mapping
// (ParseLayer) share one schema:
//
//	default: ask                      # allow | ask | deny (strictest of the layers wins; ask if none)
//	deny_modes: ["claude:bypassPermissions", "*:yolo"]
//	allow_modes: ["claude:acceptEdits"]  # modes of the built-in table allowed after all
//	unknown_agents: refuse            # warn (default) | refuse agents the router cannot keep asking
//	lower_layers_may: [deny, ask]     # org files only: decisions user rules may have (allow: also allow_modes)
//	agent_modes:                      # org files only: extends the built-in table of modes (agents.yaml, same format)
//	  acme: {self_approving: {turbo: {kinds: all, how: nothing is asked}}, asking: [safe]}
//	include: [more-rules.yaml]        # permissions: only; read by the caller, folded in with AddInclude
//	rules:
//	  - id: no-secrets                # required, unique in the layer
//	    decision: deny                # required
//	    when: {paths: ["**/.env", "**/.env.*", "~/.ssh/**"]}   # required
//	    unless: {paths: ["**/.env.example"]}                   # optional exception
//	    message: Secrets are not available to agents.
//	tests:
//	  - {call: "fs/read_text_file ${cwd}/.env", expect: deny, rule: no-secrets}
//
// Matchers (every key must match; a list matches when any entry does):
// agent, mode (text globs), kind (ACP tool kinds), method (the four
// decided methods), title (text glob or "re:REGEXP"), tool (text globs
// over the tool call's name, ToolCall.name: the agent names its own tools,
// so a name is never proof of what the tool does; it selects rules, and
// what the tool call shows it does is judged as always), paths and cwd
// (doublestar globs over absolute cleaned paths, starting with /, **, ~,
// ${cwd}, ${roots} or ${home}), command (token patterns: * one token, **
// any tokens), program (a name matched by basename, or a path), flags_any
// (-x or --long; -rf is -r and -f), env (names of variables the command
// line sets), domains (host, *.host for strict subdomains, or *). See
// TestCase for tests:.
//
// Modes (modes.go): with a policy in force, the modes of the built-in
// table that approve tool calls by themselves are denied unless
// allow_modes allows them, and deny_modes denies any mode (deny wins).
// AGENT in both is the router's name for the agent, the table's name for
// it (claude, codex, gemini, opencode; found from the agent's agentInfo
// name, else from the router's name), or * for every agent.
type Layer struct {
	// Name is LayerOrg or LayerUser.
	Name string
	// Files are the files the layer was read from, in the order read.
	Files []string
	// Default is the layer's default decision; None when no file set one.
	Default    Effect
	DefaultPos yamlpos.Pos
	// DenyModes are the AGENT:MODE pairs the layer forbids.
	DenyModes []ModeRef
	// AllowModes are the AGENT:MODE pairs the layer allows although the
	// built-in table says they approve by themselves, or, for an agent
	// the table does not know, the modes the layer has vetted.
	AllowModes []ModeRef
	// UnknownAgents is the layer's unknown_agents: "warn", "refuse", or ""
	// when no file sets it.
	UnknownAgents    string
	UnknownAgentsPos yamlpos.Pos
	// LowerLayersMay (org layer only) lists the decisions rules of lower
	// layers may have; nil when not set (everything allowed).
	LowerLayersMay []Effect
	// agents (org layer only) are its agent_modes: entries that extend
	// the built-in table of the agents' modes (agents.yaml).
	agents []*agentFamily
	// Includes (user layer only) are the files `include:` lists, for the
	// caller to read and fold in with AddInclude. A relative path is
	// already joined with the directory of the file that lists it; a
	// leading ~/ is left for the caller to expand.
	Includes []Include
	// Telemetry (org layer only) are the files' telemetry: blocks, in
	// the order read, for the caller to parse (config.ParseOrgTelemetry):
	// the org may set and lock the router's telemetry (issue 17). They
	// are not part of the policy or its hash.
	Telemetry []Block
	// Sandbox (org layer only) are the files' sandbox: blocks, parsed by
	// config.ParseOrgSandbox: the org may set and lock kernel enforcement
	// (issue 29). Not part of the policy or its hash.
	Sandbox []Block
	Rules   []*Rule
	Tests   []*TestCase
	// Budgets are the layer's budgets: (budget.go).
	Budgets []*budget.Budget
}

// Block is a mapping of a policy file that another package reads.
type Block struct {
	File string
	Node *yaml.Node
}

// HasPolicy: the layer sets something of the permission policy (an org
// file may hold only a telemetry: block).
func (l *Layer) HasPolicy() bool {
	return l.Default != None || len(l.DenyModes) > 0 || len(l.AllowModes) > 0 || l.UnknownAgents != "" ||
		l.LowerLayersMay != nil || len(l.Rules) > 0 || len(l.Tests) > 0 || len(l.Includes) > 0 || len(l.Budgets) > 0
}

// ModeRef is one deny_modes or allow_modes entry.
type ModeRef struct {
	Agent string // an agent name, an agent of the built-in table, or * for every agent
	Mode  string
	Pos   yamlpos.Pos
	Layer string // the layer of the file it is in
}

func (m ModeRef) String() string { return m.Agent + ":" + m.Mode }

// Include is one entry of include:.
type Include struct {
	Path string
	Pos  yamlpos.Pos
}

// Rule is one compiled rule.
type Rule struct {
	ID       string
	Decision Effect
	Message  string
	// Layer is the layer the rule belongs to.
	Layer string
	Pos   yamlpos.Pos
	When  *Cond
	// Unless is nil when the rule has no exception.
	Unless *Cond
	// AnyArgs (arguments: any): an allow rule that covers commands whose
	// arguments the router does not all understand (Item.Unknown).
	AnyArgs bool
	// AnsweredBy (ask rules only) are who may answer the ask: token names
	// and AnswererEditor; nil: any controller (answerers.go).
	AnsweredBy []string
}

// Keys of a permissions mapping, a rule and a matcher.
var (
	orgKeys     = []string{"default", "deny_modes", "allow_modes", "unknown_agents", "lower_layers_may", "agent_modes", "rules", "tests", "budgets", "telemetry", "sandbox"}
	userKeys    = []string{"default", "deny_modes", "allow_modes", "unknown_agents", "include", "rules", "tests", "budgets"}
	includeKeys = []string{"default", "deny_modes", "allow_modes", "unknown_agents", "rules", "tests", "budgets"}
	ruleKeys    = []string{"id", "decision", "when", "unless", "message", "arguments", "answered_by"}
	testKeys    = []string{"call", "expect", "rule", "answered_by", "agent", "mode", "cwd", "roots", "files", "symlinks", "prompt", "spent", "budget"}
	matcherKeys = []string{"agent", "kind", "method", "title", "tool", "paths", "command", "program", "flags_any",
		"domains", "mode", "cwd", "env"}

	ruleID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// layerKind is which schema a mapping follows.
type layerKind uint8

const (
	kindOrgFile layerKind = iota
	kindUserConfig
	kindIncludeFile
)

// ParseFile parses one org policy file (a *.yaml file of the policy
// directory): the same schema as the config's permissions: mapping, plus
// lower_layers_may, without include. Fold the files of the directory
// together with Merge, in file name order. The error joins (errors.Join,
// in file order) every problem found, each a *yamlpos.Error at the YAML
// node that caused it.
func ParseFile(file string, data []byte) (*Layer, error) {
	return parseData(file, data, kindOrgFile)
}

// ParseLayer parses the user layer: the value of the permissions: key of
// the config file (DESIGN §4). The files its include: lists are in
// Layer.Includes; read each and fold it in with AddInclude.
func ParseLayer(file string, node *yaml.Node) (*Layer, error) {
	p := &parser{file: file}
	l := p.layer(yamlpos.Deref(node), kindUserConfig)
	return l, p.err()
}

// AddInclude folds an include file (same schema as permissions:, without
// include) into the user layer l.
func (l *Layer) AddInclude(file string, data []byte) error {
	inc, err := parseData(file, data, kindIncludeFile)
	if err != nil {
		return err
	}
	return l.Merge(inc)
}

// Merge folds o, another file of the same layer, into l: the stricter
// default and unknown_agents win, deny_modes, allow_modes, rules and tests
// add up, lower_layers_may keeps only what both allow. A rule id already
// used in l is an error.
func (l *Layer) Merge(o *Layer) error {
	p := &parser{file: firstOr(o.Files, "")}
	seen := map[string]*Rule{}
	for _, r := range l.Rules {
		seen[r.ID] = r
	}
	for _, r := range o.Rules {
		if first := seen[r.ID]; first != nil {
			p.errs = append(p.errs, &yamlpos.Error{Pos: r.Pos, Msg: fmt.Sprintf("duplicate rule id %q (first at %s)", r.ID, first.Pos)})
			continue
		}
		seen[r.ID] = r
		r.Layer = l.Name
		l.Rules = append(l.Rules, r)
	}
	names := map[string]*budget.Budget{}
	for _, b := range l.Budgets {
		names[b.Name] = b
	}
	for _, b := range o.Budgets {
		if first := names[b.Name]; first != nil {
			p.errs = append(p.errs, &yamlpos.Error{Pos: b.Pos, Msg: fmt.Sprintf("duplicate budget name %q (first at %s)", b.Name, first.Pos)})
			continue
		}
		names[b.Name] = b
		b.Layer = l.Name
		l.Budgets = append(l.Budgets, b)
	}
	if o.Default > l.Default {
		l.Default, l.DefaultPos = o.Default, o.DefaultPos
	}
	for _, m := range o.DenyModes {
		m.Layer = l.Name
		l.DenyModes = append(l.DenyModes, m)
	}
	for _, m := range o.AllowModes {
		m.Layer = l.Name
		l.AllowModes = append(l.AllowModes, m)
	}
	l.agents = append(l.agents, o.agents...)
	if o.UnknownAgents != "" && (l.UnknownAgents == "" || l.UnknownAgents == unknownWarn && o.UnknownAgents == unknownRefuse) {
		l.UnknownAgents, l.UnknownAgentsPos = o.UnknownAgents, o.UnknownAgentsPos
	}
	switch {
	case o.LowerLayersMay == nil:
	case l.LowerLayersMay == nil:
		l.LowerLayersMay = slices.Clone(o.LowerLayersMay)
	default:
		l.LowerLayersMay = slices.DeleteFunc(l.LowerLayersMay, func(e Effect) bool { return !slices.Contains(o.LowerLayersMay, e) })
	}
	for _, t := range o.Tests {
		t.Layer = l.Name
	}
	l.Tests = append(l.Tests, o.Tests...)
	l.Includes = append(l.Includes, o.Includes...)
	l.Telemetry = append(l.Telemetry, o.Telemetry...)
	l.Sandbox = append(l.Sandbox, o.Sandbox...)
	l.Files = append(l.Files, o.Files...)
	return p.err()
}

func firstOr(s []string, d string) string {
	if len(s) > 0 {
		return s[0]
	}
	return d
}

func parseData(file string, data []byte, kind layerKind) (*Layer, error) {
	p := &parser{file: file}
	root, err := yamlpos.Document(p.file, data, "policy file")
	if err != nil {
		return nil, err
	}
	l := p.layer(root, kind)
	if err := p.err(); err != nil {
		return nil, err
	}
	return l, nil
}

// parser walks the YAML node tree of one policy file and collects every
// problem with the position of the node that caused it.
type parser struct {
	file string
	errs []*yamlpos.Error
}

func (p *parser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(p.errs, func(a, b *yamlpos.Error) int {
		return cmp.Or(cmp.Compare(a.Pos.File, b.Pos.File), cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
	})
	errs := make([]error, len(p.errs))
	for i, e := range p.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

func (p *parser) pos(n *yaml.Node) yamlpos.Pos { return yamlpos.At(p.file, n) }

// errorf records an error at n; path names the value ("rules[0].when").
func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	p.errs = append(p.errs, &yamlpos.Error{Pos: p.pos(n), Msg: msg})
}

// layer reads a permissions mapping.
func (p *parser) layer(n *yaml.Node, kind layerKind) *Layer {
	l := &Layer{Name: LayerUser, Files: []string{p.file}}
	keys := userKeys
	switch kind {
	case kindOrgFile:
		l.Name, keys = LayerOrg, orgKeys
	case kindIncludeFile:
		keys = includeKeys
	}
	var misplaced []string
	switch kind {
	case kindUserConfig, kindIncludeFile:
		misplaced = append(misplaced, "lower_layers_may", "agent_modes")
	}
	if kind != kindUserConfig {
		misplaced = append(misplaced, "include")
	}
	f := p.fields("", n, keys, misplaced...)
	if f == nil {
		return l
	}
	if v := f["default"]; v != nil {
		l.Default = p.effect("default", v)
		l.DefaultPos = p.pos(v)
	}
	l.DenyModes = p.modes("deny_modes", f["deny_modes"], l.Name)
	l.AllowModes = p.modes("allow_modes", f["allow_modes"], l.Name)
	if v := f["unknown_agents"]; v != nil {
		if s, ok := p.str("unknown_agents", v); ok {
			switch s {
			case unknownWarn, unknownRefuse:
				l.UnknownAgents, l.UnknownAgentsPos = s, p.pos(v)
			default:
				p.errorf(v, "unknown_agents", "must be %s or %s, got %q", unknownWarn, unknownRefuse, s)
			}
		}
	}
	if v := f["lower_layers_may"]; v != nil {
		l.LowerLayersMay = []Effect{}
		for i, item := range p.list("lower_layers_may", v, false) {
			if e := p.effect(fmt.Sprintf("lower_layers_may[%d]", i), item); e != None && !slices.Contains(l.LowerLayersMay, e) {
				l.LowerLayersMay = append(l.LowerLayersMay, e)
			}
		}
	}
	if v := f["agent_modes"]; v != nil {
		l.agents = p.families("agent_modes", v)
	}
	if v := f["telemetry"]; v != nil {
		l.Telemetry = append(l.Telemetry, Block{File: p.file, Node: v})
	}
	if v := f["sandbox"]; v != nil {
		l.Sandbox = append(l.Sandbox, Block{File: p.file, Node: v})
	}
	if v := f["include"]; v != nil {
		for i, item := range p.list("include", v, true) {
			s, ok := p.str(fmt.Sprintf("include[%d]", i), item)
			if !ok || s == "" {
				continue
			}
			if !filepath.IsAbs(s) && !strings.HasPrefix(s, "~/") {
				s = filepath.Join(filepath.Dir(p.file), s)
			}
			l.Includes = append(l.Includes, Include{s, p.pos(item)})
		}
	}
	if v := f["rules"]; v != nil {
		seen := map[string]*Rule{}
		for i, item := range p.list("rules", v, true) {
			if r := p.rule(fmt.Sprintf("rules[%d]", i), item, seen); r != nil {
				r.Layer = l.Name
				l.Rules = append(l.Rules, r)
			}
		}
	}
	if v := f["budgets"]; v != nil {
		l.Budgets = p.budgets(v, l.Name)
	}
	if v := f["tests"]; v != nil {
		for i, item := range p.list("tests", v, true) {
			if t := p.test(fmt.Sprintf("tests[%d]", i), item); t != nil {
				t.Layer = l.Name
				l.Tests = append(l.Tests, t)
			}
		}
	}
	return l
}

// modes reads a deny_modes or allow_modes list (nil n: none).
func (p *parser) modes(key string, n *yaml.Node, layer string) []ModeRef {
	if n == nil {
		return nil
	}
	var out []ModeRef
	for i, item := range p.list(key, n, true) {
		path := fmt.Sprintf("%s[%d]", key, i)
		s, ok := p.str(path, item)
		if !ok {
			continue
		}
		agent, mode, found := strings.Cut(s, ":")
		if !found || agent == "" || mode == "" || strings.Contains(mode, ":") {
			p.errorf(item, path, `expected "AGENT:MODE" (AGENT may be *), got %q`, s)
			continue
		}
		out = append(out, ModeRef{agent, mode, p.pos(item), layer})
	}
	return out
}

// rule reads one rule.
func (p *parser) rule(path string, n *yaml.Node, seen map[string]*Rule) *Rule {
	f := p.fields(path, n, ruleKeys)
	if f == nil {
		return nil
	}
	r := &Rule{Pos: p.pos(n)}
	before := len(p.errs)
	p.require(path, n, f, "id", "decision", "when")
	if v := f["id"]; v != nil {
		if id, ok := p.str(path+".id", v); ok {
			switch {
			case !ruleID.MatchString(id):
				p.errorf(v, path+".id", "invalid rule id %q: use letters, digits, '.', '_' and '-'", id)
			case seen[id] != nil:
				p.errorf(v, path+".id", "duplicate rule id %q (first at line %d)", id, seen[id].Pos.Line)
			default:
				r.ID = id
				seen[id] = r
			}
		}
	}
	if v := f["decision"]; v != nil {
		r.Decision = p.effect(path+".decision", v)
	}
	if v := f["message"]; v != nil {
		r.Message, _ = p.str(path+".message", v)
	}
	if v := f["answered_by"]; v != nil {
		r.AnsweredBy = p.answerers(path+".answered_by", v)
		if r.Decision != None && r.Decision != Ask {
			p.errorf(v, path+".answered_by", "only an ask rule may say who answers (this rule is %s: no one is asked)", r.Decision)
		}
	}
	if v := f["arguments"]; v != nil {
		if a, ok := p.str(path+".arguments", v); ok {
			switch a {
			case "any":
				r.AnyArgs = true
			case "known":
			default:
				p.errorf(v, path+".arguments", "arguments must be known (the default: every argument of a command understood) or any, not %q", a)
			}
		}
	}
	if v := f["when"]; v != nil {
		r.When = p.cond(path+".when", v)
		if r.When != nil {
			if why := r.When.infeasible(); why != "" {
				p.errorf(v, path+".when", "the rule can never match: %s", why)
			}
		}
	}
	if v := f["unless"]; v != nil {
		r.Unless = p.cond(path+".unless", v)
		if r.Unless != nil && r.When != nil {
			if why := r.Unless.infeasible(); why != "" {
				p.errorf(v, path+".unless", "the exception can never match: %s", why)
			} else if r.Unless.sameAs(r.When) {
				p.errorf(v, path+".unless", "the exception is the same as when: the rule can never match")
			} else if k := r.Unless.notCommandKey(); k != "" && r.When.methods&commandMethodBits != 0 {
				p.errorf(v, path+".unless", "the rule is about the router's commands, which have no %s: their exception has only agent, cwd and method", k)
			}
		}
	}
	if len(p.errs) > before {
		return nil
	}
	return r
}

// cond reads a when or unless mapping.
func (p *parser) cond(path string, n *yaml.Node) *Cond {
	f := p.fields(path, n, matcherKeys)
	if f == nil {
		return nil
	}
	if len(n.Content) == 0 {
		p.errorf(n, path, "must have at least one matcher (%s)", strings.Join(matcherKeys, ", "))
		return nil
	}
	c := &Cond{src: map[string][]string{}}
	before := len(p.errs)
	for _, key := range matcherKeys {
		v := f[key]
		if v == nil {
			continue
		}
		kp := path + "." + key
		items := p.list(kp, v, true)
		if len(items) == 0 {
			continue
		}
		for i, item := range items {
			ip := fmt.Sprintf("%s[%d]", kp, i)
			if v.Kind != yaml.SequenceNode {
				ip = kp
			}
			s, ok := p.str(ip, item)
			if !ok {
				continue
			}
			if err := c.add(key, s); err != nil {
				p.errorf(item, ip, "%v", err)
			}
		}
	}
	if len(p.errs) > before {
		return nil
	}
	return c
}

// test reads one tests entry.
func (p *parser) test(path string, n *yaml.Node) *TestCase {
	f := p.fields(path, n, testKeys)
	if f == nil {
		return nil
	}
	t := &TestCase{Pos: p.pos(n)}
	if f["prompt"] != nil {
		return p.budgetTest(path, n, f, t)
	}
	before := len(p.errs)
	p.require(path, n, f, "call", "expect")
	if v := f["call"]; v != nil {
		var items []*yaml.Node
		if v.Kind == yaml.MappingNode {
			items = []*yaml.Node{v}
		} else {
			items = p.list(path+".call", v, true)
		}
		for i, item := range items {
			ip := path + ".call"
			if v.Kind == yaml.SequenceNode {
				ip = fmt.Sprintf("%s[%d]", ip, i)
			}
			call, err := p.call(ip, item)
			if err != nil {
				p.errorf(item, ip, "%v", err)
				continue
			}
			if call != nil {
				call.Pos = p.pos(item)
				t.Calls = append(t.Calls, call)
			}
		}
	}
	if v := f["expect"]; v != nil {
		t.Expect = p.effect(path+".expect", v)
	}
	if v := f["rule"]; v != nil {
		t.Rule, _ = p.str(path+".rule", v)
	}
	if v := f["answered_by"]; v != nil {
		t.AnsweredBy = p.answerers(path+".answered_by", v)
		if t.Expect != None && t.Expect != Ask {
			p.errorf(v, path+".answered_by", "only an ask is answered: expect must be ask, not %s", t.Expect)
		}
	}
	if v := f["agent"]; v != nil {
		t.Agent, _ = p.str(path+".agent", v)
	}
	if v := f["mode"]; v != nil {
		t.Mode, _ = p.str(path+".mode", v)
	}
	if v := f["cwd"]; v != nil {
		if t.Cwd, _ = p.str(path+".cwd", v); t.Cwd != "" && !filepath.IsAbs(t.Cwd) {
			p.errorf(v, path+".cwd", "must be an absolute path, got %q", t.Cwd)
		}
	}
	for key, dst := range map[string]*[]string{"roots": &t.Roots, "files": &t.Files} {
		if v := f[key]; v != nil {
			for i, item := range p.list(path+"."+key, v, false) {
				ip := fmt.Sprintf("%s.%s[%d]", path, key, i)
				if s, ok := p.str(ip, item); ok {
					if !filepath.IsAbs(s) {
						p.errorf(item, ip, "must be an absolute path, got %q", s)
					}
					*dst = append(*dst, s)
				}
			}
		}
	}
	if v := f["symlinks"]; v != nil {
		pairs, ok := yamlpos.Mapping(path+".symlinks", v, p.errorf)
		if ok {
			t.Symlinks = map[string]string{}
			for _, kv := range pairs {
				target, ok := p.str(path+".symlinks."+kv.Key.Value, kv.Val)
				if !filepath.IsAbs(kv.Key.Value) {
					p.errorf(kv.Key, path+".symlinks", "link %q must be an absolute path", kv.Key.Value)
				}
				if ok {
					t.Symlinks[kv.Key.Value] = target
				}
			}
		}
	}
	if len(p.errs) > before {
		return nil
	}
	return t
}

// nodeJSON is a test call's params or update as JSON: a mapping converted,
// or a string holding the JSON text itself, kept as written (the order of
// its members, members given twice or in other cases: what a mapping cannot
// say).
func nodeJSON(n *yaml.Node) (json.RawMessage, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if !json.Valid([]byte(n.Value)) {
			return nil, errors.New("a string here must be JSON text")
		}
		return json.RawMessage(n.Value), nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	return jsonValue(v)
}

// ParseCallNode reads a call written in YAML as tests: writes one: a
// string (ParseCall) or a mapping of method, params and updates. path
// names the node in errors.
func ParseCallNode(file, path string, n *yaml.Node) (*TestCall, error) {
	p := &parser{file: file}
	c, err := p.call(path, n)
	if err == nil {
		err = p.err()
	}
	return c, err
}

func (p *parser) call(path string, n *yaml.Node) (*TestCall, error) {
	if n.Kind == yaml.MappingNode {
		f := p.fields(path, n, []string{"method", "params", "updates"})
		if f == nil {
			return nil, nil
		}
		var updates []json.RawMessage
		if u := f["updates"]; u != nil {
			for i, item := range p.list(path+".updates", u, true) {
				raw, err := nodeJSON(item)
				if err != nil {
					return nil, fmt.Errorf("updates[%d]: %v", i, err)
				}
				updates = append(updates, raw)
			}
		}
		p.require(path, n, f, "method", "params")
		if f["method"] == nil || f["params"] == nil {
			return nil, nil
		}
		method, ok := p.str(path+".method", f["method"])
		if !ok {
			return nil, nil
		}
		params, err := nodeJSON(f["params"])
		if err != nil {
			return nil, fmt.Errorf("params: %v", err)
		}
		return &TestCall{Method: method, Params: params, Updates: updates}, checkMethod(method)
	}
	s, ok := p.str(path, n)
	if !ok {
		return nil, nil
	}
	return ParseCall(s)
}

func (p *parser) effect(path string, n *yaml.Node) Effect {
	s, ok := p.str(path, n)
	if !ok {
		return None
	}
	e, err := ParseEffect(s)
	if err != nil {
		p.errorf(n, path, "must be allow, ask or deny, got %q", s)
	}
	return e
}

// list reads a list, or one scalar as a list of one. nonEmpty reports an
// empty list.
func (p *parser) list(path string, n *yaml.Node, nonEmpty bool) []*yaml.Node {
	switch n.Kind {
	case yaml.SequenceNode:
		if len(n.Content) == 0 && nonEmpty {
			p.errorf(n, path, "must not be an empty list")
		}
		out := make([]*yaml.Node, len(n.Content))
		for i, c := range n.Content {
			out[i] = yamlpos.Deref(c)
		}
		return out
	case yaml.MappingNode:
		p.errorf(n, path, "expected a list, got a mapping")
		return nil
	}
	if n.ShortTag() == "!!null" && n.Value != "~" {
		p.errorf(n, path, "expected a list, got an empty value")
		return nil
	}
	return []*yaml.Node{n}
}

func (p *parser) str(path string, n *yaml.Node) (string, bool) {
	if n.Kind == yaml.ScalarNode && n.Value == "~" && n.Style == 0 {
		// YAML reads a plain ~ as null; here it means the home directory.
		return "~", true
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		p.errorf(n, path, "expected a string, got %s", yamlpos.Describe(n))
		return "", false
	}
	return n.Value, true
}

// fields reads mapping n whose keys must be among known; misplaced keys
// are valid elsewhere and say so.
func (p *parser) fields(path string, n *yaml.Node, known []string, misplaced ...string) map[string]*yaml.Node {
	pairs, ok := yamlpos.Mapping(path, n, p.errorf)
	if !ok {
		return nil
	}
	f := make(map[string]*yaml.Node, len(pairs))
	for _, kv := range pairs {
		switch key := kv.Key.Value; {
		case slices.Contains(known, key):
			f[key] = kv.Val
		case slices.Contains(misplaced, key) && key == "lower_layers_may":
			p.errorf(kv.Key, "", "lower_layers_may is only valid in the org layer (%s)", "policy directory files")
		case slices.Contains(misplaced, key) && key == "agent_modes":
			p.errorf(kv.Key, "", "agent_modes is only valid in the org layer (%s)", "policy directory files")
		case slices.Contains(misplaced, key) && key == "include":
			p.errorf(kv.Key, "", "include is only valid in the config's permissions")
		default:
			p.errorf(kv.Key, "", "unknown key %q%s", key, yamlpos.Suggest(key, known))
		}
	}
	return f
}

func (p *parser) require(path string, n *yaml.Node, f map[string]*yaml.Node, keys ...string) {
	for _, k := range keys {
		if f[k] == nil {
			p.errorf(n, path, "missing required key %q", k)
		}
	}
}
