package test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// End-to-end tests of sessions that survive (issue: sessions): list, load,
// resume, close and delete through the router, across router restarts and
// agent crashes, with agents that do and do not load sessions themselves.

const (
	initLoad   = `{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"sessionCapabilities":{"delete":{}}},"authMethods":[],"agentInfo":{"name":"fake","version":"1"}}`
	initResume = `{"protocolVersion":1,"agentCapabilities":{"sessionCapabilities":{"resume":{}}},"authMethods":[],"agentInfo":{"name":"fake","version":"1"}}`
)

// historyRouter starts a router on cfg and initializes it.
func historyRouter(t *testing.T, cfg string) *Editor {
	t.Helper()
	e := StartRouter(t, cfg, nil)
	res := e.Initialize(t, capsAll)
	var init struct {
		AgentCapabilities struct {
			LoadSession         bool                       `json:"loadSession"`
			SessionCapabilities map[string]json.RawMessage `json:"sessionCapabilities"`
		} `json:"agentCapabilities"`
	}
	json.Unmarshal(res, &init)
	caps := init.AgentCapabilities
	for _, c := range []string{"list", "resume", "close", "delete"} {
		if _, ok := caps.SessionCapabilities[c]; !ok || !caps.LoadSession {
			t.Fatalf("initialize does not advertise loadSession and session %s: %s", c, res)
		}
	}
	return e
}

// stopRouter closes the editor's side and waits for the router to exit.
func stopRouter(t *testing.T, e *Editor) {
	t.Helper()
	e.CloseStdin()
	if _, _, ok := e.Wait(waitTimeout); !ok {
		t.Fatal("the router did not exit")
	}
}

