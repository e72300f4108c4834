package test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/audit/audittest"
)

// TestAnsweredByCommands pins answered_by (issue 30) in the commands that
// read a policy: check lists it with its rule, policy explain says who may
// answer, policy test asserts it, and on a deny rule it is an error at
// file:line:col that stops the router.
func TestAnsweredByCommands(t *testing.T) {
	t.Parallel()
	policy := `default: ask
rules:
  - {id: push-needs-lead, decision: ask, when: {command: ["git push **"]}, answered_by: [lead, editor]}
tests:
  - {call: "terminal/create git push origin main", expect: ask, answered_by: [editor, lead]}
`
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, policy)
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "ask   push-needs-lead, answered by lead, editor   ("+cfg+":") {
		t.Errorf("check: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runRouterCmd(t, nil, "policy", "test", "--config", cfg)
	if code != 0 || !strings.Contains(out, "0 failed") {
		t.Errorf("policy test: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runRouterCmd(t, nil, "policy", "explain", "--config", cfg, "--cwd", t.TempDir(), "terminal/create", "git push origin main")
	if code != 0 || !strings.Contains(out, "answered: only by editor, lead   (answered_by of rule push-needs-lead (user layer))") {
		t.Errorf("explain: exit %d\n%s%s", code, out, errOut)
	}

	wrong, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, strings.Replace(policy, "answered_by: [editor, lead]", "answered_by: [lead]", 1))
	code, out, _ = runRouterCmd(t, nil, "policy", "test", "--config", wrong)
	if code != 1 || !strings.Contains(out, "expected ask answered by lead, got ask answered by editor, lead") {
		t.Errorf("policy test with a wrong answered_by: exit %d\n%s", code, out)
	}

	broken, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "rules:\n  - id: x\n    decision: deny\n    when: {command: [\"git push **\"]}\n    answered_by: [lead]\n")
	for _, args := range [][]string{{"--config", broken}, {"check", "--config", broken}} {
		code, out, errOut = runRouterCmd(t, nil, args...)
		if code != 1 || !strings.Contains(errOut, broken+":") || !strings.Contains(errOut, "rules[0].answered_by: only an ask rule may say who answers (this rule is deny: no one is asked)") {
			t.Errorf("%v with answered_by on a deny rule: exit %d, stdout %q, stderr %q; want 1 and file:line:col", args, code, out, errOut)
		}
	}
}

// TestAnsweredByStdio: a router an editor launched over stdio, with no
// hub in front, has one client: an ask only the lead may answer is refused
// at once (the agent gets its reject option, the editor a failed tool
// call saying why, the audit the reason) without asking, and an ask the
// editor may answer is asked and audited as the editor's, whoever its
// answer claims to be.
func TestAnsweredByStdio(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, `default: ask
rules:
  - {id: push-needs-lead, decision: ask, when: {command: ["git push **"]}, answered_by: [lead]}
  - {id: deploy, decision: ask, when: {command: ["make deploy"]}, answered_by: [lead, editor]}
`)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	allow := asks.handler("allow_once")
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		res, rerr := allow(p)
		if m, ok := res.(map[string]any); ok {
			m["_meta"] = map[string]any{"acp-router/answeredBy": map[string]any{"name": "lead", "editor": false}}
		}
		return res, rerr
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, `permission-tool {"kind":"execute","title":"Push","rawInput":{"command":"git push origin main"}}
permission-tool {"kind":"execute","title":"Deploy","rawInput":{"command":"make deploy"}}`, "end_turn")

	texts := strings.Join(e.Texts(sid), "\n")
	// The push refused by the router (its own answer), the deploy as the
	// editor answered it.
	for _, want := range []string{`permission: {"outcome":"selected","optionId":"reject"}`, `permission: {"optionId":"allow","outcome":"selected"}`} {
		if !strings.Contains(texts, want) {
			t.Errorf("agent said %q; want %q", texts, want)
		}
	}
	if n := asks.count(); n != 1 {
		t.Fatalf("the editor was asked %d times, want once (the deploy)", n)
	}
	asks.mu.Lock()
	q := string(asks.params[0])
	asks.mu.Unlock()
	if !strings.Contains(q, `"acp-router/answerers":["editor","lead"]`) || !strings.Contains(q, `"toolCallId":"call-2"`) {
		t.Errorf("the editor's question %s: want the deploy, naming editor and lead", q)
	}
	failed := e.Rec.Filter(func(m *Msg) bool {
		return m.Update() == "tool_call_update" && strings.Contains(string(m.Params), `"status":"failed"`)
	})
	if len(failed) != 1 || !strings.Contains(string(failed[0].Params), "push-needs-lead") || !strings.Contains(string(failed[0].Params), "only lead may answer") {
		t.Errorf("failed tool call updates: %v", failed)
	}

	var raw []map[string]any
	for _, r := range audittest.ReadLines(t, auditFile) {
		if r["method"] != "acp-router/agent_start" {
			raw = append(raw, r)
		}
	}
	if len(raw) != 2 {
		t.Fatalf("audit has %d records, want 2: %v", len(raw), raw)
	}
	if r := raw[0]; r["rule"] != "push-needs-lead" || r["answeredBy"] != nil ||
		!strings.Contains(str(r["answerRefused"]), "the editor is this router's only client") {
		t.Errorf("the push's record %v", r)
	}
	if r := raw[1]; r["rule"] != "deploy" || r["answeredBy"] != "editor" || r["userChoice"] != "allow_once" || r["answerRefused"] != nil {
		t.Errorf("the deploy's record %v", r)
	}
}

func str(v any) string { s, _ := v.(string); return s }
