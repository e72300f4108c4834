package test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// End-to-end tests of modes that approve by themselves (issue 13, part 1):
// with a permission policy in force, the modes of the built-in table are
// off unless allow_modes allows them; the org layer can forbid that; an
// agent the router cannot keep asking is reported, and refused when the
// policy says unknown_agents: refuse.

// claudeModes is a session/new result with Claude's modes (0.101), the
// session starting in current.
func claudeModes(current string) json.RawMessage {
	var avail []map[string]string
	for _, id := range []string{"default", "acceptEdits", "plan", "auto", "bypassPermissions"} {
		avail = append(avail, map[string]string{"id": id, "name": id})
	}
	return mustJSON(map[string]any{"modes": map[string]any{"currentModeId": current, "availableModes": avail}})
}

// initWithInfo is the fake agent's initialize result with another
// agentInfo.name.
func initWithInfo(name string) json.RawMessage {
	return json.RawMessage(strings.Replace(defaultInitResult, `"agentInfo":{"name":"fake"`, `"agentInfo":{"name":"`+name+`"`, 1))
}

// sessionMode creates a session in cwd and returns its id, its current
// mode and the modes offered, as the editor sees them.
func sessionMode(t *testing.T, e *Editor, cwd string) (sid, current string, offered []string) {
	t.Helper()
	res := e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	var nr struct {
		SessionID string `json:"sessionId"`
		Modes     struct {
			CurrentModeID  string `json:"currentModeId"`
			AvailableModes []struct {
				ID string `json:"id"`
			} `json:"availableModes"`
		} `json:"modes"`
	}
	if err := json.Unmarshal(res, &nr); err != nil {
		t.Fatal(err)
	}
	for _, m := range nr.Modes.AvailableModes {
		offered = append(offered, m.ID)
	}
	return nr.SessionID, nr.Modes.CurrentModeID, offered
}

// modeResets are the audited mode resets of agent.
func modeResets(t *testing.T, auditFile, agent string) []auditRecord {
	t.Helper()
	var out []auditRecord
	for _, r := range readAudit(t, auditFile) {
		if r.Method == "mode" && r.Agent == agent {
			out = append(out, r)
		}
	}
	return out
}

