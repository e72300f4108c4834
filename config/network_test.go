package config

import (
	"slices"
	"strings"
	"testing"
)

// TestNetworkConfig: an agent's network: block is read; a bad host or
// port is an error at its file:line:col.
func TestNetworkConfig(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	y := "version: 1\nagents:\n  - name: claude\n    command: claude-agent-acp\n    network:\n      model_hosts: [API.example.com, \"*.models.example\"]\n      loopback: [11434, 8080]\n  - name: codex\n    command: codex-acp\n"
	cfg, err := Parse("c.yaml", []byte(y), testEnv(bin, nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.Agents[0].Network; !slices.Equal(n.ModelHosts, []string{"api.example.com", "*.models.example"}) || !slices.Equal(n.Loopback, []int{11434, 8080}) {
		t.Errorf("network = %+v", n)
	}
	if n := cfg.Agents[1].Network; n.ModelHosts != nil || n.Loopback != nil {
		t.Errorf("codex network = %+v, want nil (the built-in defaults)", n)
	}
	for _, c := range []struct{ block, want string }{
		{"model_hosts: [https://api.example.com]", "c.yaml:6:21: agents[0].network.model_hosts[0]: invalid host"},
		{"model_hosts: [api.example.com:443]", "c.yaml:6:21: agents[0].network.model_hosts[0]: invalid host"},
		{"loopback: [0]", "c.yaml:6:18: agents[0].network.loopback[0]: invalid port 0"},
		{"loopback: [x]", "c.yaml:6:18: agents[0].network.loopback[0]: expected an integer"},
		{"hosts: [a]", `c.yaml:6:7: unknown key "hosts"`},
	} {
		y := "version: 1\nagents:\n  - name: claude\n    command: claude-agent-acp\n    network:\n      " + c.block + "\n"
		_, err := Parse("c.yaml", []byte(y), testEnv(bin, nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.block, err, c.want)
		}
	}
}
