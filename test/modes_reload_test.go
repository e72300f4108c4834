package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestModesReloadReachesLiveSessions (issue 27, point 1): a reload that
// stops allowing a mode reaches the sessions already in it, at once: the
// live session is set back to its first mode that asks, audited and the
// user told, and its subagent session in that mode (whose mode the router
// cannot set) is audited and the user told; all without the agent
// reporting its mode again or another prompt.
func TestModesReloadReachesLiveSessions(t *testing.T) {
	t.Parallel()
	claudeLog := filepath.Join(t.TempDir(), "claude.log")
	allow := `allow_modes: ["claude:acceptEdits"]` + "\n"
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{LogFile: claudeLog, SessionResult: claudeModes("acceptEdits")})},
		"default: ask\n"+allow)
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsSubagents)
	sid, current, _ := sessionMode(t, e, t.TempDir())
	if current != "claude:acceptEdits" {
		t.Fatalf("the session starts in %q; want claude:acceptEdits (allowed)", current)
	}
	e.MustPrompt(t, sid, announce("child-1")+"\n"+
		`as child-1 update {"sessionUpdate":"current_mode_update","currentModeId":"acceptEdits"}`, "end_turn")
	if n := len(modeResets(t, auditFile, "claude")); n != 0 {
		t.Fatalf("%d mode records while acceptEdits is allowed", n)
	}

	// The config saved without the allow, as an editor saves: a new file
	// renamed over the old one.
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	without := strings.Replace(string(text), "  "+allow, "", 1)
	if without == string(text) {
		t.Fatalf("no allow_modes line in:\n%s", text)
	}
	if err := os.WriteFile(cfg+".tmp", []byte(without), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfg+".tmp", cfg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.WaitText(t, sid, `acp-router: claude was in mode "acceptEdits", which the permission policy does not allow; it has been set back to "default".`)
	notice := `acp-router: a subagent session of claude (child-1) is in mode "acceptEdits", which the permission policy does not allow; a subagent's mode cannot be set back, so its requests are decided as in that mode.`
	e.WaitText(t, sid, notice)
	t.Logf("live session and child reset %v after the save", time.Since(start))

	var parent, child int
	for _, r := range modeResets(t, auditFile, "claude") {
		ev := string(r.Evidence)
		switch {
		case r.Session == sid && strings.Contains(ev, `"resetTo":"default"`):
			parent++
		case r.Session == "child-1" && r.Parent == sid:
			child++
		default:
			t.Errorf("unexpected mode record: %+v %s", r, ev)
			continue
		}
		if r.Decision != "deny" || r.rule() != "acp-router:self-approving-mode" || !strings.Contains(ev, `"mode":"acceptEdits"`) {
			t.Errorf("mode record: %+v %s", r, ev)
		}
	}
	if parent != 1 || child != 1 {
		t.Errorf("audited %d resets of the session and %d records of its child; want 1 and 1", parent, child)
	}
	if n := countLines(claudeLog, "session/set_mode"); n != 1 {
		t.Errorf("claude got %d set_mode requests, want 1", n)
	}
	if n := countLines(claudeLog, "session/prompt"); n != 1 {
		t.Errorf("claude got %d prompts, want 1: the reload alone must reset it", n)
	}
}
