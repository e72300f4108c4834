package sandbox

import (
	"os"
	"sync/atomic"
	"testing"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
)

// TestEgressFollowsReload: a running agent's egress proxy decides by the
// policy in force, not the one of the agent's start; Close removes its
// socket.
func TestEgressFollowsReload(t *testing.T) {
	before := compile(t, "rules:\n  - {id: no-paste, decision: deny, when: {domains: [pastebin.com]}}\n")
	after := compile(t, "rules:\n  - {id: no-example, decision: deny, when: {domains: [example.org]}}\n")
	var cur atomic.Pointer[policy.Policy]
	cur.Store(before)
	c := &Confiner{Mode: config.SandboxEnforce, Policy: cur.Load}
	a := config.Agent{Name: "claude", Command: "claude-agent-acp", Network: config.Network{Loopback: []int{11434}}}
	n, _ := deriveNetwork(cur.Load(), a)
	np, err := c.egressFor(a, n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	decide := c.egress["claude"].proxy.Decide
	if decide("pastebin.com", 443).Allow || !decide("example.org", 443).Allow {
		t.Fatal("the start's policy is not in force")
	}
	cur.Store(after)
	if v := decide("pastebin.com", 443); !v.Allow {
		t.Errorf("after the reload, pastebin.com: %+v", v)
	}
	if v := decide("example.org", 443); v.Allow || v.ID != "no-example" {
		t.Errorf("after the reload, example.org: %+v", v)
	}
	if lb := c.egress["claude"].proxy.Loopback; !lb(11434) || lb(80) {
		t.Error("the loopback ports of the start are not kept")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(np.Socket); !os.IsNotExist(err) {
		t.Errorf("the socket %s is left after Close: %v", np.Socket, err)
	}
}
