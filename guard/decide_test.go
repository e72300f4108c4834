package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/policy"
)

// TestDecide: each method the policy decides, with the evidence the
// session tracked for a permission request's tool call.
func TestDecide(t *testing.T) {
	title := "Read README.md"
	tests := []struct {
		name   string
		agent  string // "" = claude
		mode   string
		track  []ToolUpdate // tracked for agent "claude" before the request
		method string
		params json.RawMessage
		want   outcome
	}{
		{name: "read in the project", method: acp.MethodReadTextFile, params: readParams(testCwd + "/README.md"),
			want: outcome{Allow, "rule", "reads-in-project", "user"}},
		{name: "read a secret", method: acp.MethodReadTextFile, params: readParams(testCwd + "/.env"),
			want: outcome{Deny, "rule", "no-secrets", "user"}},
		{name: "read outside the project", method: acp.MethodReadTextFile, params: readParams("/etc/hosts"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "read outside through a symlink", method: acp.MethodReadTextFile, params: readParams(testCwd + "/etc/hosts"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "read a relative path", method: acp.MethodReadTextFile, params: readParams("README.md"),
			want: outcome{Deny, "builtin", policy.RuleRefused, "builtin"}},
		{name: "write in the project", method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "write /etc", method: acp.MethodWriteTextFile, params: writeParams("/etc/hosts"),
			want: outcome{Deny, "rule", "no-etc-writes", "user"}},
		{name: "write /etc through a symlink", method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/etc/hosts"),
			want: outcome{Deny, "rule", "no-etc-writes", "user"}},
		{name: "terminal: a safe command", method: acp.MethodTerminalCreate, params: terminalParams("git", "status"),
			want: outcome{Allow, "rule", "safe-commands", "user"}},
		{name: "terminal: another command", method: acp.MethodTerminalCreate, params: terminalParams("rm", "-rf", "build"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "terminal: a secret in a pipeline", method: acp.MethodTerminalCreate, params: terminalParams("sh", "-c", "ls && cat .env"),
			want: outcome{Deny, "rule", "no-secrets", "user"}},
		{name: "permission: evidence from the tool call's updates",
			track:  []ToolUpdate{{ID: "t1", Kind: raw(`"read"`), Title: &title, Locations: mustJSON(locations(testCwd + "/README.md"))}},
			method: acp.MethodRequestPermission, params: permParams("t1", nil),
			want: outcome{Allow, "rule", "reads-in-project", "user"}},
		{name: "permission: a secret in an earlier update",
			track: []ToolUpdate{
				{ID: "t1", Kind: raw(`"read"`), RawInput: raw(`{"file_path":"/p/.env"}`)},
				{ID: "t1", Status: "in_progress"},
			},
			method: acp.MethodRequestPermission, params: permParams("t1", map[string]any{"kind": "read", "locations": locations(testCwd + "/README.md")}),
			want: outcome{Deny, "rule", "no-secrets", "user"}},
		{name: "permission: another tool call's updates are not evidence",
			track:  []ToolUpdate{{ID: "t2", Kind: raw(`"read"`), RawInput: raw(`{"file_path":"/p/.env"}`)}},
			method: acp.MethodRequestPermission, params: permParams("t1", map[string]any{"kind": "read", "locations": locations(testCwd + "/README.md")}),
			want: outcome{Allow, "rule", "reads-in-project", "user"}},
		{name: "permission: another agent's updates are not evidence", agent: "codex",
			track:  []ToolUpdate{{ID: "t1", Kind: raw(`"read"`), RawInput: raw(`{"file_path":"/p/.env"}`)}},
			method: acp.MethodRequestPermission, params: permParams("t1", map[string]any{"kind": "read", "locations": locations(testCwd + "/README.md")}),
			want: outcome{Allow, "rule", "reads-in-project", "user"}},
		{name: "permission: an edit in the project", method: acp.MethodRequestPermission,
			params: permParams("t1", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")}),
			want:   outcome{Ask, "default", "", "user"}},
		// deny_modes: nothing is allowed without asking; deny rules still deny.
		{name: "a denied mode: an allow is asked about", mode: "yolo", method: acp.MethodReadTextFile, params: readParams(testCwd + "/README.md"),
			want: outcome{Ask, "builtin", policy.RuleDeniedMode, "user"}},
		{name: "a mode that approves by itself: an allow is asked about", mode: "auto", method: acp.MethodReadTextFile, params: readParams(testCwd + "/README.md"),
			want: outcome{Ask, "builtin", policy.RuleSelfApprovingMode, "builtin"}},
		{name: "a mode that asks: allowed", mode: "default", method: acp.MethodReadTextFile, params: readParams(testCwd + "/README.md"),
			want: outcome{Allow, "rule", "reads-in-project", "user"}},
		{name: "a denied mode: a deny stays", mode: "yolo", method: acp.MethodReadTextFile, params: readParams(testCwd + "/.env"),
			want: outcome{Deny, "rule", "no-secrets", "user"}},
	}
	g := newTestGuard(t, "", Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSession(testCwd, nil)
			for _, up := range tt.track {
				s.Track("rs", "claude", &up)
			}
			agent := cmpOr(tt.agent, "claude")
			v := g.Decide(t.Context(), s, Request{SessionID: "rs", Agent: agent, Mode: tt.mode, Method: tt.method, Params: tt.params})
			if got := outcomeOf(v); got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, tt.want)
			}
			if v.Method != tt.method || v.SessionID != "rs" || v.Agent != agent {
				t.Errorf("verdict about %s %s %s", v.Method, v.SessionID, v.Agent)
			}
			if tt.method == acp.MethodRequestPermission && v.ToolCallID != "t1" {
				t.Errorf("ToolCallID = %q, want t1", v.ToolCallID)
			}
		})
	}
}

