package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sort"
)

// Keys fingerprints what the config sets, key by key ("agents.codex.args",
// "routing.default", ...), so that two loads of a config can be compared
// without keeping their values: a running router records the fingerprint
// of what it applied, and a reload or `acp-router check` names each key
// that changed since (Changed). Values are hashed, never kept: env values
// are often secrets. The permission policy is not in it: it has its own
// hash and is applied on reload; the org's telemetry: is in it (merged).
func (c *Config) Keys() map[string]string {
	out := map[string]string{}
	put := func(key string, v any) {
		b, _ := json.Marshal(v)
		sum := sha256.Sum256(b)
		out[key] = hex.EncodeToString(sum[:8])
	}
	var names []string
	for _, a := range c.Agents {
		names = append(names, a.Name)
		p := "agents." + a.Name + "."
		put(p+"title", a.Title)
		put(p+"command", a.Command)
		put(p+"args", a.Args)
		put(p+"env", a.Env)
		put(p+"env_inherit", a.EnvInherit)
		put(p+"cwd", a.Cwd)
		put(p+"lazy", a.Lazy)
		put(p+"startup_timeout", a.StartupTimeout)
		put(p+"stall_timeout", a.StallTimeout)
		put(p+"cancel_timeout", a.CancelTimeout)
		put(p+"idle_timeout", a.IdleTimeout)
		put(p+"auth", a.Auth)
		put(p+"state_dirs", a.StateDirs)
		put(p+"network", []any{a.Network.ModelHosts, a.Network.Loopback})
	}
	put("agents", names) // which agents, in which order
	put("routing.default", c.Routing.Default)
	put("routing.fallback", c.Routing.Fallback)
	rules := make([]any, len(c.Routing.Rules))
	for i, r := range c.Routing.Rules {
		rules[i] = []any{r.Cwd, r.Agent, r.Enforce}
	}
	put("routing.rules", rules)
	for _, cmd := range c.Commands {
		put("commands."+cmd.Name, cmd)
	}
	cmds := make([]string, len(c.Commands))
	for i, cmd := range c.Commands {
		cmds[i] = cmd.Name
	}
	put("commands", cmds)
	put("handoff", c.Handoff)
	put("state_dir", c.StateDir)
	put("history", c.History)
	put("audit.file", c.Audit.File)
	put("audit.max_bytes", c.Audit.MaxBytes)
	// The org's telemetry: too (guard.LoadPolicy reads it): a change
	// there needs a restart like the user's.
	put("telemetry", c.EffectiveTelemetry().fingerprint())
	// The mode a running agent was started under: a change needs its
	// restart, like its command.
	sb := []any{c.Sandbox.Mode}
	for _, o := range c.OrgSandbox {
		sb = append(sb, o.Mode, o.Lock)
	}
	put("sandbox", sb)
	put("listen", []any{c.Listen.Address, c.Listen.TLSCert, c.Listen.TLSKey})
	put("sessions", c.Sessions.CancelOnLastDetach)
	put("compare", c.Compare)
	return out
}

// Changed lists the keys whose value differs between two fingerprints
// (Keys), added and removed ones included, sorted. A key whose parent
// list also changed (an agent added or removed) is named by the list and
// the entry: "agents", "agents.gemini.command".
func Changed(old, new map[string]string) []string {
	var out []string
	for k, v := range new {
		if old[k] != v {
			out = append(out, k)
		}
	}
	for k := range old {
		if _, ok := new[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}
