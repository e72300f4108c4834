package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// /compare and /pick (issue 32, part 1), through the router binary with
// fake agents: every agent runs the same prompt, and "on NAME COMMAND"
// lines make each do its own part.

// compareSection is a run of message chunks the editor got under one
// messageId.
type compareSection struct {
	msgID string
	texts []string
}

// headingRe is the heading chunk that opens an agent's section.
var headingRe = regexp.MustCompile(`^\n\n\*\*(.+)\*\*\n\n$`)

// sectionsOf groups the agent_message_chunk updates of msgs for sid by
// messageId, in the order each id first appears, and fails the test when
// an id comes back after another one: a message the editor would show in
// two places.
func sectionsOf(t *testing.T, msgs []*Msg, sid string) []compareSection {
	t.Helper()
	var out []compareSection
	seen := map[string]bool{}
	for _, m := range msgs {
		text, ok := m.ChunkText(sid)
		if !ok {
			continue
		}
		id := jsonString(m.Params, "update", "messageId")
		if id == "" {
			t.Errorf("a chunk of a comparison without a messageId: %s", m)
		}
		if len(out) == 0 || out[len(out)-1].msgID != id {
			if seen[id] {
				t.Errorf("message %s continued after another one began: %s", id, m)
			}
			seen[id] = true
			out = append(out, compareSection{msgID: id})
		}
		out[len(out)-1].texts = append(out[len(out)-1].texts, text)
	}
	return out
}

// agentSections reads sections as the editor shows them: each agent's
// section opens with its heading and holds only that agent's lines (the
// fake agents' lines start with their name); the router's summary, last,
// has no heading. It returns "AGENT: TEXT | TEXT" per section.
func agentSections(t *testing.T, sections []compareSection) []string {
	t.Helper()
	var out []string
	for i, sec := range sections {
		h := headingRe.FindStringSubmatch(sec.texts[0])
		if h == nil {
			if i == len(sections)-1 && strings.Contains(sec.texts[0], "Compared ") {
				continue // the router's summary
			}
			t.Errorf("section %d does not open with an agent's heading: %q", i, sec.texts)
			continue
		}
		agent := h[1]
		for _, text := range sec.texts[1:] {
			for _, other := range []string{"alpha", "beta"} {
				if other != agent && strings.HasPrefix(strings.TrimLeft(text, "\n*"), other) {
					t.Errorf("%s's section holds %q: two agents mixed in one message", agent, text)
				}
			}
		}
		out = append(out, agent+": "+strings.Join(sec.texts[1:], " | "))
	}
	return out
}

// turnMsgs are the messages the editor got after index from.
func turnMsgs(e *Editor, from int) []*Msg { return e.Rec.All()[from:] }

func compareRouter(t *testing.T, extra string, alpha, beta fakeOpts, agentExtra ...string) (*Editor, string) {
	t.Helper()
	cfg := routerYAML(t, []string{fakeAgentYAML("alpha", alpha, agentExtra...), fakeAgentYAML("beta", beta, agentExtra...)}, "default: alpha")
	e := StartRouter(t, writeConfig(t, cfg+extra), nil)
	e.Initialize(t, capsAll)
	return e, e.NewSession(t, t.TempDir())
}

