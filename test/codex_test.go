package test

// Codex (@agentclientprotocol/codex-acp 2.6.0 with @openai/codex 0.166.0)
// behind the router, against the fake Responses API
// (fakeresponses_test.go). See npmpeers_test.go for how it is installed.
//
// What it does in its default mode, measured through the router: it starts
// in mode "agent" ("Auto review": a model it calls a guardian approves
// escalations), and there an apply_patch that adds a file in the session's
// directory runs at once, without session/request_permission. So does
// "workspace-write" for files in the workspace ("ask before writing outside
// the workspace"). "read-only" asks for every edit; it is Codex's first
// mode. When its permission request is refused, Codex ends the turn with
// stopReason "cancelled".

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// codexModeIDs are the agent's modes, in its order, as the router shows them.
var codexModeIDs = []string{"codex:read-only", "codex:workspace-write", "codex:agent", "codex:agent-full-access"}

// codexSetup returns the agents: entry for Codex and its fake API.
func codexSetup(t *testing.T) (peerAgent, *fakeResponses) {
	t.Helper()
	entry := peerCodex.need(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("codex-acp is a Node program and node is not on PATH: %v", err)
	}
	fake := startFakeResponses(t)
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	// Codex ignores OPENAI_BASE_URL; a model provider reaches the fake.
	// gpt-5.5 is a model Codex knows, so that it offers apply_patch.
	config := fmt.Sprintf(`model = "gpt-5.5"
model_provider = "fake"

[model_providers.fake]
name = "fake"
base_url = %q
env_key = "OPENAI_API_KEY"
wire_api = "responses"
`, fake.URL())
	if err := os.MkdirAll(codexHome, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"HOME":           home,
		"CODEX_HOME":     codexHome,
		"OPENAI_API_KEY": "test-key", // not a credential: only the fake sees it
		// The codex CLI of this install, not one on PATH.
		"CODEX_PATH": filepath.Join(peerCodex.module("@openai/codex"), "bin", "codex.js"),
	}
	return peerAgent{"codex", "Codex", []string{node, entry}, env}, fake
}

