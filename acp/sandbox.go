package acp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/sourcegraph/jsonrpc2"
)

// The draft RFD "Sandbox Capability and Policy" (agent-client-protocol
// PR #1063, docs/rfds/sandbox-capability-policy.mdx): what the runtime
// enforces (SandboxCapability, in agentCapabilities.sandbox), what a client
// requires for a session (SandboxPolicy, the acp.sandbox session config
// option), and the predicate between them (Satisfies). Where the draft is
// unclear, the choice is said next to the type.

// SandboxOptionID is the well-known session config option of the draft.
const SandboxOptionID = "acp.sandbox"

// SandboxUnsatisfiable is the draft's typed error: the data's "code" of
// the JSON-RPC error refusing an acp.sandbox the runtime cannot meet.
const SandboxUnsatisfiable = "sandbox_policy_unsatisfiable"

// Sandbox modes of the draft. "custom" is the only one that names a
// Landlock and mount-namespace confinement: it is neither a container nor
// a chroot nor seccomp.
const (
	SandboxModeHost   = "host"
	SandboxModeCustom = "custom"
)

// Isolation grades, weakest first (the draft orders them).
var (
	fsGrades  = []string{"none", "workspace", "fullRoot"}
	netGrades = []string{"none", "restricted", "denyAll"}
)

// SandboxCapability is agentCapabilities.sandbox.
type SandboxCapability struct {
	Mode       string            `json:"mode"`
	Guarantees SandboxGuarantees `json:"guarantees"`
	Meta       map[string]any    `json:"_meta,omitempty"`
}

// SandboxGuarantees are the capability's guarantees.
type SandboxGuarantees struct {
	FsIsolation  string `json:"fsIsolation"`
	NetIsolation string `json:"netIsolation"`
	ProcessCaps  bool   `json:"processCaps"`
}

// HostSandbox is the capability of a runtime that confines nothing.
func HostSandbox() SandboxCapability {
	return SandboxCapability{Mode: SandboxModeHost, Guarantees: SandboxGuarantees{FsIsolation: "none", NetIsolation: "none"}}
}

// SandboxPolicy is the value of the acp.sandbox option. The draft's
// advisory image and setupCommand are read and ignored: no container is
// involved.
type SandboxPolicy struct {
	Require         string `json:"require"`
	MinFsIsolation  string `json:"minFsIsolation,omitempty"`
	MinNetIsolation string `json:"minNetIsolation,omitempty"`
	Image           string `json:"image,omitempty"`
	SetupCommand    string `json:"setupCommand,omitempty"`
}

// ParseSandboxPolicy reads the value of session/set_config_option for
// acp.sandbox. The draft's value is an object; the stable schema's
// set_config_option carries a value id (a string), which is read as
// {"require": value}, so that a client that only knows selects can set
// it. Anything unknown is an error: a requirement the router cannot read
// is never taken as met.
func ParseSandboxPolicy(raw json.RawMessage) (SandboxPolicy, error) {
	var pol SandboxPolicy
	var id string
	if json.Unmarshal(raw, &id) == nil {
		pol.Require = id
	} else {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&pol); err != nil {
			return pol, fmt.Errorf("acp.sandbox: the value is a SandboxPolicy object or one of any, host, sandboxed: %v", err)
		}
	}
	switch pol.Require {
	case "any", "host", "sandboxed":
	default:
		return pol, fmt.Errorf("acp.sandbox: require is %q; want any, host or sandboxed", pol.Require)
	}
	if pol.MinFsIsolation != "" && !slices.Contains(fsGrades[1:], pol.MinFsIsolation) {
		return pol, fmt.Errorf("acp.sandbox: minFsIsolation is %q; want workspace or fullRoot", pol.MinFsIsolation)
	}
	if pol.MinNetIsolation != "" && !slices.Contains(netGrades[1:], pol.MinNetIsolation) {
		return pol, fmt.Errorf("acp.sandbox: minNetIsolation is %q; want restricted or denyAll", pol.MinNetIsolation)
	}
	return pol, nil
}

// Satisfies is the draft's predicate: whether cap meets pol, and if not
// why. The draft writes it as (any ∨ host ∨ sandboxed) ∧ fs ∧ net, with
// the grades applying whatever require says; an unknown grade in cap
// counts as the weakest.
func Satisfies(cap SandboxCapability, pol SandboxPolicy) (bool, string) {
	switch pol.Require {
	case "any":
	case "host":
		if cap.Mode != SandboxModeHost {
			return false, fmt.Sprintf("the session requires a host runtime; this one runs sandboxed (%s)", cap.Mode)
		}
	case "sandboxed":
		if cap.Mode == SandboxModeHost || cap.Mode == "" {
			return false, "the session requires a sandbox; this runtime confines nothing"
		}
	default:
		return false, fmt.Sprintf("unknown require %q", pol.Require)
	}
	if pol.MinFsIsolation != "" && grade(fsGrades, cap.Guarantees.FsIsolation) < grade(fsGrades, pol.MinFsIsolation) {
		return false, fmt.Sprintf("the session requires filesystem isolation %s; this runtime gives %s", pol.MinFsIsolation, cap.Guarantees.FsIsolation)
	}
	if pol.MinNetIsolation != "" && grade(netGrades, cap.Guarantees.NetIsolation) < grade(netGrades, pol.MinNetIsolation) {
		return false, fmt.Sprintf("the session requires network isolation %s; this runtime gives %s", pol.MinNetIsolation, cap.Guarantees.NetIsolation)
	}
	return true, ""
}

func grade(grades []string, g string) int {
	return max(slices.Index(grades, g), 0)
}

// Confines reports whether pol asks for any confinement (its check is
// more than "any").
func (pol SandboxPolicy) Confines() bool {
	return pol.Require == "sandboxed" || pol.MinFsIsolation != "" || pol.MinNetIsolation != ""
}

// UnsatisfiableError is the draft's sandbox_policy_unsatisfiable error.
// JSON-RPC error codes are integers and the draft names none: the code is
// -32602 (the value cannot be taken), the draft's string is data.code, and
// data.sandbox carries the capability, as the draft asks.
func UnsatisfiableError(cap SandboxCapability, why string) *jsonrpc2.Error {
	return NewError(CodeInvalidParams, SandboxUnsatisfiable+": "+why,
		map[string]any{"code": SandboxUnsatisfiable, "sandbox": cap, "reason": why})
}