// TestCompareInterleaved: two agents answering at once, their chunks
// interleaved on the wire, reach the editor as sections that never mix:
// each under a messageId of its own, opened by a heading naming the agent.
// The agent that spoke first streams; the other's lines wait for its
// message to end, unless it stays silent (compareFloorIdle) while the
// other has something to say. The commands are advertised; /compare
// PROMPT asks compare.default.
func TestCompareInterleaved(t *testing.T) {
	t.Parallel()
	e, sid := compareRouter(t, "compare: {default: [alpha, beta]}\n", fakeOpts{}, fakeOpts{})
	cmds := e.Rec.WaitFor(t, waitTimeout, "the router's commands", func(m *Msg) bool {
		return m.Update() == "available_commands_update" && m.SessionID() == sid
	})
	if names := commandNames(cmds); !slices.Contains(names, "compare") || !slices.Contains(names, "pick") {
		t.Errorf("commands %q: compare and pick not advertised", names)
	}

	from := len(e.Rec.All())
	e.MustPrompt(t, sid, strings.Join([]string{"/compare alpha beta on alpha say alpha 1",
		"on beta sleep 40ms", "on beta say beta 1",
		"on alpha sleep 80ms", "on alpha say alpha 2",
		"on beta sleep 80ms", "on beta say beta 2",
		"on alpha sleep 80ms", "on alpha say alpha 3",
		"on beta sleep 80ms", "on beta say beta 3"}, "\n"), "end_turn")
	// Each agent's lines in order, in few sections: one each unless a
	// loaded machine kept an agent silent for compareFloorIdle (the
	// floor itself: TestCompareFloor). Six would be every line its own.
	got := agentSections(t, sectionsOf(t, turnMsgs(e, from), sid))
	if said := byAgent(got); len(got) > 4 || !slices.Equal(said["alpha"], []string{"alpha 1", "alpha 2", "alpha 3"}) ||
		!slices.Equal(said["beta"], []string{"beta 1", "beta 2", "beta 3"}) {
		t.Errorf("sections %q, want each agent's three lines in order, in two sections", got)
	}

	// alpha thinks for 1.5 s after its first line: beta, which has
	// something to say at 0.7 s, takes the floor rather than waiting.
	// No agents named: compare.default asks them.
	from = len(e.Rec.All())
	e.MustPrompt(t, sid, strings.Join([]string{"/compare on alpha say alpha first",
		"on alpha sleep 1500ms", "on alpha say alpha last",
		"on beta sleep 700ms", "on beta say beta early"}, "\n"), "end_turn")
	got = agentSections(t, sectionsOf(t, turnMsgs(e, from), sid))
	if early, last := slices.Index(got, "beta: beta early"), slices.Index(got, "alpha: alpha last"); early < 0 || last < 0 || early > last {
		t.Errorf("sections %q: beta's line waited for alpha's last", got)
	}
}

// byAgent collects the lines of agentSections' sections by agent.
func byAgent(sections []string) map[string][]string {
	out := map[string][]string{}
	for _, sec := range sections {
		agent, lines, _ := strings.Cut(sec, ": ")
		out[agent] = append(out[agent], strings.Split(lines, " | ")...)
	}
	return out
}

// TestCompareToolCallsAndPolicy: the agents' tool calls, which use the same
// id, reach the editor under distinct ids with titles labelled by agent;
// each permission request is decided by the policy with its agent's name
// (beta's edits denied, alpha's asked, the request's title labelled); the
// audit log records the comparison's agents.
func TestCompareToolCallsAndPolicy(t *testing.T) {
	t.Parallel()
	agents := []string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{})}
	cfg, auditFile := policyYAML(t, agents, `default: ask
rules:
  - {id: beta-no-edits, decision: deny, when: {agent: [beta], kind: [edit]}}
`, "default: alpha")
	e := StartRouter(t, cfg, nil)
	var mu sync.Mutex
	var asked []string
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		asked = append(asked, jsonString(p, "toolCall", "title"))
		mu.Unlock()
		return AllowFirst(p)
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	from := len(e.Rec.All())
	e.MustPrompt(t, sid, "/compare alpha beta permission", "end_turn")

	ids, titles := map[string]bool{}, []string{}
	for _, m := range turnMsgs(e, from) {
		if m.Update() == "tool_call" && m.SessionID() == sid {
			ids[jsonString(m.Params, "update", "toolCallId")] = true
			titles = append(titles, jsonString(m.Params, "update", "title"))
		}
	}
	slices.Sort(titles)
	if want := []string{"[alpha] Edit a file", "[beta] Edit a file"}; !slices.Equal(titles, want) || len(ids) != 2 {
		t.Errorf("tool calls %q with ids %v, want %q under two ids", titles, ids, want)
	}
	mu.Lock()
	if want := []string{"[alpha] Edit a file"}; !slices.Equal(asked, want) {
		t.Errorf("the editor was asked about %q, want %q (beta's edit is denied by the policy)", asked, want)
	}
	mu.Unlock()
	got := strings.Join(agentSections(t, sectionsOf(t, turnMsgs(e, from), sid)), "\n")
	if !regexp.MustCompile(`(?m)^alpha: permission: .*"optionId":"allow"`).MatchString(got) ||
		!regexp.MustCompile(`(?m)^beta: permission: .*"optionId":"reject"`).MatchString(got) {
		t.Errorf("answers:\n%s\nwant alpha allowed, beta rejected", got)
	}

	var compare, beta, alpha int
	for _, r := range readAudit(t, auditFile) {
		switch {
		case r.Method == "acp-router/compare":
			compare++
			requireJSON(t, "the comparison's audit evidence", r.Evidence, `[{"agents":["alpha","beta"],"turn":0}]`)
			if r.Session != sid {
				t.Errorf("comparison audited in session %q, want %q", r.Session, sid)
			}
		case r.Method == "session/request_permission" && r.Agent == "beta":
			beta++
			if r.Decision != "deny" || r.rule() != "beta-no-edits" {
				t.Errorf("beta's request audited %s", r.summary())
			}
		case r.Method == "session/request_permission" && r.Agent == "alpha":
			alpha++
			if r.Decision != "ask" {
				t.Errorf("alpha's request audited %s", r.summary())
			}
		}
	}
	if compare != 1 || beta != 1 || alpha != 1 {
		t.Errorf("audit: %d comparison, %d beta and %d alpha requests; want one each", compare, beta, alpha)
	}
}

