package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseCompare: compare: sets /compare's default agents and limit; a
// default naming an unknown agent, one twice, fewer than two or more than
// the limit, and a limit under two are errors at their line; without the
// block the limit is DefaultCompareMaxAgents; compare and pick are built-in
// commands no agent may be named.
func TestParseCompare(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	cfg, err := Parse("c.yaml", []byte(minimal), testEnv(bin, nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Compare{}); !reflect.DeepEqual(cfg.Compare, want) || cfg.Compare.Max() != DefaultCompareMaxAgents {
		t.Errorf("without compare: got %+v, want %+v", cfg.Compare, want)
	}
	cfg, err = Parse("c.yaml", []byte(minimal+"compare: {default: [codex, claude], max_agents: 3}\n"), testEnv(bin, nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Compare{Default: []string{"codex", "claude"}, MaxAgents: 3}); !reflect.DeepEqual(cfg.Compare, want) {
		t.Errorf("got %+v, want %+v", cfg.Compare, want)
	}
	for _, c := range []struct{ extra, want string }{
		{"compare: {default: [codex, nope]}\n", `c.yaml:7:28: compare.default[1]: unknown agent "nope"`},
		{"compare: {default: [codex, codex]}\n", `c.yaml:7:28: compare.default[1]: agent "codex" is listed twice`},
		{"compare: {default: [codex]}\n", "c.yaml:7:20: compare.default: must list at least two agents, got 1"},
		{"compare: {default: [codex, claude], max_agents: 1}\n", "c.yaml:7:49: compare.max_agents: must be at least 2"},
		{"compare: {defaults: [codex, claude]}\n", `c.yaml:7:11: unknown key "defaults" (did you mean "default"?)`},
		{"compare: [codex]\n", "c.yaml:7:10"},
	} {
		_, err := Parse("c.yaml", []byte(minimal+c.extra), testEnv(bin, nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.extra, err, c.want)
		}
	}
	three := minimal + "  - name: gemini\n    command: gemini\ncompare: {default: [codex, claude, gemini], max_agents: 2}\n"
	if _, err := Parse("c.yaml", []byte(three), testEnv(bin, nil)); err == nil || !strings.Contains(err.Error(), "compare.default: lists 3 agents, more than compare.max_agents (2)") {
		t.Errorf("three defaults over a limit of two: %v", err)
	}
	for _, name := range []string{"compare", "pick"} {
		y := strings.Replace(minimal, "name: codex", "name: "+name, 1)
		if _, err := Parse("c.yaml", []byte(y), testEnv(bin, nil)); err == nil || !strings.Contains(err.Error(), "reserved for a built-in command") {
			t.Errorf("an agent named %s: %v", name, err)
		}
	}
}
