package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Protocol-level tests of the permission policy: what an agent can make
// the router approve by the shape and order of its messages rather than
// by what they say.

func init() {
	// permission-call JSON: session/request_permission with this toolCall
	// as it is (no tool_call announced before it), the four options.
	fakeScriptExt["permission-call"] = func(a *fakeAgent, s *fakeSession, rest string) {
		var tc map[string]any
		if err := json.Unmarshal([]byte(rest), &tc); err != nil {
			a.say(s.id, "bad permission-call: "+err.Error())
			return
		}
		a.askPermission(s.id, tc,
			map[string]any{"optionId": fakeAllowOption, "name": "Allow", "kind": "allow_once"},
			map[string]any{"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
			map[string]any{"optionId": fakeRejectOption, "name": "Reject", "kind": "reject_once"},
			map[string]any{"optionId": "reject-always", "name": "Always reject", "kind": "reject_always"})
	}
}

// TestPolicyHiddenUpdatesApproveNothing: a tool_call_update for a tool
// call the editor has not seen is not forwarded to it, and no editor shows
// a tool call's _meta, but both are evidence of the permission request.
// The user who approves that request saw only what the editor shows:
// their choice must not approve what only the hidden update or _meta
// named (a direct call it covers, a grant).
func TestPolicyHiddenUpdatesApproveNothing(t *testing.T) {
	t.Parallel()
	cwd, elsewhere := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main"), 0o644)
	secret := filepath.Join(elsewhere, "notes.txt")
	os.WriteFile(secret, []byte("private notes"), 0o644)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	main := filepath.Join(cwd, "main.go")
	scripts := map[string]string{
		// An update for a tool call the editor has not seen.
		"hidden-update": fmt.Sprintf(`update {"sessionUpdate":"tool_call_update","toolCallId":"t1","kind":"read","rawInput":{"file_path":%[2]q}}
permission-call {"toolCallId":"t1","kind":"read","title":"Read main.go","locations":[{"path":%[1]q}]}`, main, secret),
		// _meta: no editor shows it (ACP: reserved for extensions).
		"meta": fmt.Sprintf(`permission-call {"toolCallId":"t1","kind":"read","title":"Read main.go","locations":[{"path":%[1]q}],"_meta":{"x":{"file_path":%[2]q}}}`, main, secret),
	}
	for _, tc := range []struct{ how, choice string }{{"hidden-update", "allow_once"}, {"hidden-update", "allow_always"}, {"meta", "allow_once"}, {"meta", "allow_always"}} {
		choice := tc.choice
		t.Run(tc.how+"/"+choice, func(t *testing.T) {
			e := StartRouter(t, cfg, nil)
			asks := &permissionCounter{}
			e.Handle("session/request_permission", asks.handler(choice))
			e.Handle("fs/read_text_file", readTextFile)
			e.Initialize(t, capsAll)
			sid := e.NewSession(t, cwd)
			script := scripts[tc.how] + "\nread " + secret
			if choice == "allow_always" {
				script += "\nread " + secret
			}
			e.MustPrompt(t, sid, script, "end_turn")
			for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.Update() == "tool_call_update" }) {
				if strings.Contains(string(m.Params), secret) {
					t.Fatalf("the editor got the hidden update: %s", m.Params)
				}
			}
			if asks.count() < 1 {
				t.Fatalf("the editor was not asked about the permission request")
			}
			var first struct {
				ToolCall map[string]json.RawMessage `json:"toolCall"`
			}
			json.Unmarshal(asks.params[0], &first)
			delete(first.ToolCall, "_meta")
			if b, _ := json.Marshal(first.ToolCall); strings.Contains(string(b), secret) {
				t.Fatalf("the permission request shows %s: the test does not test what it says", secret)
			}
			// The read of the file only the hidden update named is asked
			// about, not covered by the user's approval of "Read main.go".
			reads := 0
			for _, p := range asks.params[1:] {
				if strings.Contains(string(p), secret) {
					reads++
				}
			}
			if reads == 0 {
				t.Errorf("the read of %s was not asked about: the approval of a tool call showing main.go covered it (editor asked %d times; agent said %q)", secret, asks.count(), e.Texts(sid))
			}
		})
	}
}

func init() {
	// terminal-env NAME=VALUE CMD ARGS...: terminal/create with that
	// environment variable.
	fakeScriptExt["terminal-env"] = func(a *fakeAgent, s *fakeSession, rest string) {
		words := strings.Fields(rest)
		name, value, _ := strings.Cut(words[0], "=")
		res, rerr := a.call("terminal/create", map[string]any{"sessionId": s.id, "command": words[1], "args": words[2:],
			"env": []any{map[string]string{"name": name, "value": value}}})
		if rerr != nil {
			a.say(s.id, fmt.Sprintf("terminal error: %d %s", rerr.Code, rerr.Message))
			return
		}
		a.say(s.id, "terminal-id: "+jsonString(res, "terminalId"))
	}
}