// TestCompareStopAndCancel: the turn ends when both agents end, with the
// most severe stop reason; session/cancel reaches every agent of the
// comparison, and one that ignores it is ended "cancelled" by the router
// after its cancel_timeout, what it says later not shown.
func TestCompareStopAndCancel(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	logOf := func(name string) string { return filepath.Join(logs, name+".log") }
	e, sid := compareRouter(t, "", fakeOpts{LogFile: logOf("alpha")}, fakeOpts{LogFile: logOf("beta")}, "cancel_timeout: 1s")

	e.MustPrompt(t, sid, "/compare alpha beta on beta stop refusal\non alpha stop max_tokens\non alpha say alpha", "refusal")
	e.MustPrompt(t, sid, "/compare alpha beta on beta stop cancelled\non alpha stop max_turn_requests\non beta say beta", "max_turn_requests")
	e.MustPrompt(t, sid, "/compare alpha beta on alpha stop cancelled\non beta say beta", "cancelled")

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, wait, err := e.Go("session/prompt", promptReq(sid, "/compare alpha beta on beta nocancel\nsay started\nsleep 3s\non beta say beta too late"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alpha", "beta"} {
		waitAgentLog(t, logOf(name), waitTimeout, "its prompt", func(l string) bool { return l == "session/prompt" })
	}
	e.WaitText(t, sid, "started")      // alpha streams; beta's line waits for the floor
	time.Sleep(300 * time.Millisecond) // beta has run its nocancel
	began := time.Now()
	if err := e.Notify("session/cancel", map[string]any{"sessionId": sid}); err != nil {
		t.Fatal(err)
	}
	m, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "cancelled")
	if d := time.Since(began); d > 2500*time.Millisecond {
		t.Errorf("the cancelled comparison ended after %v, want about beta's cancel_timeout (1 s)", d)
	}
	for _, name := range []string{"alpha", "beta"} {
		if countLines(logOf(name), "session/cancel") == 0 {
			t.Errorf("%s got no session/cancel: %q", name, agentLog(logOf(name)))
		}
	}
	time.Sleep(2500 * time.Millisecond) // beta says its last line, to no one
	for _, text := range e.Texts(sid) {
		if strings.Contains(text, "too late") {
			t.Errorf("beta's line after the router ended its cancelled turn reached the editor")
		}
	}
}

