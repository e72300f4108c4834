package test

// The unstable methods the router routes itself (issue 15, point 3;
// notes/acp-currency.md rows 7-10, 12, 14, 15): session/set_title,
// session/status, session/archive and unarchive, auth/status and a flood
// of auth/status_update, MCP over ACP (mcp/message), session/fork, and a
// new method naming a session (session/options) with its id translated.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func init() {
	known := func(a *fakeAgent, m wireMsg) (string, bool) {
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return p.SessionID, a.knownSession(m)
	}
	fakeMethodExt["session/set_title"] = func(a *fakeAgent, m wireMsg) {
		var p struct {
			Title string `json:"title"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if _, ok := known(a, m); ok {
			a.reply(m.ID, map[string]string{"title": strings.TrimSpace(p.Title) + " (" + a.opts.Name + ")"})
		}
	}
	fakeMethodExt["session/status"] = func(a *fakeAgent, m wireMsg) {
		if _, ok := known(a, m); ok {
			a.reply(m.ID, map[string]string{"status": "open"})
		}
	}
	for _, method := range []string{"session/archive", "session/unarchive"} {
		fakeMethodExt[method] = func(a *fakeAgent, m wireMsg) { a.reply(m.ID, map[string]any{}) }
	}
	fakeMethodExt["session/options"] = func(a *fakeAgent, m wireMsg) {
		if sid, ok := known(a, m); ok {
			a.reply(m.ID, map[string]string{"agentSessionId": sid})
		}
	}
	fakeMethodExt["session/fork"] = func(a *fakeAgent, m wireMsg) {
		var p struct {
			Cwd string `json:"cwd"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if _, ok := known(a, m); !ok {
			return
		}
		a.mu.Lock()
		a.nSess++
		sid := a.prefix + fmt.Sprint(a.nSess)
		a.sessions[sid] = &fakeSession{id: sid, cwd: p.Cwd}
		a.mu.Unlock()
		a.reply(m.ID, map[string]string{"sessionId": sid})
	}
	fakeMethodExt["auth/status"] = func(a *fakeAgent, m wireMsg) {
		if a.opts.AuthState == "silent" { // never answers: logs the id it was asked under
			a.logf("auth/status held %s", m.ID)
			return
		}
		a.reply(m.ID, map[string]any{"state": a.opts.AuthState, "accounts": []any{map[string]any{"label": a.opts.Name + " key", "active": true}}})
	}
	fakeMethodExt["mcp/message"] = func(a *fakeAgent, m wireMsg) {
		a.reply(m.ID, map[string]any{"result": map[string]any{"agent": a.opts.Name, "params": m.Params}})
	}
	// mcp-call SERVERID: mcp/message to the editor; say "mcp: RESULT" or
	// "mcp error: CODE MESSAGE".
	fakeScriptExt["mcp-call"] = func(a *fakeAgent, s *fakeSession, rest string) {
		res, rerr := a.call("mcp/message", map[string]any{"serverId": rest, "requestId": "req-1", "method": "tools/list", "params": map[string]any{}})
		if rerr != nil {
			a.say(s.id, fmt.Sprintf("mcp error: %d %s", rerr.Code, rerr.Message))
			return
		}
		a.say(s.id, "mcp: "+string(res))
	}
	// mcp-send SERVERID JSON: mcp/message to the editor with the members
	// of the JSON object (method, params, ...) and a requestId of its own;
	// say as mcp-call does.
	fakeScriptExt["mcp-send"] = func(a *fakeAgent, s *fakeSession, rest string) {
		server, msg, _ := strings.Cut(rest, " ")
		p := map[string]any{}
		if err := json.Unmarshal([]byte(msg), &p); err != nil {
			a.say(s.id, "mcp-send: "+err.Error())
			return
		}
		a.mu.Lock()
		a.nSent++
		p["serverId"], p["requestId"] = server, fmt.Sprintf("req-%d", a.nSent)
		a.mu.Unlock()
		res, rerr := a.call("mcp/message", p)
		if rerr != nil {
			a.say(s.id, fmt.Sprintf("mcp error: %d %s", rerr.Code, rerr.Message))
			return
		}
		a.say(s.id, "mcp: "+string(res))
	}
	// auth-flood N: N auth/status_update notifications, as fast as they
	// can be written, numbered in _meta.n.
	fakeScriptExt["auth-flood"] = func(a *fakeAgent, s *fakeSession, rest string) {
		var n int
		fmt.Sscan(rest, &n)
		for i := range n {
			a.notify("auth/status_update", map[string]any{"state": "authenticated", "_meta": map[string]any{"n": i}})
		}
	}
}