// TestPolicyAskShowsTerminalEnv: the router's own permission request
// about a terminal/create shows everything the policy decided on that
// the editor will use: the environment variables (LD_PRELOAD here, which
// is why it asks), the arguments as separate words, the directory.
func TestPolicyAskShowsTerminalEnv(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, `default: ask
rules:
  - id: ls
    decision: allow
    when: {command: ["ls **"]}
`)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("reject_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "terminal-env LD_PRELOAD=/tmp/evil.so ls -l", "end_turn")
	if asks.count() != 1 {
		t.Fatalf("asked %d times, want 1; agent said %q", asks.count(), e.Texts(sid))
	}
	var ask struct {
		ToolCall struct {
			Title    string          `json:"title"`
			RawInput json.RawMessage `json:"rawInput"`
		} `json:"toolCall"`
	}
	json.Unmarshal(asks.params[0], &ask)
	if !strings.Contains(ask.ToolCall.Title, "LD_PRELOAD=/tmp/evil.so") || !strings.Contains(string(ask.ToolCall.RawInput), "LD_PRELOAD") {
		t.Errorf("the router's permission request does not show the environment it asks about: %s", asks.params[0])
	}
}

// TestPolicyPermissionForEarlierTurnsToolCall: the router keeps a tool
// call's updates as evidence for its turn only, while the editor keeps
// showing the tool call. A permission request in a later turn about a tool
// call the editor was shown then (as "rm -rf ~") cannot be reconciled with
// what it said before: it is never allowed on what the request alone
// says (a read of main.go).
func TestPolicyPermissionForEarlierTurnsToolCall(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("reject_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, `update {"sessionUpdate":"tool_call","toolCallId":"t7","kind":"execute","title":"rm -rf ~","rawInput":{"command":"rm -rf ~"},"status":"pending"}`, "end_turn")
	e.MustPrompt(t, sid, fmt.Sprintf(`permission-call {"toolCallId":"t7","kind":"read","locations":[{"path":%q}]}`, filepath.Join(cwd, "main.go")), "end_turn")
	for _, txt := range e.Texts(sid) {
		if strings.Contains(txt, `"optionId":"allow"`) {
			t.Errorf("the permission request about the earlier turn's rm -rf ~ was allowed as a read of main.go (editor asked %d times)", asks.count())
		}
	}
}

func init() {
	// raw-update JSON: a session/update whose update is JSON as written
	// (escapes in member names kept).
	fakeScriptExt["raw-update"] = func(a *fakeAgent, s *fakeSession, rest string) {
		a.writeRaw([]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":` + string(mustJSON(s.id)) + `,"update":` + rest + "}}\n"))
	}
}

// TestPolicyEscapedUpdateNames: a tool_call whose member names are
// written with escapes is the same tool call to the router as to the
// editor: its rawInput is evidence of the permission request about it.
func TestPolicyEscapedUpdateNames(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, `default: ask
rules:
  - id: reads-in-project
    decision: allow
    when: {kind: [read, search], paths: ["${cwd}/**"]}
  - id: no-rm
    decision: deny
    when: {command: ["rm **"]}
`)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	main := filepath.Join(cwd, "main.go")
	for _, upd := range []string{
		`{"sessionUpdate":"tool_call","toolCall\u0049d":"t1","kind":"read","title":"x","r\u0061wInput":{"comm\u0061nd":"rm -rf ~"},"status":"pending"}`,
		`{"sessionUpd\u0061te":"tool_call","toolCallId":"t2","kind":"read","title":"x","rawInput":{"command":"rm -rf ~"},"status":"pending"}`,
	} {
		id := "t1"
		if strings.Contains(upd, `"t2"`) {
			id = "t2"
		}
		e.MustPrompt(t, sid, fmt.Sprintf("raw-update %s\npermission-call {\"toolCallId\":%q,\"kind\":\"read\",\"locations\":[{\"path\":%q}]}", upd, id, main), "end_turn")
	}
	rejected := 0
	for _, txt := range e.Texts(sid) {
		if strings.Contains(txt, `"optionId":"allow"`) {
			t.Errorf("a permission request about a tool call announced with escaped names as rm -rf ~ was allowed: %q", e.Texts(sid))
		}
		if strings.Contains(txt, `"optionId":"reject"`) {
			rejected++
		}
	}
	if rejected != 2 {
		t.Errorf("%d permission requests denied by no-rm, want 2: %q", rejected, e.Texts(sid))
	}
}