// TestComparePick: both agents of a comparison get the brief of the
// session's earlier turns; /pick beta makes beta's comparison session the
// session's and beta the active agent: the next prompt goes there, with
// no brief sent again and no new session opened; without /pick the
// session stays on its agent. Bad /compare and /pick are answered with a
// message, nothing sent to any agent.
func TestComparePick(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	logOf := func(name string) string { return filepath.Join(logs, name+".log") }
	e, sid := compareRouter(t, "compare: {max_agents: 2}\n", fakeOpts{LogFile: logOf("alpha")}, fakeOpts{LogFile: logOf("beta")})

	e.MustPrompt(t, sid, "say the first turn", "end_turn")
	for _, c := range []struct{ prompt, want string }{
		{"/compare alpha gama beta say x", `No agent "gama"`},
		{"/compare alpha alpha say x", "alpha is named twice"},
		{"/compare alpha say x", "needs at least two agents"},
		{"/compare alpha beta alpha say x", "alpha is named twice"},
		{"/compare say x", "Set compare.default"},
		{"/pick beta", "Nothing to pick"},
	} {
		e.MustPrompt(t, sid, c.prompt, "end_turn")
		if got := lastText(e, sid); !strings.Contains(got, c.want) {
			t.Errorf("%q answered %q, want %q", c.prompt, got, c.want)
		}
	}
	if n := countLines(logOf("beta"), "session/new"); n != 0 {
		t.Errorf("refused commands opened %d sessions on beta", n)
	}
	if n := countLines(logOf("alpha"), "session/prompt"); n != 1 {
		t.Errorf("alpha got %d prompts, want only the first turn's", n)
	}

	from := len(e.Rec.All())
	e.MustPrompt(t, sid, "/compare alpha beta prompt-text", "end_turn")
	got := agentSections(t, sectionsOf(t, turnMsgs(e, from), sid))
	if len(got) != 2 {
		t.Fatalf("sections %q", got)
	}
	for _, sec := range got {
		if !strings.Contains(sec, "the first turn") || !strings.Contains(sec, "[acp-router") {
			t.Errorf("a comparison's agent was not briefed on the session's first turn: %q", sec)
		}
	}
	if got := lastText(e, sid); !strings.Contains(got, "/pick alpha or /pick beta") {
		t.Errorf("the comparison's summary %q does not say how to pick", got)
	}

	// Each agent answered on a new session of its own: alpha's is not
	// the session's own session on alpha.
	if n := countLines(logOf("alpha"), "session/new"); n != 2 {
		t.Errorf("alpha opened %d sessions, want the session's and the comparison's", n)
	}
	// Without /pick, the next prompt goes to alpha, on its own session.
	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "alpha" {
		t.Errorf("after a comparison without /pick the prompt went to %q", got)
	}
	var ends []string
	for _, l := range agentLog(logOf("alpha")) {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "turn-end" {
			ends = append(ends, f[1])
		}
	}
	if len(ends) != 3 || ends[0] != ends[2] || ends[1] == ends[0] {
		t.Errorf("alpha's turns ran on sessions %q: want the first and the last on the session's own, the comparison's apart", ends)
	}
	e.MustPrompt(t, sid, "/pick beta", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "Nothing to pick") {
		t.Errorf("/pick after another prompt answered %q", got)
	}

	e.MustPrompt(t, sid, "/compare alpha beta on beta say beta remembers this", "end_turn")
	e.MustPrompt(t, sid, "/pick beta", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "Continuing with beta") {
		t.Errorf("/pick beta answered %q", got)
	}
	newBefore := countLines(logOf("beta"), "session/new")
	e.MustPrompt(t, sid, "prompt-text", "end_turn")
	if got := lastText(e, sid); got != "prompt-text" {
		t.Errorf("the prompt after /pick beta got %q: want it alone, no brief (beta saw the comparison)", got)
	}
	e.MustPrompt(t, sid, "whoami", "end_turn")
	if got := lastText(e, sid); got != "beta" {
		t.Errorf("after /pick beta the prompt went to %q", got)
	}
	if n := countLines(logOf("beta"), "session/new"); n != newBefore || n != 2 {
		t.Errorf("beta opened %d sessions (%d before the prompts after /pick): want the two comparisons' only", n, newBefore)
	}
	opts := updatesOf(e, sid, "config_option_update")
	if len(opts) == 0 || jsonString(option(t, jsonPath(opts[len(opts)-1].Params, "update", "configOptions"), "agent"), "currentValue") != "beta" {
		t.Errorf("the agent option does not say beta after /pick")
	}
}