func cmpOr(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// TestDecideNoPolicy: without a policy in force (or a guard) the editor
// decides; nothing is audited.
func TestDecideNoPolicy(t *testing.T) {
	for name, g := range map[string]*Guard{"nil guard": nil, "no policy": mustNew(t, nil, Options{})} {
		t.Run(name, func(t *testing.T) {
			for _, s := range []*Session{nil, NewSession(testCwd, nil)} {
				v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/etc/hosts")})
				if got, want := outcomeOf(v), (outcome{Ask, "builtin", "", "builtin"}); got != want {
					t.Errorf("Decide = %+v, want %+v", got, want)
				}
			}
			if g.Decides(acp.MethodReadTextFile) || g.Enforcing() || g.Policy() != nil {
				t.Error("a guard without a policy decides")
			}
		})
	}
}

func mustNew(t *testing.T, p *policy.Policy, opts Options) *Guard {
	t.Helper()
	g, err := New(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// TestDecides: the methods the policy decides, once one is in force.
func TestDecides(t *testing.T) {
	g := newTestGuard(t, "", Options{})
	for method, want := range map[string]bool{
		acp.MethodRequestPermission: true, acp.MethodReadTextFile: true, acp.MethodWriteTextFile: true,
		acp.MethodTerminalCreate: true, acp.MethodTerminalOutput: false, acp.MethodSessionUpdate: false, "_x/y": false,
	} {
		if got := g.Decides(method); got != want {
			t.Errorf("Decides(%s) = %v, want %v", method, got, want)
		}
	}
}

// TestDecideNilSession: a nil *Session keeps nothing; a decision about it
// is the policy's alone (no cwd: nothing is in the project).
func TestDecideNilSession(t *testing.T) {
	g := newTestGuard(t, "", Options{})
	tests := []struct {
		name   string
		method string
		params json.RawMessage
		want   outcome
	}{
		{"deny rules apply", acp.MethodReadTextFile, readParams(testCwd + "/.env"), outcome{Deny, "rule", "no-secrets", "user"}},
		{"no project to allow in", acp.MethodReadTextFile, readParams(testCwd + "/README.md"), outcome{Ask, "default", "", "user"}},
		{"permission request", acp.MethodRequestPermission, permParams("t1", map[string]any{"kind": "edit", "locations": locations("/etc/x")}),
			outcome{Deny, "rule", "no-etc-writes", "user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := g.Decide(t.Context(), nil, Request{Agent: "claude", Method: tt.method, Params: tt.params})
			if got := outcomeOf(v); got != tt.want {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
			if err := g.Record(v, AllowAlways); err != nil {
				t.Errorf("Record: %v", err)
			}
		})
	}
	var s *Session
	s.Track("rs", "claude", &ToolUpdate{ID: "t1"})
	s.EndTurn()
	if _, _, _, ok := s.Tool("rs", "claude", "t1"); ok {
		t.Error("a nil session keeps a tool call")
	}
	if ev := s.Evidence("rs", "claude", []string{"t1"}); len(ev) != 0 {
		t.Errorf("a nil session has evidence %v", ev)
	}
}

// TestGrants: an "always" choice of the user decides the later requests
// its evidence covers, in this session, for this agent; grants outlive the
// turn; deny rules still win over an allow grant.
func TestGrants(t *testing.T) {
	editA := permParams("t1", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")})
	tests := []struct {
		name   string
		choice string
		agent  string // of the later request; "" = claude
		endTrn bool
		method string
		params json.RawMessage
		want   outcome
	}{
		{name: "allow_always: the same write is allowed", choice: AllowAlways, method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"),
			want: outcome{Allow, "grant", "", "session"}},
		{name: "allow_always: a later permission request too", choice: AllowAlways, method: acp.MethodRequestPermission,
			params: permParams("t9", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")}),
			want:   outcome{Allow, "grant", "", "session"}},
		{name: "allow_always: outlives the turn", choice: AllowAlways, endTrn: true, method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"),
			want: outcome{Allow, "grant", "", "session"}},
		{name: "allow_always: another file is asked about", choice: AllowAlways, method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/b.go"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "allow_always: another agent is asked", choice: AllowAlways, agent: "codex", method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "reject_always: the same write is denied", choice: RejectAlways, method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"),
			want: outcome{Deny, "grant", "", "session"}},
		{name: "reject_always: even what the policy allows", choice: RejectAlways, method: acp.MethodRequestPermission,
			params: permParams("t9", map[string]any{"kind": "read", "locations": locations(testCwd + "/README.md")}),
			want:   outcome{Deny, "grant", "", "session"}},
		{name: "allow_once: no grant", choice: AllowOnce, endTrn: true, method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "reject_once: no grant", choice: RejectOnce, method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"),
			want: outcome{Ask, "default", "", "user"}},
	}
	g := newTestGuard(t, "", Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSession(testCwd, nil)
			first := editA
			if tt.choice == RejectAlways && tt.method == acp.MethodRequestPermission {
				// The user rejected reading README for good (asked about
				// it because the agent offered only allow_always, say).
				first = permParams("t1", map[string]any{"kind": "read", "locations": locations(testCwd + "/README.md")})
			}
			v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission, Params: first})
			if err := g.Record(v, tt.choice); err != nil {
				t.Fatal(err)
			}
			if v.Source != "user" {
				t.Errorf("the user's choice recorded with source %q", v.Source)
			}
			if tt.endTrn {
				s.EndTurn()
			}
			v = g.Decide(t.Context(), s, Request{Agent: cmpOr(tt.agent, "claude"), Method: tt.method, Params: tt.params})
			if got := outcomeOf(v); got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, tt.want)
			}
		})
	}
	t.Run("a deny rule wins over an allow grant", func(t *testing.T) {
		s := NewSession(testCwd, nil)
		// The user allowed, for good, a tool call that the deny rule
		// does not see (a plain write in the project)...
		v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission, Params: editA})
		g.Record(v, AllowAlways)
		// ...which does not cover the same file through a link into /etc.
		v = g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodWriteTextFile, Params: writeParams(testCwd + "/etc/hosts")})
		if got, want := outcomeOf(v), (outcome{Deny, "rule", "no-etc-writes", "user"}); got != want {
			t.Errorf("Decide = %+v, want %+v", got, want)
		}
	})
	t.Run("grants are bounded, the oldest forgotten", func(t *testing.T) {
		s := NewSession(testCwd, nil)
		for i := range maxGrants + 1 {
			p := permParams("t", map[string]any{"kind": "edit", "locations": locations(fmt.Sprintf("%s/src/f%d.go", testCwd, i))})
			g.Record(g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission, Params: p}), AllowAlways)
		}
		if len(s.grants) != maxGrants {
			t.Errorf("%d grants kept, want %d", len(s.grants), maxGrants)
		}
		s.EndTurn() // the turn's approvals would allow them all
		for i, want := range map[int]Effect{0: Ask, 1: Allow, maxGrants: Allow} {
			v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodWriteTextFile, Params: writeParams(fmt.Sprintf("%s/src/f%d.go", testCwd, i))})
			if v.Effect != want {
				t.Errorf("write f%d: %v, want %v", i, v.Effect, want)
			}
		}
	})
}

