package test

// Claude (@agentclientprotocol/claude-agent-acp 0.101.0, on Node 22) behind
// the router, against the fake Anthropic API (fakeanthropic_test.go). See
// npmpeers_test.go for how it is installed and why CI never skips it.
//
// What it does in its default mode, measured through the router: it starts
// in mode "auto" ("Claude handles permission decisions"), and there a Write
// of a file in the session's directory runs at once, without
// session/request_permission: the file is written and the router's policy
// never hears of it. Its first mode that asks is "default" ("Manual").

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// lingeringTempDir is a temporary directory for an agent's HOME: the
// claude CLI the agent runs may still be writing its session files there
// for a moment after the test stopped the agent, so removing it is retried
// for up to 5 s (t.TempDir's cleanup fails the test on the first
// "directory not empty").
func lingeringTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Logf("agent home %s not removed: %v", dir, err)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return dir
}

// claudeSetup returns the agents: entry for Claude and its fake API.
func claudeSetup(t *testing.T) (peerAgent, *fakeAnthropic) {
	t.Helper()
	entry := peerClaude.need(t)
	node := needNode22(t)
	fake := startFakeAnthropic(t)
	env := map[string]string{
		"HOME": lingeringTempDir(t),
		// Node 22 first: the agent and whatever it runs with node.
		"PATH":               filepath.Dir(node) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"ANTHROPIC_API_KEY":  "test-key", // not a credential: only the fake sees it
		"ANTHROPIC_BASE_URL": fake.URL(),
		// CI runs as root, where the CLI refuses to start without it.
		"IS_SANDBOX": "1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_TELEMETRY":                        "1",
		"DISABLE_AUTOUPDATER":                      "1",
	}
	return peerAgent{"claude", "Claude", []string{node, entry}, env}, fake
}

// claudeModeIDs are the agent's modes, in its order, as the router shows them.
var claudeModeIDs = []string{"claude:default", "claude:acceptEdits", "claude:plan", "claude:auto", "claude:bypassPermissions"}

// requireTextsInOrder checks that want are among the session's message
// chunks, in order (Claude adds notices of its own, such as one about auto
// mode and the base URL).
func requireTextsInOrder(t *testing.T, e *Editor, sid string, want ...string) {
	t.Helper()
	got := e.Texts(sid)
	i := 0
	for _, txt := range got {
		if i < len(want) && txt == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("message chunks of the session: %q, want %q among them in order", got, want)
	}
}