// TestCompareLoadReplay: the store records the comparison as the editor
// was shown it; session/load after a router restart replays it the same,
// labelled sections and all, and an agent briefed from the store is told
// each agent's answer.
func TestCompareLoadReplay(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{UniqueSessionIDs: true}),
		fakeAgentYAML("beta", fakeOpts{UniqueSessionIDs: true})}, "default: alpha"))
	cwd := t.TempDir()
	e := historyRouter(t, cfg)
	sid := e.NewSession(t, cwd)
	from := len(e.Rec.All())
	e.MustPrompt(t, sid, "/compare alpha beta on alpha say alpha answers\non beta sleep 30ms\non beta say beta answers", "end_turn")
	live := chunkTexts(turnMsgs(e, from), sid)
	liveSections := agentSections(t, sectionsOf(t, turnMsgs(e, from), sid))
	if got := slices.Sorted(slices.Values(liveSections)); !slices.Equal(got, []string{"alpha: alpha answers", "beta: beta answers"}) {
		t.Fatalf("live sections %q", got)
	}
	stopRouter(t, e)

	e = historyRouter(t, cfg)
	replay := loadUpdates(t, e, sid, cwd)
	var prompt string
	for _, m := range replay {
		if m.Update() == "user_message_chunk" {
			prompt = jsonString(m.Params, "update", "content", "text")
		}
	}
	if !strings.HasPrefix(prompt, "/compare alpha beta") {
		t.Errorf("the replayed prompt is %q", prompt)
	}
	if got := chunkTexts(replay, sid); !slices.Equal(got, live) {
		t.Errorf("replayed\n%q\nwant as shown live\n%q", got, live)
	}
	if got := agentSections(t, sectionsOf(t, replay, sid)); !slices.Equal(got, liveSections) {
		t.Errorf("replayed sections %q, want %q", got, liveSections)
	}
	// The brief read back from the store tells the comparison, each
	// answer under its agent, the summary under none.
	e.MustPrompt(t, sid, "/beta prompt-text", "end_turn")
	brief := lastText(e, sid)
	if !regexp.MustCompile(`(?s)--- alpha ---.*alpha: alpha answers`).MatchString(brief) ||
		!regexp.MustCompile(`(?s)--- beta ---.*beta: beta answers`).MatchString(brief) || strings.Contains(brief, "Compared") {
		t.Errorf("beta's brief after the router restarted: %q", brief)
	}
	stopRouter(t, e)
}

func chunkTexts(msgs []*Msg, sid string) []string {
	var out []string
	for _, m := range msgs {
		if text, ok := m.ChunkText(sid); ok {
			out = append(out, fmt.Sprintf("%s %q", jsonString(m.Params, "update", "messageId"), text))
		}
	}
	return out
}

// TestCompareAgentCrash: an agent that crashes during a comparison is
// named as failed in its section; the other's answer is shown and the turn
// ends normally.
func TestCompareAgentCrash(t *testing.T) {
	t.Parallel()
	e, sid := compareRouter(t, "", fakeOpts{}, fakeOpts{})
	from := len(e.Rec.All())
	e.MustPrompt(t, sid, "/compare alpha beta on beta crash\non alpha sleep 200ms\non alpha say alpha still here", "end_turn")
	got := strings.Join(agentSections(t, sectionsOf(t, turnMsgs(e, from), sid)), "\n")
	if !strings.Contains(got, "alpha: alpha still here") || !strings.Contains(got, "beta: ") || !strings.Contains(got, "beta failed") {
		t.Errorf("sections:\n%s\nwant alpha's answer and beta named as failed", got)
	}
	if got := lastText(e, sid); !strings.Contains(got, "Failed: beta") || !strings.Contains(got, "/pick alpha") {
		t.Errorf("summary %q", got)
	}
}

