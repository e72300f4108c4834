package sandbox

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/config"
)

type networkCase struct {
	Name   string
	Policy string
	Agent  struct {
		Name    string
		Command string
		Env     map[string]string
		Network struct {
			ModelHosts []string `yaml:"model_hosts"`
			Loopback   []int
		}
	}
	Confined bool
	Reach    []string
	Refuse   map[string]string
	Loopback []int
	WireOnly []string `yaml:"wireOnly"`
	Errors   []string
}

// TestNetworkProfile: the network half of Derive, as data
// (testdata/network.yaml): which hosts the egress proxy lets through and
// which rule refuses the others.
func TestNetworkProfile(t *testing.T) {
	data, err := os.ReadFile("testdata/network.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []networkCase
	if err := yaml.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			a := config.Agent{Name: c.Agent.Name, Command: c.Agent.Command, Env: c.Agent.Env,
				Network: config.Network{ModelHosts: c.Agent.Network.ModelHosts, Loopback: c.Agent.Network.Loopback}}
			prof, probs := Derive(compile(t, c.Policy), a, Env{Home: "/home/u", TempDir: "/tmp", Roots: []string{"/home/u/proj"}})
			n := prof.Network
			if n.Confined != c.Confined {
				t.Errorf("confined = %v, want %v", n.Confined, c.Confined)
			}
			for _, h := range c.Reach {
				if v := n.Decide(h, 443); !v.Allow {
					t.Errorf("%s refused: %s", h, v.Rule)
				}
			}
			for h, rule := range c.Refuse {
				if v := n.Decide(h, 443); v.Allow || !strings.Contains(v.Rule, rule) {
					t.Errorf("%s: %+v, want refused by %q", h, v, rule)
				}
			}
			if c.Loopback != nil && !slices.Equal(n.Loopback, c.Loopback) {
				t.Errorf("loopback = %v, want %v", n.Loopback, c.Loopback)
			}
			var wire []string
			for _, s := range n.WireOnly {
				wire = append(wire, s.Rule)
			}
			if c.WireOnly != nil && !slices.Equal(wire, c.WireOnly) {
				t.Errorf("wire-only = %q, want %q", wire, c.WireOnly)
			}
			var errs []string
			for _, p := range probs {
				if p.Error {
					errs = append(errs, p.Msg)
				}
			}
			checkMsgs(t, "error", errs, c.Errors)
			if n.Confined && !strings.Contains(prof.Summary(), "network: ") {
				t.Errorf("summary %q does not say the network", prof.Summary())
			}
		})
	}
}
