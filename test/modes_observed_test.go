package test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Red-team tests of where the router reads an agent's mode. ACP says a
// config option's category is for the UX only ("MUST NOT be required for
// correctness", schema SessionConfigOptionCategory): the router cannot
// learn an agent's mode from the category alone, nor from the first
// option that has it.

// claudeModeOption is a Claude-like mode select with the given id,
// category ("" for none) and current value.
func claudeModeOption(id, category, current string) map[string]any {
	var values []map[string]string
	for _, v := range []string{"default", "acceptEdits", "plan", "auto", "bypassPermissions"} {
		values = append(values, map[string]string{"value": v, "name": v})
	}
	o := map[string]any{"id": id, "name": "Mode", "type": "select", "currentValue": current, "options": values}
	if category != "" {
		o["category"] = category
	}
	return o
}

// TestModesObservedWhateverTheOptionSays: an agent that reports a mode
// the policy denies is set back however its options spell the mode: a
// mode select without a category (or with a custom one), a second select
// of category mode, an uncategorized option with another id.
func TestModesObservedWhateverTheOptionSays(t *testing.T) {
	t.Parallel()
	withMode := mustJSON(map[string]any{"configOptions": []any{claudeModeOption("mode", "mode", "default")}})
	optionsUpdate := func(options ...any) string {
		return "update " + string(mustJSON(map[string]any{"sessionUpdate": "config_option_update", "configOptions": options}))
	}
	model := map[string]any{"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "opus",
		"options": []any{map[string]string{"value": "opus", "name": "Opus"}}}
	for _, tc := range []struct {
		name, update string
		start        json.RawMessage
	}{
		// The control: what the router always read.
		{"mode select of category mode", optionsUpdate(claudeModeOption("mode", "mode", "bypassPermissions")), withMode},
		{"mode select without category", optionsUpdate(claudeModeOption("mode", "", "bypassPermissions")), withMode},
		{"mode select with custom category", optionsUpdate(claudeModeOption("mode", "_permissions", "bypassPermissions")), withMode},
		{"second select of category mode", optionsUpdate(claudeModeOption("mode", "mode", "default"), claudeModeOption("permission_mode", "mode", "bypassPermissions")), withMode},
		{"uncategorized option under another id", optionsUpdate(claudeModeOption("mode", "mode", "default"), claudeModeOption("approvals", "", "bypassPermissions")), withMode},
		// Options without a mode select, no legacy modes: the agent's
		// current_mode_update is still its mode.
		{"current_mode_update beside options", `update {"sessionUpdate":"current_mode_update","currentModeId":"bypassPermissions"}`,
			mustJSON(map[string]any{"configOptions": []any{model}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{SessionResult: tc.start})}, "default: ask\n")
			e := StartRouter(t, cfg, nil)
			e.Initialize(t, capsAll)
			sid := e.NewSession(t, t.TempDir())
			e.MustPrompt(t, sid, tc.update, "end_turn")
			waitFor(t, "a reset of claude audited", func() bool { return len(modeResets(t, auditFile, "claude")) == 1 })
			if r := modeResets(t, auditFile, "claude")[0]; !strings.Contains(string(r.Evidence), `"mode":"bypassPermissions"`) {
				t.Errorf("reset: %+v %s", r, r.Evidence)
			}
		})
	}
}

// TestModesChildOptionSpelling: a subagent session whose mode select has
// no category (ACP: UX only) and says bypassPermissions is decided as a
// child in a denied mode: its reads are asked, never allowed.
func TestModesChildOptionSpelling(t *testing.T) {
	t.Parallel()
	c := startChildPolicy(t)
	upd, _ := json.Marshal(map[string]any{"sessionUpdate": "config_option_update", "configOptions": []any{claudeModeOption("mode", "", "bypassPermissions")}})
	c.e.MustPrompt(t, c.sid, strings.Join([]string{
		announce("child-1"),
		"as child-1 update " + string(upd),
		"as child-1 read " + c.cwd + "/main.go",
	}, "\n"), "end_turn")
	if txts := c.e.Texts("child-1"); len(txts) != 1 || txts[0] == "read: package main" || c.asks.count() != 1 {
		t.Errorf("child reads %q, editor asked %d times; want the read (in bypassPermissions) asked and refused", txts, c.asks.count())
	}
}