// initUnstable: an agent with every unstable capability the router routes.
const initUnstable = `{"protocolVersion":1,"agentCapabilities":{"mcpCapabilities":{"acp":true},
	"sessionCapabilities":{"close":{},"title":{},"status":{},"fork":{},"archive":{}},"auth":{"status":{}}},
	"authMethods":[],"agentInfo":{"name":"fake","version":"1"}}`

// unstableRouter: alpha (no unstable capability, the default) and beta
// (all of them, for sessions under dirB). Both hand out the same session
// ids, so beta's sessions are renamed by the router (sess-1~beta) and a
// method that reaches beta untranslated fails there (knownSession).
func unstableRouter(t *testing.T, dirB string) (*Editor, string, string) {
	t.Helper()
	logs := t.TempDir()
	alphaLog, betaLog := filepath.Join(logs, "alpha.log"), filepath.Join(logs, "beta.log")
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{Name: "alpha", LogFile: alphaLog}),
		fakeAgentYAML("beta", fakeOpts{Name: "beta", LogFile: betaLog, InitResult: json.RawMessage(initUnstable), AuthState: "authenticated"}),
	}, "default: alpha", "rules:", cwdRule(dirB, "beta")))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	return e, alphaLog, betaLog
}

// requireRPCError fails unless err has code and its message contains want.
func requireRPCError(t *testing.T, what string, err *RPCError, code int, want string) {
	t.Helper()
	if err == nil || err.Code != code || !strings.Contains(err.Message, want) {
		t.Fatalf("%s: error %v, want %d containing %q", what, err, code, want)
	}
}

type listed struct {
	SessionID string `json:"sessionId"`
	Title     string `json:"title"`
	Archived  *bool  `json:"archived"`
}

func listSessions(t *testing.T, e *Editor, p map[string]any) []listed {
	t.Helper()
	var out struct {
		Sessions []listed `json:"sessions"`
	}
	json.Unmarshal(e.MustCall(t, "session/list", p), &out)
	return out.Sessions
}

func titleOf(list []listed, sid string) (string, bool) {
	for _, s := range list {
		if s.SessionID == sid {
			return s.Title, true
		}
	}
	return "", false
}