// TestComparePickEnforced: in a session a routing rule holds to its agent
// (enforce: true), a comparison runs, but /pick cannot move the session to
// another agent; picking its own agent adopts that comparison session.
func TestComparePickEnforced(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg := routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{})},
		"default: beta", "rules:", fmt.Sprintf("  - {when: {cwd: [%s]}, agent: alpha, enforce: true}", yamlQuote(cwd+"/**")))
	e := StartRouter(t, writeConfig(t, cfg), nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "/compare alpha beta on alpha say alpha here\non beta say beta here", "end_turn")
	e.MustPrompt(t, sid, "/pick beta", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, `must stay on "alpha"`) {
		t.Errorf("/pick beta in an enforced session answered %q", got)
	}
	e.MustPrompt(t, sid, "/pick alpha", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "Continuing with alpha") {
		t.Errorf("/pick alpha answered %q", got)
	}
	e.MustPrompt(t, sid, "prompt-text", "end_turn")
	if got := lastText(e, sid); got != "prompt-text" {
		t.Errorf("after /pick alpha the prompt got %q, want it alone: alpha's comparison session saw the comparison", got)
	}
}

// TestCompareAskAfterItsSection: an agent that asks a permission while
// another streams has its waiting lines (its tool call among them) shown
// first, so that the question follows its own context; the other agent's
// later lines come in a section of their own.
func TestCompareAskAfterItsSection(t *testing.T) {
	t.Parallel()
	e, sid := compareRouter(t, "", fakeOpts{}, fakeOpts{})
	e.Handle("session/request_permission", AllowFirst)
	from := len(e.Rec.All())
	e.MustPrompt(t, sid, strings.Join([]string{"/compare alpha beta on alpha say alpha 1",
		"on beta sleep 40ms", "on beta say beta 1", "on beta permission",
		"on alpha sleep 300ms", "on alpha say alpha 2", "on beta say beta 2"}, "\n"), "end_turn")
	msgs := turnMsgs(e, from)
	ask := slices.IndexFunc(msgs, func(m *Msg) bool { return m.Method == "session/request_permission" })
	tool := slices.IndexFunc(msgs, func(m *Msg) bool { return m.Update() == "tool_call" })
	beta1 := slices.IndexFunc(msgs, func(m *Msg) bool { text, _ := m.ChunkText(sid); return text == "beta 1" })
	if ask < 0 || tool < 0 || beta1 < 0 || !(beta1 < tool && tool < ask) {
		t.Errorf("beta's line at %d, its tool call at %d, its question at %d: want them in that order", beta1, tool, ask)
	}
	agentSections(t, sectionsOf(t, msgs, sid)) // never mixed
}

// TestCompareRealPeers: a comparison of two agents nobody here wrote
// (Gemini CLI against the fake model, the Go SDK's example agent with its
// permission question) shows each answer in its own headed section; /pick
// gemini continues on Gemini's comparison session: the model's next
// conversation holds the compared prompt and its own answer, and no brief.
func TestCompareRealPeers(t *testing.T) {
	t.Parallel()
	bin := needGemini(t)
	sdkAgent, _ := goSDKPeers(t)
	fake := startFakeGemini(t)
	cfg := writeConfig(t, routerYAML(t, []string{
		geminiAgentYAML(bin, geminiEnv(geminiHome(t), fake)),
		"  - name: goexample\n    title: Go SDK example\n    command: " + yamlQuote(sdkAgent) + "\n",
	}, "default: goexample"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())

	first := fake.Script(geminiScript{Text: []string{"Gemini compares."}})
	from := len(e.Rec.All())
	m, err := e.Prompt(waitTimeout, sid, "/compare gemini goexample Hello "+first.token)
	if err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	got := strings.Join(agentSections(t, sectionsOf(t, turnMsgs(e, from), sid)), "\n")
	if !strings.Contains(got, "Gemini CLI (gemini): Gemini compares.") || !strings.Contains(got, "Go SDK example (goexample): ") ||
		!strings.Contains(got, sdkAgentDisclaimer) {
		t.Errorf("sections:\n%s", got)
	}

	e.MustPrompt(t, sid, "/pick gemini", "end_turn")
	if got := lastText(e, sid); !strings.Contains(got, "Continuing with Gemini CLI") {
		t.Fatalf("/pick gemini: %q", got)
	}
	second := fake.Script(geminiScript{Text: []string{"Still Gemini."}})
	if m, err = e.Prompt(waitTimeout, sid, "And now? "+second.token); err != nil {
		t.Fatal(err)
	}
	requireGeminiStop(t, m, "end_turn")
	users, convs := second.UserTexts(), second.Conversations()
	if len(users) != 1 || strings.Contains(users[0], "[acp-router handoff]") || len(convs) != 1 ||
		!strings.Contains(convs[0], "Hello "+first.token) || !strings.Contains(convs[0], "Gemini compares.") {
		t.Errorf("after /pick gemini the model got %q in the conversation %q; want the prompt alone, its comparison turn before it", users, convs)
	}
}

// TestCompareArchive: archiving a session while a comparison runs waits for
// the comparison to end (its slowest agent's cancel_timeout), so the prompt
// is answered "cancelled" before the archive is.
func TestCompareArchive(t *testing.T) {
	t.Parallel()
	e, sid := compareRouter(t, "", fakeOpts{}, fakeOpts{}, "cancel_timeout: 2s")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, wait, err := e.Go("session/prompt", promptReq(sid, "/compare alpha beta on beta nocancel\nsay started\nsleep 5s"))
	if err != nil {
		t.Fatal(err)
	}
	e.WaitText(t, sid, "started")
	time.Sleep(300 * time.Millisecond) // beta has run its nocancel
	archived, err := e.Request(ctx, "session/archive", map[string]any{"sessionId": sid})
	if err != nil || archived.Error != nil {
		t.Fatalf("archive of a session running a comparison: %v %v", archived, err)
	}
	prompt, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, prompt, "cancelled")
	if prompt.Seq > archived.Seq {
		t.Errorf("the archive was answered before the comparison it cancelled")
	}
}

