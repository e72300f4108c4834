package guard

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
)

// answerPermissions asks who may answer (issue 30): a push only the lead,
// an edit in src the editor or the lead.
const answerPermissions = `permissions:
  default: ask
  rules:
    - id: push-needs-lead
      decision: ask
      when: {command: ["git push **"]}
      answered_by: [lead]
    - id: src-edits
      decision: ask
      when: {kind: edit, paths: ["${cwd}/src/**"]}
      answered_by: [editor, lead]
`

func pushParams() []byte {
	return permParams("t1", map[string]any{"kind": "execute", "title": "git push", "rawInput": map[string]any{"command": "git push origin main"}})
}

// TestRecordAnswer: the answer of a client the ask's rules let answer is
// taken and audited with its name; any other answer (the editor's when
// only the lead may, a client whose token is named "editor") is refused:
// audited as cancelled with the reason, approving and granting nothing,
// and the verdict becomes a deny that says why.
func TestRecordAnswer(t *testing.T) {
	lead, bob, fakeEditor := Answerer{Name: "lead"}, Answerer{Name: "bob"}, Answerer{Name: "editor"}
	src := permParams("t2", map[string]any{"kind": "edit", "locations": locations(testCwd + "/src/a.go")})
	tests := []struct {
		name    string
		params  []byte
		by      Answerer
		choice  string
		refused string // part of the reason; "" when taken
	}{
		{"the lead answers a push", pushParams(), lead, AllowAlways, ""},
		{"the editor answers a push", pushParams(), EditorAnswerer, AllowAlways, `the editor answered allow_always, but only lead may answer (answered_by of rule push-needs-lead (user layer))`},
		{"another client answers a push", pushParams(), bob, AllowOnce, `client "bob" answered allow_once, but only lead may answer`},
		{"another client rejects a push", pushParams(), bob, RejectAlways, `client "bob" answered reject_always, but only lead may answer`},
		{"the editor answers an edit", src, EditorAnswerer, AllowAlways, ""},
		{"a client named editor answers an edit", src, fakeEditor, AllowAlways, `client "editor" answered allow_always, but only editor, lead may answer`},
		{"a client that does not say who it is", src, Answerer{}, AllowOnce, `a client that did not say who it is answered allow_once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "audit.jsonl")
			g := newTestGuard(t, answerPermissions, Options{AuditFile: file})
			s := NewSession(testCwd, nil)
			req := Request{SessionID: "rs", Agent: "claude", Method: acp.MethodRequestPermission, Params: tt.params}
			v := g.Decide(t.Context(), s, req)
			if v.Effect != Ask || v.Answerers() == nil {
				t.Fatalf("Decide = %s answerers %v, want an ask with answerers", v.Effect, v.Answerers())
			}
			names := v.Answerers().Names
			if err := g.RecordAnswer(v, tt.choice, tt.by); err != nil {
				t.Fatal(err)
			}
			recs := audittest.ReadLines(t, file)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			rec := recs[0]
			if rec["answeredBy"] != tt.by.Name && !(tt.by.Name == "" && rec["answeredBy"] == nil) {
				t.Errorf("answeredBy %v, want %q", rec["answeredBy"], tt.by.Name)
			}
			if got, _ := rec["answerers"].([]any); len(got) != len(names) {
				t.Errorf("answerers %v, want %v", rec["answerers"], names)
			}
			next := g.Decide(t.Context(), s, req)
			if tt.refused == "" {
				if v.AnswerRefused() || rec["userChoice"] != tt.choice || rec["answerRefused"] != nil {
					t.Errorf("taken answer: refused %v, record %v", v.AnswerRefused(), rec)
				}
				if tt.choice == AllowAlways && (next.Effect != Allow || next.Source != "grant") {
					t.Errorf("after the allowed answerer's allow_always: %+v, want a grant", outcomeOf(next))
				}
				return
			}
			reason, _ := rec["answerRefused"].(string)
			if !v.AnswerRefused() || v.Effect != Deny || rec["userChoice"] != Cancelled || !strings.Contains(reason, tt.refused) {
				t.Errorf("refused answer: refused %v effect %s, record %v; want the reason %q", v.AnswerRefused(), v.Effect, rec, tt.refused)
			}
			if rec["decision"] != "ask" || rec["source"] != "user" {
				t.Errorf("refused answer recorded as %v by %v", rec["decision"], rec["source"])
			}
			if !strings.Contains(v.ErrorMessage(), tt.refused) {
				t.Errorf("the deny's message %q does not say why", v.ErrorMessage())
			}
			if next.Effect != Ask {
				t.Errorf("after a refused %s: %+v, want ask again (nothing granted)", tt.choice, outcomeOf(next))
			}
		})
	}
}

// TestGrantByAnswerer: an "always" covers a later ask only when whoever
// gave it may answer that ask: the editor's grant given before a policy
// said the lead answers does not cover it after, the lead's does; an
// approval the policy gave covers no direct call only the lead may allow.
func TestGrantByAnswerer(t *testing.T) {
	g := newTestGuard(t, strings.Replace(answerPermissions, "      answered_by: [lead]\n", "", 1), Options{})
	s := NewSession(testCwd, nil)
	req := Request{Agent: "claude", Method: acp.MethodRequestPermission, Params: pushParams()}
	v := g.Decide(t.Context(), s, req)
	if v.Answerers() != nil {
		t.Fatalf("answerers %v without answered_by", v.Answerers())
	}
	if err := g.Record(v, AllowAlways); err != nil {
		t.Fatal(err)
	}
	if v = g.Decide(t.Context(), s, req); v.Effect != Allow || v.Source != "grant" {
		t.Fatalf("the editor's grant does not cover the push without answered_by: %+v", outcomeOf(v))
	}
	g.Set(loadTestPolicy(t, answerPermissions))
	v = g.Decide(t.Context(), s, req)
	if v.Effect != Ask || v.Answerers() == nil || v.Answerers().String() != "lead" {
		t.Fatalf("the editor's grant covers a push only the lead may answer: %+v (%v)", outcomeOf(v), v.Answerers())
	}
	if err := g.RecordAnswer(v, AllowAlways, Answerer{Name: "lead"}); err != nil {
		t.Fatal(err)
	}
	if v = g.Decide(t.Context(), s, req); v.Effect != Allow || v.Source != "grant" {
		t.Errorf("the lead's grant does not cover the push: %+v", outcomeOf(v))
	}

	// A direct call only the lead may allow is not covered by the
	// approval of a permission request the policy allowed.
	const direct = `permissions:
  default: ask
  rules:
    - id: pushes
      decision: allow
      when: {method: session/request_permission}
    - id: push-needs-lead
      decision: ask
      when: {method: terminal/create, command: ["git push **"]}
      answered_by: [lead]
`
	g = newTestGuard(t, direct, Options{})
	s = NewSession(testCwd, nil)
	v = g.Decide(t.Context(), s, req)
	if v.Effect != Allow {
		t.Fatalf("the permission request: %+v", outcomeOf(v))
	}
	g.Record(v, "")
	call := Request{Agent: "claude", Method: acp.MethodTerminalCreate, Params: terminalParams("git", "push", "origin", "main")}
	if v = g.Decide(t.Context(), s, call); v.Effect != Ask || v.Answerers() == nil {
		t.Errorf("the policy's approval covers a direct call only the lead may allow: %+v", outcomeOf(v))
	}
}

// TestRecordUnanswerable: an ask no client that may answer can answer is
// audited with the reason and becomes a deny that says it.
func TestRecordUnanswerable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	g := newTestGuard(t, answerPermissions, Options{AuditFile: file})
	v := g.Decide(t.Context(), NewSession(testCwd, nil), Request{Agent: "claude", Method: acp.MethodRequestPermission, Params: pushParams()})
	const why = "only lead may answer, and no client but the editor can"
	if err := g.RecordUnanswerable(v, why); err != nil {
		t.Fatal(err)
	}
	if !v.AnswerRefused() || v.Effect != Deny || !strings.Contains(v.ErrorMessage(), "denied by push-needs-lead: "+why) {
		t.Errorf("verdict %+v %q", outcomeOf(v), v.ErrorMessage())
	}
	recs := audittest.ReadLines(t, file)
	if len(recs) != 1 || recs[0]["answerRefused"] != why || recs[0]["decision"] != "ask" || recs[0]["answeredBy"] != nil || recs[0]["userChoice"] != nil {
		t.Errorf("records %v", recs)
	}
}