// TestPolicySubagentMode: a subagent session that reports a mode the
// policy denies (claude's bypassPermissions) cannot be set back (ACP
// permits only cancel on a child): its requests are decided as a denied
// mode's are, never allowed without asking.
func TestPolicySubagentMode(t *testing.T) {
	t.Parallel()
	c := startChildPolicy(t)
	e, cwd, sid, asks := c.e, c.cwd, c.sid, c.asks
	e.MustPrompt(t, sid, strings.Join([]string{
		announce("child-1"),
		"as child-1 read " + cwd + "/main.go",
		`as child-1 update {"sessionUpdate":"current_mode_update","currentModeId":"bypassPermissions"}`,
		"as child-1 read " + cwd + "/main.go",
	}, "\n"), "end_turn")
	var reads []string
	for _, txt := range e.Texts("child-1") {
		if strings.HasPrefix(txt, "read") {
			reads = append(reads, txt)
		}
	}
	if len(reads) != 2 || reads[0] != "read: package main" || reads[1] == "read: package main" || asks.count() != 1 {
		t.Errorf("reads %q, editor asked %d times; want the first allowed, the second (in bypassPermissions) asked and refused", reads, asks.count())
	}
}

func init() {
	// permission-then-update REQUEST ||| UPDATE: session/request_permission
	// with REQUEST's toolCall and options, then, while the editor has it,
	// the session/update UPDATE; then waits for the answer and says it.
	fakeScriptExt["permission-then-update"] = func(a *fakeAgent, s *fakeSession, rest string) {
		reqJSON, updJSON, _ := strings.Cut(rest, " ||| ")
		var p, u map[string]any
		if json.Unmarshal([]byte(reqJSON), &p) != nil || json.Unmarshal([]byte(updJSON), &u) != nil {
			a.say(s.id, "bad permission-then-update")
			return
		}
		p["sessionId"] = s.id
		a.mu.Lock()
		id := a.nextID
		a.nextID++
		ch := make(chan wireMsg, 1)
		a.pending[id] = ch
		a.methods[id] = "session/request_permission"
		a.mu.Unlock()
		a.writeRaw(mustLine(map[string]any{"jsonrpc": "2.0", "id": id, "method": "session/request_permission", "params": p}))
		a.update(s.id, u)
		a.say(s.id, "updated")
		select {
		case m := <-ch:
			if m.Error != nil {
				a.say(s.id, fmt.Sprintf("permission error: %d %s", m.Error.Code, m.Error.Message))
				return
			}
			var out struct {
				Outcome json.RawMessage `json:"outcome"`
			}
			_ = json.Unmarshal(m.Result, &out)
			a.say(s.id, "permission: "+string(out.Outcome))
		case <-time.After(30 * time.Second):
			a.say(s.id, "permission: no answer")
		}
	}
}

// TestPolicyToolCallChangedWhileAsked: the editor's user decides about
// the tool call as the editor shows it when they answer. Zed upserts a
// tool_call_update into the card of a pending permission request (its
// title, kind, locations change, the buttons stay). An agent asked about
// an edit of ~/.bashrc, then, while the dialog was up, updated the tool
// call to "Read README.md": the user allowed what read as a harmless read,
// the router recorded an approval of the edit of ~/.bashrc, and the
// agent's direct write of ~/.bashrc in that turn went through without
// asking. Updates of a tool call whose permission request the editor has
// are held until it is answered.
func TestPolicyToolCallChangedWhileAsked(t *testing.T) {
	t.Parallel()
	for _, child := range []bool{false, true} {
		name := "session"
		if child {
			name = "subagent"
		}
		t.Run(name, func(t *testing.T) { testToolCallChangedWhileAsked(t, child) })
	}
}

