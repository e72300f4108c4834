package sandbox

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/egress"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// Network is the network half of a profile: which hosts the agent's
// process tree reaches through the router's egress proxy. Confined false:
// the policy names no host the kernel can hold for this agent, and its
// network is left as it is.
type Network struct {
	Confined bool `json:"confined"`
	// Deny are the deny rules whose hosts are unreachable.
	Deny []HostRule `json:"deny,omitempty"`
	// AllowOnly: the policy's default is deny, so only the hosts of
	// Allow (its allow and ask rules) and ModelHosts are reachable.
	AllowOnly bool       `json:"allowOnly,omitempty"`
	Allow     []HostRule `json:"allow,omitempty"`
	// ModelHosts are the agent's model API (network.model_hosts, the
	// built-in defaults, the hosts of its *_BASE_URL variables):
	// reachable under AllowOnly; a deny rule still wins.
	ModelHosts []string `json:"modelHosts"`
	// Loopback are the ports of this machine's loopback the agent
	// reaches (network.loopback, and the ports of loopback URLs in the
	// agent's env: its model API on 127.0.0.1).
	Loopback []int `json:"loopback"`
	// DefaultLayer is the layer whose default: deny made AllowOnly.
	DefaultLayer string `json:"-"`
	// WireOnly are the deny rules on hosts that the kernel cannot hold.
	WireOnly []policy.KernelSkip `json:"-"`

	deny, allow []policy.HostRule
	agent       string
	pol         *policy.Policy // derived from
}

// HostRule is one rule of a network profile.
type HostRule struct {
	Rule   string   `json:"rule"`
	Layer  string   `json:"layer"`
	Hosts  []string `json:"hosts"`
	Except []string `json:"except,omitempty"`
}

// DefaultModelHosts are the built-in model API hosts of the agents the
// router knows, by the base name of their command (with the hosts their
// logins refresh tokens at): reachable under an allow-list policy unless a
// deny rule names them. nil for an agent the router does not know.
func DefaultModelHosts(command string) []string {
	switch filepath.Base(command) {
	case "claude-agent-acp", "claude-code-acp", "claude":
		return []string{"api.anthropic.com", "console.anthropic.com", "claude.ai"}
	case "codex-acp", "codex":
		return []string{"api.openai.com", "chatgpt.com", "auth.openai.com"}
	case "gemini":
		return []string{"generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com", "oauth2.googleapis.com"}
	case "opencode":
		return []string{"api.anthropic.com", "api.openai.com", "opencode.ai", "models.dev"}
	}
	return nil
}

// deriveNetwork computes agent's network profile under pol. Problems: a
// deny rule on the agent's model API (an error: it cannot work).
func deriveNetwork(pol *policy.Policy, agent config.Agent) (*Network, []Problem) {
	n := &Network{agent: agent.Name, pol: pol, ModelHosts: []string{}, Loopback: []int{}}
	hosts := agent.Network.ModelHosts
	if hosts == nil {
		hosts = DefaultModelHosts(agent.Command)
	}
	for _, h := range hosts {
		n.addModelHost(h)
	}
	envHosts, envPorts := envEndpoints(agent.Env)
	for _, h := range envHosts {
		n.addModelHost(h)
	}
	for _, p := range append(slices.Clone(agent.Network.Loopback), envPorts...) {
		if !slices.Contains(n.Loopback, p) {
			n.Loopback = append(n.Loopback, p)
		}
	}
	sort.Ints(n.Loopback)
	if pol == nil {
		return n, nil
	}
	var probs []Problem
	kh := pol.KernelHosts()
	n.WireOnly = kh.Skipped
	for _, r := range kh.Deny {
		if !r.AppliesTo(agent.Name) {
			continue
		}
		n.deny = append(n.deny, r)
		n.Deny = append(n.Deny, HostRule{Rule: r.Rule, Layer: r.Layer, Hosts: r.Hosts, Except: r.Except})
		for _, h := range n.ModelHosts {
			if r.Matches(agent.Name, strings.TrimPrefix(h, "*.")) {
				probs = append(probs, Problem{Error: true, Msg: fmt.Sprintf("%s: deny rule %q denies %s, the model API of agent %q: it cannot work under the sandbox; narrow the rule, or declare the agent's network.model_hosts",
					r.Pos, r.Rule, h, agent.Name)})
			}
		}
	}
	if kh.AllowOnly {
		n.AllowOnly, n.DefaultLayer = true, kh.DefaultLayer
		for _, r := range kh.Allow {
			if !r.AppliesTo(agent.Name) {
				continue
			}
			if r.Any {
				// A rule that may let any host through: the kernel can
				// refuse none.
				n.AllowOnly, n.allow, n.Allow = false, nil, nil
				break
			}
			n.allow = append(n.allow, r)
			n.Allow = append(n.Allow, HostRule{Rule: r.Rule, Layer: r.Layer, Hosts: r.Hosts})
		}
	}
	n.Confined = len(n.deny) > 0 || n.AllowOnly
	return n, probs
}