// TestModesGrandchildOfDeniedChild: a child in a denied mode delegates to
// a child of its own (ACP: nested subagents), which runs in the mode it
// inherits: its requests are decided as its parent's are.
func TestModesGrandchildOfDeniedChild(t *testing.T) {
	t.Parallel()
	c := startChildPolicy(t)
	c.e.MustPrompt(t, c.sid, strings.Join([]string{
		announce("child-1"),
		`as child-1 update {"sessionUpdate":"current_mode_update","currentModeId":"bypassPermissions"}`,
		"as child-1 " + announce("child-2"),
		"as child-2 read " + c.cwd + "/main.go",
	}, "\n"), "end_turn")
	if txts := c.e.Texts("child-2"); len(txts) != 1 || txts[0] == "read: package main" || c.asks.count() != 1 {
		t.Errorf("grandchild reads %q, editor asked %d times; want the read asked and refused", txts, c.asks.count())
	}
}

// childPolicy is a router with the fake claude under secretsPolicy (reads
// in the project allowed, the rest asked), an editor that advertises
// subagents, reads files and rejects every permission request, and one
// session in cwd, which holds main.go.
type childPolicy struct {
	e    *Editor
	cwd  string
	sid  string
	asks *permissionCounter
}

func startChildPolicy(t *testing.T) childPolicy {
	t.Helper()
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main"), 0o644)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/read_text_file", readTextFile)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("reject_once"))
	e.Initialize(t, capsSubagents)
	return childPolicy{e: e, cwd: cwd, sid: e.NewSession(t, cwd), asks: asks}
}

// TestModesEditorSetsUncategorizedMode: the editor's set_config_option
// naming a select that may say the mode (no category: ACP's categories
// are for the UX only) with a mode the policy denies is refused, as one
// naming the category-mode select is; the agent never gets it.
func TestModesEditorSetsUncategorizedMode(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "claude.log")
	start := mustJSON(map[string]any{"configOptions": []any{claudeModeOption("mode", "mode", "default"), claudeModeOption("approvals", "", "default")}})
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{LogFile: log, SessionResult: start})}, "default: ask\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, id := range []string{"mode", "approvals"} {
		if _, rerr := e.Call(ctx, "session/set_config_option", map[string]any{"sessionId": sid, "configId": id, "value": "bypassPermissions"}); rerr == nil || !strings.Contains(rerr.Message, "bypassPermissions") {
			t.Errorf("set_config_option %s=bypassPermissions: %v, want a refusal naming the mode", id, rerr)
		}
	}
	if n := countLines(log, "session/set_config_option"); n != 0 {
		t.Errorf("the agent got %d set_config_option requests, want 0", n)
	}
}

// TestModesCodexAuto: codex-acp 0.16 names its "Default" preset auto:
// it reads, edits and runs commands in the workspace without asking
// (shared/fixtures/real-agents/codex-acp-0.16.0-mock.jsonl). A session
// that starts there is set back to read-only.
func TestModesCodexAuto(t *testing.T) {
	t.Parallel()
	var avail, values []map[string]string
	for _, id := range []string{"read-only", "auto", "full-access"} {
		avail = append(avail, map[string]string{"id": id, "name": id})
		values = append(values, map[string]string{"value": id, "name": id})
	}
	start := mustJSON(map[string]any{"modes": map[string]any{"currentModeId": "auto", "availableModes": avail},
		"configOptions": []any{map[string]any{"id": "mode", "name": "Approval Preset", "category": "mode", "type": "select", "currentValue": "auto", "options": values}}})
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("codex", fakeOpts{SessionResult: start, InitResult: initWithInfo("codex-acp")})}, "default: ask\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	e.NewSession(t, t.TempDir())
	waitFor(t, "a reset of codex audited", func() bool { return len(modeResets(t, auditFile, "codex")) == 1 })
	if r := modeResets(t, auditFile, "codex")[0]; !strings.Contains(string(r.Evidence), `"mode":"auto"`) || !strings.Contains(string(r.Evidence), `"resetTo":"read-only"`) {
		t.Errorf("reset: %+v %s", r, r.Evidence)
	}
}