// TestHistoryAcrossRouterRestart: a thread that used three agents comes
// back after the router restarted: listed with its cwd; loaded with the
// router's own history replayed before the answer (the agent's own replay
// not shown twice), each agent re-attached its own way (session/load,
// session/resume, a new session with the brief of what it missed), and the
// thread continues; resume shows nothing; close keeps it listed; delete
// removes it and deletes it at the agent that supports that.
func TestHistoryAcrossRouterRestart(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	logOf := func(name string) string { return filepath.Join(logs, name+".log") }
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{InitResult: json.RawMessage(initLoad), LogFile: logOf("alpha"), UniqueSessionIDs: true, ReplayAfterAnswer: true}),
		fakeAgentYAML("beta", fakeOpts{InitResult: json.RawMessage(initResume), LogFile: logOf("beta"), UniqueSessionIDs: true}),
		fakeAgentYAML("gamma", fakeOpts{LogFile: logOf("gamma"), UniqueSessionIDs: true}),
	}, "default: alpha"))
	cwd := t.TempDir()

	e := historyRouter(t, cfg)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "say a1", "end_turn")
	e.MustPrompt(t, sid, "/beta say b1", "end_turn")
	e.MustPrompt(t, sid, "/gamma say g1", "end_turn")
	stopRouter(t, e)

	e = historyRouter(t, cfg)
	res := e.MustCall(t, "session/list", map[string]any{"cwd": cwd})
	var list struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
			Cwd       string `json:"cwd"`
			UpdatedAt string `json:"updatedAt"`
		} `json:"sessions"`
	}
	json.Unmarshal(res, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != sid || list.Sessions[0].Cwd != cwd || list.Sessions[0].UpdatedAt == "" {
		t.Fatalf("session/list: %s", res)
	}
	// Everything of the thread, once, before the answer.
	var replayed []string
	for _, msg := range loadUpdates(t, e, sid, cwd) {
		if msg.Update() == "user_message_chunk" || msg.Update() == "agent_message_chunk" {
			var u struct {
				Update struct {
					Content struct{ Text string } `json:"content"`
				} `json:"update"`
			}
			json.Unmarshal(msg.Params, &u)
			replayed = append(replayed, msg.Update()[:4]+":"+u.Update.Content.Text)
		}
	}
	want := []string{"user:say a1", "agen:a1", "user:/beta say b1", "agen:b1", "user:/gamma say g1", "agen:g1"}
	if !slices.Equal(replayed, want) {
		t.Errorf("replay before the load answer:\n%q\nwant\n%q", replayed, want)
	}
	if countLines(logOf("alpha"), "session/load") != 1 {
		t.Errorf("alpha was not re-attached with its own session/load: %q", agentLog(logOf("alpha")))
	}
	// The thread continues on alpha; beta is re-attached by resume and
	// hears what it missed; gamma gets a new session and a brief.
	e.MustPrompt(t, sid, "say a2", "end_turn")
	e.MustPrompt(t, sid, "/beta prompt-text", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "User: say a2") || strings.Contains(got, "say a1") || !strings.Contains(got, "say g1\ngamma: g1") {
		t.Errorf("beta's prompt after resume: %q; want a brief of the turns it missed only", got)
	}
	if countLines(logOf("beta"), "session/resume") != 1 {
		t.Errorf("beta was not re-attached with session/resume: %q", agentLog(logOf("beta")))
	}
	e.MustPrompt(t, sid, "/gamma prompt-text", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "User: say a1") || !strings.Contains(got, "User: say a2") || !strings.Contains(got, "User: prompt-text") {
		t.Errorf("gamma's prompt after the reload: %q; want the brief", got)
	}
	for _, txt := range e.Texts(sid) {
		if strings.HasPrefix(txt, "replayed ") {
			t.Errorf("the agent's own replay reached the editor: %q", txt)
		}
	}

	// resume: nothing replayed; close keeps it; delete removes it.
	stopRouter(t, e)
	e = historyRouter(t, cfg)
	before := len(e.Rec.All())
	e.MustCall(t, "session/resume", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	for _, msg := range e.Rec.All()[before:] {
		if msg.Update() == "agent_message_chunk" || msg.Update() == "user_message_chunk" {
			t.Errorf("session/resume replayed %s", msg.Params)
		}
	}
	e.MustPrompt(t, sid, "say a3", "end_turn")
	e.MustCall(t, "session/close", map[string]any{"sessionId": sid})
	if res := e.MustCall(t, "session/list", map[string]any{}); !strings.Contains(string(res), sid) {
		t.Errorf("a closed session is no longer listed: %s", res)
	}
	e.MustCall(t, "session/delete", map[string]any{"sessionId": sid})
	if res := e.MustCall(t, "session/list", map[string]any{}); strings.Contains(string(res), sid) {
		t.Errorf("a deleted session is still listed: %s", res)
	}
	e.MustCall(t, "session/delete", map[string]any{"sessionId": "no-such-session"})
	if countLines(logOf("alpha"), "session/delete") != 1 {
		t.Errorf("alpha (delete capability) did not get session/delete: %q", agentLog(logOf("alpha")))
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel2()
	if _, rerr := e.Call(ctx2, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}); rerr == nil || rerr.Code != -32002 {
		t.Errorf("loading a deleted session: %v, want -32002", rerr)
	}
}

// TestHistoryAgentKilledMidThread: an agent killed between two prompts is
// restarted and re-attached with its own session/load; the next prompt
// works and the editor sees no gap and nothing twice.
func TestHistoryAgentKilledMidThread(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile, logFile := filepath.Join(dir, "alpha.pid"), filepath.Join(dir, "alpha.log")
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{InitResult: json.RawMessage(initLoad), PidFile: pidFile, LogFile: logFile, UniqueSessionIDs: true}),
	}))
	e := historyRouter(t, cfg)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say one", "end_turn")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	syscall.Kill(pid, syscall.SIGKILL)
	// Logged once the agent is marked failed, so that the next prompt
	// starts it anew: a prompt sent before that (a fixed 100 ms wait on a
	// loaded machine) went to the dying process and failed with its exit.
	waitRouterLog(t, e, "agent failed")
	e.MustPrompt(t, sid, "say two", "end_turn")
	if got := e.Texts(sid); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("the editor saw %q; want one, two (no replay, no error)", got)
	}
	if countLines(logFile, "session/load") != 1 {
		t.Errorf("the restarted agent did not get session/load: %q", agentLog(logFile))
	}
}

// TestHistoryAgentPickAfterLoad: editors re-apply the option values they
// remember after session/load; re-applying the session's own agent does not
// switch the thread (no cleared plan, no second agent).
func TestHistoryAgentPickAfterLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{InitResult: json.RawMessage(initLoad), UniqueSessionIDs: true}),
		fakeAgentYAML("beta", fakeOpts{LogFile: filepath.Join(dir, "beta.log"), UniqueSessionIDs: true}),
	}, "default: alpha"))
	e := historyRouter(t, cfg)
	cwd := t.TempDir()
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "/agent beta", "end_turn")
	e.MustPrompt(t, sid, "say on-beta", "end_turn")
	stopRouter(t, e)

	e = historyRouter(t, cfg)
	res := e.MustCall(t, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	if !strings.Contains(string(res), `"currentValue":"beta"`) {
		t.Fatalf("load answer: %s; want beta active", res)
	}
	before := len(e.Rec.All())
	e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "agent", "value": "beta"})
	for _, m := range e.Rec.All()[before:] {
		if m.Update() == "plan" {
			t.Errorf("re-applying the active agent switched the thread: %s", m.Params)
		}
	}
	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "beta" {
		t.Errorf("after load the thread runs on %q, want beta", got)
	}
}

