package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// DefaultHandoffBytes bounds the brief an agent gets when it takes over a
// session (DESIGN §5).
const DefaultHandoffBytes = 16 << 10

// Handoff configures the brief a newly used agent gets of the turns it has
// not seen.
type Handoff struct {
	Disabled bool // `handoff: none`
	MaxBytes int
}

// Command is a slash command from `commands:` (DESIGN §4, §5).
type Command struct {
	Name        string // [a-z0-9-]+; not an agent name or a built-in command
	Description string
	Agent       string // the agent that runs it
	// Prompt is the template sent to Agent; {{input}} is what the user typed
	// after the command. Empty: the input itself.
	Prompt string
	// Switch makes Agent the session's active agent instead of running one
	// turn on it.
	Switch bool
	Pos    Pos
}

var (
	handoffKeys = []string{"max_bytes"}
	commandKeys = []string{"name", "description", "agent", "prompt", "switch"}
)

func (p *parser) handoff(n *yaml.Node) Handoff {
	h := Handoff{MaxBytes: DefaultHandoffBytes}
	if n.Kind == yaml.ScalarNode && n.Value == "none" {
		return Handoff{Disabled: true}
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "handoff", `expected "none" or a mapping with max_bytes, got %s`, yamlpos.Describe(n))
		return h
	}
	f := p.fields("handoff", n, handoffKeys)
	if v := f["max_bytes"]; v != nil {
		if b, ok := p.integer("handoff.max_bytes", v); ok {
			if b < 256 {
				p.errorf(v, "handoff.max_bytes", "must be at least 256 (or use `handoff: none`), got %d", b)
			}
			h.MaxBytes = b
		}
	}
	return h
}

// commands reads `commands:`; names must not collide with agents, built-in
// commands or each other.
func (p *parser) commands(n *yaml.Node, agents []string) []Command {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "commands", "expected a list of commands, got %s", yamlpos.Describe(n))
		return nil
	}
	var out []Command
	seen := map[string]*yaml.Node{}
	for i, item := range n.Content {
		path := fmt.Sprintf("commands[%d]", i)
		item = yamlpos.Deref(item)
		c := Command{Pos: p.pos(item)}
		f := p.fields(path, item, commandKeys)
		if f == nil {
			continue
		}
		p.require(path, item, f, "name", "description", "agent")
		if v := f["name"]; v != nil {
			if name, ok := p.str(path+".name", v); ok {
				switch {
				case !agentName.MatchString(name):
					p.errorf(v, path+".name", "%q: use lower-case letters, digits and -", name)
				case slices.Contains(ReservedNames, name):
					p.errorf(v, path+".name", "%q is a built-in command", name)
				case slices.Contains(agents, name):
					p.errorf(v, path+".name", "%q is the name of an agent (/%s TEXT already asks it)", name, name)
				case seen[name] != nil:
					p.errorf(v, path+".name", "duplicate command %q (first defined at line %d)", name, seen[name].Line)
				}
				seen[name] = v
				c.Name = name
			}
		}
		if v := f["description"]; v != nil {
			c.Description, _ = p.str(path+".description", v)
		}
		if v := f["agent"]; v != nil {
			c.Agent = p.target(path+".agent", v, agents)
		}
		if v := f["prompt"]; v != nil {
			c.Prompt, _ = p.str(path+".prompt", v)
			if c.Prompt != "" && strings.Contains(c.Prompt, "{{") && !strings.Contains(c.Prompt, "{{input}}") {
				p.errorf(v, path+".prompt", "unknown template field: the only one is {{input}}")
			}
		}
		if v := f["switch"]; v != nil {
			c.Switch = p.boolean(path+".switch", v)
			if c.Switch && c.Prompt != "" {
				p.errorf(v, path+".switch", "a switching command sends no prompt; drop prompt or switch")
			}
		}
		out = append(out, c)
	}
	return out
}