// TestSetTitle: the title is the router's. Forwarded, id translated, to an
// agent with sessionCapabilities.title (its normalized title is kept);
// answered by the router for one without; kept by session/list; an
// agent's own title no longer renames the thread; a session only in the
// store is retitled there; an unknown session is -32002, an empty title
// -32602, and the other sessions keep working.
func TestSetTitle(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	e, alphaLog, betaLog := unstableRouter(t, dirB)
	a := e.NewSession(t, dirA)
	b := e.NewSession(t, dirB)
	if !strings.HasSuffix(b, "~beta") {
		t.Fatalf("beta's session is %q, want it renamed (the test relies on a translated id)", b)
	}

	requireJSON(t, "set_title at beta", e.MustCall(t, "session/set_title", map[string]any{"sessionId": b, "title": "  Beta thread "}), `{"title":"Beta thread (beta)"}`)
	requireJSON(t, "set_title at alpha", e.MustCall(t, "session/set_title", map[string]any{"sessionId": a, "title": "Alpha thread"}), `{"title":"Alpha thread"}`)
	if n := countLines(betaLog, "session/set_title"); n != 1 {
		t.Errorf("beta got session/set_title %d times, want 1", n)
	}
	if n := countLines(alphaLog, "session/set_title"); n != 0 {
		t.Errorf("alpha, without the title capability, got session/set_title")
	}
	// The agent's own title does not rename what the editor named.
	e.MustPrompt(t, a, `update {"sessionUpdate":"session_info_update","title":"Generated"}`, "end_turn")
	for _, m := range updatesOf(e, a, "session_info_update") {
		t.Errorf("an agent's title replaced the editor's: %s", m.Params)
	}

	_, rerr := e.Call(context.Background(), "session/set_title", map[string]any{"sessionId": "nope", "title": "x"})
	requireRPCError(t, "set_title of an unknown session", rerr, -32002, `unknown session "nope"`)
	if jsonString(rerr.Data, "sessionId") != "nope" {
		t.Errorf("error data %s, want the sessionId", rerr.Data)
	}
	_, rerr = e.Call(context.Background(), "session/set_title", map[string]any{"sessionId": a, "title": "  "})
	requireRPCError(t, "an empty title", rerr, -32602, "title")

	// Closed: only in the store now.
	e.MustCall(t, "session/close", map[string]any{"sessionId": a})
	requireJSON(t, "set_title of a stored session", e.MustCall(t, "session/set_title", map[string]any{"sessionId": a, "title": "Renamed later"}), `{"title":"Renamed later"}`)
	list := listSessions(t, e, map[string]any{})
	if got, _ := titleOf(list, a); got != "Renamed later" {
		t.Errorf("session/list title of %s = %q, want the one set after close", a, got)
	}
	if got, _ := titleOf(list, b); got != "Beta thread (beta)" {
		t.Errorf("session/list title of %s = %q, want beta's normalized title", b, got)
	}
	e.MustPrompt(t, b, "say still here", "end_turn")
}

// TestSessionStatus: open sessions are open (the agent's own answer, id
// translated, when it supports status); a closed session is saved; an
// unknown one -32002.
func TestSessionStatus(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	e, _, betaLog := unstableRouter(t, dirB)
	a := e.NewSession(t, dirA)
	b := e.NewSession(t, dirB)
	status := func(sid string) string {
		return jsonString(e.MustCall(t, "session/status", map[string]any{"sessionId": sid}), "status")
	}
	if got := status(b); got != "open" {
		t.Errorf("beta's session: %q, want open", got)
	}
	waitAgentLog(t, betaLog, waitTimeout, "session/status at beta", func(l string) bool { return l == "session/status" })
	if got := status(a); got != "open" {
		t.Errorf("alpha's session: %q, want open", got)
	}
	e.MustCall(t, "session/close", map[string]any{"sessionId": a})
	if got := status(a); got != "saved" {
		t.Errorf("a closed session: %q, want saved", got)
	}
	_, rerr := e.Call(context.Background(), "session/status", map[string]any{"sessionId": "nope"})
	requireRPCError(t, "status of an unknown session", rerr, -32002, `unknown session "nope"`)
}

