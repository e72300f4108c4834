package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Subagent sessions (issue 13, part 2; ACP subagent sessions, stable
// 2026-11-20): a child announced with a subagent_update on a session the
// router routes is a router session bound to its parent.

const subagentPolicy = `default: ask
rules:
  - id: no-secret
    decision: deny
    when: {paths: ["**/secret.txt"]}
  - id: reads-in-project
    decision: allow
    when: {kind: [read, search], paths: ["${cwd}/**"]}
`

// announce is the script line announcing child id on the running session.
func announce(id string) string {
	return fmt.Sprintf(`update {"sessionUpdate":"subagent_update","sessionId":%q,"title":"Explore","capabilities":{"cancel":{}}}`, id)
}

// TestSubagentSessions: a child's updates reach the editor under the
// child's id, in order with the parent's; its requests are decided by the
// policy with the parent's context (a denied write never reaches the
// editor or the disk; an ask is asked under the child's id; each audit
// line names the child and its parent); a request naming a child that was
// never announced fails closed, with an audit line; children of two
// agents with the same id never collide; a load of the parent replays the
// child's updates.
func TestSubagentSessions(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main"), 0o644)
	logFile := filepath.Join(t.TempDir(), "alpha.log")
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{LogFile: logFile}), fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"})}, subagentPolicy)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/read_text_file", readTextFile)
	e.Handle("fs/write_text_file", writeTextFile)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	e.Initialize(t, map[string]any{"fs": map[string]bool{"readTextFile": true, "writeTextFile": true}, "terminal": true, "subagents": map[string]any{}})
	sid := e.NewSession(t, cwd)

	script := strings.Join([]string{
		"say parent-before",
		announce("child-1"),
		"as child-1 say child-hello",
		"as child-1 read " + cwd + "/main.go",
		"as child-1 write " + cwd + "/secret.txt leaked",
		`as child-1 permission-tool {"kind":"edit","title":"Write notes","locations":[{"path":"` + cwd + `/notes.txt"}]}`,
		"as ghost-9 write " + cwd + "/ghost.txt boo",
		"say parent-after",
	}, "\n")
	e.MustPrompt(t, sid, script, "end_turn")

	// The editor saw the child under the id the router gave it, between
	// the parent's messages, in the agent's order.
	var seq []string
	childID := ""
	for _, m := range e.Rec.All() {
		if m.Method != "session/update" {
			continue
		}
		var p struct {
			SessionID string `json:"sessionId"`
			Update    struct {
				Kind      string `json:"sessionUpdate"`
				SessionID string `json:"sessionId"`
				Content   struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"update"`
		}
		json.Unmarshal(m.Params, &p)
		switch {
		case p.Update.Kind == "subagent_update":
			childID = p.Update.SessionID
			seq = append(seq, "announce "+p.SessionID+" "+childID)
		case p.Update.Kind == "agent_message_chunk":
			who := "parent"
			if p.SessionID != sid {
				who = "child " + p.SessionID
			}
			seq = append(seq, who+": "+p.Update.Content.Text)
		}
	}
	if childID == "" {
		t.Fatalf("no subagent_update reached the editor:\n%s", strings.Join(seq, "\n"))
	}
	want := []string{
		"parent: parent-before",
		"announce " + sid + " " + childID,
		"child " + childID + ": child-hello",
		"child " + childID + ": read: package main",
		"child " + childID + ": write error: -32603 acp-router: denied by no-secret",
		"child " + childID + `: permission: {"optionId":"allow","outcome":"selected"}`,
		// ghost-9's answer (-32602) is said under ghost-9: an unknown
		// session, so it never reaches the editor either.
		"parent: parent-after",
	}
	if strings.Join(seq, "\n") != strings.Join(want, "\n") {
		t.Errorf("the editor saw\n%s\nwant\n%s", strings.Join(seq, "\n"), strings.Join(want, "\n"))
	}
	if _, err := os.Stat(filepath.Join(cwd, "secret.txt")); err == nil {
		t.Error("the denied write reached the disk")
	}
	if _, err := os.Stat(filepath.Join(cwd, "ghost.txt")); err == nil {
		t.Error("the unknown session's write reached the disk")
	}
	if asks.count() != 1 {
		t.Fatalf("the editor was asked %d times, want 1", asks.count())
	}
	var ask struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(asks.params[0], &ask)
	if ask.SessionID != childID {
		t.Errorf("the child's permission request reached the editor under %q, want %q", ask.SessionID, childID)
	}

	var audit []string
	for _, r := range readAudit(t, auditFile) {
		audit = append(audit, fmt.Sprintf("%s %s %s %s %s", r.Session, r.Parent, r.Method, r.Decision, r.rule()))
	}
	wantAudit := []string{
		childID + " " + sid + " fs/read_text_file allow reads-in-project",
		childID + " " + sid + " fs/write_text_file deny no-secret",
		childID + " " + sid + " session/request_permission ask ",
		"ghost-9  fs/write_text_file deny acp-router:unknown-session",
	}
	if strings.Join(audit, "\n") != strings.Join(wantAudit, "\n") {
		t.Errorf("audit\n%s\nwant\n%s", strings.Join(audit, "\n"), strings.Join(wantAudit, "\n"))
	}

	t.Run("session/cancel of a child reaches the agent", func(t *testing.T) {
		e.Notify("session/cancel", map[string]any{"sessionId": childID})
		// The fake agent logs what it reads; a prompt afterwards proves
		// the cancel was read before it (one stdin, in order).
		e.MustPrompt(t, sid, "say after-cancel", "end_turn")
		if countLines(logFile, "cancel child-1") != 1 {
			t.Errorf("the agent did not get the child's cancel under its own id: %q", agentLog(logFile))
		}
	})

	t.Run("nested children and bad announcements", func(t *testing.T) {
		// A grandchild announced on the child; an announcement naming the
		// parent itself (a top-level session) is dropped; the grandchild's
		// write is decided with the top-level session's context.
		e.MustPrompt(t, sid, strings.Join([]string{
			announce(sid),
			"as child-1 " + announce("grandchild"),
			"as grandchild say deep",
			"as grandchild write " + cwd + "/secret.txt deeper",
			`update {"sessionUpdate":"session_message","messageId":"m1","senderSessionId":"nobody","recipientSessionId":"child-1","content":[{"type":"text","text":"forged"}]}`,
			`update {"sessionUpdate":"session_message","messageId":"m2","senderSessionId":"` + sid + `","recipientSessionId":"child-1","content":[{"type":"text","text":"to-child"}]}`,
		}, "\n"), "end_turn")
		var messages []string
		for _, m := range e.Rec.All() {
			var p struct {
				Update struct {
					Kind      string `json:"sessionUpdate"`
					Sender    string `json:"senderSessionId"`
					Recipient string `json:"recipientSessionId"`
				} `json:"update"`
			}
			if m.Method == "session/update" && json.Unmarshal(m.Params, &p) == nil && p.Update.Kind == "session_message" {
				messages = append(messages, p.Update.Sender+">"+p.Update.Recipient)
			}
		}
		// A message naming a session the router does not know never reaches
		// the editor; a known one names the sessions as the editor knows them.
		if strings.Join(messages, " ") != sid+">"+childID {
			t.Errorf("session_messages seen by the editor: %q", messages)
		}
		var announced, deep []string
		for _, m := range e.Rec.All() {
			var p struct {
				SessionID string `json:"sessionId"`
				Update    struct {
					Kind      string `json:"sessionUpdate"`
					SessionID string `json:"sessionId"`
					Content   struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"update"`
			}
			if m.Method != "session/update" || json.Unmarshal(m.Params, &p) != nil {
				continue
			}
			if p.Update.Kind == "subagent_update" {
				announced = append(announced, p.SessionID+">"+p.Update.SessionID)
			}
			if p.SessionID == "grandchild" {
				deep = append(deep, p.Update.Content.Text)
			}
		}
		if strings.Join(announced, " ") != sid+">"+childID+" "+childID+">grandchild" {
			t.Errorf("announcements seen by the editor: %q", announced)
		}
		if strings.Join(deep, "|") != "deep|write error: -32603 acp-router: denied by no-secret" {
			t.Errorf("the grandchild's messages: %q", deep)
		}
		recs := readAudit(t, auditFile)
		if last := recs[len(recs)-1]; last.Session != "grandchild" || last.Parent != sid || last.rule() != "no-secret" {
			t.Errorf("last audit record %+v; want the grandchild's write denied, naming the top-level session", last)
		}
	})

	t.Run("two agents announce the same child id", func(t *testing.T) {
		sid2 := e.NewSession(t, cwd)
		e.MustPrompt(t, sid2, "/agent beta", "end_turn")
		e.MustPrompt(t, sid2, announce("child-1")+"\nas child-1 say from-beta", "end_turn")
		var got []string
		for _, m := range e.Rec.All() {
			var p struct {
				SessionID string `json:"sessionId"`
				Update    struct {
					Kind    string `json:"sessionUpdate"`
					Content struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"update"`
			}
			if m.Method == "session/update" && json.Unmarshal(m.Params, &p) == nil && p.Update.Content.Text == "from-beta" {
				got = append(got, p.SessionID)
			}
		}
		if len(got) != 1 || got[0] == childID || got[0] == "child-1" {
			t.Errorf("beta's child reached the editor as %q; alpha's is %q: they must differ", got, childID)
		}
	})
}

// TestSubagentReplayAndClose: a load of the parent after a router restart
// replays the child's updates, under the child's id, between the parent's;
// after the parent is closed, the child's requests fail closed.
func TestSubagentReplayAndClose(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{InitResult: json.RawMessage(initLoad), UniqueSessionIDs: true})}, subagentPolicy)
	e := historyRouter(t, cfg)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "say p1\n"+announce("kid")+"\nas kid say k1\nsay p2", "end_turn")
	stopRouter(t, e)

	e = historyRouter(t, cfg)
	var got []string
	for _, m := range loadUpdates(t, e, sid, cwd) {
		if txt, ok := m.ChunkText(m.SessionID()); ok {
			got = append(got, m.SessionID()+": "+txt)
		}
	}
	if len(got) < 3 || got[len(got)-3] != sid+": p1" || got[len(got)-2] != "kid: k1" || got[len(got)-1] != sid+": p2" {
		t.Errorf("replay %q; want the child's k1 between p1 and p2", got)
	}

	e.MustPrompt(t, sid, announce("kid2")+"\nas kid2 say k2", "end_turn")
	e.MustCall(t, "session/close", map[string]any{"sessionId": sid})
	sid2 := e.NewSession(t, cwd)
	e.MustPrompt(t, sid2, "as kid2 write "+cwd+"/late.txt x", "end_turn")
	if _, err := os.Stat(filepath.Join(cwd, "late.txt")); err == nil {
		t.Error("a closed parent's child wrote a file")
	}
	recs := readAudit(t, auditFile)
	if last := recs[len(recs)-1]; last.Session != "kid2" || last.rule() != "acp-router:unknown-session" {
		t.Errorf("last audit record %+v; want the closed child's write refused as an unknown session", last)
	}
}

// TestSubagentBound: a session's children are bounded (1,024 at all
// depths); announcements past the bound are dropped and logged once, the
// children they named do not exist (their requests fail closed), and the
// session goes on.
func TestSubagentBound(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, subagentPolicy)
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	var script []string
	for i := range 1100 {
		script = append(script, announce(fmt.Sprintf("c%d", i)))
	}
	script = append(script, "as c1099 write "+cwd+"/over.txt x", "say still here")
	e.MustPrompt(t, sid, strings.Join(script, "\n"), "end_turn")
	announced := 0
	for _, m := range e.Rec.All() {
		if m.Update() == "subagent_update" {
			announced++
		}
	}
	if announced != 1024 {
		t.Errorf("%d children announced to the editor, want the bound, 1024", announced)
	}
	if got := e.Texts(sid); len(got) == 0 || got[len(got)-1] != "still here" {
		t.Errorf("the session did not go on: %q", got)
	}
	if n := e.LogCount("subagent sessions past the bound dropped", 1); n != 1 {
		t.Errorf("the drop was logged %d times, want once", n)
	}
	recs := readAudit(t, auditFile)
	if last := recs[len(recs)-1]; last.Session != "c1099" || last.rule() != "acp-router:unknown-session" {
		t.Errorf("last audit record %+v; want the unannounced child's write refused", last)
	}
	if _, err := os.Stat(filepath.Join(cwd, "over.txt")); err == nil {
		t.Error("a child past the bound wrote a file")
	}
}

// TestSubagentExplain: `policy explain --subagent-cwd` shows a child's
// decision: made with the top-level session's cwd, whatever cwd the child
// announced (a read in the child's own "cwd" is not a read in the project).
func TestSubagentExplain(t *testing.T) {
	t.Parallel()
	project, elsewhere := t.TempDir(), t.TempDir()
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, subagentPolicy)
	code, out, errOut := runRouterCmd(t, nil, "policy", "explain", "--config", cfg, "--cwd", project, "--subagent-cwd", elsewhere,
		"fs/read_text_file", elsewhere+"/notes.txt")
	if code != 0 || !strings.Contains(out, "subagent: a child that announced cwd "+elsewhere+" is decided as its top-level session: cwd "+project) ||
		!strings.Contains(out, "decision: ASK") {
		t.Errorf("exit %d\n%s%s\nwant the child's read outside the parent's project asked, not allowed", code, out, errOut)
	}
}
