package test

// Gemini CLI, a real coding agent nobody here wrote, end to end: the
// scripted editor in front of the router binary, Gemini CLI 0.61.0
// (`gemini --acp`, from npm) behind it, and the fake Gemini API
// (fakegemini_test.go) behind that, on loopback with a dummy key.
//
// .ci/run installs Gemini CLI into .peers/gemini and sets ACP_E2E_GEMINI; CI
// never skips these tests. A developer without Node can set
// ACP_E2E_NO_GEMINI=1 to skip them.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// envGemini names the gemini executable (default: the one .ci/run
	// installs under .peers/gemini).
	envGemini = "ACP_E2E_GEMINI"
	// envNoGemini=1 skips the Gemini CLI tests (never set in CI).
	envNoGemini = "ACP_E2E_NO_GEMINI"
	// geminiVersion is the version the tests, the README and .ci/run pin.
	geminiVersion = "0.61.0"
)

// geminiSettings is ~/.gemini/settings.json of every Gemini process: API-key
// auth (the key only ever reaches the fake), no telemetry, no update checks.
const geminiSettings = `{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},` +
	`"telemetry":{"enabled":false},"general":{"disableAutoUpdate":true,"disableUpdateNag":true}}`

// needGemini returns the Gemini CLI executable. It fails the test, with how
// to install it, when it is missing or not version geminiVersion, unless
// ACP_E2E_NO_GEMINI=1 asks to skip.
func needGemini(t testing.TB) string {
	t.Helper()
	skipShort(t, "runs Gemini CLI from npm")
	if os.Getenv(envNoGemini) == "1" {
		t.Skipf("%s=1: Gemini CLI tests skipped on request (CI never sets it)", envNoGemini)
	}
	bin := os.Getenv(envGemini)
	if bin == "" {
		bin = filepath.Join(moduleRoot, ".peers", "gemini", "node_modules", ".bin", "gemini")
	}
	if err := checkGemini(bin); err != nil {
		t.Fatalf("Gemini CLI %s is required: %v\n"+
			"Install it as CI does, with .ci/run, or from the repository root:\n"+
			"  npm install --no-audit --no-fund --ignore-scripts --prefix .peers/gemini @google/gemini-cli@%s\n"+
			"(%s names another gemini executable; %s=1 skips these tests on a machine without Node.)",
			geminiVersion, err, geminiVersion, envGemini, envNoGemini)
	}
	return bin
}

// checkGemini checks that bin is Gemini CLI geminiVersion (the npm bin link
// into @google/gemini-cli/bundle) and that node, which runs it, is on PATH.
func checkGemini(bin string) error {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return err
	}
	pkgFile := filepath.Join(filepath.Dir(filepath.Dir(real)), "package.json")
	b, err := os.ReadFile(pkgFile)
	if err != nil {
		return fmt.Errorf("%s is not the bin of an npm install of @google/gemini-cli: %w", bin, err)
	}
	var pkg struct{ Name, Version string }
	if err := json.Unmarshal(b, &pkg); err != nil {
		return fmt.Errorf("%s: %w", pkgFile, err)
	}
	if pkg.Name != "@google/gemini-cli" || pkg.Version != geminiVersion {
		return fmt.Errorf("%s is %s@%s, want @google/gemini-cli@%s", bin, pkg.Name, pkg.Version, geminiVersion)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("gemini is a Node program and node is not on PATH: %w", err)
	}
	return nil
}

// geminiHome makes a temporary HOME with Gemini's settings.
func geminiHome(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte(geminiSettings), 0o644); err != nil {
		t.Fatal(err)
	}
	return home
}

// geminiEnv is the environment that points Gemini at the fake API.
func geminiEnv(home string, f *fakeGemini) map[string]string {
	return map[string]string{
		"HOME":                   home,
		"GEMINI_API_KEY":         "test-key", // not a credential: only the fake sees it
		"GOOGLE_GEMINI_BASE_URL": f.URL(),
	}
}

// geminiConfigValue quotes s for a config value that is ${ENV}-expanded.
func geminiConfigValue(s string) string { return yamlQuote(strings.ReplaceAll(s, "$", "$$")) }