// TestModesSelfApprovingOffByDefault: a policy with no deny_modes still
// keeps Claude out of auto: a session that starts there (Claude 0.101's
// default) is moved to default, its first mode that asks, the reset is
// audited under the built-in rule and the user told; the modes that
// approve by themselves are not offered and refused when asked for; an
// agent that moves itself into one mid-session is moved back. The agent
// is recognised by its config name (claude) and, under another name, by
// the agentInfo of its initialize result.
func TestModesSelfApprovingOffByDefault(t *testing.T) {
	t.Parallel()
	claudeLog := filepath.Join(t.TempDir(), "claude.log")
	workLog := filepath.Join(t.TempDir(), "work.log")
	dirWork := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{
		fakeAgentYAML("claude", fakeOpts{LogFile: claudeLog, SessionResult: claudeModes("auto")}),
		fakeAgentYAML("work", fakeOpts{LogFile: workLog, SessionResult: claudeModes("auto"), InitResult: initWithInfo("@agentclientprotocol/claude-agent-acp")}),
	}, "default: ask\n", "default: claude", "rules:", cwdRule(dirWork, "work"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)

	sid, current, offered := sessionMode(t, e, t.TempDir())
	if current != "claude:default" {
		t.Errorf("the session starts in %q; want claude:default (moved from auto)", current)
	}
	for _, m := range []string{"claude:auto", "claude:acceptEdits", "claude:bypassPermissions"} {
		if slices.Contains(offered, m) {
			t.Errorf("%s is offered: %q", m, offered)
		}
	}
	if !slices.Contains(offered, "claude:plan") {
		t.Errorf("claude:plan (it asks) is not offered: %q", offered)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, rerr := e.Call(ctx, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "claude:auto"}); rerr == nil ||
		!strings.Contains(rerr.Message, "approves every tool call by itself") || !strings.Contains(rerr.Message, `allow_modes: ["claude:auto"]`) {
		t.Errorf("set_mode claude:auto: %v", rerr)
	}
	// The agent moves itself into acceptEdits: moved back.
	e.MustPrompt(t, sid, `update {"sessionUpdate":"current_mode_update","currentModeId":"acceptEdits"}`, "end_turn")
	waitFor(t, "two resets of claude audited", func() bool { return len(modeResets(t, auditFile, "claude")) == 2 })
	if n := countLines(claudeLog, "session/set_mode"); n != 2 {
		t.Errorf("claude got %d set_mode requests, want 2 (at session/new, after its mode update)", n)
	}
	for i, r := range modeResets(t, auditFile, "claude") {
		from := []string{"auto", "acceptEdits"}[i]
		if r.Decision != "deny" || r.rule() != "acp-router:self-approving-mode" || r.Layer != "builtin" || r.Source != "builtin" ||
			!strings.Contains(string(r.Evidence), `"mode":"`+from+`"`) || !strings.Contains(string(r.Evidence), `"resetTo":"default"`) ||
			!strings.Contains(string(r.Evidence), "by itself") {
			t.Errorf("reset %d: %+v %s", i, r, r.Evidence)
		}
	}
	notice := `"auto", which the permission policy does not allow; it has been set back to "default"`
	waitFor(t, "the user is told", func() bool { return strings.Contains(strings.Join(e.Texts(sid), "\n"), notice) })

	// Under another name, found by its agentInfo.
	wsid, current, _ := sessionMode(t, e, dirWork)
	if current != "work:default" {
		t.Errorf("work (agentInfo claude-agent-acp) starts in %q; want work:default", current)
	}
	waitFor(t, "the reset of work audited", func() bool { return len(modeResets(t, auditFile, "work")) == 1 })
	if r := modeResets(t, auditFile, "work")[0]; r.rule() != "acp-router:self-approving-mode" || r.Session != wsid {
		t.Errorf("work's reset: %+v", r)
	}
	if n := countLines(workLog, "session/set_mode"); n != 1 {
		t.Errorf("work got %d set_mode requests, want 1", n)
	}
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

// TestModesAllowModes: allow_modes: ["claude:auto"] lets Claude stay in
// auto, under its own name and under another one (the table's name in
// the entry matches it by agentInfo); nothing is reset or audited. The
// user's deny_modes still wins over the same user's allow_modes.
func TestModesAllowModes(t *testing.T) {
	t.Parallel()
	claudeLog := filepath.Join(t.TempDir(), "claude.log")
	workLog := filepath.Join(t.TempDir(), "work.log")
	dirWork, dirGem := t.TempDir(), t.TempDir()
	cfg, auditFile := policyYAML(t, []string{
		fakeAgentYAML("claude", fakeOpts{LogFile: claudeLog, SessionResult: claudeModes("auto")}),
		fakeAgentYAML("work", fakeOpts{LogFile: workLog, SessionResult: claudeModes("auto"), InitResult: initWithInfo("@agentclientprotocol/claude-agent-acp")}),
		fakeAgentYAML("gem", fakeOpts{SessionResult: mustJSON(map[string]any{"modes": map[string]any{"currentModeId": "yolo",
			"availableModes": []map[string]string{{"id": "default", "name": "Default"}, {"id": "yolo", "name": "YOLO"}}}}),
			InitResult: initWithInfo("gemini-cli")}),
	}, "default: ask\nallow_modes: [\"claude:auto\", \"gemini:yolo\"]\ndeny_modes: [\"gem:yolo\"]\n",
		"default: claude", "rules:", cwdRule(dirWork, "work"), cwdRule(dirGem, "gem"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid, current, offered := sessionMode(t, e, t.TempDir())
	if current != "claude:auto" || !slices.Contains(offered, "claude:auto") {
		t.Errorf("claude: current %q, offered %q; want it left in auto", current, offered)
	}
	if slices.Contains(offered, "claude:acceptEdits") {
		t.Errorf("acceptEdits is offered although only auto is allowed: %q", offered)
	}
	if _, current, _ = sessionMode(t, e, dirWork); current != "work:auto" {
		t.Errorf("work: current %q, want work:auto", current)
	}
	// deny wins: gem is moved from yolo although gemini:yolo is allowed.
	if _, current, _ = sessionMode(t, e, dirGem); current != "gem:default" {
		t.Errorf("gem: current %q, want gem:default (deny_modes wins)", current)
	}
	e.MustPrompt(t, sid, "say hi", "end_turn")
	if n := countLines(claudeLog, "session/set_mode") + countLines(workLog, "session/set_mode"); n != 0 {
		t.Errorf("%d set_mode requests, want none", n)
	}
	waitFor(t, "gem's reset audited", func() bool { return len(modeResets(t, auditFile, "gem")) == 1 })
	if r := modeResets(t, auditFile, "gem")[0]; r.rule() != "acp-router:denied-mode" || r.Layer != "user" || !strings.Contains(string(r.Evidence), `deny_modes \"gem:yolo\"`) {
		t.Errorf("gem's reset: %+v %s", r, r.Evidence)
	}
	if n := len(modeResets(t, auditFile, "claude")) + len(modeResets(t, auditFile, "work")); n != 0 {
		t.Errorf("%d resets of claude audited, want none", n)
	}
}

// TestModesUnknownAgents: an agent whose modes the router does not know
// (the fake agent, whatever its name) and one that asks nothing by default
// (OpenCode) keep working under the default unknown_agents: warn, with a
// warning in the log and in `check` saying what to do; with
// unknown_agents: refuse, session/new on them is refused with -32603
// naming the agent and the reason, and audited, while Claude and an
// unknown agent whose modes allow_modes lists still work.
func TestModesUnknownAgents(t *testing.T) {
	t.Parallel()
	dirHelper, dirOC, dirVetted := t.TempDir(), t.TempDir(), t.TempDir()
	agents := []string{
		fakeAgentYAML("claude", fakeOpts{}),
		fakeAgentYAML("helper", fakeOpts{}),
		fakeAgentYAML("oc", fakeOpts{InitResult: initWithInfo("OpenCode")}),
		fakeAgentYAML("vetted", fakeOpts{}),
	}
	routing := []string{"default: claude", "rules:", cwdRule(dirHelper, "helper"), cwdRule(dirOC, "oc"), cwdRule(dirVetted, "vetted")}

	t.Run("warn", func(t *testing.T) {
		cfg, _ := policyYAML(t, agents, "default: ask\n", routing...)
		e := StartRouter(t, cfg, nil)
		e.Initialize(t, capsAll)
		for _, dir := range []string{dirHelper, dirOC} {
			e.NewSession(t, dir)
		}
		const warning = "the permission policy cannot keep this agent asking: "
		waitFor(t, "the warnings logged", func() bool {
			return strings.Contains(e.Stderr(), warning+"agent=helper ") && strings.Contains(e.Stderr(), warning+"agent=oc ")
		})
		e.NewSession(t, dirHelper)
		log := e.Stderr()
		if n := strings.Count(log, warning+"agent=helper "); n != 1 {
			t.Errorf("helper warned about %d times, want once", n)
		}
		if !strings.Contains(log, "opencode.json") || strings.Contains(log, warning+"agent=claude ") {
			t.Errorf("the log:\n%s", log)
		}
		// check knows OpenCode by the initialize result the router cached.
		out, err := exec.Command(routerBin, "check", "--config", cfg).CombinedOutput()
		if err != nil {
			t.Fatalf("check: %v\n%s", err, out)
		}
		for _, want := range []string{
			`agent "helper": the router does not know its modes, so it cannot keep it out of those that approve by themselves; make it ask with its own settings, then list the modes that ask in allow_modes (e.g. "helper:default"`,
			`agent "oc": OpenCode (opencode acp 1.18) asks nothing under its default permissions, in any mode; set "permission": {"edit": "ask", "bash": "ask", "webfetch": "ask"} in its opencode.json`,
			`agent "claude": Claude Agent (@agentclientprotocol/claude-agent-acp 0.101) (from its name): asks in default, plan`,
			`denied  auto               it approves every tool call by itself (a model approves each action); the policy allows it only with allow_modes: ["claude:auto"]`,
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("check lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("refuse", func(t *testing.T) {
		cfg, auditFile := policyYAML(t, agents, "default: ask\nunknown_agents: refuse\nallow_modes: [\"vetted:default\"]\n", routing...)
		e := StartRouter(t, cfg, nil)
		e.Initialize(t, capsAll)
		e.NewSession(t, t.TempDir()) // claude
		e.NewSession(t, dirVetted)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		for _, tc := range []struct{ dir, agent, reason string }{
			{dirHelper, "helper", "the router does not know its modes"},
			{dirOC, "oc", "OpenCode (opencode acp 1.18) asks nothing under its default permissions"},
		} {
			_, rerr := e.Call(ctx, "session/new", map[string]any{"cwd": tc.dir, "mcpServers": []any{}})
			if rerr == nil || rerr.Code != -32603 || !strings.Contains(rerr.Message, `the permission policy refuses agent "`+tc.agent+`": `+tc.reason) ||
				!strings.Contains(rerr.Message, "unknown_agents: refuse") || !strings.Contains(rerr.Message, "allow_modes") {
				t.Errorf("session/new on %s: %v", tc.agent, rerr)
			}
		}
		var refused []string
		for _, r := range readAudit(t, auditFile) {
			if r.Method == "session/new" && r.Decision == "deny" && r.rule() == "acp-router:unknown-agent" && r.Layer == "user" {
				refused = append(refused, r.Agent)
			}
		}
		if !slices.Equal(refused, []string{"helper", "oc"}) {
			t.Errorf("refusals audited for %q, want helper, oc", refused)
		}
		out, _ := exec.Command(routerBin, "check", "--config", cfg).CombinedOutput()
		if !strings.Contains(string(out), `agent "helper": the router does not know its modes`) || !strings.Contains(string(out), "until then the router refuses its sessions (unknown_agents: refuse") {
			t.Errorf("check:\n%s", out)
		}
	})
}

// TestModesOrgLayer: the org layer's lower_layers_may without allow drops
// the user's allow_modes (check says so), so Claude is moved out of auto
// although the user allowed it; the org's unknown_agents: refuse keeps an
// unknown agent out although the user's allow_modes lists its modes.
func TestModesOrgLayer(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the org layer must be root-owned: run as root (CI does)")
	}
	orgDir := filepath.Join(t.TempDir(), "policy.d")
	os.MkdirAll(orgDir, 0o755)
	os.WriteFile(filepath.Join(orgDir, "10-org.yaml"), []byte("default: ask\nlower_layers_may: [deny, ask]\nunknown_agents: refuse\n"), 0o644)
	bin := routerWithOrgDir(t, orgDir)
	dirHelper := t.TempDir()
	claudeLog := filepath.Join(t.TempDir(), "claude.log")
	cfg, auditFile := policyYAML(t, []string{
		fakeAgentYAML("claude", fakeOpts{LogFile: claudeLog, SessionResult: claudeModes("auto")}),
		fakeAgentYAML("helper", fakeOpts{}),
	}, "allow_modes: [\"claude:auto\", \"helper:default\"]\n", "default: claude", "rules:", cwdRule(dirHelper, "helper"))
	e := StartEditor(t, []string{bin, "--config", cfg, "--log-level", "debug"})
	e.Initialize(t, capsAll)
	if _, current, _ := sessionMode(t, e, t.TempDir()); current != "claude:default" {
		t.Errorf("claude starts in %q; want claude:default (the org drops the user's allow_modes)", current)
	}
	waitFor(t, "claude's reset audited", func() bool { return len(modeResets(t, auditFile, "claude")) == 1 })
	if r := modeResets(t, auditFile, "claude")[0]; r.rule() != "acp-router:self-approving-mode" {
		t.Errorf("claude's reset: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, rerr := e.Call(ctx, "session/new", map[string]any{"cwd": dirHelper, "mcpServers": []any{}}); rerr == nil ||
		!strings.Contains(rerr.Message, `refuses agent "helper"`) || !strings.Contains(rerr.Message, "10-org.yaml:3:17") {
		t.Errorf("session/new on helper: %v", rerr)
	}
	out, _ := exec.Command(bin, "check", "--config", cfg).CombinedOutput()
	for _, want := range []string{
		`allow_modes "claude:auto" is dropped: the org layer allows lower layers only [deny, ask]`,
		`dropped allow mode helper:default: the org layer's lower_layers_may does not allow it`,
		`unknown agents: refuse`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check lacks %q:\n%s", want, out)
		}
	}
}
