package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// What an agent gets done by the shape of its requests around the policy:
// permission options (ids, kinds, "always" without "once"), members
// spelled twice or in another case, request methods sent as
// notifications. protocol_policy_test.go has the rest of this kind.

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

// TestTerminalOwnershipExactNames: the terminal whose owner the router
// checks is the terminal the editor uses. Before, the router read
// terminalId with encoding/json (any case, the last one winning), the
// editor by its exact name: beta, naming its own terminal as
// "TerminalId" (or as a second "terminalId") next to alpha's, had the
// editor read, wait for, kill or release alpha's terminal.
func TestTerminalOwnershipExactNames(t *testing.T) {
	t.Parallel()
	e, sidA, sidB := startAlphaBeta(t)
	termOf := func(sid string) string {
		t.Helper()
		e.MustPrompt(t, sid, "terminal-create echo hi", "end_turn")
		for _, text := range e.Texts(sid) {
			if id, ok := strings.CutPrefix(text, "terminal-id: "); ok {
				return id
			}
		}
		t.Fatalf("no terminal: %q", e.Texts(sid))
		return ""
	}
	termA, termB := termOf(sidA), termOf(sidB)
	methods := []string{"terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}
	answered := func(method, params string) string {
		t.Helper()
		before := len(e.Texts(sidB))
		e.MustPrompt(t, sidB, "request "+method+" "+params, "end_turn")
		texts := e.Texts(sidB)[before:]
		if len(texts) != 1 || !strings.HasPrefix(texts[0], "answer: ") {
			t.Fatalf("%s %s: beta got no answer (texts %q)", method, params, texts)
		}
		return texts[0]
	}
	for _, method := range methods {
		for _, params := range []string{
			`{"sessionId":"SESSION","terminalId":%q,"TerminalId":%q}`,
			`{"sessionId":"SESSION","terminalId":%q,"terminalId":%q}`,
			`{"sessionId":"SESSION","terminalId":%q,"terminal\u0049d":%q}`,
		} {
			if got := answered(method, fmt.Sprintf(params, termA, termB)); got != "answer: error -32602" {
				t.Errorf("%s naming alpha's and beta's terminals: beta got %q, want the router's -32602", method, got)
			}
		}
	}
	// Beta's own terminal, named once, reaches the editor: the recording
	// below sees what the router relays of each method.
	for _, method := range methods {
		answered(method, fmt.Sprintf(`{"sessionId":"SESSION","terminalId":%q}`, termB))
	}
	relayed := map[string]int{}
	for _, m := range e.Rec.Filter(func(m *Msg) bool { return strings.HasPrefix(m.Method, "terminal/") && m.Method != "terminal/create" }) {
		if jsonString(m.Params, "terminalId") == termA || strings.Contains(string(m.Params), termA) {
			t.Errorf("beta had the editor use alpha's terminal: %s %s", m.Method, m.Params)
		}
		if jsonString(m.Params, "terminalId") == termB {
			relayed[m.Method]++
		}
	}
	for _, method := range methods {
		if relayed[method] != 1 {
			t.Errorf("the editor got %s of beta's own terminal %d times, want 1", method, relayed[method])
		}
	}
}

// TestRequestMethodsAsNotifications: an agent's fs/*, terminal/* and
// session/request_permission sent without an id are dropped. Before,
// they went to the editor as notifications, undecided and unaudited
// (the policy decides requests only): a write the policy denies reached
// every editor that acts on the method it reads.
func TestRequestMethodsAsNotifications(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/read_text_file", readTextFile)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	env, notes := filepath.Join(cwd, ".env"), filepath.Join(cwd, "notes.txt")
	os.WriteFile(notes, []byte("notes"), 0o644)
	dropped := []string{
		fmt.Sprintf(`notify fs/write_text_file {"sessionId":%q,"path":%q,"content":"X=1"}`, sid, env),
		fmt.Sprintf(`notify fs/read_text_file {"sessionId":%q,"path":%q}`, sid, env),
		fmt.Sprintf(`notify terminal/create {"sessionId":%q,"command":"rm","args":["-rf",%q]}`, sid, cwd),
		fmt.Sprintf(`notify session/request_permission {"sessionId":%q,"toolCall":{"toolCallId":"t1","title":"x"},"options":[]}`, sid),
		fmt.Sprintf(`notify elicitation/create {"sessionId":%q,"mode":"form","message":"?","requestedSchema":{"type":"object","properties":{}}}`, sid),
	}
	// After them, what does reach the editor: a notification the router
	// relays (the agent's messages are relayed in order, so whatever the
	// router relayed of the lines above was recorded before it), and a
	// read the policy allows, as a request.
	script := strings.Join(append(dropped,
		fmt.Sprintf(`notify _acme/after {"sessionId":%q}`, sid),
		"read "+notes,
	), "\n")
	e.MustPrompt(t, sid, script, "end_turn")
	if texts := e.Texts(sid); !slices.Contains(texts, "read: notes") {
		t.Errorf("the allowed read did not reach the editor: texts %q", texts)
	}
	if got := e.Rec.Filter(func(m *Msg) bool { return m.Method == "_acme/after" }); len(got) != 1 {
		t.Fatalf("the editor got %d of the notification sent after the dropped ones, want 1", len(got))
	}
	for _, m := range e.Rec.Filter(func(m *Msg) bool {
		return (strings.HasPrefix(m.Method, "fs/") || strings.HasPrefix(m.Method, "terminal/") ||
			m.Method == "session/request_permission" || m.Method == "elicitation/create") && len(m.ID) == 0
	}) {
		t.Errorf("the editor got an agent's %s undecided: %s", m.Method, m.Params)
	}
	// Each was seen and dropped, not lost on the way.
	deadline := time.Now().Add(waitTimeout)
	for strings.Count(e.Stderr(), "a request method sent as a notification dropped") < len(dropped) {
		if time.Now().After(deadline) {
			t.Fatalf("the router did not log dropping the %d request methods sent as notifications:\n%s", len(dropped), e.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPolicyPermissionOptionLabels: the buttons the editor shows for an
// agent's permission request say what each does. An agent naming its
// allow_once option "Reject" and its reject_once "Allow" made a user who
// pressed "Reject" approve (Zed labels each button with the option's
// name), audited as the user's allow; and an "always" named for a scope
// of the agent's ("don't ask again for npm") is the router's grant for
// the session. The editor now gets the router's label for each kind, the
// agent's ids kept.
func TestPolicyPermissionOptionLabels(t *testing.T) {
	t.Parallel()
	cwd, elsewhere := t.TempDir(), t.TempDir()
	secret := filepath.Join(elsewhere, "notes.txt")
	os.WriteFile(secret, []byte("private notes"), 0o644)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	tool := fmt.Sprintf(`{"toolCallId":"t1","kind":"read","title":"Read notes.txt","locations":[{"path":%q}]}`, secret)
	options := `[{"optionId":"a1","name":"Reject","kind":"allow_once"},{"optionId":"a2","name":"Yes, and don't ask again for npm","kind":"allow_always"},{"optionId":"r1","name":"Allow","kind":"reject_once"},{"optionId":"r2","name":"Allow always","kind":"reject_always"}]`
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("reject_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, fmt.Sprintf(`permission-opts {"toolCall":%s,"options":%s}`, tool, options), "end_turn")
	if asks.count() != 1 {
		t.Fatalf("the editor was asked %d times, want 1", asks.count())
	}
	var shown struct {
		Options []struct{ OptionID, Name, Kind string }
	}
	if err := json.Unmarshal(asks.params[0], &shown); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{"a1": {"allow_once", "Allow once"}, "a2": {"allow_always", "Always allow in this session"},
		"r1": {"reject_once", "Reject"}, "r2": {"reject_always", "Always reject in this session"}}
	if len(shown.Options) != len(want) {
		t.Fatalf("the editor was shown %d options, want %d: %s", len(shown.Options), len(want), asks.params[0])
	}
	for _, o := range shown.Options {
		if w, ok := want[o.OptionID]; !ok || o.Kind != w[0] || o.Name != w[1] {
			t.Errorf("the editor was shown option %s (%s) named %q, want %q", o.OptionID, o.Kind, o.Name, want[o.OptionID][1])
		}
	}
	if texts := e.Texts(sid); len(texts) == 0 || texts[0] != `permission: {"outcome":"selected","optionId":"r1"}` {
		t.Errorf("the user pressed the reject_once button; the agent said %q", texts)
	}
}
