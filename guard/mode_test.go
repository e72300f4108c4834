package guard

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/policy"
)

// TestModes: deny_modes as the router asks about them.
func TestModes(t *testing.T) {
	const wildcard = `permissions:
  default: ask
  deny_modes: ["*:yolo", "claude:bypassPermissions"]
`
	g := newTestGuard(t, wildcard, Options{})
	none := newTestGuard(t, "permissions:\n  default: ask\n", Options{})
	allow := newTestGuard(t, "permissions:\n  default: ask\n  allow_modes: [claude:auto]\n", Options{})
	for _, g := range []*Guard{g, none, allow} {
		g.SetAgentInfo("work", "@agentclientprotocol/claude-agent-acp")
	}
	tests := []struct {
		name        string
		g           *Guard
		agent, mode string
		denied      bool
		rule        string
	}{
		{"agent's own entry", g, "claude", "bypassPermissions", true, policy.RuleDeniedMode},
		{"another agent's entry", g, "gemini", "bypassPermissions", false, ""},
		{"wildcard", g, "gemini", "yolo", true, policy.RuleDeniedMode},
		{"an allowed mode", g, "claude", "default", false, ""},
		{"no deny_modes", none, "claude", "yolo", false, ""},
		{"the built-in table", none, "claude", "auto", true, RuleSelfApprovingMode},
		{"the table by agentInfo", none, "work", "acceptEdits", true, RuleSelfApprovingMode},
		{"the table by agentInfo, codex's modes", none, "work", "agent", false, ""},
		{"allow_modes", allow, "claude", "auto", false, ""},
		{"allow_modes by the table's name", allow, "work", "auto", false, ""},
		{"an agent the table does not know", none, "fake", "auto", false, ""},
		{"no guard", nil, "claude", "yolo", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.g.ModeDenied(tt.agent, tt.mode); got != tt.denied {
				t.Errorf("ModeDenied = %v, want %v", got, tt.denied)
			}
			if f := tt.g.ModeFilter(tt.agent); f != nil && f(tt.mode) != tt.denied {
				t.Errorf("ModeFilter(%s)(%s) = %v", tt.agent, tt.mode, f(tt.mode))
			}
			err := tt.g.ModeRefusal(tt.agent, tt.mode)
			if (err != nil) != tt.denied {
				t.Fatalf("ModeRefusal = %v", err)
			}
			if err == nil {
				return
			}
			var e *jsonrpc2.Error
			if !errors.As(err, &e) || e.Code != acp.CodeInvalidParams {
				t.Fatalf("ModeRefusal = %#v", err)
			}
			var data map[string]string
			jsonUnmarshal(t, *e.Data, &data)
			if want := map[string]string{"agent": tt.agent, "mode": tt.mode, "rule": tt.rule}; !reflect.DeepEqual(data, want) {
				t.Errorf("data %v, want %v", data, want)
			}
			if !strings.Contains(e.Message, "does not allow") || tt.rule == RuleSelfApprovingMode && !strings.Contains(e.Message, "allow_modes") {
				t.Errorf("message %q", e.Message)
			}
		})
	}
	t.Run("ModeFilter is nil when no mode can be denied", func(t *testing.T) {
		if none.ModeFilter("fake") != nil || (*Guard)(nil).ModeFilter("claude") != nil || mustNew(t, nil, Options{}).ModeFilter("claude") != nil {
			t.Error("a filter that filters nothing")
		}
		if g.ModeFilter("fake") == nil || none.ModeFilter("claude") == nil || none.ModeFilter("work") == nil {
			t.Error("no filter with deny_modes, or for an agent of the table")
		}
	})
	t.Run("ModeTarget", func(t *testing.T) {
		modes := []string{"auto", "dontAsk", "acceptEdits", "plan", "default"}
		for _, tc := range []struct {
			g     *Guard
			agent string
			want  string
		}{
			{none, "work", "plan"},  // the first that asks
			{allow, "work", "plan"}, // auto is allowed, but a mode that asks comes first
			{none, "fake", "auto"},  // nothing denied
			{nil, "claude", "auto"}, // no policy
		} {
			if got := tc.g.ModeTarget(tc.agent, modes); got != tc.want {
				t.Errorf("ModeTarget(%s) = %q, want %q", tc.agent, got, tc.want)
			}
		}
		if got := none.ModeTarget("claude", []string{"auto", "bypassPermissions"}); got != "" {
			t.Errorf("ModeTarget with no allowed mode = %q", got)
		}
	})
}