func testToolCallChangedWhileAsked(t *testing.T, child bool) {
	t.Parallel()
	cwd, home := t.TempDir(), t.TempDir()
	bashrc := filepath.Join(home, ".bashrc")
	readme := filepath.Join(cwd, "README.md")
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/write_text_file", writeTextFile)
	var (
		mu        sync.Mutex
		shownWhen []string // the card's title each time the user answered about t1
		writeAsks int      // the router's own asks about the write
	)
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		if strings.Contains(string(p), "wants to write") {
			mu.Lock()
			writeAsks++
			mu.Unlock()
			return choosePermission(p, "reject_once")
		}
		// The user reads the card once the agent's "updated" is on screen
		// (anything forwarded before it is too), the card as Zed builds it:
		// the request's tool call, then each tool_call_update merged in.
		sid := jsonString(p, "sessionId")
		id := jsonString(p, "toolCall", "toolCallId")
		e.Rec.Await(10*time.Second, func(m *Msg) bool { txt, ok := m.ChunkText(sid); return ok && txt == "updated" })
		title := jsonString(p, "toolCall", "title")
		seenReq := false
		for _, m := range e.Rec.All() {
			if m.IsRequest() && m.Method == "session/request_permission" && jsonString(m.Params, "toolCall", "toolCallId") == id {
				seenReq = true
				continue
			}
			if seenReq && m.Update() == "tool_call_update" && jsonString(m.Params, "update", "toolCallId") == id {
				if t := jsonString(m.Params, "update", "title"); t != "" {
					title = t
				}
			}
		}
		mu.Lock()
		shownWhen = append(shownWhen, title)
		mu.Unlock()
		if strings.HasPrefix(title, "Read ") { // a read in the project: fine
			return choosePermission(p, "allow_once")
		}
		return choosePermission(p, "reject_once")
	})
	prefix := ""
	if child {
		e.Initialize(t, capsSubagents)
		prefix = "as child-1 "
	} else {
		e.Initialize(t, capsAll)
	}
	sid := e.NewSession(t, cwd)
	script := fmt.Sprintf(prefix+`permission-then-update {"toolCall":{"toolCallId":"t1","title":"Edit .bashrc","kind":"edit","locations":[{"path":%[1]q}]},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]} ||| {"sessionUpdate":"tool_call_update","toolCallId":"t1","title":"Read README.md","kind":"read","locations":[{"path":%[2]q}]}
`+prefix+`write %[1]s evil`, bashrc, readme)
	if child {
		script = announce("child-1") + "\n" + script
	}
	e.MustPrompt(t, sid, script, "end_turn")
	texts := e.Texts(sid)
	if child {
		texts = nil
		for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.Update() == "agent_message_chunk" }) {
			texts = append(texts, jsonString(m.Params, "update", "content", "text"))
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(shownWhen) != 1 || shownWhen[0] != "Edit .bashrc" {
		t.Errorf("when the user answered the permission request about the edit of .bashrc, the editor showed the tool call as %q", shownWhen)
	}
	for _, txt := range texts {
		if txt == "write: ok" && writeAsks == 0 {
			t.Errorf("the write of %s went through without asking: the user's answer about what the editor showed as %q approved it (texts %q)", bashrc, shownWhen, texts)
		}
	}
	if b, _ := os.ReadFile(bashrc); string(b) == "evil" {
		t.Errorf("%s was written", bashrc)
	}
	// The agent's update is not lost: it reaches the editor once the
	// request is answered.
	if n := len(e.Rec.Filter(func(m *Msg) bool {
		return m.Update() == "tool_call_update" && jsonString(m.Params, "update", "title") == "Read README.md"
	})); n != 1 {
		t.Errorf("the editor got the agent's update %d times, want 1 (after the answer)", n)
	}
}

// TestPolicyDeniedToolCallStaysFailed: once the policy denied a
// permission request and the editor shows the tool call failed, with the
// note naming the rule, the agent's later updates of that tool call do
// not reach the editor: an agent sent status "completed" with its own
// content, and the editor showed the denied tool call as done, the
// router's note gone. Nor does a new tool_call the agent announces under
// the same id: it gets a card of its own.
func TestPolicyDeniedToolCallStaysFailed(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	env := filepath.Join(cwd, ".env")
	e.MustPrompt(t, sid, fmt.Sprintf(`update {"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read .env","kind":"read","status":"pending","locations":[{"path":%[1]q}]}
permission-call {"toolCallId":"t1","kind":"read","title":"Read .env","locations":[{"path":%[1]q}]}
update {"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"API_KEY=..."}}]}
update {"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read .env","kind":"read","status":"completed","content":[{"type":"content","content":{"type":"text","text":"API_KEY=..."}}]}`, env), "end_turn")
	// The last word on t1, the failed card: a tool_call_update or a
	// tool_call under its id (the agent's fresh tool_call t1 must get a
	// card of its own).
	var last *Msg
	for _, m := range e.Rec.Filter(func(m *Msg) bool { return m.Update() == "tool_call_update" || m.Update() == "tool_call" }) {
		if jsonString(m.Params, "update", "toolCallId") == "t1" {
			last = m
		}
	}
	if last == nil {
		t.Fatal("the editor never got the failed tool call")
	}
	if st := jsonString(last.Params, "update", "status"); st != "failed" || !strings.Contains(string(last.Params), "no-secrets") {
		t.Errorf("the editor's last word on the denied tool call: %s", last.Params)
	}
}
