package config

import (
	"slices"
	"testing"
	"time"
)

func TestChanged(t *testing.T) {
	base := func() *Config {
		return &Config{
			Agents: []Agent{{Name: "claude", Command: "claude-agent-acp", Env: map[string]string{"KEY": "secret-1"}},
				{Name: "codex", Command: "codex-acp", StartupTimeout: time.Second}},
			Routing:  Routing{Default: "claude"},
			Commands: []Command{{Name: "review", Agent: "codex", Prompt: "Review. {{input}}"}},
			Audit:    Audit{File: "/var/log/a.jsonl"},
		}
	}
	tests := []struct {
		name string
		edit func(c *Config)
		want []string
	}{
		{"nothing", func(c *Config) {}, nil},
		{"an agent's args", func(c *Config) { c.Agents[1].Args = []string{"--x"} }, []string{"agents.codex.args"}},
		{"an env value", func(c *Config) { c.Agents[0].Env["KEY"] = "secret-2" }, []string{"agents.claude.env"}},
		{"routing default", func(c *Config) { c.Routing.Default = "codex" }, []string{"routing.default"}},
		{"a command's prompt", func(c *Config) { c.Commands[0].Prompt = "x" }, []string{"commands.review"}},
		{"audit file", func(c *Config) { c.Audit.File = "/tmp/b.jsonl" }, []string{"audit.file"}},
		{"agent removed", func(c *Config) { c.Agents = c.Agents[:1] }, []string{"agents",
			"agents.codex.args", "agents.codex.auth", "agents.codex.cancel_timeout", "agents.codex.command", "agents.codex.cwd",
			"agents.codex.env", "agents.codex.env_inherit", "agents.codex.idle_timeout", "agents.codex.lazy",
			"agents.codex.network", "agents.codex.stall_timeout", "agents.codex.startup_timeout", "agents.codex.state_dirs", "agents.codex.title"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(c)
			got := Changed(base().Keys(), c.Keys())
			if !slices.Equal(got, tt.want) {
				t.Errorf("Changed = %q, want %q", got, tt.want)
			}
		})
	}
	for _, v := range base().Keys() {
		if v == "secret-1" {
			t.Error("a value is kept in clear")
		}
	}
}
