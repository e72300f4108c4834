package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// Error is one problem in a config file, at the position of the YAML node
// that caused it. Load and Parse return every Error they find, joined with
// errors.Join in file order.
type Error = yamlpos.Error

// Load reads and validates the config file at path, with the process
// environment for ${NAME}, ~ and the PATH lookup of agent commands.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(path, data, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if cfg.File, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// Parse validates config bytes. name is the file name used in error
// positions. env supplies ${NAME} expansion, the home directory (HOME), the
// default state directory (XDG_STATE_HOME) and the PATH in which agent
// commands are looked up; pass os.LookupEnv outside tests.
func Parse(name string, data []byte, env func(string) (string, bool)) (*Config, error) {
	p := &parser{file: name, env: env}
	p.home, _ = env("HOME")
	root, err := yamlpos.Document(p.file, data, "config file")
	if err != nil {
		return nil, err
	}
	cfg := p.config(root)
	if len(p.errs) == 0 {
		return cfg, nil
	}
	slices.SortStableFunc(p.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
	})
	errs := make([]error, len(p.errs))
	for i, e := range p.errs {
		errs[i] = e
	}
	return nil, errors.Join(errs...)
}

// parser walks the YAML node tree of one config file and collects every
// problem with the position of the node that caused it.
type parser struct {
	file string
	env  func(string) (string, bool)
	home string
	errs []*Error
	// org: an org policy file's block (ParseOrgTelemetry): ${NAME} is not
	// expanded.
	org bool
}

func (p *parser) pos(n *yaml.Node) Pos { return yamlpos.At(p.file, n) }

// errorf records an error at n. path (e.g. "agents[0].command") names the
// value in the message; "" for messages that name it themselves.
func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	p.errs = append(p.errs, &Error{Pos: p.pos(n), Msg: msg})
}

var (
	topKeys = []string{"version", "agents", "routing", "state_dir", "commands", "handoff", "permissions", "audit", "history", "telemetry", "sandbox", "listen", "sessions", "compare"}
	// unsupportedKeys are sections of the config format (DESIGN.md §4) that
	// this build does not implement yet. They are rejected rather than
	// ignored, so that nobody believes e.g. a permission rule is enforced.
	unsupportedKeys = []string{}
	agentKeys       = []string{"name", "title", "command", "args", "env", "env_inherit", "cwd", "lazy",
		"startup_timeout", "stall_timeout", "cancel_timeout", "idle_timeout", "auth", "state_dirs", "network"}
	routingKeys = []string{"default", "fallback", "rules"}
	ruleKeys    = []string{"when", "agent", "enforce"}
	whenKeys    = []string{"cwd"}

	agentName = regexp.MustCompile(`^[a-z0-9-]+$`)
	envName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (p *parser) config(root *yaml.Node) *Config {
	cfg := &Config{}
	f := p.fields("", root, topKeys, unsupportedKeys...)
	if f == nil {
		return cfg
	}
	p.require("", root, f, "version", "agents")
	if v := f["version"]; v != nil {
		var ok bool
		if cfg.Version, ok = p.integer("version", v); ok && cfg.Version != Version {
			// A newer format: whatever else we would report is noise.
			p.errs = nil
			p.errorf(v, "version", "unsupported config version %d (this build understands %d)", cfg.Version, Version)
			return cfg
		}
	}
	if v := f["agents"]; v != nil {
		cfg.Agents = p.agents(v)
	}
	var names []string
	for _, a := range cfg.Agents {
		if a.Name != "" {
			names = append(names, a.Name)
		}
	}
	if len(names) > 0 {
		cfg.Routing.Default = names[0]
	}
	if v := f["routing"]; v != nil {
		p.routing(&cfg.Routing, v, names)
	}
	cfg.Handoff = Handoff{MaxBytes: DefaultHandoffBytes}
	if v := f["handoff"]; v != nil {
		cfg.Handoff = p.handoff(v)
	}
	if v := f["commands"]; v != nil {
		cfg.Commands = p.commands(v, names)
	}
	if v := f["state_dir"]; v != nil {
		cfg.StateDir = p.path("state_dir", v, false)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = p.defaultStateDir(root)
	}
	if v := f["permissions"]; v != nil {
		cfg.Permissions = p.permissions(v)
	}
	if v := f["audit"]; v != nil {
		cfg.Audit = p.audit(v)
	}
	if cfg.Audit.File == "" {
		cfg.Audit.File = p.defaultAuditFile()
	}
	cfg.History = History{MaxTotalBytes: DefaultHistoryBytes, MaxAge: DefaultHistoryAge}
	if v := f["history"]; v != nil {
		cfg.History = p.history(v)
	}
	if v := f["telemetry"]; v != nil {
		cfg.Telemetry = p.telemetry(v)
	}
	if v := f["sandbox"]; v != nil {
		cfg.Sandbox = p.sandbox(v)
	}
	if v := f["listen"]; v != nil {
		cfg.Listen = p.listen(v)
	}
	if v := f["sessions"]; v != nil {
		cfg.Sessions = p.sessions(v)
	}
	if v := f["compare"]; v != nil {
		cfg.Compare = p.compare(v, names)
	}
	return cfg
}

func (p *parser) defaultStateDir(root *yaml.Node) string {
	if dir, ok := p.env("XDG_STATE_HOME"); ok && filepath.IsAbs(dir) {
		return filepath.Join(dir, "acp-router")
	}
	if !filepath.IsAbs(p.home) {
		p.errorf(root, "", "cannot choose a default state_dir: neither XDG_STATE_HOME nor HOME is an absolute path; set state_dir")
		return ""
	}
	return filepath.Join(p.home, ".local", "state", "acp-router")
}

func (p *parser) agents(n *yaml.Node) []Agent {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "agents", "expected a list of agents, got %s", yamlpos.Describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		p.errorf(n, "agents", "must list at least one agent")
	}
	agents := make([]Agent, 0, len(n.Content))
	seen := map[string]*yaml.Node{}
	for i, item := range n.Content {
		agents = append(agents, p.agent(fmt.Sprintf("agents[%d]", i), yamlpos.Deref(item), seen))
	}
	return agents
}