// geminiAgentYAML renders the agents: entry for Gemini CLI. env_inherit
// minimal keeps a developer's GOOGLE_*, GEMINI_* and proxy variables away
// from it; PATH (for node) is kept.
func geminiAgentYAML(bin string, env map[string]string) string {
	var b strings.Builder
	b.WriteString("  - name: gemini\n    title: Gemini CLI\n")
	fmt.Fprintf(&b, "    command: %s\n    args: ['--acp']\n", geminiConfigValue(bin))
	b.WriteString("    env_inherit: minimal\n    env:\n")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "      %s: %s\n", k, geminiConfigValue(env[k]))
	}
	// Gemini answers initialize after about 1.7 s, more on a loaded
	// machine. cancel_timeout is far above what the cancel test allows, so
	// a "cancelled" it sees is Gemini's own answer, not the router's.
	b.WriteString("    startup_timeout: 60s\n    cancel_timeout: 30s\n")
	return b.String()
}

// geminiRig is one router with Gemini CLI behind it, shared by subtests
// (each on its own session) because Gemini takes seconds to start.
type geminiRig struct {
	fake *fakeGemini
	e    *Editor

	mu    sync.Mutex
	perms map[string]string // session → the optionId the editor chose
}

func startGeminiRouter(t *testing.T) *geminiRig {
	t.Helper()
	bin := needGemini(t)
	r := &geminiRig{fake: startFakeGemini(t), perms: map[string]string{}}
	cfg := writeConfig(t, routerYAML(t,
		[]string{geminiAgentYAML(bin, geminiEnv(geminiHome(t), r.fake))},
		"default: gemini",
	))
	start := time.Now()
	r.e = StartRouter(t, cfg, nil)
	// The editor answers permission requests itself (allow_once) and
	// remembers its choice per session.
	r.e.Handle("session/request_permission", func(params json.RawMessage) (any, *RPCError) {
		res, rerr := AllowFirst(params)
		if rerr == nil {
			r.mu.Lock()
			r.perms[jsonString(params, "sessionId")] = jsonString(mustJSON(res), "outcome", "optionId")
			r.mu.Unlock()
		}
		return res, rerr
	})
	init := r.e.Initialize(t, capsAll)
	t.Logf("initialize through the router took %v", time.Since(start).Round(time.Millisecond))
	if v := string(jsonPath(init, "protocolVersion")); v != "1" {
		t.Fatalf("initialize result %s: protocolVersion %s, want 1", truncate(string(init), 1000), v)
	}
	return r
}

func (r *geminiRig) permChoice(sid string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.perms[sid]
}

// requireGeminiStop checks a session/prompt response's stopReason. Unlike
// requireStop it allows other members: Gemini adds _meta.quota.
func requireGeminiStop(t testing.TB, m *Msg, want string) {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("session/prompt failed: %v", m.Error)
	}
	if got := jsonString(m.Result, "stopReason"); got != want {
		t.Fatalf("session/prompt result %s: stopReason %q, want %q", truncate(string(m.Result), 1000), got, want)
	}
}

// geminiSessionMsgs returns the recorded requests and notifications of
// session sid with method (and, for session/update, kind; "" for any).
func geminiSessionMsgs(e *Editor, sid, method, kind string) []*Msg {
	return e.Rec.Filter(func(m *Msg) bool {
		return m.Method == method && m.SessionID() == sid && (kind == "" || m.Update() == kind)
	})
}