// TestCodex runs Codex behind the router: in its default mode, agent, and
// without a policy, a text turn, and an apply_patch that runs without
// asking (what makes agent a mode the router turns off under a policy);
// with a policy that denies writing secret.txt, the session is moved to
// read-only and an apply_patch adding that file is refused, nothing is
// written and the audit log names the rule.
func TestCodex(t *testing.T) {
	t.Parallel()
	agent, fake := codexSetup(t)
	rig := startPeerRig(t, writeConfig(t, routerYAML(t, []string{agent.yaml()}, "default: codex")), "", capsAll)

	t.Run("text in the default mode", func(t *testing.T) {
		t.Parallel()
		sid, resp := rig.newSession(t, t.TempDir())
		cur, modes := sessionModes(t, resp.Result)
		if cur != "codex:agent" || !slices.Equal(modes, codexModeIDs) {
			t.Errorf("modes %q, current %q; want %q, current codex:agent", modes, cur, codexModeIDs)
		}
		s := fake.Script(responsesScript{Text: []string{"Hello", " from Codex through the router."}})
		m := rig.prompt(t, sid, "Say hello "+s.token)
		requireGeminiStop(t, m, "end_turn")
		requireGeminiTexts(t, rig.e, sid, m, "Hello", " from Codex through the router.")
	})

	t.Run("default mode writes without asking", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "notes.txt")
		sid, _ := rig.newSession(t, dir)
		s := fake.Script(responsesScript{Write: &fileWrite{Path: path, Content: "unasked\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Please write notes.txt "+s.token), "end_turn")
		requireWrittenUnasked(t, rig, sid, path, "unasked\n")
	})

	// workspace-write asks only outside the workspace: an edit inside it
	// runs at once, like agent's. (Measured for issue 13's table of modes
	// that approve by themselves, which counts workspace-write as asking.)
	t.Run("workspace-write writes in the workspace without asking", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "notes.txt")
		sid, _ := rig.newSession(t, dir)
		ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		if _, rerr := rig.e.Call(ctx, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "codex:workspace-write"}); rerr != nil {
			t.Fatalf("session/set_mode codex:workspace-write: %v", rerr)
		}
		s := fake.Script(responsesScript{Write: &fileWrite{Path: path, Content: "unasked\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Please write notes.txt "+s.token), "end_turn")
		requireWrittenUnasked(t, rig, sid, path, "unasked\n")
	})

	t.Run("write denied by the policy", func(t *testing.T) {
		t.Parallel()
		agent, fake := codexSetup(t)
		cfg, audit := policyYAML(t, []string{agent.yaml()}, secretPolicy(), "default: codex")
		rig := startPeerRig(t, cfg, audit, capsAll)
		dir := t.TempDir()
		path := filepath.Join(dir, "secret.txt")
		sid, resp := rig.newSession(t, dir)
		// The router moved the session from agent to Codex's first mode.
		if v := optionValue(jsonPath(resp.Result, "configOptions"), "mode"); v != "read-only" {
			t.Errorf("mode option %q, want read-only (agent is denied)", v)
		}
		// workspace-write edits the workspace without asking: under a
		// policy it is refused like agent (a bypass before: a write there
		// reached the disk with no request and no audit line).
		ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		if _, rerr := rig.e.Call(ctx, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "codex:workspace-write"}); rerr == nil || !strings.Contains(rerr.Message, "workspace-write") {
			t.Errorf("session/set_mode codex:workspace-write under a policy: %v, want a refusal naming the mode", rerr)
		}
		if cur, _ := sessionModes(t, resp.Result); cur != "codex:read-only" {
			// The reset goes through session/set_config_option; the
			// legacy modes must say the same.
			t.Errorf("legacy current mode %q after the reset to read-only", cur)
		}
		s := fake.Script(responsesScript{
			Write: &fileWrite{Path: path, Content: "top secret\n"},
			Text:  []string{"The write was refused."},
		})
		m := rig.prompt(t, sid, "Please write secret.txt "+s.token)
		if stop := jsonString(m.Result, "stopReason"); stop != "cancelled" && stop != "end_turn" {
			t.Errorf("stopReason %q, want Codex's cancelled (or end_turn)", stop)
		}

		requireNotWritten(t, path)
		requireDenyAudited(t, audit, sid, "codex", path)
		requireToolFailedByPolicy(t, rig.e, sid)
		if n := rig.asks.count(); n != 0 {
			t.Errorf("the editor was asked %d times; the policy decides the write", n)
		}
		if n := s.ToolCalls(); n != 1 {
			t.Errorf("the model made %d apply_patch calls, want 1", n)
		}
		// Codex ends the turn on a refusal: the model gets no success.
		for _, out := range s.Results() {
			if !containsAny(out, "rejected", "denied", "declined", "abort") {
				t.Errorf("the model got tool output %q after the refusal", out)
			}
		}
		// Codex's default was agent: the audit says the router reset it.
		var reset bool
		for _, r := range readAudit(t, audit) {
			reset = reset || r.Method == "mode" && strings.Contains(string(r.Evidence), `"mode":"agent"`) &&
				strings.Contains(string(r.Evidence), `"resetTo":"read-only"`)
		}
		if !reset {
			t.Errorf("no audit record of the reset from agent to read-only: %+v", readAudit(t, audit))
		}
	})
}

// TestCodexDirect runs a text turn with Codex and the fake API and no
// router, so that a failure of TestCodex can be told apart from a broken
// setup.
func TestCodexDirect(t *testing.T) {
	t.Parallel()
	agent, _ := codexSetup(t)
	e := StartEditor(t, agent.argv, withEnv(agent.environ()...))
	init := e.Initialize(t, capsAll)
	if jsonString(init, "agentInfo", "name") != peerCodex.pkg || jsonString(init, "agentInfo", "version") != peerCodex.version {
		t.Fatalf("initialize agentInfo %s, want %s %s", jsonPath(init, "agentInfo"), peerCodex.pkg, peerCodex.version)
	}
	rig := &peerRig{e: e}
	sid, _ := rig.newSession(t, t.TempDir())
	m := rig.prompt(t, sid, "Say hello")
	requireGeminiStop(t, m, "end_turn")
	requireGeminiTexts(t, e, sid, m, fakeResponsesText...)
}