// agent reads one agents entry. seen maps the names of earlier agents to
// their nodes, for duplicates.
func (p *parser) agent(path string, n *yaml.Node, seen map[string]*yaml.Node) Agent {
	a := Agent{
		EnvInherit:     EnvInheritAll,
		StartupTimeout: DefaultStartupTimeout,
		StallTimeout:   DefaultStallTimeout,
		CancelTimeout:  DefaultCancelTimeout,
		Auth:           AuthAdvertise,
		Pos:            p.pos(n),
	}
	f := p.fields(path, n, agentKeys)
	if f == nil {
		return a
	}
	p.require(path, n, f, "name")
	if v := f["name"]; v != nil {
		a.Name = p.agentName(path+".name", v, seen)
	}
	if f["command"] == nil {
		// Only the conductor's successor has no process of its own; what
		// configures a process then has nothing to configure.
		if a.Name != SuccessorName {
			p.require(path, n, f, "command")
		}
		for _, key := range []string{"args", "env", "env_inherit", "cwd", "state_dirs", "network"} {
			if v := f[key]; v != nil && a.Name == SuccessorName {
				p.errorf(v, path+"."+key, "%q without a command is reached through the conductor (proxy chains): it has no process to configure", SuccessorName)
			}
		}
	}
	if v := f["title"]; v != nil {
		a.Title, _ = p.str(path+".title", v)
	}
	a.Title = cmp.Or(a.Title, a.Name)
	if v := f["cwd"]; v != nil {
		a.Cwd = p.path(path+".cwd", v, true)
	}
	if v := f["command"]; v != nil {
		a.Command = p.command(path+".command", v, a.Cwd)
	}
	if v := f["args"]; v != nil {
		a.Args = p.args(path+".args", v)
	}
	if v := f["env"]; v != nil {
		a.Env = p.envMap(path+".env", v)
	}
	if v := f["env_inherit"]; v != nil {
		a.EnvInherit = EnvInherit(p.enum(path+".env_inherit", v, string(EnvInheritAll), string(EnvInheritMinimal)))
	}
	if v := f["lazy"]; v != nil {
		a.Lazy = p.boolean(path+".lazy", v)
	}
	for key, d := range map[string]*time.Duration{
		"startup_timeout": &a.StartupTimeout,
		"stall_timeout":   &a.StallTimeout,
		"cancel_timeout":  &a.CancelTimeout,
		"idle_timeout":    &a.IdleTimeout,
	} {
		if v := f[key]; v != nil {
			*d = p.duration(path+"."+key, v)
		}
	}
	if v := f["auth"]; v != nil {
		a.Auth = AuthMode(p.enum(path+".auth", v, string(AuthAdvertise), string(AuthHide)))
	}
	if v := f["state_dirs"]; v != nil {
		a.StateDirs, a.StateDirsPos = p.stateDirs(path+".state_dirs", v), p.pos(v)
	}
	if v := f["network"]; v != nil {
		a.Network = p.network(path+".network", v)
	}
	return a
}