func (n *Network) addModelHost(h string) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h != "" && !slices.Contains(n.ModelHosts, h) {
		n.ModelHosts = append(n.ModelHosts, h)
	}
}

// envEndpoints reads the URLs among the agent's configured env values:
// the hosts of its *_BASE_URL variables (its model API elsewhere: a
// gateway) and the ports of every URL on this machine's loopback (its
// model API on 127.0.0.1, a fake LLM in tests).
func envEndpoints(env map[string]string) (hosts []string, ports []int) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		u, err := url.Parse(env[k])
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "wss") {
			continue
		}
		h := strings.ToLower(u.Hostname())
		if loopbackHost(h) {
			p := u.Port()
			if p == "" {
				p = map[string]string{"http": "80", "ws": "80", "https": "443", "wss": "443"}[u.Scheme]
			}
			if port, err := strconv.Atoi(p); err == nil && port > 0 && port < 65536 {
				ports = append(ports, port)
			}
			continue
		}
		if strings.HasSuffix(k, "_BASE_URL") || strings.HasSuffix(k, "_API_BASE") {
			hosts = append(hosts, h)
		}
	}
	return hosts, ports
}

func loopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// Decide is the profile's verdict on host and port, for the egress
// proxy: a deny rule wins; under an allow-list, the model API and the
// hosts of the allow and ask rules pass; otherwise everything passes.
func (n *Network) Decide(host string, port int) egress.Verdict {
	// The form the policy matches hosts in (HostRule.Matches).
	h, valid := extract.NormDomain(host)
	for i := range n.deny {
		if n.deny[i].Matches(n.agent, h) {
			return egress.Verdict{Rule: "deny rule " + n.deny[i].Rule, ID: n.deny[i].Rule}
		}
	}
	if !n.AllowOnly {
		return egress.Verdict{Allow: true, Rule: "no rule denies it"}
	}
	if !valid {
		return egress.Verdict{Rule: "not a valid host name, under default: deny"}
	}
	for _, m := range n.ModelHosts {
		if h == m || strings.HasPrefix(m, "*.") && strings.HasSuffix(h, m[1:]) {
			return egress.Verdict{Allow: true, Rule: "the model API of agent " + n.agent}
		}
	}
	for i := range n.allow {
		if n.allow[i].Matches(n.agent, h) {
			return egress.Verdict{Allow: true, Rule: n.allow[i].Decision.String() + " rule " + n.allow[i].Rule}
		}
	}
	return egress.Verdict{Rule: fmt.Sprintf("default: deny (%s layer) and no allow or ask rule names it", n.DefaultLayer)}
}

// Reachable says in one line what the agent reaches, for check.
func (n *Network) Reachable() string {
	if !n.Confined {
		return "every host (the policy names none the kernel holds)"
	}
	var s []string
	if n.AllowOnly {
		hosts := slices.Clone(n.ModelHosts)
		for _, r := range n.Allow {
			hosts = append(hosts, r.Hosts...)
		}
		s = append(s, "only "+strings.Join(hosts, ", "))
	} else {
		s = append(s, "every host")
	}
	for _, r := range n.Deny {
		x := " but " + strings.Join(r.Hosts, ", ") + " (rule " + r.Rule + ")"
		if len(r.Except) > 0 {
			x = " but " + strings.Join(r.Hosts, ", ") + " except " + strings.Join(r.Except, ", ") + " (rule " + r.Rule + ")"
		}
		s = append(s, x)
	}
	lo := "no loopback port"
	if len(n.Loopback) > 0 {
		var ps []string
		for _, p := range n.Loopback {
			ps = append(ps, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		}
		lo = "loopback " + strings.Join(ps, ", ")
	}
	return strings.Join(s, "") + "; " + lo + "; names resolved by the router"
}

// NetPlan is the network half of a Plan: the agent runs in a network
// namespace of its own, reaching the router's egress proxy at Socket and
// the host's loopback at Loopback's ports only.
type NetPlan struct {
	Socket   string `json:"socket"`
	Loopback []int  `json:"loopback,omitempty"`
}