// TestApprovals: a permission request allowed (by the policy or the user)
// covers the direct calls that carry it out in the same turn; EndTurn
// forgets it.
func TestApprovals(t *testing.T) {
	editA := permParams("t1", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")})
	tests := []struct {
		name    string
		first   json.RawMessage // a permission request
		choice  string          // the user's; "" = the policy decided
		endTurn bool
		// answeredLate: the turn ends between the decision and the
		// user's answer (the next turn has begun when it comes).
		answeredLate bool
		// decidedLate: the turn ends between the request's arrival (its
		// Request.Turn) and its decision (the router decides on the
		// session's sequencer, after the agent's read loop has read the
		// turn's answer).
		decidedLate bool
		agent       string
		method      string
		params      json.RawMessage
		want        outcome
	}{
		{name: "allowed by the user: the write it announced", first: editA, choice: AllowOnce,
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"), want: outcome{Allow, "user", "", "turn"}},
		{name: "not after the turn", first: editA, choice: AllowOnce, endTurn: true,
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"), want: outcome{Ask, "default", "", "user"}},
		{name: "answered after its turn: not the next turn's", first: editA, choice: AllowOnce, answeredLate: true,
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"), want: outcome{Ask, "default", "", "user"}},
		{name: "decided after its turn: not the next turn's", first: editA, choice: AllowOnce, decidedLate: true,
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"), want: outcome{Ask, "default", "", "user"}},
		{name: "not another file", first: editA, choice: AllowOnce,
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/b.go"), want: outcome{Ask, "default", "", "user"}},
		{name: "not another agent", first: editA, choice: AllowOnce, agent: "codex",
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"), want: outcome{Ask, "default", "", "user"}},
		{name: "not another permission request", first: editA, choice: AllowOnce,
			method: acp.MethodRequestPermission, params: editA, want: outcome{Ask, "default", "", "user"}},
		{name: "rejected: no approval", first: editA, choice: RejectOnce,
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"), want: outcome{Ask, "default", "", "user"}},
		{name: "cancelled: no approval", first: editA, choice: Cancelled,
			method: acp.MethodWriteTextFile, params: writeParams(testCwd + "/src/a.go"), want: outcome{Ask, "default", "", "user"}},
		{name: "asked, not answered yet: no approval",
			first:  permParams("t1", map[string]any{"kind": "execute", "rawInput": map[string]any{"command": "git status && make"}}),
			method: acp.MethodTerminalCreate, params: terminalParams("make"), want: outcome{Ask, "default", "", "user"}},
		{name: "allowed by the user: covers a command of it",
			first: permParams("t1", map[string]any{"kind": "execute", "rawInput": map[string]any{"command": "git status && make"}}), choice: AllowOnce,
			method: acp.MethodTerminalCreate, params: terminalParams("make"), want: outcome{Allow, "user", "", "turn"}},
	}
	g := newTestGuard(t, "", Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSession(testCwd, nil)
			arrived := s.Turn()
			if tt.decidedLate {
				s.EndTurn()
			}
			v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission, Params: tt.first, Turn: arrived})
			if tt.answeredLate {
				s.EndTurn()
			}
			if err := g.Record(v, tt.choice); err != nil {
				t.Fatal(err)
			}
			if tt.endTurn {
				s.EndTurn()
			}
			v = g.Decide(t.Context(), s, Request{Agent: cmpOr(tt.agent, "claude"), Method: tt.method, Params: tt.params})
			if got := outcomeOf(v); got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, tt.want)
			}
		})
	}
	t.Run("allowed by a rule: covers the direct call", func(t *testing.T) {
		// The policy allows the permission request (reads in the project)
		// and, by the same rule, the read: the verdict says which.
		s := NewSession(testCwd, nil)
		v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission,
			Params: permParams("t1", map[string]any{"kind": "read", "locations": locations(testCwd + "/README.md")})})
		if v.Effect != Allow {
			t.Fatalf("permission request: %v", v.Effect)
		}
		g.Record(v, "")
		if len(s.approvals) != 1 || s.approvals[0].source != "rule" || s.approvals[0].rule != "reads-in-project" {
			t.Errorf("approvals %+v", s.approvals)
		}
	})
	t.Run("a deny rule is re-checked", func(t *testing.T) {
		s := NewSession(testCwd, nil)
		v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission,
			Params: permParams("t1", map[string]any{"kind": "read", "locations": locations(testCwd + "/.env")})})
		g.Record(v, AllowOnce) // the user overrode nothing: a deny is not asked about, but say it were
		v = g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams(testCwd + "/.env")})
		if got, want := outcomeOf(v), (outcome{Deny, "rule", "no-secrets", "user"}); got != want {
			t.Errorf("Decide = %+v, want %+v", got, want)
		}
	})
	t.Run("approvals are bounded, the oldest forgotten", func(t *testing.T) {
		s := NewSession(testCwd, nil)
		for i := range maxApprovals + 1 {
			p := permParams("t", map[string]any{"kind": "edit", "locations": locations(fmt.Sprintf("%s/src/f%d.go", testCwd, i))})
			g.Record(g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission, Params: p}), AllowOnce)
		}
		if len(s.approvals) != maxApprovals {
			t.Errorf("%d approvals kept, want %d", len(s.approvals), maxApprovals)
		}
		for i, want := range map[int]Effect{0: Ask, 1: Allow, maxApprovals: Allow} {
			v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodWriteTextFile, Params: writeParams(fmt.Sprintf("%s/src/f%d.go", testCwd, i))})
			if v.Effect != want {
				t.Errorf("write f%d: %v, want %v", i, v.Effect, want)
			}
		}
	})
}