// turnContent are the update kinds that belong to a prompt turn; commands,
// options and modes may come at any time.
var turnContent = []string{"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}

// requireGeminiTexts checks the agent_message_chunk texts of sid, and that
// the turn's content all arrived before the prompt's response resp.
func requireGeminiTexts(t testing.TB, e *Editor, sid string, resp *Msg, want ...string) {
	t.Helper()
	if got := e.Texts(sid); !slices.Equal(got, want) {
		t.Errorf("message chunks of the session: %q, want %q", got, want)
	}
	for _, m := range geminiSessionMsgs(e, sid, "session/update", "") {
		if m.Seq > resp.Seq && slices.Contains(turnContent, m.Update()) {
			t.Errorf("turn content after the prompt's response (#%d): %s", resp.Seq, m)
		}
	}
}

// TestGemini runs Gemini CLI behind the router: a text turn, a write turn
// whose permission and file write the editor handles, a cancel mid-stream,
// and the modes and commands of a new session. One router and one Gemini
// serve all subtests, each on its own session.
func TestGemini(t *testing.T) {
	t.Parallel()
	rig := startGeminiRouter(t)
	e := rig.e

	t.Run("text", func(t *testing.T) {
		t.Parallel()
		s := rig.fake.Script(geminiScript{Text: []string{"Hello", " from Gemini through the router."}})
		sid := e.NewSession(t, t.TempDir())
		start := time.Now()
		m, err := e.Prompt(waitTimeout, sid, "Say hello "+s.token)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("text turn took %v", time.Since(start).Round(time.Millisecond))
		requireGeminiStop(t, m, "end_turn")
		// Gemini's extension member reaches the editor unchanged.
		if q := jsonPath(m.Result, "_meta", "quota", "token_count"); q == nil {
			t.Errorf("prompt result %s lacks Gemini's _meta.quota.token_count", truncate(string(m.Result), 1000))
		}
		requireGeminiTexts(t, e, sid, m, "Hello", " from Gemini through the router.")
		if n := s.Streams(); n != 1 {
			t.Errorf("the fake API streamed %d replies for the turn, want 1", n)
		}
	})

	t.Run("write", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "notes.txt")
		const oldText, newText = "old content\n", "hello from the fake Gemini\n"
		if err := os.WriteFile(path, []byte(oldText), 0o644); err != nil {
			t.Fatal(err)
		}
		s := rig.fake.Script(geminiScript{
			WriteFile: &geminiWrite{Path: path, Content: newText},
			Text:      []string{"Done: ", "file written."},
		})
		sid := e.NewSession(t, dir)
		start := time.Now()
		m, err := e.Prompt(waitTimeout, sid, "Please write the file "+s.token)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("write turn took %v", time.Since(start).Round(time.Millisecond))
		requireGeminiStop(t, m, "end_turn")

		if b, err := os.ReadFile(path); err != nil || string(b) != newText {
			t.Errorf("file after the turn: %q (%v), want %q", b, err, newText)
		}

		// The permission request reached the editor as Gemini sent it.
		perms := geminiSessionMsgs(e, sid, "session/request_permission", "")
		if len(perms) != 1 {
			t.Fatalf("%d session/request_permission requests reached the editor, want 1", len(perms))
		}
		perm := perms[0]
		requireJSON(t, "permission options", jsonPath(perm.Params, "options"),
			`[{"optionId":"proceed_always","name":"Allow for this session","kind":"allow_always"},`+
				`{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},`+
				`{"optionId":"cancel","name":"Reject","kind":"reject_once"}]`)
		if title := jsonString(perm.Params, "toolCall", "title"); title != "Writing to notes.txt" {
			t.Errorf("permission toolCall.title %q, want %q", title, "Writing to notes.txt")
		}
		var tc struct {
			Content []struct {
				Type, Path, OldText, NewText string
			} `json:"content"`
		}
		if err := json.Unmarshal(jsonPath(perm.Params, "toolCall"), &tc); err != nil || len(tc.Content) != 1 ||
			tc.Content[0].Type != "diff" || tc.Content[0].Path != path ||
			tc.Content[0].OldText != oldText || tc.Content[0].NewText != newText {
			t.Errorf("permission toolCall content is not the diff of %s: %s", path, truncate(string(perm.Params), 2000))
		}
		if got := rig.permChoice(sid); got != "proceed_once" {
			t.Errorf("the editor answered the permission with %q, want proceed_once (allow_once)", got)
		}

		// Then Gemini wrote the file through the editor, and said so.
		writes := geminiSessionMsgs(e, sid, "fs/write_text_file", "")
		if len(writes) != 1 {
			t.Fatalf("%d fs/write_text_file requests reached the editor, want 1", len(writes))
		}
		w := writes[0]
		if jsonString(w.Params, "path") != path || jsonString(w.Params, "content") != newText {
			t.Errorf("fs/write_text_file params %s, want path %s and the new content", truncate(string(w.Params), 1000), path)
		}
		var done *Msg
		for _, u := range geminiSessionMsgs(e, sid, "session/update", "tool_call_update") {
			if jsonString(u.Params, "update", "status") == "completed" {
				done = u
			}
		}
		if done == nil {
			t.Fatalf("no completed tool_call_update for the write")
		}
		if !(perm.Seq < w.Seq && w.Seq < done.Seq && done.Seq < m.Seq) {
			t.Errorf("order: permission #%d, write #%d, completed #%d, response #%d; want them in that order",
				perm.Seq, w.Seq, done.Seq, m.Seq)
		}
		requireGeminiTexts(t, e, sid, m, "Done: ", "file written.")

		// The model got the tool's success back.
		fr := s.FunctionResponses()
		if len(fr) != 1 || jsonString([]byte(fr[0]), "name") != "write_file" ||
			jsonPath([]byte(fr[0]), "response", "output") == nil || jsonPath([]byte(fr[0]), "response", "error") != nil {
			t.Errorf("functionResponses sent to the model: %q, want one write_file output", fr)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		// A model that sends its first words, then stalls for a minute.
		s := rig.fake.Script(geminiScript{Text: []string{"Hello", " (late)"}, Delay: time.Minute})
		sid := e.NewSession(t, t.TempDir())
		_, wait, err := e.Go("session/prompt", promptReq(sid, "Say hello slowly "+s.token))
		if err != nil {
			t.Fatal(err)
		}
		e.WaitText(t, sid, "Hello")
		tCancel := time.Now()
		if err := e.Notify("session/cancel", map[string]any{"sessionId": sid}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		m, err := wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		requireGeminiStop(t, m, "cancelled")
		// The router would answer by itself only after cancel_timeout (30 s).
		d := m.At.Sub(tCancel)
		t.Logf("cancelled answer %v after session/cancel", d.Round(time.Millisecond))
		if d > 5*time.Second {
			t.Errorf("cancelled answer %v after session/cancel, want Gemini's own prompt answer", d)
		}
		select {
		case <-s.aborted:
		case <-time.After(5 * time.Second):
			t.Errorf("Gemini did not drop the model's stream after the cancel")
		}
		for _, txt := range e.Texts(sid) {
			if txt == " (late)" {
				t.Errorf("text after the cancel reached the editor")
			}
		}

		// The session takes the next prompt.
		s2 := rig.fake.Script(geminiScript{Text: []string{"Still here."}})
		m2, err := e.Prompt(waitTimeout, sid, "Are you there? "+s2.token)
		if err != nil {
			t.Fatal(err)
		}
		requireGeminiStop(t, m2, "end_turn")
		if got := e.Texts(sid); !slices.Equal(got, []string{"Hello", "Still here."}) {
			t.Errorf("message chunks of the session: %q, want %q", got, []string{"Hello", "Still here."})
		}
	})

	t.Run("commands", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		resp, err := e.Request(ctx, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Error != nil {
			t.Fatalf("session/new: %v", resp.Error)
		}
		sid := jsonString(resp.Result, "sessionId")
		if sid == "" {
			t.Fatalf("session/new result %s: no sessionId", truncate(string(resp.Result), 1000))
		}

		// Gemini's modes as the router shows them (DESIGN §5): legacy
		// modes AGENT:MODE, and a mode select of Gemini's own mode ids
		// after the router's agent select.
		var modes struct {
			CurrentModeID  string `json:"currentModeId"`
			AvailableModes []struct {
				ID string `json:"id"`
			} `json:"availableModes"`
		}
		if err := json.Unmarshal(jsonPath(resp.Result, "modes"), &modes); err != nil {
			t.Fatalf("session/new result %s: modes: %v", truncate(string(resp.Result), 3000), err)
		}
		var modeIDs []string
		for _, m := range modes.AvailableModes {
			modeIDs = append(modeIDs, m.ID)
		}
		if want := []string{"gemini:default", "gemini:autoEdit", "gemini:yolo", "gemini:plan"}; !slices.Equal(modeIDs, want) ||
			modes.CurrentModeID != "gemini:default" {
			t.Errorf("modes %q, current %q; want %q, current gemini:default", modeIDs, modes.CurrentModeID, want)
		}
		requireGeminiOptions(t, "session/new configOptions", jsonPath(resp.Result, "configOptions"), "default")
		if m := jsonString(resp.Result, "models", "currentModelId"); m != "auto" {
			t.Errorf("models.currentModelId %q, want Gemini's auto", m)
		}

		// Gemini sends its commands on the line after the response
		// (setTimeout 0): the router must have bound the session by then,
		// and hold every update of the session until after the response.
		cmds := e.Rec.WaitFor(t, waitTimeout, "available_commands_update with Gemini's commands", func(m *Msg) bool {
			return m.Update() == "available_commands_update" && m.SessionID() == sid &&
				slices.Contains(commandNames(m), "help")
		})
		t.Logf("Gemini's commands reached the editor %v after the session/new response", cmds.At.Sub(resp.At).Round(time.Millisecond))
		for _, m := range geminiSessionMsgs(e, sid, "session/update", "") {
			if m.Seq < resp.Seq {
				t.Errorf("update reached the editor before the session/new response #%d: %s", resp.Seq, m)
			}
		}
		names := commandNames(cmds)
		// The router's commands first, then all of Gemini's.
		want := []string{"agent", "gemini", "memory", "memory show", "memory refresh", "memory list", "memory inbox",
			"extensions", "extensions list", "extensions explore", "extensions enable", "extensions disable",
			"extensions install", "extensions link", "extensions uninstall", "extensions restart", "extensions update",
			"init", "restore", "restore list", "about", "help"}
		if !slices.Equal(names, want) {
			t.Errorf("available commands %q, want %q", names, want)
		}

		// A legacy mode id goes to Gemini as its own mode id; the mode
		// select follows.
		seen := len(e.Rec.All())
		if res, rerr := e.Call(ctx, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "gemini:plan"}); rerr != nil {
			t.Errorf("session/set_mode gemini:plan: %v", rerr)
		} else if !jsonEqual(res, []byte(`{}`)) {
			t.Errorf("session/set_mode gemini:plan result %s, want {}", res)
		}
		upd := e.Rec.WaitFor(t, waitTimeout, "config_option_update after set_mode", func(m *Msg) bool {
			return m.Seq >= seen && m.Update() == "config_option_update" && m.SessionID() == sid
		})
		requireGeminiOptions(t, "config_option_update after set_mode", jsonPath(upd.Params, "update", "configOptions"), "plan")
		// The synthesized mode select is carried out with set_mode.
		res, rerr := e.Call(ctx, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "default"})
		if rerr != nil {
			t.Fatalf("session/set_config_option mode default: %v", rerr)
		}
		requireGeminiOptions(t, "session/set_config_option result", jsonPath(res, "configOptions"), "default")
		// Gemini's own refusals reach the editor.
		if _, rerr := e.Call(ctx, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "gemini:no-such-mode"}); rerr == nil ||
			!strings.Contains(rerr.Error(), "Invalid or unavailable mode: no-such-mode") {
			t.Errorf("session/set_mode gemini:no-such-mode: %v, want Gemini's error", rerr)
		}
	})
}