// TestClaude runs Claude behind the router: in its default mode, auto, and
// without a policy, a text turn, and a Write that runs without asking (what
// makes auto a mode the router turns off under a policy); with a policy
// that denies writing secret.txt, the session is moved out of auto and a
// Write of that file is refused, nothing is written and the audit log
// names the rule.
func TestClaude(t *testing.T) {
	t.Parallel()
	agent, fake := claudeSetup(t)
	rig := startPeerRig(t, writeConfig(t, routerYAML(t, []string{agent.yaml()}, "default: claude")), "", capsAll)

	t.Run("text in the default mode", func(t *testing.T) {
		t.Parallel()
		sid, resp := rig.newSession(t, t.TempDir())
		cur, modes := sessionModes(t, resp.Result)
		if cur != "claude:auto" || !slices.Equal(modes, claudeModeIDs) {
			t.Errorf("modes %q, current %q; want %q, current claude:auto", modes, cur, claudeModeIDs)
		}
		if v := optionValue(jsonPath(resp.Result, "configOptions"), "mode"); v != "auto" {
			t.Errorf("mode option %q, want auto", v)
		}
		s := fake.Script(anthropicScript{Text: []string{"Hello", " from Claude through the router."}})
		m := rig.prompt(t, sid, "Say hello "+s.token)
		requireGeminiStop(t, m, "end_turn")
		requireTextsInOrder(t, rig.e, sid, "Hello", " from Claude through the router.")
		if u := jsonPath(m.Result, "usage", "totalTokens"); u == nil {
			t.Errorf("prompt result %s lacks Claude's usage", truncate(string(m.Result), 1000))
		}
	})

	t.Run("default mode writes without asking", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "notes.txt")
		sid, _ := rig.newSession(t, dir)
		s := fake.Script(anthropicScript{Write: &fileWrite{Path: path, Content: "unasked\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Please write notes.txt "+s.token), "end_turn")
		requireWrittenUnasked(t, rig, sid, path, "unasked\n")
	})

	t.Run("write denied by the policy", func(t *testing.T) {
		t.Parallel()
		agent, fake := claudeSetup(t)
		cfg, audit := policyYAML(t, []string{agent.yaml()}, secretPolicy(), "default: claude")
		rig := startPeerRig(t, cfg, audit, capsAll)
		dir := t.TempDir()
		path := filepath.Join(dir, "secret.txt")
		sid, resp := rig.newSession(t, dir)
		// The router moved the session from auto to Claude's first mode.
		if cur, _ := sessionModes(t, resp.Result); cur != "claude:default" {
			t.Errorf("current mode %q, want claude:default (auto is denied)", cur)
		}
		s := fake.Script(anthropicScript{
			Write: &fileWrite{Path: path, Content: "top secret\n"},
			Text:  []string{"The write", " was refused."},
		})
		m := rig.prompt(t, sid, "Please write secret.txt "+s.token)
		requireGeminiStop(t, m, "end_turn")

		requireNotWritten(t, path)
		requireDenyAudited(t, audit, sid, "claude", path)
		requireToolFailedByPolicy(t, rig.e, sid)
		if n := rig.asks.count(); n != 0 {
			t.Errorf("the editor was asked %d times; the policy decides the write", n)
		}
		// The model was told the tool failed, and said so.
		if r := s.Results(); len(r) != 1 || r[0].Tool != "Write" || !r[0].IsError {
			t.Errorf("tool results the model got: %+v, want one failed Write", r)
		}
		requireTextsInOrder(t, rig.e, sid, "The write", " was refused.")
		// Claude's default was auto: the audit says the router reset it.
		var reset bool
		for _, r := range readAudit(t, audit) {
			reset = reset || r.Method == "mode" && strings.Contains(string(r.Evidence), `"mode":"auto"`) &&
				strings.Contains(string(r.Evidence), `"resetTo":"default"`)
		}
		if !reset {
			t.Errorf("no audit record of the reset from auto to default")
		}
	})
}

// TestClaudeDirect runs a text turn with Claude and the fake API and no
// router, so that a failure of TestClaude can be told apart from a broken
// setup.
func TestClaudeDirect(t *testing.T) {
	t.Parallel()
	agent, _ := claudeSetup(t)
	e := StartEditor(t, agent.argv, withEnv(agent.environ()...))
	init := e.Initialize(t, capsAll)
	if jsonString(init, "agentInfo", "name") != peerClaude.pkg || jsonString(init, "agentInfo", "version") != peerClaude.version {
		t.Fatalf("initialize agentInfo %s, want %s %s", jsonPath(init, "agentInfo"), peerClaude.pkg, peerClaude.version)
	}
	rig := &peerRig{e: e}
	sid, _ := rig.newSession(t, t.TempDir())
	m := rig.prompt(t, sid, "Say hello")
	requireGeminiStop(t, m, "end_turn")
	requireTextsInOrder(t, e, sid, fakeAnthropicText...)
}

// subagentUpdates returns the subagent_update updates the editor got on
// parent, as (child id, state).
func subagentUpdates(e *Editor, parent string) [][2]string {
	var out [][2]string
	for _, m := range updatesOf(e, parent, "subagent_update") {
		var p struct {
			Update struct {
				SessionID string `json:"sessionId"`
				State     struct {
					State string `json:"state"`
				} `json:"state"`
			} `json:"update"`
		}
		_ = json.Unmarshal(m.Params, &p)
		out = append(out, [2]string{p.Update.SessionID, p.Update.State.State})
	}
	return out
}
