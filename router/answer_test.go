package router

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/guard"
)

// answerPolicy says who may answer (issue 30): a push only the lead, a
// deploy the lead or the editor, a test run anyone; a read of /s only the
// lead.
const answerPolicy = `  default: allow
  rules:
    - {id: push-needs-lead, decision: ask, when: {command: ["git push **"]}, answered_by: [lead]}
    - {id: deploy, decision: ask, when: {command: ["make deploy"]}, answered_by: [lead, editor]}
    - {id: tests-ask, decision: ask, when: {command: ["make test"]}}
    - {id: secrets, decision: ask, when: {kind: read, paths: ["/s/**"]}, answered_by: [lead]}
`

// TestAnsweredBy: the question the editor is sent names who may answer
// (never what the agent wrote there); with a hub in front (ClientMeta) the
// answer's acp-router/answeredBy says who answered, and an answer from
// anyone the rule does not name is a reject, shown and audited with the
// reason; without one the editor answers whatever its answer claims, and
// an ask only others may answer is refused at once without asking. Both
// for an agent's permission request and for the router's own question
// about a direct call.
func TestAnsweredBy(t *testing.T) {
	by := func(name string, editor bool) map[string]any {
		return map[string]any{"acp-router/answeredBy": map[string]any{"name": name, "editor": editor}, "x-editor": true}
	}
	tests := []struct {
		name       string
		clientMeta bool
		script     string
		meta       map[string]any // the answer's _meta; nil: none
		asked      bool           // the editor is asked
		answerers  []string       // the question's acp-router/answerers; nil: absent
		want       []string       // what the agent says of the answer
		answeredBy string         // the audit record's; "" absent
		refused    string         // part of the audit's answerRefused and the editor's notice; "" none
	}{
		{name: "no hub the editor answers; whoever it claims to be", script: "perm make deploy", meta: by("lead", false),
			asked: true, answerers: []string{"editor", "lead"}, want: []string{"perm: selected ok", `perm meta: {"x-editor":true}`}, answeredBy: "editor"},
		{name: "no hub anyone may answer; the claim ignored", script: "perm make test", meta: by("bob", false),
			asked: true, want: []string{"perm: selected ok", `perm meta: {"x-editor":true}`}, answeredBy: "editor"},
		{name: "no hub only the lead may answer; refused unasked", script: "perm git push origin main", meta: by("lead", false),
			want: []string{"perm: selected no"}, refused: "only lead may answer (answered_by of rule push-needs-lead (user layer)), and the editor is this router's only client"},
		{name: "hub the lead answers", clientMeta: true, script: "perm git push origin main", meta: by("lead", false),
			asked: true, answerers: []string{"lead"}, want: []string{"perm: selected ok", `perm meta: {"x-editor":true}`}, answeredBy: "lead"},
		{name: "hub another client answers", clientMeta: true, script: "perm git push origin main", meta: by("bob", false),
			asked: true, answerers: []string{"lead"}, want: []string{"perm: selected no"}, answeredBy: "bob",
			refused: `client "bob" answered allow_once, but only lead may answer (answered_by of rule push-needs-lead (user layer))`},
		{name: "hub the editor answers what only the lead may", clientMeta: true, script: "perm git push origin main", meta: by("editor", true),
			asked: true, answerers: []string{"lead"}, want: []string{"perm: selected no"}, answeredBy: "editor",
			refused: "the editor answered allow_once, but only lead may answer"},
		{name: "hub an answer that does not say who gave it", clientMeta: true, script: "perm git push origin main",
			asked: true, answerers: []string{"lead"}, want: []string{"perm: selected no"},
			refused: "a client that did not say who it is answered allow_once, but only lead may answer"},
		{name: "hub anyone may answer", clientMeta: true, script: "perm make test", meta: by("bob", false),
			asked: true, want: []string{"perm: selected ok", `perm meta: {"x-editor":true}`}, answeredBy: "bob"},
		{name: "no hub a direct call only the lead may allow; refused unasked", script: "read /s/x\nwait", meta: by("lead", false),
			want: []string{"read /s/x: error acp-router: denied by secrets: only lead may answer"}, refused: "the editor is this router's only client"},
		{name: "hub the lead allows a direct call", clientMeta: true, script: "read /s/x\nwait", meta: by("lead", false),
			asked: true, answerers: []string{"lead"}, want: []string{"read /s/x: ok content of /s/x"}, answeredBy: "lead"},
		{name: "hub another client allows a direct call", clientMeta: true, script: "read /s/x\nwait", meta: by("bob", false),
			asked: true, answerers: []string{"lead"}, answeredBy: "bob",
			want:    []string{`read /s/x: error acp-router: denied by secrets: client "bob" answered allow_once, but only lead may answer`},
			refused: `client "bob" answered allow_once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPolicyRouter(t, answerPolicy, guard.Options{}, Options{OpenDelay: time.Millisecond, ClientMeta: tt.clientMeta})
			var questions []json.RawMessage
			e.mu.Lock()
			e.perm = func(p json.RawMessage) any {
				e.mu.Lock()
				questions = append(questions, p)
				e.mu.Unlock()
				var q struct {
					Options []permOption `json:"options"`
				}
				json.Unmarshal(p, &q)
				res := map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": q.Options[0].OptionID}}
				if tt.meta != nil {
					res["_meta"] = tt.meta
				}
				return res
			}
			e.mu.Unlock()
			var res struct{ SessionID string }
			json.Unmarshal(e.mustCall("session/new", map[string]any{"cwd": "/w", "mcpServers": []any{}}), &res)
			end, done := e.call("session/prompt", map[string]any{"sessionId": res.SessionID, "prompt": []map[string]string{{"type": "text", "text": tt.script}}})
			e.await("session/prompt", done)

			got := e.transcript(res.SessionID, end)
			for _, w := range tt.want {
				if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, w) }) {
					t.Errorf("the agent did not say %q; transcript %q", w, got)
				}
			}
			e.mu.Lock()
			asked := slices.Clone(questions)
			e.mu.Unlock()
			if tt.asked != (len(asked) == 1) {
				t.Fatalf("the editor was asked %d times, want asked %v", len(asked), tt.asked)
			}
			for _, q := range asked {
				if strings.Contains(string(q), "agent-forged") {
					t.Errorf("the agent's own answerers reached the editor: %s", q)
				}
				var answerers []string
				if raw, ok := metaOf(q)[metaAnswerers]; ok {
					if err := json.Unmarshal(raw, &answerers); err != nil || answerers == nil {
						t.Errorf("answerers %s", raw)
					}
				}
				if !slices.Equal(answerers, tt.answerers) {
					t.Errorf("the question's answerers %q, want %q: %s", answerers, tt.answerers, q)
				}
			}

			recs := audittest.ReadLines(t, e.r.opts.Guard.AuditFile())
			var rec map[string]any
			for _, r := range recs {
				if r["decision"] == "ask" {
					rec = r
				}
			}
			if rec == nil {
				t.Fatalf("no audit record of the ask: %v", recs)
			}
			if a, _ := rec["answeredBy"].(string); a != tt.answeredBy {
				t.Errorf("audit answeredBy %q, want %q: %v", a, tt.answeredBy, rec)
			}
			why, _ := rec["answerRefused"].(string)
			if tt.refused == "" && why != "" || !strings.Contains(why, tt.refused) {
				t.Errorf("audit answerRefused %q, want %q", why, tt.refused)
			}
			if tt.refused != "" && tt.answeredBy != "" && rec["userChoice"] != guard.Cancelled {
				t.Errorf("a refused answer audited as %v", rec["userChoice"])
			}
			if tt.refused != "" && strings.HasPrefix(tt.script, "perm ") {
				// The editor sees the tool call failed, and why.
				e.waitFor("the refusal's notice", 5*time.Second, func(m *edMsg) bool {
					return m.Method == "session/update" && strings.Contains(string(m.Params), `"status":"failed"`) &&
						strings.Contains(string(m.Params), strings.ReplaceAll(tt.refused, `"`, `\"`))
				})
			}
		})
	}
}