// TestArchive: archiving a session running a turn cancels the turn first
// (the prompt is answered cancelled before the archive answer), closes it
// at the agent (session/archive where supported), and hides it from
// session/list unless archived: include or only asks for it; every listed
// session says whether it is archived; unarchive shows it again; an
// unknown session is -32002, an unknown filter -32602; the other sessions
// keep working.
func TestArchive(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	e, _, betaLog := unstableRouter(t, dirB)
	a := e.NewSession(t, dirA)
	b := e.NewSession(t, dirB)

	_, wait, err := e.Go("session/prompt", promptReq(b, "say start\nsleep 20s\nsay never"))
	if err != nil {
		t.Fatal(err)
	}
	e.WaitText(t, b, "start")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	archived, err := e.Request(ctx, "session/archive", map[string]any{"sessionId": b})
	if err != nil || archived.Error != nil {
		t.Fatalf("archive of a session running a turn: %v %v", archived, err)
	}
	prompt, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, prompt, "cancelled")
	if prompt.Seq > archived.Seq {
		t.Errorf("the archive was answered before the turn it cancelled")
	}
	waitAgentLog(t, betaLog, waitTimeout, "session/archive at beta", func(l string) bool { return l == "session/archive" })
	if countLines(betaLog, "cancel sess-1") != 1 {
		t.Errorf("beta's turn was not cancelled: %q", agentLog(betaLog))
	}

	e.MustPrompt(t, a, "say alpha works", "end_turn")
	ids := func(p map[string]any) string {
		var out []string
		for _, s := range listSessions(t, e, p) {
			if s.Archived == nil {
				t.Errorf("session/list entry %s without archived", s.SessionID)
				continue
			}
			out = append(out, fmt.Sprintf("%s:%v", s.SessionID, *s.Archived))
		}
		return strings.Join(out, ",")
	}
	if got, want := ids(map[string]any{}), a+":false"; got != want {
		t.Errorf("default list %q, want %q", got, want)
	}
	if got, want := ids(map[string]any{"archived": "only"}), b+":true"; got != want {
		t.Errorf("archived only %q, want %q", got, want)
	}
	if got := ids(map[string]any{"archived": "include"}); !strings.Contains(got, a+":false") || !strings.Contains(got, b+":true") {
		t.Errorf("archived include %q, want both", got)
	}
	_, rerr := e.Call(context.Background(), "session/list", map[string]any{"archived": "_sometimes"})
	requireRPCError(t, "an unknown archive filter", rerr, -32602, "_sometimes")
	_, rerr = e.Call(context.Background(), "session/prompt", promptReq(b, "say revived?"))
	if rerr == nil {
		t.Errorf("a prompt brought an archived session back")
	}

	e.MustCall(t, "session/archive", map[string]any{"sessionId": b}) // again: succeeds
	e.MustCall(t, "session/unarchive", map[string]any{"sessionId": b})
	waitAgentLog(t, betaLog, waitTimeout, "session/unarchive at beta", func(l string) bool { return l == "session/unarchive" })
	if got := ids(map[string]any{}); !strings.Contains(got, b+":false") {
		t.Errorf("after unarchive %q, want %s listed", got, b)
	}
	for _, m := range []string{"session/archive", "session/unarchive"} {
		_, rerr = e.Call(context.Background(), m, map[string]any{"sessionId": "nope"})
		requireRPCError(t, m+" of an unknown session", rerr, -32002, `unknown session "nope"`)
	}
	e.MustPrompt(t, a, "say alpha still works", "end_turn")
}