func (p *parser) agentName(path string, n *yaml.Node, seen map[string]*yaml.Node) string {
	name, ok := p.str(path, n)
	switch {
	case !ok:
	case !agentName.MatchString(name):
		p.errorf(n, path, "invalid agent name %q: use lowercase letters, digits and -", name)
	case slices.Contains(ReservedNames, name):
		p.errorf(n, path, "%q is reserved for a built-in command; choose another name", name)
	case seen[name] != nil:
		p.errorf(n, path, "duplicate agent name %q (first defined at line %d)", name, seen[name].Line)
	default:
		seen[name] = n
	}
	return name
}

// command reads an agent's command and checks that it can be run.
func (p *parser) command(path string, n *yaml.Node, cwd string) string {
	s, ok := p.expanded(path, n)
	if !ok {
		return ""
	}
	if s == "" {
		p.errorf(n, path, "must not be empty")
		return ""
	}
	pathList, _ := p.env("PATH")
	if err := findCommand(s, cwd, pathList); err != nil {
		p.errorf(n, path, "%v", err)
	}
	return s
}

func (p *parser) args(path string, n *yaml.Node) []string {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "expected a list of strings, got %s", yamlpos.Describe(n))
		return nil
	}
	args := make([]string, len(n.Content))
	for i, item := range n.Content {
		args[i], _ = p.expanded(fmt.Sprintf("%s[%d]", path, i), yamlpos.Deref(item))
	}
	return args
}

func (p *parser) envMap(path string, n *yaml.Node) map[string]string {
	pairs, ok := yamlpos.Mapping(path, n, p.errorf)
	if !ok {
		return nil
	}
	env := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		if !envName.MatchString(kv.Key.Value) {
			p.errorf(kv.Key, path, "invalid environment variable name %q", kv.Key.Value)
			continue
		}
		env[kv.Key.Value], _ = p.expanded(path+"."+kv.Key.Value, kv.Val)
	}
	return env
}

func (p *parser) routing(r *Routing, n *yaml.Node, agents []string) {
	f := p.fields("routing", n, routingKeys)
	if v := f["default"]; v != nil {
		r.Default = p.target("routing.default", v, agents)
		r.DefaultSet = true
	}
	if v := f["fallback"]; v != nil {
		r.Fallback = p.target("routing.fallback", v, agents)
		if r.Fallback != "" && r.Fallback == r.Default {
			p.errorf(v, "routing.fallback", "%q is already the default agent; the fallback must be another one", r.Fallback)
		}
	}
	v := f["rules"]
	if v == nil {
		return
	}
	if v.Kind != yaml.SequenceNode {
		p.errorf(v, "routing.rules", "expected a list of rules, got %s", yamlpos.Describe(v))
		return
	}
	for i, item := range v.Content {
		r.Rules = append(r.Rules, p.rule(fmt.Sprintf("routing.rules[%d]", i), yamlpos.Deref(item), agents))
	}
}

func (p *parser) rule(path string, n *yaml.Node, agents []string) Rule {
	r := Rule{Pos: p.pos(n)}
	f := p.fields(path, n, ruleKeys)
	if f == nil {
		return r
	}
	p.require(path, n, f, "when", "agent")
	if v := f["when"]; v != nil {
		if when := p.fields(path+".when", v, whenKeys); when != nil {
			p.require(path+".when", v, when, "cwd")
			if c := when["cwd"]; c != nil {
				r.Cwd = p.globs(path+".when.cwd", c)
			}
		}
	}
	if v := f["agent"]; v != nil {
		r.Agent = p.target(path+".agent", v, agents)
	}
	if v := f["enforce"]; v != nil {
		r.Enforce = p.boolean(path+".enforce", v)
	}
	return r
}

// target reads a reference to an agent by name.
func (p *parser) target(path string, n *yaml.Node, agents []string) string {
	name, ok := p.str(path, n)
	// Without any agent defined, "agents" already has an error.
	if ok && len(agents) > 0 && !slices.Contains(agents, name) {
		p.errorf(n, path, "unknown agent %q (agents: %s)", name, strings.Join(agents, ", "))
	}
	return name
}

