package test

// OpenCode (opencode-ai 1.18.33, `opencode acp`) behind the router, against
// the fake chat API (fakechat_test.go). See npmpeers_test.go for how it is
// installed.
//
// What it does in its default mode, measured through the router: its modes
// are the config option "mode" (build, plan; no legacy modes), it starts in
// build, and under its default permissions build writes a file without
// session/request_permission; plan refuses the edit by itself (its own
// rule, reported in a failed tool call), so neither mode ever asks. What
// makes it ask is its own permission setting, "permission": {"edit": "ask"}
// in its config (or OPENCODE_PERMISSION): then every edit is a
// session/request_permission, which the router's policy decides.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// opencodeSetup returns the agents: entry for OpenCode and its fake API.
// permission is OpenCode's own "permission" config value ("" for its
// default).
func opencodeSetup(t *testing.T, permission string) (peerAgent, *fakeChat) {
	t.Helper()
	bin := peerOpencode.need(t)
	fake := startFakeChat(t)
	home := t.TempDir()
	cfgDir := filepath.Join(home, ".config")
	config := map[string]any{
		"$schema":     "https://opencode.ai/config.json",
		"model":       "fake/fake-model",
		"small_model": "fake/fake-model",
		"autoupdate":  false,
		"share":       "disabled",
		"provider": map[string]any{"fake": map[string]any{
			"npm":     "@ai-sdk/openai-compatible", // bundled in the binary
			"name":    "Fake",
			"options": map[string]any{"baseURL": fake.URL(), "apiKey": "test-key"}, // not a credential
			"models": map[string]any{"fake-model": map[string]any{
				"name": "Fake model", "tool_call": true, "limit": map[string]any{"context": 100000, "output": 4000}}},
		}},
	}
	if permission != "" {
		config["permission"] = json.RawMessage(permission)
	}
	if err := os.MkdirAll(filepath.Join(cfgDir, "opencode"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "opencode", "opencode.json"), mustJSON(config), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"HOME":            home,
		"XDG_CONFIG_HOME": cfgDir,
		"XDG_DATA_HOME":   filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME":  filepath.Join(home, ".cache"),
		"XDG_STATE_HOME":  filepath.Join(home, ".local", "state"),
		// No model list, update, plugin or language server downloads.
		"OPENCODE_DISABLE_MODELS_FETCH":    "1",
		"OPENCODE_DISABLE_AUTOUPDATE":      "1",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
		"OPENCODE_PURE":                    "1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
		// It still installs @opencode-ai/plugin into its config directory
		// in the background, with npm; this registry fails at once.
		"npm_config_registry": "http://127.0.0.1:9/",
	}
	return peerAgent{"opencode", "OpenCode", []string{bin, "acp"}, env}, fake
}

// TestOpencode runs OpenCode behind the router: in its default mode,
// build, under its default permissions and without a policy, a text turn,
// and a write that runs without asking (no mode of OpenCode asks); with
// OpenCode set to ask for edits and a policy that denies writing
// secret.txt, its write of that file is refused, nothing is written and the
// audit log names the rule.
func TestOpencode(t *testing.T) {
	t.Parallel()
	agent, fake := opencodeSetup(t, "")
	rig := startPeerRig(t, writeConfig(t, routerYAML(t, []string{agent.yaml()}, "default: opencode")), "", capsAll)

	t.Run("text in the default mode", func(t *testing.T) {
		t.Parallel()
		sid, resp := rig.newSession(t, t.TempDir())
		if v := optionValue(jsonPath(resp.Result, "configOptions"), "mode"); v != "build" {
			t.Errorf("mode option %q, want build", v)
		}
		if v := optionValue(jsonPath(resp.Result, "configOptions"), "model"); v != "fake/fake-model" {
			t.Errorf("model option %q, want fake/fake-model", v)
		}
		s := fake.Script(chatScript{Text: []string{"Hello", " from OpenCode through the router."}})
		m := rig.prompt(t, sid, "Say hello "+s.token)
		requireGeminiStop(t, m, "end_turn")
		requireGeminiTexts(t, rig.e, sid, m, "Hello", " from OpenCode through the router.")
	})

	t.Run("default mode writes without asking", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "notes.txt")
		sid, _ := rig.newSession(t, dir)
		s := fake.Script(chatScript{Write: &fileWrite{Path: path, Content: "unasked\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Please write notes.txt "+s.token), "end_turn")
		requireWrittenUnasked(t, rig, sid, path, "unasked\n")
	})

	t.Run("write denied by the policy", func(t *testing.T) {
		t.Parallel()
		// OpenCode's own setting that makes it ask (issue 13 part 1:
		// under its default permissions no mode asks).
		agent, fake := opencodeSetup(t, `{"edit":"ask"}`)
		cfg, audit := policyYAML(t, []string{agent.yaml()}, secretPolicy(), "default: opencode")
		rig := startPeerRig(t, cfg, audit, capsAll)
		dir := t.TempDir()
		path := filepath.Join(dir, "secret.txt")
		sid, resp := rig.newSession(t, dir)
		if v := optionValue(jsonPath(resp.Result, "configOptions"), "mode"); v != "build" {
			t.Errorf("mode option %q, want build", v)
		}
		s := fake.Script(chatScript{
			Write: &fileWrite{Path: path, Content: "top secret\n"},
			Text:  []string{"The write was refused."},
		})
		m := rig.prompt(t, sid, "Please write secret.txt "+s.token)
		requireGeminiStop(t, m, "end_turn")

		requireNotWritten(t, path)
		requireDenyAudited(t, audit, sid, "opencode", path)
		requireToolFailedByPolicy(t, rig.e, sid)
		if n := rig.asks.count(); n != 0 {
			t.Errorf("the editor was asked %d times; the policy decides the write", n)
		}
		if n := s.ToolCalls(); n != 1 {
			t.Errorf("the model made %d write calls, want 1", n)
		}
		// OpenCode ends the turn on a refusal (1.18.33 does not call the
		// model again); whatever the model gets is no success.
		for _, r := range s.Results() {
			if !containsAny(r, "rejected") {
				t.Errorf("the model got tool result %q after the refusal", r)
			}
		}
	})
}

// TestOpencodeDirect runs a text turn with OpenCode and the fake API and no
// router, so that a failure of TestOpencode can be told apart from a broken
// setup.
func TestOpencodeDirect(t *testing.T) {
	t.Parallel()
	agent, _ := opencodeSetup(t, "")
	e := StartEditor(t, agent.argv, withEnv(agent.environ()...))
	init := e.Initialize(t, capsAll)
	if v := jsonString(init, "agentInfo", "version"); jsonString(init, "agentInfo", "name") != "OpenCode" || v != peerOpencode.version {
		t.Fatalf("initialize agentInfo %s, want OpenCode %s", jsonPath(init, "agentInfo"), peerOpencode.version)
	}
	rig := &peerRig{e: e}
	sid, _ := rig.newSession(t, t.TempDir())
	m := rig.prompt(t, sid, "Say hello")
	requireGeminiStop(t, m, "end_turn")
	requireGeminiTexts(t, e, sid, m, fakeChatText...)
}