// TestAnsweredByMeta: the editor's question carries the router's
// answerers and the rest of the agent's _meta, never the agent's own
// answerers; the answer the agent gets keeps the editor's _meta but who
// answered.
func TestAnsweredByMeta(t *testing.T) {
	p := json.RawMessage(`{"sessionId":"s","_meta":{"acp-router/answerers":["x"],"k":1},"options":[]}`)
	for _, tc := range []struct {
		names      []string
		restricted bool
		want       string // the new _meta; "" unchanged
	}{
		{nil, false, `{"k":1}`},
		{[]string{"lead"}, true, `{"acp-router/answerers":["lead"],"k":1}`},
		{[]string{}, true, `{"acp-router/answerers":[],"k":1}`},
	} {
		got, ok := answerersMeta(p, tc.names, tc.restricted)
		if !ok || string(got) != tc.want {
			t.Errorf("answerersMeta(%q, %v) = %s %v, want %s", tc.names, tc.restricted, got, ok, tc.want)
		}
	}
	if _, ok := answerersMeta(json.RawMessage(`{"sessionId":"s","_meta":{"k":1}}`), nil, false); ok {
		t.Error("a _meta without answerers changed")
	}
	if got, ok := answerersMeta(json.RawMessage(`{"sessionId":"s"}`), []string{"lead"}, true); !ok || string(got) != `{"acp-router/answerers":["lead"]}` {
		t.Errorf("no _meta: %s %v", got, ok)
	}
	// An escaped key is the same key: it is replaced too.
	if got, ok := answerersMeta(json.RawMessage(`{"_meta":{"acp-router\/answerers":["x"]}}`), nil, false); !ok || string(got) != `{}` {
		t.Errorf("escaped key: %s %v", got, ok)
	}
	res := json.RawMessage(`{"outcome":{"outcome":"selected","optionId":"ok"},"_meta":{"acp-router/answeredBy":{"name":"lead"},"k":1}}`)
	if got := string(withoutAnsweredBy(res)); strings.Contains(got, "lead") || !strings.Contains(got, `"k":1`) {
		t.Errorf("withoutAnsweredBy = %s", got)
	}
	// Read by its exact name only: a key in another case is not the hub's.
	r := &Router{opts: Options{ClientMeta: true}}
	for raw, want := range map[string]guard.Answerer{
		`{"_meta":{"acp-router/answeredBy":{"name":"lead"}}}`:                 {Name: "lead"},
		`{"_meta":{"acp-router/answeredBy":{"name":"editor","editor":true}}}`: guard.EditorAnswerer,
		`{"_meta":{"ACP-ROUTER/ANSWEREDBY":{"name":"lead"}}}`:                 {},
		`{"_META":{"acp-router/answeredBy":{"name":"lead"}}}`:                 {},
		`{"_meta":{"acp-router/answeredBy":{"NAME":"lead"}}}`:                 {},
		`{"outcome":{"outcome":"cancelled"}}`:                                 {},
	} {
		if got := r.answerer(json.RawMessage(raw)); got != want {
			t.Errorf("answerer(%s) = %+v, want %+v", raw, got, want)
		}
	}
	r.opts.ClientMeta = false
	if got := r.answerer(json.RawMessage(`{"_meta":{"acp-router/answeredBy":{"name":"lead"}}}`)); got != guard.EditorAnswerer {
		t.Errorf("without ClientMeta: %+v", got)
	}
}
