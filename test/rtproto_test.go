package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Red-team tests of the protocol around the permission policy: what an
// agent gets done by the shape of its messages.

func init() {
	// permission-opts JSON: session/request_permission with JSON's
	// toolCall and options as they are.
	fakeScriptExt["permission-opts"] = func(a *fakeAgent, s *fakeSession, rest string) {
		var p map[string]json.RawMessage
		if err := json.Unmarshal([]byte(rest), &p); err != nil {
			a.say(s.id, "bad permission-opts: "+err.Error())
			return
		}
		p["sessionId"] = mustJSON(s.id)
		res, rerr := a.call("session/request_permission", p)
		if rerr != nil {
			a.say(s.id, fmt.Sprintf("permission error: %d %s", rerr.Code, rerr.Message))
			return
		}
		var out struct {
			Outcome json.RawMessage `json:"outcome"`
		}
		_ = json.Unmarshal(res, &out)
		a.say(s.id, "permission: "+string(out.Outcome))
	}
}

// TestPolicyPermissionOptionsAsRecorded: the option the user presses is
// the option whose kind the router records, and the agent gets an option
// of that kind. Before, the router read the kind of the first option with
// the id the editor answered and passed the editor's answer on as it was:
// two options with one id made the user's Reject an allow_always (a grant
// covering the direct read that followed, never asked about), an agent
// offering allow_always without allow_once was given its "always" (so it
// stops asking: what it then runs is never decided or audited), and an
// option of a kind not in the schema was recorded as no allow while the
// agent took it as its own.
func TestPolicyPermissionOptionsAsRecorded(t *testing.T) {
	t.Parallel()
	cwd, elsewhere := t.TempDir(), t.TempDir()
	secret := filepath.Join(elsewhere, "notes.txt")
	os.WriteFile(secret, []byte("private notes"), 0o644)
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	tool := fmt.Sprintf(`{"toolCallId":"t1","kind":"read","title":"Read notes.txt","locations":[{"path":%q}]}`, secret)
	for _, tc := range []struct {
		name, options, choice string
		// agentGets: the outcome the agent may get; read: a direct read
		// of secret follows (it must be asked about).
		agentGets []string
		read      bool
	}{
		{"shared id", `[{"optionId":"x","name":"Always allow","kind":"allow_always"},{"optionId":"x","name":"Reject","kind":"reject_once"},{"optionId":"r","name":"No","kind":"reject_once"}]`,
			"reject_once", []string{`{"outcome":"selected","optionId":"r"}`, `{"outcome":"cancelled"}`}, true},
		{"always without once", `[{"optionId":"aa","name":"Always allow","kind":"allow_always"},{"optionId":"r","name":"Reject","kind":"reject_once"}]`,
			"allow_always", []string{`{"outcome":"cancelled"}`}, false},
		{"unknown kind", `[{"optionId":"yes","name":"Allow","kind":"allow"},{"optionId":"r","name":"Reject","kind":"reject_once"}]`,
			"allow", []string{`{"outcome":"cancelled"}`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := StartRouter(t, cfg, nil)
			asks := &permissionCounter{}
			e.Handle("session/request_permission", asks.handler(tc.choice))
			e.Handle("fs/read_text_file", readTextFile)
			e.Initialize(t, capsAll)
			sid := e.NewSession(t, cwd)
			script := fmt.Sprintf(`permission-opts {"toolCall":%s,"options":%s}`, tool, tc.options)
			if tc.read {
				script += "\nread " + secret
			}
			e.MustPrompt(t, sid, script, "end_turn")
			texts := e.Texts(sid)
			if len(texts) == 0 || !strings.HasPrefix(texts[0], "permission: ") {
				t.Fatalf("agent said %q", texts)
			}
			got := strings.TrimPrefix(texts[0], "permission: ")
			ok := false
			for _, w := range tc.agentGets {
				ok = ok || got == w
			}
			if !ok {
				t.Errorf("the user chose %s; the agent got %s, want one of %q", tc.choice, got, tc.agentGets)
			}
			if tc.read {
				for _, txt := range texts {
					if strings.Contains(txt, "private notes") {
						t.Errorf("the user rejected the read of %s, and the agent read it without being asked (%d asks): %q", secret, asks.count(), texts)
					}
				}
			}
			for _, r := range readAudit(t, auditFile) {
				if r.Session == sid && r.UserChoice == "allow_always" && tc.choice != "allow_always" {
					t.Errorf("audited as allow_always; the user chose %s", tc.choice)
				}
			}
		})
	}
}