// TestMcpOverAcp: mcp/message is routed by serverId. The agent's request
// for a server its session declared reaches the editor and the answer
// comes back; one for a server no session declared is -32602 naming it.
// The editor's message for a declared server reaches the agent of that
// session, its session id translated; for an undeclared one -32602 naming
// it; after the session closes its servers are gone. An agent without the
// ACP transport does not get the server.
func TestMcpOverAcp(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	e, alphaLog, betaLog := unstableRouter(t, dirB)
	e.Handle("mcp/message", func(p json.RawMessage) (any, *RPCError) {
		return map[string]any{"result": map[string]any{"tools": []any{}, "server": jsonString(p, "serverId")}}, nil
	})
	servers := []any{map[string]any{"type": "acp", "name": "editor-tools", "serverId": "srv-1"}}
	newSession := func(cwd string) string {
		var r struct {
			SessionID string `json:"sessionId"`
		}
		json.Unmarshal(e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": servers}), &r)
		return r.SessionID
	}
	a := e.NewSession(t, dirA)
	b := newSession(dirB)

	e.MustPrompt(t, b, "mcp-call srv-1\nmcp-call srv-nope", "end_turn")
	texts := strings.Join(e.Texts(b), "\n")
	if !strings.Contains(texts, `mcp: {"result":{"server":"srv-1","tools":[]}}`) {
		t.Errorf("the agent's mcp/message did not get the editor's answer: %q", texts)
	}
	if !strings.Contains(texts, `mcp error: -32602 `) || !strings.Contains(texts, `"srv-nope"`) {
		t.Errorf("an undeclared server: %q, want -32602 naming it", texts)
	}

	res := e.MustCall(t, "mcp/message", map[string]any{"serverId": "srv-1", "requestId": "req-7", "method": "notifications/progress", "sessionId": b})
	if jsonString(jsonPath(res, "result"), "agent") != "beta" || jsonString(jsonPath(res, "result", "params"), "sessionId") != "sess-1" {
		t.Errorf("the editor's mcp/message reached %s, want beta with its own session id", res)
	}
	_, rerr := e.Call(context.Background(), "mcp/message", map[string]any{"serverId": "srv-nope", "requestId": "req-1", "method": "ping"})
	requireRPCError(t, "the editor's mcp/message for an undeclared server", rerr, -32602, `"srv-nope"`)

	e.MustPrompt(t, a, "say alpha works", "end_turn")
	if countLines(alphaLog, "mcp/message") != 0 {
		t.Errorf("alpha got mcp/message")
	}
	e.MustCall(t, "session/close", map[string]any{"sessionId": b})
	_, rerr = e.Call(context.Background(), "mcp/message", map[string]any{"serverId": "srv-1", "requestId": "req-2", "method": "ping"})
	requireRPCError(t, "mcp/message after the session closed", rerr, -32602, `"srv-1"`)
	if n := countLines(betaLog, "mcp/message"); n != 1 {
		t.Errorf("beta got mcp/message %d times, want 1", n)
	}
}

// TestAuthStatus: auth/status answers every agent's state, merged, each
// agent named in _meta["acp-router"]; a flood of 100,000
// auth/status_update from one agent is coalesced (the newest one always
// reaches the editor, attributed) while another session's prompts keep
// being answered, and the router's memory stays bounded.
func TestAuthStatus(t *testing.T) {
	skipShort(t, "floods 100,000 auth/status_update, 15 s")
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	e, _, _ := unstableRouter(t, dirB)
	a := e.NewSession(t, dirA)
	b := e.NewSession(t, dirB)

	res := e.MustCall(t, "auth/status", map[string]any{})
	requireJSON(t, "auth/status", res, `{"state":"authenticated",
		"accounts":[{"label":"beta key","active":true,"_meta":{"acp-router":{"agent":"beta"}}}],
		"_meta":{"acp-router":{"agents":{
			"alpha":{"state":"unknown","reason":"does not support auth/status"},
			"beta":{"state":"authenticated","accounts":[{"label":"beta key","active":true}]}}}}}`)

	pid := e.cmd.Process.Pid
	before, _ := procMemory(t, pid)
	const flood = 100000
	_, wait, err := e.Go("session/prompt", promptReq(b, fmt.Sprintf("auth-flood %d\nsay flooded", flood)))
	if err != nil {
		t.Fatal(err)
	}
	// alpha's session is answered throughout.
	for i := range 20 {
		start := time.Now()
		e.MustPrompt(t, a, fmt.Sprintf("say ping %d", i), "end_turn")
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a prompt of another session took %v during the flood", d)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	m, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "end_turn")
	last := e.Rec.WaitFor(t, waitTimeout, "the newest auth/status_update", func(m *Msg) bool {
		return m.Method == "auth/status_update" && string(jsonPath(m.Params, "_meta", "n")) == fmt.Sprint(flood-1)
	})
	requireJSON(t, "the newest update", last.Params, fmt.Sprintf(`{"state":"authenticated","_meta":{"n":%d,"acp-router":{"agent":"beta"}}}`, flood-1))
	got := len(e.Rec.Filter(func(m *Msg) bool { return m.Method == "auth/status_update" }))
	t.Logf("%d of %d auth/status_update reached the editor", got, flood)
	checkGrowth(t, e, "auth/status_update flood", before)
	e.MustPrompt(t, b, "say beta works", "end_turn")
}

// TestForkAndOptions: session/fork is forwarded for a session one agent
// served that supports fork (a new router session on that agent) and
// refused with the reason otherwise; session/options, a method the router
// does not know, reaches the session's agent with its id translated; a
// prompt_suggestions_update is forwarded.
func TestForkAndOptions(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	e, _, betaLog := unstableRouter(t, dirB)
	a := e.NewSession(t, dirA)
	b := e.NewSession(t, dirB)

	requireJSON(t, "session/options", e.MustCall(t, "session/options", map[string]any{"sessionId": b}), `{"agentSessionId":"sess-1"}`)
	e.MustPrompt(t, b, `update {"sessionUpdate":"prompt_suggestions_update","suggestions":["next"]}`, "end_turn")
	if len(updatesOf(e, b, "prompt_suggestions_update")) != 1 {
		t.Errorf("prompt_suggestions_update was not forwarded to %s", b)
	}

	res := e.MustCall(t, "session/fork", map[string]any{"sessionId": b, "cwd": dirB, "mcpServers": []any{}})
	fork := jsonString(res, "sessionId")
	if fork == "" || fork == b {
		t.Fatalf("session/fork answered %s", res)
	}
	waitAgentLog(t, betaLog, waitTimeout, "session/fork at beta", func(l string) bool { return l == "session/fork" })
	e.MustPrompt(t, fork, "whoami", "end_turn")
	if got := e.Texts(fork); len(got) != 1 || got[0] != "beta" {
		t.Errorf("the fork's prompt went to %q, want beta", got)
	}

	_, rerr := e.Call(context.Background(), "session/fork", map[string]any{"sessionId": a, "cwd": dirA, "mcpServers": []any{}})
	requireRPCError(t, "fork at an agent without fork", rerr, -32602, `agent "alpha"`)
	e.MustPrompt(t, b, "/alpha say one turn", "end_turn")
	_, rerr = e.Call(context.Background(), "session/fork", map[string]any{"sessionId": b, "cwd": dirB, "mcpServers": []any{}})
	requireRPCError(t, "fork of a session two agents served", rerr, -32602, "alpha, beta")
	_, rerr = e.Call(context.Background(), "session/fork", map[string]any{"sessionId": "nope", "cwd": dirB, "mcpServers": []any{}})
	requireRPCError(t, "fork of an unknown session", rerr, -32002, `"nope"`)
	e.MustPrompt(t, b, "say b works", "end_turn")
}

// TestAuthStatusCancelsWhatItGivesUp (issue 27, point 4): an agent that
// does not answer auth/status within the init budget is reported
// unknown, and the call the router stops waiting for is cancelled at the
// agent ($/cancel_request naming the id the agent saw), not left pending
// there.
func TestAuthStatusCancelsWhatItGivesUp(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "beta.log")
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("beta", fakeOpts{Name: "beta", LogFile: log, InitResult: json.RawMessage(initUnstable), AuthState: "silent"}),
	}))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	res := e.MustCall(t, "auth/status", map[string]any{})
	if got := jsonString(res, "_meta", "acp-router", "agents", "beta", "state"); got != "unknown" {
		t.Errorf("auth/status: %s; want beta unknown", res)
	}
	held := waitAgentLog(t, log, waitTimeout, "auth/status", func(l string) bool { return strings.HasPrefix(l, "auth/status held ") })
	id := strings.TrimPrefix(held, "auth/status held ")
	waitAgentLog(t, log, waitTimeout, "$/cancel_request "+id, func(l string) bool { return l == "$/cancel_request "+id })
}
