package policy

import (
	"cmp"
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/yamlpos"
)

// The agents' mode families are data: agents.yaml is the built-in table
// (a new agent release is a change there), and an org policy file extends
// it with agent_modes: in the same format (Layer's doc).

//go:embed agents.yaml
var agentsData []byte

// builtinFamilies is the built-in table, in the file's order.
var builtinFamilies = mustLoadFamilies("agents.yaml", agentsData)

// familyFields are the keys of an agent's entry (not named *Keys: they
// are documented in agents.yaml, not in the config's page).
var familyFields = []string{"title", "self_approving", "asking", "to_ask"}

func mustLoadFamilies(file string, data []byte) []*agentFamily {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		panic(fmt.Sprintf("%s: %v", file, err))
	}
	p := &parser{file: file}
	var fams []*agentFamily
	if len(root.Content) > 0 {
		fams = p.families("", root.Content[0])
	}
	if err := p.err(); err != nil {
		panic(err)
	}
	return fams
}

// families reads a mapping of agent names to their entries.
func (p *parser) families(path string, n *yaml.Node) []*agentFamily {
	pairs, ok := yamlpos.Mapping(path, n, p.errorf)
	if !ok {
		return nil
	}
	var out []*agentFamily
	for _, kv := range pairs {
		id := kv.Key.Value
		at := strings.TrimPrefix(path+"."+id, ".")
		if !validFamilyID(id) {
			p.errorf(kv.Key, path, "%q is not an agent name (lower-case letters, digits, - and _)", id)
			continue
		}
		if slices.ContainsFunc(out, func(f *agentFamily) bool { return f.id == id }) {
			p.errorf(kv.Key, path, "agent %q is listed twice", id)
			continue
		}
		f := &agentFamily{id: id, pos: p.pos(kv.Key)}
		fields := p.fields(at, yamlpos.Deref(kv.Val), familyFields)
		if fields == nil {
			continue
		}
		if v := fields["title"]; v != nil {
			f.title, _ = p.str(at+".title", v)
		}
		if v := fields["to_ask"]; v != nil {
			f.toAsk, _ = p.str(at+".to_ask", v)
		}
		if v := fields["self_approving"]; v != nil {
			f.self = p.selfModes(at+".self_approving", v)
		}
		if v := fields["asking"]; v != nil {
			for i, item := range p.list(at+".asking", v, false) {
				if m, ok := p.str(fmt.Sprintf("%s.asking[%d]", at, i), item); ok {
					if f.selfMode(m) != nil {
						p.errorf(item, at+".asking", "%q is also a mode that approves by itself", m)
						continue
					}
					f.asking = append(f.asking, m)
				}
			}
		}
		out = append(out, f)
	}
	return out
}

// selfModes reads a mapping of mode names to {kinds, how}.
func (p *parser) selfModes(path string, n *yaml.Node) []selfMode {
	pairs, ok := yamlpos.Mapping(path, n, p.errorf)
	if !ok {
		return nil
	}
	var out []selfMode
	for _, kv := range pairs {
		at := path + "." + kv.Key.Value
		if kv.Key.Value == "" || strings.Contains(kv.Key.Value, ":") {
			p.errorf(kv.Key, path, "%q is not a mode name", kv.Key.Value)
			continue
		}
		f := p.fields(at, yamlpos.Deref(kv.Val), []string{"kinds", "how"})
		if f == nil {
			continue
		}
		p.require(at, kv.Val, f, "kinds", "how")
		m := selfMode{mode: kv.Key.Value}
		if v := f["how"]; v != nil {
			m.how, _ = p.str(at+".how", v)
		}
		if v := f["kinds"]; v != nil {
			if v.Kind == yaml.ScalarNode && v.Value == "all" {
				m.kinds = extract.AllKinds
			} else {
				for i, item := range p.list(at+".kinds", v, true) {
					s, ok := p.str(fmt.Sprintf("%s.kinds[%d]", at, i), item)
					if !ok {
						continue
					}
					if !slices.Contains(extract.AllKinds, extract.Kind(s)) {
						p.errorf(item, at+".kinds", "unknown kind %q (want all or ACP tool kinds: %s)", s, joinKinds(extract.AllKinds))
						continue
					}
					m.kinds = append(m.kinds, extract.Kind(s))
				}
			}
		}
		out = append(out, m)
	}
	return out
}

func validFamilyID(id string) bool {
	if id == "" || id == "*" {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// extendFamilies returns the built-in table extended by the org layer's
// agent_modes: an entry with a built-in name adds its modes to that
// agent's (a self-approving mode of the same name is replaced; a mode
// cannot then both ask and approve by itself) and replaces its title and
// to_ask when it gives them; an entry with a new name is a new agent,
// found before the built-in ones (so that "claude-internal" is not taken
// for claude).
func extendFamilies(builtin, org []*agentFamily) ([]*agentFamily, error) {
	if len(org) == 0 {
		return builtin, nil
	}
	var added []*agentFamily
	out := slices.Clone(builtin)
	for _, o := range org {
		list := &out
		i := slices.IndexFunc(out, func(f *agentFamily) bool { return f.id == o.id })
		if j := slices.IndexFunc(added, func(f *agentFamily) bool { return f.id == o.id }); j >= 0 {
			list, i = &added, j
		}
		if i < 0 {
			added = append(added, o)
			continue
		}
		f, err := extendFamily((*list)[i], o)
		if err != nil {
			return nil, err
		}
		(*list)[i] = f
	}
	return append(added, out...), nil
}

// extendFamily returns f with o's modes added (see extendFamilies).
func extendFamily(base, o *agentFamily) (*agentFamily, error) {
	f := *base
	f.self = slices.Clone(f.self)
	for _, m := range o.self {
		if j := slices.IndexFunc(f.self, func(s selfMode) bool { return s.mode == m.mode }); j >= 0 {
			f.self[j] = m
		} else {
			f.self = append(f.self, m)
		}
	}
	f.asking = slices.Clone(f.asking)
	for _, m := range o.asking {
		if !slices.Contains(f.asking, m) {
			f.asking = append(f.asking, m)
		}
	}
	for _, m := range f.asking {
		if f.selfMode(m) != nil {
			return nil, &yamlpos.Error{Pos: o.pos, Msg: fmt.Sprintf("agent_modes: %s: %q would both ask and approve by itself (allow_modes allows a mode that approves by itself)", o.id, m)}
		}
	}
	f.title = cmp.Or(o.title, f.title)
	f.toAsk = cmp.Or(o.toAsk, f.toAsk)
	return &f, nil
}
