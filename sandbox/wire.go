package sandbox

import (
	"fmt"
	"slices"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
)

// What the router says on the wire about the sandbox (issue 29 req. 8),
// in the shape of the draft ACP RFD "Sandbox Capability and Policy"
// (acp/sandbox.go): the capability the router advertises for every agent
// behind it, and the acp.sandbox requirement of a session.

// Capability is what the router enforces for every agent it starts, as
// agentCapabilities.sandbox:
//   - off, or a kernel that cannot confine: host, nothing guaranteed;
//   - enforce or best-effort on a kernel that can: custom (Landlock and
//     a mount namespace), fsIsolation workspace (writes only in the
//     session roots, temp, the agent's state and tool caches; the paths
//     a deny rule hides unreadable), processCaps true (no_new_privs, no
//     ptrace or /proc/PID/root outside the sandbox, capabilities
//     dropped), and netIsolation as netGrade says. In best-effort an
//     agent whose profile cannot be applied starts unconfined until a
//     session requires a sandbox (Require); from then on it is refused as
//     in enforce.
//
// workspace is the draft's nearest grade, and the one Codex's
// workspace-write and Claude Code's sandbox mean: writes confined, reads
// outside the workspace allowed except what the policy hides. _meta says
// so, and what each agent's network reaches, for a client that needs the
// exact reach.
func (c *Confiner) Capability() acp.SandboxCapability {
	if c == nil || c.Mode == config.SandboxOff || c.Mode == "" || Available() != nil {
		return acp.HostSandbox()
	}
	grade, reach := c.netGrade()
	mech := "landlock+mount-namespace"
	if grade != "none" {
		mech += "+network-namespace+egress-proxy"
	}
	return acp.SandboxCapability{
		Mode:       acp.SandboxModeCustom,
		Guarantees: acp.SandboxGuarantees{FsIsolation: "workspace", NetIsolation: grade, ProcessCaps: true},
		Meta: map[string]any{"acp-router": map[string]any{
			"mechanism": mech,
			"mode":      string(c.Mode),
			"reads":     "everywhere except the paths the policy's deny rules hide",
			"writes":    "the session roots, temp, each agent's state and the tool caches",
			"network":   reach,
		}}}
}

// netGrade is the draft's network grade the router can promise for every
// agent the config declares under the policy in force, and what each one
// reaches. restricted only when each of them runs in a network namespace
// of its own behind the egress proxy (the policy denies a host it may
// reach, or allows only listed hosts): one agent left with the host's
// network, or a kernel without network namespaces, makes it none, since
// a session cannot choose which agent it is switched to. Never denyAll:
// a confined agent still reaches its model API.
func (c *Confiner) netGrade() (string, map[string]string) {
	reach := map[string]string{}
	grade := "restricted"
	if len(c.Agents) == 0 {
		grade = "none"
	}
	netErr := netAvailable()
	for _, a := range c.Agents {
		if a.Command == "" {
			reach[a.Name], grade = "its own (not started by the router)", "none"
			continue
		}
		prof, probs := c.Profile(a)
		var why string
		for _, p := range probs {
			if p.Error {
				why = "every host (its profile cannot be applied: " + p.Msg + ")"
				break
			}
		}
		switch {
		case why != "":
		case !prof.Network.Confined:
			why = prof.Network.Reachable()
		case netErr != nil:
			why = "every host (" + netErr.Error() + ")"
		}
		if why != "" {
			reach[a.Name], grade = why, "none"
			continue
		}
		reach[a.Name] = prof.Network.Reachable()
	}
	return grade, reach
}

// Require checks a session's acp.sandbox requirement against the
// capability (acp.Satisfies). A requirement that asks for confinement is
// met only when no agent runs unconfined now (a best-effort fallback), and
// makes every later start refuse to run an agent unconfined. The error is
// acp.UnsatisfiableError.
func (c *Confiner) Require(pol acp.SandboxPolicy) error {
	cap := c.Capability()
	if ok, why := acp.Satisfies(cap, pol); !ok {
		return acp.UnsatisfiableError(cap, why)
	}
	if !pol.Confines() || cap.Mode == acp.SandboxModeHost {
		return nil
	}
	c.required.Store(true)
	var loose []string
	c.started.Range(func(k, v any) bool {
		if s := v.(*started); s.plan == nil {
			loose = append(loose, fmt.Sprintf("%s (%s)", k, s.reason))
		}
		return true
	})
	if len(loose) > 0 {
		slices.Sort(loose)
		return acp.UnsatisfiableError(cap, fmt.Sprintf("agents run unconfined (sandbox.mode: best-effort): %v; they are refused from their next start on", loose))
	}
	return nil
}