// TestEvidenceOverflow: a tool call with more updates than the session
// keeps, or past the bound on tool calls, is never allowed without asking
// (not by a rule, not by a grant); deny rules in what is kept still apply.
func TestEvidenceOverflow(t *testing.T) {
	readme := ToolUpdate{ID: "t1", Kind: raw(`"read"`), Locations: mustJSON(locations(testCwd + "/README.md"))}
	edit := ToolUpdate{ID: "t1", Kind: raw(`"edit"`), Locations: mustJSON(locations(testCwd + "/src/a.go"))}
	req := func(kind, path string) Request {
		return Request{SessionID: "rs", Agent: "claude", Method: acp.MethodRequestPermission, Params: permParams("t1", map[string]any{"kind": kind, "locations": locations(path)})}
	}
	tests := []struct {
		name    string
		updates int
		up      ToolUpdate
		grant   bool // the user allowed this edit for good before
		req     Request
		want    outcome
	}{
		{name: "as many updates as kept: allowed", updates: maxToolUpdates, up: readme, req: req("read", testCwd+"/README.md"),
			want: outcome{Allow, "rule", "reads-in-project", "user"}},
		{name: "one more: asked", updates: maxToolUpdates + 1, up: readme, req: req("read", testCwd+"/README.md"),
			want: outcome{Ask, "builtin", policy.RuleOpaque, "builtin"}},
		{name: "as many as kept: a grant allows it", updates: maxToolUpdates, up: edit, grant: true, req: req("edit", testCwd+"/src/a.go"),
			want: outcome{Allow, "grant", "", "session"}},
		{name: "one more: a grant does not allow it", updates: maxToolUpdates + 1, up: edit, grant: true, req: req("edit", testCwd+"/src/a.go"),
			want: outcome{Ask, "default", "", "user"}},
		{name: "one more: the request's own deny evidence", updates: maxToolUpdates + 1, up: readme, req: req("read", testCwd+"/.env"),
			want: outcome{Deny, "rule", "no-secrets", "user"}},
	}
	g := newTestGuard(t, "", Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSession(testCwd, nil)
			if tt.grant {
				v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodRequestPermission,
					Params: permParams("t0", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")})})
				g.Record(v, AllowAlways)
			}
			for range tt.updates {
				s.Track("rs", "claude", &tt.up)
			}
			v := g.Decide(t.Context(), s, tt.req)
			if got := outcomeOf(v); got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, tt.want)
			}
			ev := s.Evidence("rs", "claude", []string{"t1"})
			if overflow := tt.updates > maxToolUpdates; overflow == (len(ev["t1"]) > 0) {
				t.Errorf("Evidence has %d updates of t1 after %d", len(ev["t1"]), tt.updates)
			}
		})
	}
	t.Run("too many tool calls: the next is asked about", func(t *testing.T) {
		s := NewSession(testCwd, nil)
		for i := range maxTools {
			s.Track("rs", "claude", &ToolUpdate{ID: fmt.Sprint("busy", i), Status: "pending"})
		}
		s.Track("rs", "claude", &readme)
		s.Track("rs", "claude", &readme)
		if got, want := outcomeOf(g.Decide(t.Context(), s, req("read", testCwd+"/README.md"))), (outcome{Ask, "builtin", policy.RuleOpaque, "builtin"}); got != want {
			t.Errorf("Decide = %+v, want %+v", got, want)
		}
	})
	t.Run("too many tool calls: finished ones are forgotten first", func(t *testing.T) {
		s := NewSession(testCwd, nil)
		for i := range maxTools {
			s.Track("rs", "claude", &ToolUpdate{ID: fmt.Sprint("done", i), Status: "completed"})
		}
		s.Track("rs", "claude", &readme)
		if got, want := outcomeOf(g.Decide(t.Context(), s, req("read", testCwd+"/README.md"))), (outcome{Allow, "rule", "reads-in-project", "user"}); got != want {
			t.Errorf("Decide = %+v, want %+v", got, want)
		}
		if _, _, _, ok := s.Tool("rs", "claude", "done0"); ok {
			t.Error("a completed tool call kept past the bound")
		}
	})
}