// globs reads a cwd matcher: one glob or a list of them, ~ expanded.
func (p *parser) globs(path string, n *yaml.Node) []string {
	items := []*yaml.Node{n}
	switch n.Kind {
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			p.errorf(n, path, "must list at least one glob")
		}
		items = n.Content
	case yaml.MappingNode:
		p.errorf(n, path, "expected a glob or a list of globs, got %s", yamlpos.Describe(n))
		return nil
	}
	var globs []string
	for i, item := range items {
		item, itemPath := yamlpos.Deref(item), path
		if n.Kind == yaml.SequenceNode {
			itemPath = fmt.Sprintf("%s[%d]", path, i)
		}
		s, ok := p.str(itemPath, item)
		if !ok {
			continue
		}
		g, err := expandHome(s, p.home)
		switch {
		case err != nil:
			p.errorf(item, itemPath, "%v", err)
		case !strings.HasPrefix(g, "/"):
			// A session's cwd is absolute: a relative glob would never match.
			p.errorf(item, itemPath, "glob %q must be absolute (start with / or ~/)", s)
		case !doublestar.ValidatePattern(g):
			p.errorf(item, itemPath, "invalid glob %q", s)
		default:
			globs = append(globs, g)
		}
	}
	return globs
}

// path reads a directory: ${NAME} expanded when withEnv, then ~; it must be
// absolute. "" stays "".
func (p *parser) path(path string, n *yaml.Node, withEnv bool) string {
	var s string
	var ok bool
	if withEnv {
		s, ok = p.expanded(path, n)
	} else {
		s, ok = p.str(path, n)
	}
	if !ok || s == "" {
		return ""
	}
	dir, err := expandHome(s, p.home)
	if err != nil {
		p.errorf(n, path, "%v", err)
		return ""
	}
	if !filepath.IsAbs(dir) {
		p.errorf(n, path, "must be an absolute path (or start with ~/), got %q", s)
		return ""
	}
	return filepath.Clean(dir)
}

// expanded reads a string and expands ${NAME} in it.
func (p *parser) expanded(path string, n *yaml.Node) (string, bool) {
	s, ok := p.str(path, n)
	if !ok {
		return "", false
	}
	if p.org {
		if strings.Contains(s, "${") {
			p.errorf(n, path, "${NAME} is not expanded in org policy files (the user's environment would set it); write the value")
			return "", false
		}
		return s, true
	}
	s, err := expandEnv(s, p.env)
	if err != nil {
		p.errorf(n, path, "%v", err)
		return "", false
	}
	return s, true
}

func (p *parser) str(path string, n *yaml.Node) (string, bool) {
	if n.Kind == yaml.ScalarNode && n.Value == "~" {
		// YAML reads a plain ~ as null; in this file it means the home
		// directory ("cwd: ~").
		return "~", true
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		p.errorf(n, path, "expected a string, got %s", yamlpos.Describe(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) enum(path string, n *yaml.Node, allowed ...string) string {
	s, ok := p.str(path, n)
	if ok && !slices.Contains(allowed, s) {
		p.errorf(n, path, "must be %s, got %q", strings.Join(quote(allowed), " or "), s)
	}
	return s
}

func (p *parser) boolean(path string, n *yaml.Node) bool {
	var b bool
	if n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		p.errorf(n, path, "expected true or false, got %s", yamlpos.Describe(n))
	}
	return b
}

func (p *parser) integer(path string, n *yaml.Node) (int, bool) {
	var i int
	if n.ShortTag() != "!!int" || n.Decode(&i) != nil {
		p.errorf(n, path, "expected an integer, got %s", yamlpos.Describe(n))
		return 0, false
	}
	return i, true
}

func (p *parser) duration(path string, n *yaml.Node) time.Duration {
	s, ok := p.str(path, n)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.errorf(n, path, "invalid duration %q: use a number with a unit, e.g. 30s or 2m", s)
	case d <= 0:
		p.errorf(n, path, "must be positive, got %q", s)
	}
	return d
}

// fields reads mapping n whose keys must be among known; keys in
// unsupported are recognized but rejected. It returns the value of each key
// present, or nil when n is not a mapping.
func (p *parser) fields(path string, n *yaml.Node, known []string, unsupported ...string) map[string]*yaml.Node {
	pairs, ok := yamlpos.Mapping(path, n, p.errorf)
	if !ok {
		return nil
	}
	f := make(map[string]*yaml.Node, len(pairs))
	for _, kv := range pairs {
		switch key := kv.Key.Value; {
		case slices.Contains(known, key):
			f[key] = kv.Val
		case slices.Contains(unsupported, key):
			p.errorf(kv.Key, "", "%q is not supported yet by this build of acp-router", key)
		default:
			p.errorf(kv.Key, "", "unknown key %q%s", key, yamlpos.Suggest(key, slices.Concat(known, unsupported)))
		}
	}
	return f
}

// require reports each key missing from f, the fields of mapping n.
func (p *parser) require(path string, n *yaml.Node, f map[string]*yaml.Node, keys ...string) {
	for _, k := range keys {
		if f[k] == nil {
			p.errorf(n, path, "missing required key %q", k)
		}
	}
}

func quote(ss []string) []string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return q
}