// TestHistoryMetadataOnly: with history.content: metadata-only nothing of
// the conversation is stored; load relies on the agent's own replay, which
// then reaches the editor.
func TestHistoryMetadataOnly(t *testing.T) {
	t.Parallel()
	y := routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{InitResult: json.RawMessage(initLoad), UniqueSessionIDs: true})})
	cfg := writeConfig(t, y+"history: {content: metadata-only}\n")
	e := historyRouter(t, cfg)
	cwd := t.TempDir()
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "say secret-words", "end_turn")
	stopRouter(t, e)
	var stateDir string
	for _, l := range strings.Split(y, "\n") {
		if v, ok := strings.CutPrefix(l, "state_dir: "); ok {
			stateDir = strings.Trim(v, "'")
		}
	}
	filepath.Walk(stateDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "secret-words") {
				t.Errorf("%s keeps the conversation in metadata-only mode", p)
			}
		}
		return nil
	})
	e = historyRouter(t, cfg)
	e.MustCall(t, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	if got := e.Texts(sid); !slices.Equal(got, []string{"replayed " + sid}) {
		t.Errorf("load in metadata-only mode showed %q; want the agent's own replay", got)
	}
}

// TestHistoryCrashLoopRestart: an agent that keeps crashing uses up its
// restart budget and the session gets a clear error; `/agent restart NAME`
// brings it back and the thread continues.
func TestHistoryCrashLoopRestart(t *testing.T) {
	skipShort(t, "crashes an agent until the restart limit, 7 s")
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{InitResult: json.RawMessage(initLoad), UniqueSessionIDs: true})}))
	e := historyRouter(t, cfg)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say before", "end_turn")
	var last *Msg
	for i := 0; i < 8; i++ {
		m, err := e.Prompt(waitTimeout, sid, "crash")
		if err != nil {
			t.Fatal(err)
		}
		last = m
		if m.Error != nil && strings.Contains(m.Error.Message, "restarted too often") {
			break
		}
	}
	if last.Error == nil || !strings.Contains(last.Error.Message, "restarted too often") || !strings.Contains(last.Error.Message, "alpha") {
		t.Fatalf("after repeated crashes: %v; want a clear crash-loop error naming the agent", last.Error)
	}
	e.MustPrompt(t, sid, "/agent restart alpha", "end_turn")
	if got := lastText(e, sid); got != "Restarted alpha." {
		t.Errorf("/agent restart said %q", got)
	}
	e.MustPrompt(t, sid, "say after", "end_turn")
	if got := lastText(e, sid); got != "after" {
		t.Errorf("after /agent restart the thread says %q", got)
	}
}