// TestSessionTool: what the session keeps of a tool call for a deny
// notice: the latest title, kind and content.
func TestSessionTool(t *testing.T) {
	s := NewSession(testCwd, []string{"/lib"})
	t1, t2 := "Read", "Read README.md"
	s.Track("rs", "claude", &ToolUpdate{ID: "t1", Kind: raw(`"read"`), Title: &t1, Content: raw(`[{"type":"content","content":{"type":"text","text":"a"}}]`)})
	s.Track("rs", "claude", &ToolUpdate{ID: "t1", Title: &t2, Status: "in_progress"})
	s.Track("rs", "claude", &ToolUpdate{ID: ""}) // no id: ignored
	title, kind, content, ok := s.Tool("rs", "claude", "t1")
	if !ok || title != t2 || kind != "read" || string(content) != `[{"type":"content","content":{"type":"text","text":"a"}}]` {
		t.Errorf("Tool = %q %q %s %v", title, kind, content, ok)
	}
	if _, _, _, ok := s.Tool("rs", "codex", "t1"); ok {
		t.Error("another agent's tool call")
	}
	ev := s.Evidence("rs", "claude", []string{"t1", "t2"})
	if len(ev) != 1 || len(ev["t1"]) != 2 {
		t.Fatalf("Evidence = %v", ev)
	}
	var first map[string]any
	json.Unmarshal(ev["t1"][0], &first)
	want := map[string]any{"kind": "read", "title": "Read", "content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": "a"}}}}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("first update kept as %s", ev["t1"][0])
	}
	if b := EncodeEvidence(&ToolUpdate{Kind: raw(`{`)}); b != nil {
		t.Errorf("EncodeEvidence of invalid JSON = %s", b)
	}
	// An update that cannot be encoded is evidence the router cannot
	// keep: the tool call is asked about.
	s.Track("rs", "claude", &ToolUpdate{ID: "t3", RawInput: raw(`{"broken`)})
	if ev := s.Evidence("rs", "claude", []string{"t3"}); len(ev) != 0 {
		t.Errorf("Evidence of a tool call with a broken update = %v", ev)
	}
	s.EndTurn()
	if _, _, _, ok := s.Tool("rs", "claude", "t1"); ok {
		t.Error("EndTurn kept a tool call")
	}
}