// TestAdmitAgent: unknown_agents: refuse refuses, with an audited -32603
// naming the agent, what the router cannot do and what to do, the agents
// the router cannot keep asking; SetAgentInfo logs such an agent once.
func TestAdmitAgent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	var log syncBuffer
	g := newTestGuard(t, "permissions:\n  default: ask\n  unknown_agents: refuse\n", Options{AuditFile: file, Logger: hclogTo(&log)})
	warn := newTestGuard(t, "permissions:\n  default: ask\n", Options{})
	g.SetAgentInfo("claude", "@agentclientprotocol/claude-agent-acp")
	g.SetAgentInfo("helper", "acp-go-example")
	g.SetAgentInfo("helper", "acp-go-example")
	g.SetAgentInfo("oc", "OpenCode")
	if err := g.AdmitAgent("claude"); err != nil {
		t.Errorf("claude refused: %v", err)
	}
	if err := warn.AdmitAgent("helper"); err != nil || (*Guard)(nil).AdmitAgent("helper") != nil {
		t.Errorf("refused without unknown_agents: refuse: %v", err)
	}
	for _, tc := range []struct{ agent, reason string }{
		{"helper", "the router does not know its modes"},
		{"oc", "asks nothing under its default permissions"},
	} {
		err := g.AdmitAgent(tc.agent)
		var e *jsonrpc2.Error
		if !errors.As(err, &e) || e.Code != acp.CodeInternalError || !strings.Contains(e.Message, `refuses agent "`+tc.agent+`"`) ||
			!strings.Contains(e.Message, tc.reason) || !strings.Contains(e.Message, "unknown_agents: refuse") {
			t.Fatalf("AdmitAgent(%s) = %v", tc.agent, err)
		}
		var data map[string]string
		jsonUnmarshal(t, *e.Data, &data)
		if data["agent"] != tc.agent || data["rule"] != RuleUnknownAgent || !strings.Contains(data["reason"], tc.reason) {
			t.Errorf("data %v", data)
		}
	}
	recs := audittest.ReadLines(t, file)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	requireRecord(t, recs[0], `{"agent":"helper","method":"session/new","evidence":[{"agentInfo":"acp-go-example","problem":"the router does not know its modes, so it cannot keep it out of those that approve by themselves"}],"decision":"deny","rule":"acp-router:unknown-agent","layer":"user","source":"builtin","policyHash":"`+g.Policy().Hash()+`"}`)
	if n := strings.Count(log.String(), "the permission policy cannot keep this agent asking"); n != 2 {
		t.Errorf("%d warnings logged, want 2 (helper once, oc):\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `opencode.json`) {
		t.Errorf("the warning for OpenCode does not say what to do:\n%s", log.String())
	}
}

// TestRecordModeReset: resetting an agent out of a denied mode is
// audited, with the layer that denies the mode and, when the reset
// failed, why.
func TestRecordModeReset(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	g := newTestGuard(t, "", Options{AuditFile: file})
	g.RecordModeReset("rs", "claude", "yolo", "default", nil)
	g.RecordModeReset("rs", "claude", "yolo", "", errors.New("set_mode: refused"))
	g.RecordModeReset("rs", "gemini", "auto", "default", nil) // no layer denies it
	(*Guard)(nil).RecordModeReset("rs", "claude", "yolo", "default", nil)
	mustNew(t, nil, Options{AuditFile: file}).RecordModeReset("rs", "claude", "yolo", "default", nil)
	g.SetAgentInfo("work", "codex-acp")
	g.RecordModeReset("rs", "work", "agent", "read-only", nil) // the built-in table
	recs := audittest.ReadLines(t, file)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	hash := g.Policy().Hash()
	for i, want := range []struct{ record, why string }{
		{`{"session":"rs","agent":"claude","method":"mode","evidence":[{"mode":"yolo","resetTo":"default"}],"decision":"deny","rule":"acp-router:denied-mode","layer":"user","source":"builtin","policyHash":"` + hash + `"}`,
			`deny_modes "claude:yolo" (`},
		{`{"session":"rs","agent":"claude","method":"mode","evidence":[{"mode":"yolo","resetTo":"","resetError":"set_mode: refused"}],"decision":"deny","rule":"acp-router:denied-mode","layer":"user","source":"builtin","policyHash":"` + hash + `"}`,
			`deny_modes "claude:yolo" (`},
		{`{"session":"rs","agent":"gemini","method":"mode","evidence":[{"mode":"auto","resetTo":"default"}],"decision":"deny","rule":"acp-router:denied-mode","layer":"builtin","source":"builtin","policyHash":"` + hash + `"}`,
			""},
		{`{"session":"rs","agent":"work","method":"mode","evidence":[{"mode":"agent","resetTo":"read-only"}],"decision":"deny","rule":"acp-router:self-approving-mode","layer":"builtin","source":"builtin","policyHash":"` + hash + `"}`,
			`it approves every tool call by itself ("auto review": a model approves escalations); the policy allows it only with allow_modes: ["codex:agent"]`},
	} {
		ev := recs[i]["evidence"].([]any)[0].(map[string]any)
		why, _ := ev["why"].(string)
		if !strings.HasPrefix(why, want.why) || (want.why == "") != (why == "") {
			t.Errorf("record %d: why %q, want %q...", i, why, want.why)
		}
		delete(ev, "why")
		requireRecord(t, recs[i], want.record)
	}
	t.Run("the log cannot be written", func(t *testing.T) {
		var log syncBuffer
		g := newTestGuard(t, "", Options{Logger: hclogTo(&log)})
		g.Close()
		g.RecordModeReset("rs", "claude", "yolo", "default", nil)
		if !contains(log.String(), "cannot write the audit log") {
			t.Errorf("log: %s", log.String())
		}
	})
}