// TestGeminiLoadAfterRouterRestart: Gemini CLI (a real agent that
// advertises loadSession) behind the router; the router restarts between
// two prompts of one thread. session/load shows the thread once, from the
// router's store, and the thread continues on Gemini with the earlier turn
// in the model's conversation. (Gemini CLI 0.61.0's own session/load fails
// here — "No previous sessions found for this project", also without the
// router — so the router re-attaches it with a new session and the brief;
// with an agent whose load works, TestHistoryAcrossRouterRestart pins that
// path.)
func TestGeminiLoadAfterRouterRestart(t *testing.T) {
	t.Parallel()
	bin := needGemini(t)
	fake := startFakeGemini(t)
	cwd := t.TempDir()
	cfg := writeConfig(t, routerYAML(t, []string{geminiAgentYAML(bin, geminiEnv(geminiHome(t), fake))}, "default: gemini"))
	first := fake.Script(geminiScript{Text: []string{"First answer."}})
	second := fake.Script(geminiScript{Text: []string{"Second answer."}})

	e := historyRouter(t, cfg)
	sid := e.NewSession(t, cwd)
	m, err := e.Prompt(waitTimeout, sid, "Remember "+first.token)
	if err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	stopRouter(t, e)

	e = historyRouter(t, cfg)
	e.MustCall(t, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	if got := e.Texts(sid); !slices.Equal(got, []string{"First answer."}) {
		t.Errorf("after session/load the editor shows %q; want the thread once", got)
	}
	users := geminiSessionMsgs(e, sid, "session/update", "user_message_chunk")
	if len(users) != 1 || !strings.Contains(string(users[0].Params), first.token) {
		t.Errorf("replayed user messages: %v; want the first prompt once", users)
	}
	m, err = e.Prompt(waitTimeout, sid, "And now "+second.token)
	if err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	if got := e.Texts(sid); !slices.Equal(got, []string{"First answer.", "Second answer."}) {
		t.Errorf("the thread shows %q", got)
	}
	if convs := second.Conversations(); len(convs) != 1 || !strings.Contains(convs[0], first.token) || !strings.Contains(convs[0], "First answer.") {
		t.Errorf("the model's conversation for the second prompt: %q; want the first turn in it", convs)
	}
}

// TestTrailingReplayDropped: an agent's replay that trails its load answer
// (Gemini CLI's; here 300 lines, each its own write) is dropped whole when
// the editor prompts the moment its load is answered: the first prompt to
// the agent waits until the agent's stream has been read to the end of the
// replay. The turn's own content still arrives.
func TestTrailingReplayDropped(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{InitResult: json.RawMessage(initLoad), UniqueSessionIDs: true, ReplayAfterAnswer: true, ReplayLinesAfterAnswer: 300}),
	}, "default: alpha"))
	cwd := t.TempDir()
	e := historyRouter(t, cfg)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "say a1", "end_turn")
	stopRouter(t, e)

	e = historyRouter(t, cfg)
	loadUpdates(t, e, sid, cwd)
	e.MustPrompt(t, sid, "say a2", "end_turn")
	texts := e.Texts(sid)
	leaked := 0
	for _, txt := range texts {
		if strings.HasPrefix(txt, "replayed") {
			leaked++
		}
	}
	if leaked > 0 {
		t.Errorf("%d lines of the agent's own replay reached the editor", leaked)
	}
	if !slices.Contains(texts, "a2") {
		t.Errorf("the turn's answer a2 did not reach the editor: %q", texts)
	}
}

// loadUpdates sends session/load of sid and returns the session/update
// notifications the editor got before its answer.
func loadUpdates(t *testing.T, e *Editor, sid, cwd string) []*Msg {
	t.Helper()
	loadID, wait, err := e.Go("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if m, err := wait(ctx); err != nil || m.Error != nil {
		t.Fatalf("session/load: %v %v", err, m)
	}
	var out []*Msg
	for _, msg := range e.Rec.All() {
		if msg.IsResponse() && canonicalID(msg.ID) == canonicalID(loadID) {
			break
		}
		if msg.Method == "session/update" {
			out = append(out, msg)
		}
	}
	return out
}

// TestHistoryLoadTwice: loading a thread does not add to it; the second
// load after another router restart replays the same updates.
func TestHistoryLoadTwice(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{UniqueSessionIDs: true})}))
	cwd := t.TempDir()
	e := historyRouter(t, cfg)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "say a1", "end_turn")
	stopRouter(t, e)
	var replays [][]string
	for range 2 {
		e = historyRouter(t, cfg)
		var kinds []string
		for _, msg := range loadUpdates(t, e, sid, cwd) {
			kinds = append(kinds, msg.Update())
		}
		replays = append(replays, kinds)
		stopRouter(t, e)
	}
	if !slices.Equal(replays[0], replays[1]) || !slices.Contains(replays[0], "agent_message_chunk") {
		t.Errorf("the first load showed %q, the second %q; want the same thread", replays[0], replays[1])
	}
}

// TestHistoryModeRestored: an agent that cannot reopen its own sessions
// gets a new one after the router restarted, set to the mode the thread had.
func TestHistoryModeRestored(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "alpha.log")
	modes := json.RawMessage(`{"modes":{"currentModeId":"default","availableModes":[{"id":"default","name":"Default"},{"id":"plan","name":"Plan"}]}}`)
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{SessionResult: modes, LogFile: logFile, UniqueSessionIDs: true})}))
	e := historyRouter(t, cfg)
	cwd := t.TempDir()
	sid := e.NewSession(t, cwd)
	e.MustCall(t, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "alpha:plan"})
	e.MustPrompt(t, sid, "say planned", "end_turn")
	stopRouter(t, e)

	e = historyRouter(t, cfg)
	res := e.MustCall(t, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	if !strings.Contains(string(res), `"currentModeId":"alpha:plan"`) {
		t.Errorf("load answer %s: want the thread's mode alpha:plan", res)
	}
	if n := countLines(logFile, "session/set_mode"); n != 2 {
		t.Errorf("the agent got %d set_mode requests, want 2 (the user's, the restore)", n)
	}
}