// commandNames returns the command names of an
// available_commands_update.
func commandNames(m *Msg) []string {
	var upd struct {
		Update struct {
			AvailableCommands []struct {
				Name string `json:"name"`
			} `json:"availableCommands"`
		} `json:"update"`
	}
	_ = json.Unmarshal(m.Params, &upd)
	var names []string
	for _, c := range upd.Update.AvailableCommands {
		names = append(names, c.Name)
	}
	return names
}

// requireGeminiOptions checks a session's config options with Gemini as the
// only agent (DESIGN §5): the router's agent select, then the mode select
// synthesized from Gemini's modes (current: mode), then the model select
// synthesized from its old-style models.
func requireGeminiOptions(t testing.TB, what string, raw json.RawMessage, mode string) {
	t.Helper()
	var opts []struct {
		ID           string `json:"id"`
		Category     string `json:"category"`
		Type         string `json:"type"`
		CurrentValue string `json:"currentValue"`
		Options      []struct {
			Value string `json:"value"`
		} `json:"options"`
	}
	if err := json.Unmarshal(raw, &opts); err != nil {
		t.Fatalf("%s %s: %v", what, truncate(string(raw), 2000), err)
	}
	type opt struct{ id, category, current, values string }
	var got []opt
	for _, o := range opts {
		var values []string
		for _, v := range o.Options {
			values = append(values, v.Value)
		}
		if o.ID == "model" && len(values) > 0 {
			values = values[:1] // which models Gemini lists is not the router's business
		}
		got = append(got, opt{o.ID, o.Category, o.CurrentValue, strings.Join(values, ",")})
	}
	want := []opt{
		{"agent", "_acp-router", "gemini", "gemini"},
		{"mode", "mode", mode, "default,autoEdit,yolo,plan"},
		{"model", "model", "auto", "auto"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: %+v, want %+v", what, got, want)
	}
}

// TestGeminiDirect runs a text turn with Gemini CLI and the fake API and no
// router, so that a failure of TestGemini can be told apart from a broken
// setup.
func TestGeminiDirect(t *testing.T) {
	t.Parallel()
	bin := needGemini(t)
	fake := startFakeGemini(t)
	var env []string
	for k, v := range geminiEnv(geminiHome(t), fake) {
		env = append(env, k+"="+v)
	}
	e := StartEditor(t, []string{bin, "--acp"}, withEnv(env...))
	init := e.Initialize(t, capsAll)
	if name := jsonString(init, "agentInfo", "name"); name != "gemini-cli" || jsonString(init, "agentInfo", "version") != geminiVersion {
		t.Fatalf("initialize agentInfo %s, want gemini-cli %s", jsonPath(init, "agentInfo"), geminiVersion)
	}
	sid := e.NewSession(t, t.TempDir())
	m, err := e.Prompt(waitTimeout, sid, "Say hello")
	if err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	requireGeminiTexts(t, e, sid, m, fakeGeminiText...)
}

// TestSwitchRealPeers pins switching agents in one session with agents
// nobody here wrote (issue: switching): Gemini CLI answers, the Go SDK's
// example agent runs one turn (/goexample TEXT, with its permission
// question) and then becomes the session's agent (/agent goexample), and
// back on Gemini the model is told what happened on the other agent.
func TestSwitchRealPeers(t *testing.T) {
	t.Parallel()
	bin := needGemini(t)
	sdkAgent, _ := goSDKPeers(t)
	fake := startFakeGemini(t)
	cfg := writeConfig(t, routerYAML(t, []string{
		geminiAgentYAML(bin, geminiEnv(geminiHome(t), fake)),
		"  - name: goexample\n    title: Go SDK example\n    command: " + yamlQuote(sdkAgent) + "\n",
	}, "default: gemini"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	first := fake.Script(geminiScript{Text: []string{"Gemini here."}})
	m, err := e.Prompt(waitTimeout, sid, "Who are you? "+first.token)
	if err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	e.MustPrompt(t, sid, "/goexample Hello", "end_turn")
	texts := strings.Join(e.Texts(sid), "")
	if !strings.Contains(texts, sdkAgentDisclaimer) || !strings.Contains(texts, sdkAgentAllowText) {
		t.Fatalf("the SDK agent's one turn did not reach the editor: %q", texts)
	}
	e.MustPrompt(t, sid, "/agent goexample", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "Switched this session to Go SDK example") {
		t.Fatalf("/agent goexample: %q", got)
	}
	e.MustPrompt(t, sid, "/agent gemini", "end_turn")
	second := fake.Script(geminiScript{Text: []string{"Back."}})
	if m, err = e.Prompt(waitTimeout, sid, "And now? "+second.token); err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	users := second.UserTexts()
	if len(users) != 1 || !strings.Contains(users[0], "[acp-router handoff]") || !strings.Contains(users[0], "User: Hello") ||
		!strings.Contains(users[0], sdkAgentAllowText) || strings.Contains(users[0], "Who are you?") {
		t.Errorf("Gemini's model got %q; want a brief of the SDK agent's turn only, then the prompt", users)
	}
}
