package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy/extract"
)

// Effect is a decision: Allow, Ask or Deny. The zero value None means "no
// decision" (e.g. no rule matched an auxiliary item). Effects are ordered by
// severity, so the most severe of two is their max.
type Effect uint8

const (
	None Effect = iota
	Allow
	Ask
	Deny
)

func (e Effect) String() string {
	switch e {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return "none"
}

// MarshalText writes the effect as allow, ask, deny or none.
func (e Effect) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// ParseEffect reads allow, ask or deny.
func ParseEffect(s string) (Effect, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "ask":
		return Ask, nil
	case "deny":
		return Deny, nil
	}
	return None, fmt.Errorf("unknown decision %q (want allow, ask or deny)", s)
}

// Source says what made a decision, as the audit log records it
// (DESIGN §6): a rule, the layers' default, or a safeguard built into the
// router (a refused relative path, an opaque command, a denied mode). The
// router adds grant and user.
type Source string

const (
	SourceRule    Source = "rule"
	SourceDefault Source = "default"
	SourceBuiltin Source = "builtin"
)

// Built-in rule ids, reported in Decision.Rule when a safeguard rather than
// a policy rule decided. They contain ':' so they never collide with a
// policy rule id.
const (
	// RuleRefused: a request the router refuses outright (a relative fs
	// path, params that do not decode).
	RuleRefused = "acp-router:refused"
	// RuleOpaque: something the router cannot see through, which no allow
	// covers.
	RuleOpaque = "acp-router:opaque"
	// RuleUnknownArguments: a command whose arguments the router does not
	// all understand (Item.Unknown), which no allow rule vouched for.
	RuleUnknownArguments = "acp-router:unknown-arguments"
	// RuleDeniedMode: the session's agent is in a mode listed in
	// deny_modes; nothing is allowed without asking until it is reset.
	RuleDeniedMode = "acp-router:denied-mode"
	// RuleSelfApprovingMode: the mode approves tool calls by itself (the
	// built-in table) and no allow_modes entry allows it.
	RuleSelfApprovingMode = "acp-router:self-approving-mode"
	// RuleUnlistedMode: allow_modes lists the modes of an agent the table
	// does not know, and not this one.
	RuleUnlistedMode = "acp-router:unlisted-mode"
	// RuleUnknownAgent: unknown_agents: refuse, and the router does not
	// know how to keep the agent asking.
	RuleUnknownAgent = "acp-router:unknown-agent"
	// RuleUserCommand: a router command (extract.CommandMethods) that no
	// rule names is allowed: it is the user's own action, and the default
	// is about what agents ask (command.go).
	RuleUserCommand = "acp-router:user-command"
)

// Layer names: the two layers of policy files, and the layer reported for
// built-in safeguards and the built-in default.
const (
	LayerOrg     = "org"
	LayerUser    = "user"
	LayerBuiltin = "builtin"
)

// Methods the policy decides: the agent → client requests of DESIGN §6.
var decidedMethods = []string{
	acp.MethodRequestPermission,
	acp.MethodReadTextFile,
	acp.MethodWriteTextFile,
	acp.MethodTerminalCreate,
	acp.MethodMcpMessage,
}

// methodBit returns the bit of a decided method or a router command
// (extract.CommandMethods, after decidedMethods), 0 for any other.
func methodBit(m string) uint16 {
	for i, x := range decidedMethods {
		if x == m {
			return 1 << i
		}
	}
	for i, x := range extract.CommandMethods {
		if x == m {
			return 1 << (len(decidedMethods) + i)
		}
	}
	return 0
}

// agentMethodBits are the bits of decidedMethods: what agents ask.
var agentMethodBits = uint16(1)<<len(decidedMethods) - 1

// commandMethodBits are the bits of the router's commands.
var commandMethodBits = (uint16(1)<<len(extract.CommandMethods) - 1) << len(decidedMethods)

// methodNames lists every method a rule's method: may name.
func methodNames() string {
	return strings.Join(append(slices.Clone(decidedMethods), extract.CommandMethods...), ", ")
}