// TestCompareBudget: budgets hold for a comparison's agents as for any
// prompt: what an agent spends in a comparison is booked (its usage_update
// cost), and once its budget is reached it is not asked in the next
// comparison (its section says why, the others answer) nor in a prompt
// of its own; a comparison whose every agent is refused ends with
// stopReason refusal. The audit has the budget's refusals.
func TestCompareBudget(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	cfg, auditFile := budgetConfig(t, "", "- {name: beta-usd, cost: \"1 USD\", per: day, agents: [beta]}\n- {name: alpha-usd, cost: \"1 USD\", per: day, agents: [alpha]}\n")
	data, _ := os.ReadFile(cfg)
	// The agents log what they get.
	y := strings.Replace(string(data), fakeAgentYAML("beta", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{LogFile: filepath.Join(logs, "beta.log")}), 1)
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{})
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "/compare alpha beta on beta "+costUpdate(1.5)+"\nsay spent", "end_turn")
	from := len(e.Rec.All())
	e.MustPrompt(t, sid, "/compare alpha beta on alpha "+costUpdate(1.5)+"\nsay again", "end_turn")
	got := strings.Join(agentSections(t, sectionsOf(t, turnMsgs(e, from), sid)), "\n")
	if !strings.Contains(got, "alpha: again") || !strings.Contains(got, `beta was not asked: `) || !strings.Contains(got, `budget "beta-usd"`) {
		t.Errorf("sections:\n%s\nwant alpha's answer and beta refused by beta-usd", got)
	}
	if n := countLines(filepath.Join(logs, "beta.log"), "session/prompt"); n != 1 {
		t.Errorf("beta got %d prompts, want the first comparison's only", n)
	}
	if got := promptStop(t, e, sid, "/beta say alone"); got != "refusal" {
		t.Errorf("a prompt of beta's own after its comparison spend: %q, want refusal", got)
	}
	if got := promptStop(t, e, sid, "/compare beta alpha say x"); got != "refusal" {
		t.Errorf("a comparison of two agents past their budgets: %q, want refusal", got)
	}
	refusals := map[string]int{}
	for _, r := range budgetAudit(t, auditFile) {
		if r.Decision == "refuse" {
			refusals[r.rule()]++
		}
	}
	if refusals["beta-usd"] != 3 || refusals["alpha-usd"] != 1 {
		t.Errorf("budget refusals audited %v, want beta-usd 3 (two comparisons, one prompt), alpha-usd 1", refusals)
	}
}
