package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// KernelFunc returns the kernel guard of a request an agent sends with a
// method (sandbox.Confiner.Kernel): what the kernel keeps from the
// processes that carry it out; nil: nothing.
type KernelFunc func(agent, method string) extract.KernelGuard

type kernelFunc struct{ f KernelFunc }

// SetKernel makes every later decision credit the kernel with what k
// says it keeps away (policy.Request.Kernel, issue 29 req. 5). Safe on a
// nil Guard.
func (g *Guard) SetKernel(k KernelFunc) {
	if g != nil {
		g.kernel.Store(&kernelFunc{k})
	}
}

func (g *Guard) kernelOf(agent, method string) extract.KernelGuard {
	if k := g.kernel.Load(); k != nil && k.f != nil {
		return k.f(agent, method)
	}
	return nil
}

// MethodAgentStart names the audit records of agent starts under the
// sandbox (issue 29 req. 6): not an ACP method, a router event.
const MethodAgentStart = "acp-router/agent_start"

// RuleSandbox is the rule of an agent start refused because its sandbox
// profile could not be applied (sandbox.mode: enforce).
const RuleSandbox = "acp-router:sandbox"

// AgentStart is one agent start as the sandbox saw it.
type AgentStart struct {
	Agent string
	Mode  string // enforce | best-effort
	// Confined: the agent runs under the profile Hash (Summary says what
	// it holds); else Reason says why not, and Refused whether the start
	// was refused for it.
	Confined bool
	Refused  bool
	Hash     string
	Summary  string
	Reason   string
}

// RecordAgentStart audits an agent start: its sandbox mode, whether it is
// confined, and its profile's hash and summary. Safe on a nil Guard or
// without a policy (nothing is written: there is no audit log).
func (g *Guard) RecordAgentStart(s AgentStart) {
	pol := g.Policy()
	if pol == nil {
		return
	}
	ev := map[string]any{"sandbox": s.Mode, "confined": s.Confined}
	if s.Hash != "" {
		ev["profile"], ev["summary"] = s.Hash, s.Summary
	}
	if s.Reason != "" {
		ev["reason"] = s.Reason
	}
	rec := audit.Record{Agent: s.Agent, Method: MethodAgentStart, Evidence: []any{ev},
		Decision: policy.Allow.String(), Layer: policy.LayerBuiltin, Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	if s.Refused {
		rule := RuleSandbox
		rec.Decision, rec.Rule = policy.Deny.String(), &rule
	}
	now := time.Now()
	rec.Time = now
	if err := g.write(context.Background(), now, rec); err != nil {
		g.opts.Logger.Error("cannot audit an agent start", "agent", s.Agent, "error", err)
	}
}

// MethodSandboxRefused names the audit records of operations an agent's
// tool reported refused while the agent runs confined (issue 29 req. 6).
const MethodSandboxRefused = "acp-router/sandbox_refused"

// What the kernel does not tell the router: a Landlock or mount refusal
// is an errno in the agent's own process, and a masked file reads as
// empty, without any error at all. What the router sees is the agent's
// report of its tool's result (the content of a failed or completed
// tool_call_update): the error messages the sandbox causes are noted from
// there, with the path they name. The path and the errno's name are
// recorded, never the output.
var refusalPhrases = []struct{ text, errno string }{
	{"Permission denied", "EACCES"},
	{"Read-only file system", "EROFS"},
	{"Operation not permitted", "EPERM"},
}

// Bounds of NoteToolResult: the bytes of content read, the refusals
// noted per tool result.
const (
	maxRefusalScan = 64 << 10
	maxRefusalsPer = 4
)

var refusalPath = regexp.MustCompile(`(?:~|/)[^\s:'"‘’“”` + "`" + `,;()\[\]]+`)

// NoteToolResult logs and audits the operations a confined agent's tool
// call reports refused in its result (up, of agent's in session). It
// reads at most maxRefusalScan bytes of text content; the audit record is
// written asynchronously (the caller is the agent's read loop). Safe on a
// nil Guard.
func (g *Guard) NoteToolResult(session, agent string, up *ToolUpdate) {
	if g == nil || up == nil || up.Status != "failed" && up.Status != "completed" || len(up.Content) == 0 {
		return
	}
	kernel := g.kernelOf(agent, acp.MethodRequestPermission)
	if kernel == nil {
		return // not confined: nothing the sandbox could have refused
	}
	if !slices.ContainsFunc(refusalPhrases, func(p struct{ text, errno string }) bool { return bytes.Contains(up.Content, []byte(p.text)) }) {
		return
	}
	pol := g.Policy()
	if pol == nil {
		return
	}
	var blocks []struct {
		Content struct {
			Type, Text string
		}
	}
	if json.Unmarshal(up.Content, &blocks) != nil {
		return
	}
	var evidence []any
	scanned := 0
	for _, b := range blocks {
		text := b.Content.Text
		if b.Content.Type != "text" || scanned >= maxRefusalScan {
			continue
		}
		if len(text) > maxRefusalScan-scanned {
			text = text[:maxRefusalScan-scanned]
		}
		scanned += len(text)
		for _, line := range strings.Split(text, "\n") {
			for _, p := range refusalPhrases {
				i := strings.Index(line, p.text)
				if i < 0 || len(evidence) >= maxRefusalsPer {
					continue
				}
				ev := map[string]any{"reported": "tool result", "errno": p.errno}
				if paths := refusalPath.FindAllString(line[:i], -1); len(paths) > 0 {
					path := paths[len(paths)-1]
					ev["path"] = path
					if kernel.Hides(path) {
						ev["masked"] = true
					}
				}
				evidence = append(evidence, ev)
			}
		}
	}
	if len(evidence) == 0 {
		return
	}
	g.log.Warn("an operation of a confined agent was refused (as its tool reports it; the sandbox may be why)", "agent", agent, "session", session, "toolCall", up.ID, "refused", evidence)
	rule := RuleSandbox
	g.refusals.add(g, func() {}, audit.Record{Time: time.Now(), Session: session, Agent: agent, Method: MethodSandboxRefused, ToolCallID: up.ID,
		Evidence: evidence, Decision: policy.Deny.String(), Rule: &rule, Layer: policy.LayerBuiltin, Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()})
}