// TestFailClosed: a decision that cannot finish is a deny for that request
// only: a resolver that blocks (the timeout; past maxStuck, at once), the
// caller giving up, a panic. The blocking ones in a synctest bubble: the
// timeout passes on the bubble's clock, and a released decision has ended
// once the bubble is idle.
func TestFailClosed(t *testing.T) {
	t.Run("a blocked resolver times out", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fs := newBlockFS("/slow/")
			g := newTestGuard(t, "", Options{FS: fs, DecideTimeout: 50 * time.Millisecond})
			start := time.Now()
			v := g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/slow/x")})
			if got, want := outcomeOf(v), (outcome{Deny, "builtin", RuleTimeout, "builtin"}); got != want {
				t.Errorf("Decide = %+v, want %+v", got, want)
			}
			if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
				t.Errorf("decided in %v, want the timeout (50ms)", d)
			}
			if g.stuck.Load() != 1 {
				t.Errorf("stuck = %d, want 1", g.stuck.Load())
			}
			// Other paths are decided meanwhile.
			v = g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams(testCwd + "/README.md")})
			if v.Effect != Allow {
				t.Errorf("a read in the project while another waits: %v %s", v.Effect, v.Rule)
			}
			close(fs.release)
			synctest.Wait() // the released resolver answers, the stuck decision ends
			if n := g.stuck.Load(); n != 0 {
				t.Errorf("stuck = %d once released, want 0", n)
			}
		})
	})
	t.Run("past maxStuck, decisions are denied at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fs := newBlockFS("/slow/")
			g := newTestGuard(t, "", Options{FS: fs, DecideTimeout: 50 * time.Millisecond})
			var wg sync.WaitGroup
			for range maxStuck {
				wg.Go(func() {
					g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/slow/x")})
				})
			}
			wg.Wait()
			if g.stuck.Load() != maxStuck {
				t.Fatalf("stuck = %d, want %d", g.stuck.Load(), maxStuck)
			}
			g.opts.DecideTimeout = time.Hour // at once means without waiting for it
			start := time.Now()
			v := g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams(testCwd + "/README.md")})
			if got, want := outcomeOf(v), (outcome{Deny, "builtin", RuleTimeout, "builtin"}); got != want || !strings.Contains(v.Message, "still waiting") {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("decided in %v", d)
			}
			if g.Denies(t.Context(), NewSession(testCwd, nil), "claude", acp.MethodReadTextFile, readParams(testCwd+"/README.md"), nil) != true {
				t.Error("Denies: a stuck guard does not deny")
			}
			close(fs.release)
			synctest.Wait() // the released resolver answers, the stuck decisions end
			if n := g.stuck.Load(); n != 0 {
				t.Errorf("stuck = %d once released, want 0", n)
			}
			v = g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams(testCwd + "/README.md")})
			if v.Effect != Allow {
				t.Errorf("after the resolver answered: %v %s", v.Effect, v.Rule)
			}
		})
	})
	t.Run("the caller gives up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fs := newBlockFS("/slow/")
			g := newTestGuard(t, "", Options{FS: fs, DecideTimeout: time.Hour})
			ctx, cancel := context.WithCancel(t.Context())
			go func() {
				<-fs.entered
				cancel()
			}()
			v := g.Decide(ctx, NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/slow/x")})
			if got, want := outcomeOf(v), (outcome{Deny, "builtin", RuleTimeout, "builtin"}); got != want {
				t.Errorf("Decide = %+v, want %+v", got, want)
			}
			close(fs.release)
			synctest.Wait() // the released resolver answers, the stuck decision ends
			if n := g.stuck.Load(); n != 0 {
				t.Errorf("stuck = %d once released, want 0", n)
			}
		})
	})
	t.Run("a panic is an internal error", func(t *testing.T) {
		var log syncBuffer
		g := newTestGuard(t, "", Options{FS: panicFS{testFS()}, Logger: hclogTo(&log)})
		v := g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams(testCwd + "/README.md")})
		if got, want := outcomeOf(v), (outcome{Deny, "builtin", RuleInternal, "builtin"}); got != want || !strings.Contains(v.Message, "resolver exploded") {
			t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, want)
		}
		if !strings.Contains(log.String(), "internal error deciding a request; denied") {
			t.Errorf("log: %s", log.String())
		}
		if g.stuck.Load() != 0 {
			t.Errorf("stuck = %d", g.stuck.Load())
		}
	})
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRecord: the audit record of each kind of verdict, read back from
// the log.
func TestRecord(t *testing.T) {
	tests := []struct {
		name   string
		method string
		params json.RawMessage
		choice string
		want   string // the record without time, decisionId, latencyUs; policyHash is filled in
	}{
		{name: "allowed by a rule", method: acp.MethodReadTextFile, params: readParams(testCwd + "/README.md"),
			want: `{"session":"rs","agent":"claude","method":"fs/read_text_file","decision":"allow","rule":"reads-in-project","layer":"user","source":"rule",
				"evidence":[{"type":"path","kinds":["read"],"path":"/p/README.md","decision":"allow","rule":"reads-in-project"}]}`},
		{name: "denied by a rule", method: acp.MethodReadTextFile, params: readParams(testCwd + "/.env"),
			want: `{"session":"rs","agent":"claude","method":"fs/read_text_file","decision":"deny","rule":"no-secrets","layer":"user","source":"rule",
				"evidence":[{"type":"path","kinds":["read"],"path":"/p/.env","decision":"deny","rule":"no-secrets"}]}`},
		{name: "the default, through a symlink (both forms)", method: acp.MethodReadTextFile, params: readParams(testCwd + "/etc/hosts"),
			want: `{"session":"rs","agent":"claude","method":"fs/read_text_file","decision":"ask","rule":null,"layer":"user","source":"default",
				"evidence":[{"type":"path","kinds":["read"],"path":"/p/etc/hosts","forms":["/p/etc/hosts","/etc/hosts"],"decision":"ask"}]}`},
		{name: "a command; no file contents or env values", method: acp.MethodTerminalCreate,
			params: mustJSON(map[string]any{"sessionId": "s", "command": "git", "args": []string{"status"}, "env": []map[string]string{{"name": "TOKEN", "value": "hunter2"}}}),
			want: `{"session":"rs","agent":"claude","method":"terminal/create","decision":"allow","rule":"safe-commands","layer":"user","source":"rule",
				"evidence":[{"type":"command","kinds":["execute"],"command":["git","status"],"env":["TOKEN"],"decision":"allow","rule":"safe-commands"}]}`},
		{name: "the user's choice", method: acp.MethodRequestPermission, choice: AllowAlways,
			params: permParams("t1", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go"), "content": []map[string]any{{"type": "diff", "path": testCwd + "/src/a.go", "newText": "secret content"}}}),
			want: `{"session":"rs","agent":"claude","method":"session/request_permission","toolCallId":"t1","decision":"ask","rule":null,"layer":"user","source":"user","userChoice":"allow_always","answeredBy":"editor",
				"evidence":[{"type":"path","kinds":["edit"],"path":"/p/src/a.go","decision":"ask"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "audit.jsonl")
			g := newTestGuard(t, "", Options{AuditFile: file})
			v := g.Decide(t.Context(), NewSession(testCwd, nil), Request{SessionID: "rs", Agent: "claude", Method: tt.method, Params: tt.params})
			if err := g.Record(v, tt.choice); err != nil {
				t.Fatal(err)
			}
			recs := audittest.ReadLines(t, file)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			if recs[0]["policyHash"] != g.Policy().Hash() {
				t.Errorf("policyHash %v, want %s", recs[0]["policyHash"], g.Policy().Hash())
			}
			delete(recs[0], "policyHash")
			if strings.Contains(fmt.Sprint(recs[0]), "secret content") || strings.Contains(fmt.Sprint(recs[0]), "hunter2") {
				t.Errorf("content in the audit log: %v", recs[0])
			}
			requireRecord(t, recs[0], tt.want)
		})
	}
	t.Run("decision ids are unique", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "audit.jsonl")
		g := newTestGuard(t, "", Options{AuditFile: file})
		const n = 3
		for range n {
			if err := g.Record(g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/x")}), ""); err != nil {
				t.Fatal(err)
			}
		}
		recs := audittest.ReadLines(t, file)
		if len(recs) != n {
			t.Fatalf("%d records, want %d", len(recs), n)
		}
		seen := map[string]bool{}
		for _, r := range recs {
			id, _ := r["decisionId"].(string)
			if id == "" || seen[id] {
				t.Errorf("decisionId %v (ids so far %v)", r["decisionId"], seen)
			}
			seen[id] = true
		}
	})
}

// TestRecordAuditUnavailable: an allow that cannot be audited becomes a
// deny naming acp-router:audit-unavailable, and Record says why; a deny
// stays a deny; nothing is approved or granted.
func TestRecordAuditUnavailable(t *testing.T) {
	breakers := map[string]func(t *testing.T, file string){
		"directory removed": func(t *testing.T, file string) {
			if err := os.RemoveAll(filepath.Dir(file)); err != nil {
				t.Fatal(err)
			}
		},
		"log replaced by a directory": func(t *testing.T, file string) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(file, 0o700); err != nil {
				t.Fatal(err)
			}
		},
	}
	tests := []struct {
		name      string
		method    string
		params    json.RawMessage
		choice    string
		before    Effect
		want      outcome
		approvals int
	}{
		{name: "allowed by a rule", method: acp.MethodRequestPermission,
			params: permParams("t1", map[string]any{"kind": "read", "locations": locations(testCwd + "/README.md")}),
			before: Allow, want: outcome{Deny, "builtin", RuleAudit, "builtin"}},
		{name: "allowed by the user", method: acp.MethodRequestPermission, choice: AllowAlways,
			params: permParams("t1", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")}),
			before: Ask, want: outcome{Deny, "builtin", RuleAudit, "builtin"}},
		{name: "a direct call allowed", method: acp.MethodTerminalCreate, params: terminalParams("ls"),
			before: Allow, want: outcome{Deny, "builtin", RuleAudit, "builtin"}},
		{name: "a deny stays a deny", method: acp.MethodReadTextFile, params: readParams(testCwd + "/.env"),
			before: Deny, want: outcome{Deny, "rule", "no-secrets", "user"}},
		{name: "rejected by the user", method: acp.MethodRequestPermission, choice: RejectAlways,
			params: permParams("t1", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")}),
			before: Ask, want: outcome{Ask, "user", "", "user"}},
	}
	for bname, breakLog := range breakers {
		for _, tt := range tests {
			t.Run(bname+"/"+tt.name, func(t *testing.T) {
				file := filepath.Join(t.TempDir(), "audit", "audit.jsonl")
				var log syncBuffer
				g := newTestGuard(t, "", Options{AuditFile: file, Logger: hclogTo(&log)})
				s := NewSession(testCwd, nil)
				// The log works, then stops working.
				if err := g.Record(g.Decide(t.Context(), s, Request{Agent: "claude", Method: acp.MethodReadTextFile, Params: readParams("/x")}), ""); err != nil {
					t.Fatal(err)
				}
				breakLog(t, file)
				v := g.Decide(t.Context(), s, Request{Agent: "claude", Method: tt.method, Params: tt.params})
				if v.Effect != tt.before {
					t.Fatalf("before Record: %v", v.Effect)
				}
				err := g.Record(v, tt.choice)
				if err == nil {
					t.Fatal("Record: no error")
				}
				if got := outcomeOf(v); got != tt.want {
					t.Errorf("after Record: %+v, want %+v", got, tt.want)
				}
				if v.AuditFailed() != (tt.want.Rule == RuleAudit) {
					t.Errorf("AuditFailed = %v", v.AuditFailed())
				}
				if tt.want.Rule == RuleAudit && (!strings.Contains(v.Message, "the audit log cannot be written") ||
					!strings.Contains(v.ErrorMessage(), RuleAudit)) {
					t.Errorf("message %q, error message %q", v.Message, v.ErrorMessage())
				}
				if len(s.approvals) != 0 || len(s.grants) != 0 {
					t.Errorf("kept %d approvals and %d grants of an unrecorded verdict", len(s.approvals), len(s.grants))
				}
				if !strings.Contains(log.String(), "cannot write the audit log") {
					t.Errorf("log: %s", log.String())
				}
			})
		}
	}
	t.Run("closed", func(t *testing.T) {
		g := newTestGuard(t, "", Options{})
		g.Close()
		v := g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodTerminalCreate, Params: terminalParams("ls")})
		if err := g.Record(v, ""); err == nil || !v.AuditFailed() {
			t.Errorf("Record on a closed guard: %v, %+v", err, outcomeOf(v))
		}
	})
}

// TestVerdictErrors: what a denied direct call is told.
func TestVerdictErrors(t *testing.T) {
	tests := []struct {
		name string
		v    Verdict
		msg  string
		data string
	}{
		{"a rule with a message", Verdict{Rule: "no-secrets", Message: "Secrets are not available.", Layer: "user", Source: "rule"},
			"acp-router: denied by no-secrets: Secrets are not available.", `{"rule":"no-secrets","decision":"deny","layer":"user","source":"rule"}`},
		{"a rule without one", Verdict{Rule: "r", Layer: "org", Source: "rule"},
			"acp-router: denied by r", `{"rule":"r","decision":"deny","layer":"org","source":"rule"}`},
		{"a default", Verdict{Layer: "org", Source: "default"},
			"acp-router: denied by the org layer's default", `{"rule":"","decision":"deny","layer":"org","source":"default"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.ErrorMessage(); got != tt.msg {
				t.Errorf("ErrorMessage = %q, want %q", got, tt.msg)
			}
			var e *jsonrpc2.Error
			if !errors.As(tt.v.DenyError(), &e) {
				t.Fatalf("DenyError is %T", tt.v.DenyError())
			}
			var data, want any
			json.Unmarshal(*e.Data, &data)
			json.Unmarshal([]byte(tt.data), &want)
			if e.Code != acp.CodeInternalError || e.Message != tt.msg || !reflect.DeepEqual(data, want) {
				t.Errorf("DenyError = %d %q %s", e.Code, e.Message, *e.Data)
			}
		})
	}
}

// TestDenies: the handoff brief hides what the policy denies an agent.
func TestDenies(t *testing.T) {
	g := newTestGuard(t, "", Options{})
	s := NewSession(testCwd, nil)
	tests := []struct {
		name    string
		g       *Guard
		s       *Session
		method  string
		params  json.RawMessage
		updates []json.RawMessage
		want    bool
	}{
		{"a secret", g, s, acp.MethodReadTextFile, readParams(testCwd + "/.env"), nil, true},
		{"a read in the project", g, s, acp.MethodReadTextFile, readParams(testCwd + "/README.md"), nil, false},
		{"an ask is not a deny", g, s, acp.MethodWriteTextFile, writeParams(testCwd + "/src/a.go"), nil, false},
		{"a secret in the tool call's updates", g, s, acp.MethodRequestPermission, permParams("t1", nil),
			[]json.RawMessage{EncodeEvidence(&ToolUpdate{Kind: raw(`"read"`), Locations: mustJSON(locations(testCwd + "/.env"))})}, true},
		{"no session", g, nil, acp.MethodReadTextFile, readParams(testCwd + "/.env"), nil, false},
		{"no guard", nil, s, acp.MethodReadTextFile, readParams(testCwd + "/.env"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.g.Denies(t.Context(), tt.s, "claude", tt.method, tt.params, tt.updates); got != tt.want {
				t.Errorf("Denies = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDecideOSFS: decisions on the real filesystem (the default FS):
// symlinks resolved, globs expanded and relative names found, once per
// decision.
func TestDecideOSFS(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(root, "project")
	os.MkdirAll(filepath.Join(cwd, "src"), 0o755)
	os.MkdirAll(filepath.Join(root, "outside"), 0o755)
	for _, f := range []string{"README.md", ".env", "src/a.go"} {
		os.WriteFile(filepath.Join(cwd, f), nil, 0o644)
	}
	os.Symlink(filepath.Join(root, "outside"), filepath.Join(cwd, "out"))
	// Dangling: a write through it creates outside/.env.
	os.Symlink("../outside/.env", filepath.Join(cwd, "build.log"))
	g, err := New(loadTestPolicy(t, testPermissions), Options{AuditFile: filepath.Join(t.TempDir(), "audit.jsonl"), Home: testHome})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	tests := []struct {
		name   string
		method string
		params json.RawMessage
		want   outcome
	}{
		{"a read in the project", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "README.md")), outcome{Allow, "rule", "reads-in-project", "user"}},
		{"a read through a symlink out of it", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "out", "x")), outcome{Ask, "default", "", "user"}},
		{"ls of files that exist", acp.MethodTerminalCreate, terminalParams("ls", "README.md", "src"), outcome{Allow, "rule", "safe-commands", "user"}},
		{"a glob that finds a secret", acp.MethodTerminalCreate, terminalParams("sh", "-c", "ls .e*"), outcome{Deny, "rule", "no-secrets", "user"}},
		{"a secret by its relative name", acp.MethodTerminalCreate, terminalParams("ls", ".env"), outcome{Deny, "rule", "no-secrets", "user"}},
		{"a write through a dangling symlink", acp.MethodWriteTextFile, writeParams(filepath.Join(cwd, "build.log")), outcome{Deny, "rule", "no-secrets", "user"}},
		{"a read through a dangling symlink", acp.MethodReadTextFile, readParams(filepath.Join(cwd, "build.log")), outcome{Deny, "rule", "no-secrets", "user"}},
		{"a redirect through a dangling symlink", acp.MethodTerminalCreate, terminalParams("sh", "-c", "echo x >> build.log"), outcome{Deny, "rule", "no-secrets", "user"}},
		{"a read through /proc/self/root", acp.MethodReadTextFile, readParams("/proc/self/root" + filepath.Join(cwd, "README.md")), outcome{Ask, "default", "", "user"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := g.Decide(t.Context(), NewSession(cwd, nil), Request{Agent: "claude", Method: tt.method, Params: tt.params})
			if got := outcomeOf(v); got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, tt.want)
			}
		})
	}
}

// TestAuditLockHeldElsewhere (issue 27): with the audit log's lock held by
// another process and never released, a decision that would allow fails
// closed within the lock's deadline, its cause logged; nothing of the
// guard waits behind it meanwhile (another decision's record, AuditFile);
// a refusal never waits for the log; once the lock is
// free, records are written again, a refusal's included. In a synctest
// bubble: the lock's deadline passes on the bubble's clock, and a wait for
// it shows as time passing (nothing else moves the clock).
func TestAuditLockHeldElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		log := &syncBuffer{}
		file := filepath.Join(t.TempDir(), "audit.jsonl")
		g := newTestGuard(t, "", Options{AuditFile: file, AuditLockTimeout: timeout, Logger: hclogTo(log)})
		release := audittest.HoldLock(t, file)
		s := NewSession(testCwd, nil)

		start := time.Now()
		refused, answered := make(chan struct{}), make(chan struct{})
		go func() {
			g.RecordRefused("claude", acp.MethodReadTextFile, "nope", "unknown session", func() { close(answered) })
			close(refused)
		}()
		select {
		case <-refused:
		case <-time.After(timeout / 2):
			t.Error("RecordRefused waited for the audit log's lock; its caller is an agent's read loop")
		}

		const decisions = 3
		verdicts := make(chan *Verdict, decisions)
		for range decisions {
			go func() {
				v := g.Decide(t.Context(), s, Request{SessionID: "s", Agent: "claude", Method: acp.MethodTerminalCreate, Params: terminalParams("ls")})
				if v.Effect != policy.Allow {
					t.Errorf("decided %+v; want allow", outcomeOf(v))
				}
				g.Record(v, "")
				verdicts <- v
			}()
		}
		// While the records wait for the lock, the guard's mutex is free.
		file2 := make(chan string, 1)
		go func() { file2 <- g.AuditFile() }()
		select {
		case <-file2:
		case <-time.After(timeout / 2):
			t.Error("AuditFile waited for a record waiting for the audit log's lock")
		}
		for range decisions {
			select {
			case v := <-verdicts:
				if v.Effect != policy.Deny || !v.AuditFailed() || !strings.Contains(v.Message, "lock") {
					t.Errorf("a decision whose record could not be written: %+v %q; want a deny naming the lock", outcomeOf(v), v.Message)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("a decision still waits for the audit log's lock after 5s; the deadline is %v", timeout)
			}
		}
		if d := time.Since(start); d != timeout {
			t.Errorf("%d decisions took %v to fail closed; each record fails at its deadline, %v", decisions, d, timeout)
		}
		if !strings.Contains(log.String(), "cannot write the audit log") || !strings.Contains(log.String(), "lock") {
			t.Errorf("the cause was not logged: %s", log.String())
		}
		select {
		case <-answered:
		case <-time.After(5 * time.Second):
			t.Fatal("the refusal was not answered once its record failed")
		}

		// A record that could not be written by its deadline is not written
		// later: the log holds what was decided when it was written.
		release()
		answered = make(chan struct{})
		g.RecordRefused("claude", acp.MethodReadTextFile, "nope", "unknown session", func() { close(answered) })
		<-answered
		if recs := audittest.ReadLines(t, file); len(recs) != 1 {
			t.Fatalf("audit log when the refusal was answered: %v; want its record", recs)
		}
		v := g.Decide(t.Context(), s, Request{SessionID: "s", Agent: "claude", Method: acp.MethodTerminalCreate, Params: terminalParams("ls")})
		if err := g.Record(v, ""); err != nil || v.Effect != policy.Allow {
			t.Fatalf("with the lock free: %v, %+v", err, outcomeOf(v))
		}
		recs := audittest.ReadLines(t, file)
		if len(recs) != 2 || recs[0]["method"] != acp.MethodReadTextFile || recs[1]["decision"] != "allow" {
			t.Errorf("audit log once the lock was free: %v; want the refusal, then the allow", recs)
		}
	})
}
