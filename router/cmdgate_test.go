package router

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/guard"
)

// TestCommandPolicy (issue 32, part 1 point 5): the router's own commands
// are decided by the policy before they are carried out, for each way of
// asking for them: a switch by /agent NAME, by a commands: entry with
// switch, by the agent config option and by a legacy AGENT:MODE mode; a
// one-turn /NAME TEXT; /compare; /pick (and a /pick of another agent as a
// switch). A deny: nothing is carried out (no agent is sent anything, the
// agent stays), the editor is shown the rule's message and the turn ends
// end_turn (a config option or mode is answered with the deny's error);
// the audit log has the rule's record. An ask: the editor is asked, and
// its answer decides. A command no rule names runs whatever the default,
// unaudited.
func TestCommandPolicy(t *testing.T) {
	t.Parallel()
	const (
		denySwitch  = `    - {id: no-beta, decision: deny, when: {method: [acp-router/agent], agent: [beta]}, message: Beta is not for this repo.}` + "\n"
		askSwitch   = `    - {id: ask-beta, decision: ask, when: {method: [acp-router/agent], agent: [beta]}}` + "\n"
		denyTurn    = `    - {id: no-beta-turn, decision: deny, when: {method: [acp-router/turn], agent: [beta]}, message: Ask alpha.}` + "\n"
		askTurn     = `    - {id: ask-turn, decision: ask, when: {method: [acp-router/turn]}}` + "\n"
		denyCompare = `    - {id: no-compare, decision: deny, when: {method: [acp-router/compare]}, message: Comparisons cost double; ask your lead.}` + "\n"
		askCompare  = `    - {id: ask-compare, decision: ask, when: {method: [acp-router/compare]}}` + "\n"
		denyPick    = `    - {id: no-pick, decision: deny, when: {method: [acp-router/pick]}, message: Pick by hand.}` + "\n"
		askPick     = `    - {id: ask-pick, decision: ask, when: {method: [acp-router/pick]}}` + "\n"
	)
	type step struct {
		prompt string // a prompt's text; its turn must end end_turn
		method string // else a request: session/set_config_option or session/set_mode
		value  string
		errHas string // the request's error must contain it ("": no error)
	}
	for _, c := range []struct {
		name   string
		rules  string
		answer string // the editor's answer to an ask: allow_once, reject_once ("": none expected)
		steps  []step
		says   []string // texts the editor must be shown
		never  []string // texts it must not be shown
		active string   // the active agent at the end
		asked  int      // the permission requests the editor got
		audit  []string // "METHOD DECISION RULE[ CHOICE]" records the audit log must have, in order
	}{
		{name: "switch by /agent denied", rules: denySwitch, steps: []step{{prompt: "/agent beta"}},
			says: []string{"Cannot switch: denied by no-beta: Beta is not for this repo."}, active: "alpha",
			audit: []string{"acp-router/agent deny no-beta"}},
		{name: "switch by a commands: entry denied", rules: denySwitch, steps: []step{{prompt: "/tobeta"}},
			says: []string{"Cannot switch: denied by no-beta"}, active: "alpha", audit: []string{"acp-router/agent deny no-beta"}},
		{name: "switch by /agent asked, rejected", rules: askSwitch, answer: rejectOnce, steps: []step{{prompt: "/agent beta"}},
			says: []string{"Cannot switch: you did not allow it (switch this session to beta)"}, active: "alpha", asked: 1,
			audit: []string{"acp-router/agent ask ask-beta reject_once"}},
		{name: "switch by /agent asked, allowed", rules: askSwitch, answer: allowOnce, steps: []step{{prompt: "/agent beta"}},
			says: []string{"Switched this session to beta."}, active: "beta", asked: 1, audit: []string{"acp-router/agent ask ask-beta allow_once"}},
		{name: "switch by the agent option denied", rules: denySwitch, steps: []step{{method: acp.MethodSetConfigOption, value: "beta", errHas: "denied by no-beta: Beta is not for this repo."}},
			active: "alpha", audit: []string{"acp-router/agent deny no-beta"}},
		{name: "switch by the agent option asked, allowed", rules: askSwitch, answer: allowOnce, steps: []step{{method: acp.MethodSetConfigOption, value: "beta"}},
			active: "beta", asked: 1, audit: []string{"acp-router/agent ask ask-beta allow_once"}},
		{name: "switch by the agent option asked, rejected", rules: askSwitch, answer: rejectOnce, steps: []step{{method: acp.MethodSetConfigOption, value: "beta", errHas: "you did not allow it"}},
			active: "alpha", asked: 1, audit: []string{"acp-router/agent ask ask-beta reject_once"}},
		{name: "switch by a legacy mode denied", rules: denySwitch, steps: []step{{method: acp.MethodSetMode, value: "beta:default", errHas: "denied by no-beta"}},
			active: "alpha", audit: []string{"acp-router/agent deny no-beta"}},
		// The fake agent answers set_mode with an error: the switch came first.
		{name: "switch by a legacy mode asked, allowed", rules: askSwitch, answer: allowOnce, steps: []step{{method: acp.MethodSetMode, value: "beta:default", errHas: "method not found"}},
			active: "beta", asked: 1, audit: []string{"acp-router/agent ask ask-beta allow_once"}},
		{name: "one turn denied", rules: denyTurn, steps: []step{{prompt: "/beta say from-beta"}},
			says: []string{"Nothing was sent to beta: denied by no-beta-turn: Ask alpha."}, never: []string{"from-beta"}, active: "alpha",
			audit: []string{"acp-router/turn deny no-beta-turn"}},
		{name: "one turn of another agent allowed", rules: denyTurn, steps: []step{{prompt: "/alpha say from-alpha"}}, says: []string{"from-alpha"}, active: "alpha"},
		{name: "one turn asked, allowed", rules: askTurn, answer: allowOnce, steps: []step{{prompt: "/beta say from-beta"}},
			says: []string{"from-beta"}, active: "alpha", asked: 1, audit: []string{"acp-router/turn ask ask-turn allow_once"}},
		{name: "one turn asked, rejected", rules: askTurn, answer: rejectOnce, steps: []step{{prompt: "/beta say from-beta"}},
			says: []string{"Nothing was sent to beta: you did not allow it"}, never: []string{"from-beta"}, active: "alpha", asked: 1, audit: []string{"acp-router/turn ask ask-turn reject_once"}},
		{name: "compare denied", rules: denyCompare, steps: []step{{prompt: "/compare alpha beta say from-both"}},
			says: []string{"Nothing was compared: denied by no-compare: Comparisons cost double; ask your lead."}, never: []string{"from-both"}, active: "alpha",
			audit: []string{"acp-router/compare deny no-compare"}},
		{name: "compare asked, rejected", rules: askCompare, answer: rejectOnce, steps: []step{{prompt: "/compare alpha beta say from-both"}},
			says: []string{"Nothing was compared: you did not allow it (compare alpha, beta on this prompt)"}, never: []string{"from-both"}, active: "alpha", asked: 1,
			audit: []string{"acp-router/compare ask ask-compare reject_once"}},
		{name: "compare asked, allowed", rules: askCompare, answer: allowOnce, steps: []step{{prompt: "/compare alpha beta say from-both"}},
			says: []string{"from-both", "Compared alpha, beta."}, active: "alpha", asked: 1,
			audit: []string{"acp-router/compare ask ask-compare allow_once", "acp-router/compare allow "}},
		{name: "compare naming a denied agent", rules: strings.ReplaceAll(denyTurn, "acp-router/turn", "acp-router/compare"), steps: []step{{prompt: "/compare alpha beta say from-both"}},
			says: []string{"Nothing was compared: denied by no-beta-turn"}, never: []string{"from-both"}, active: "alpha",
			audit: []string{"acp-router/compare deny no-beta-turn"}},
		{name: "pick denied", rules: denyPick, steps: []step{{prompt: "/compare alpha beta say from-both"}, {prompt: "/pick beta"}, {prompt: "/pick alpha"}},
			says: []string{"Cannot pick: denied by no-pick: Pick by hand."}, never: []string{"Continuing with"}, active: "alpha",
			audit: []string{"acp-router/compare allow ", "acp-router/pick deny no-pick", "acp-router/pick deny no-pick"}},
		{name: "pick asked, allowed", rules: askPick, answer: allowOnce, steps: []step{{prompt: "/compare alpha beta say from-both"}, {prompt: "/pick beta"}},
			says: []string{"Continuing with beta"}, active: "beta", asked: 1,
			audit: []string{"acp-router/compare allow ", "acp-router/pick ask ask-pick allow_once", "acp-router/pick allow "}},
		{name: "pick asked, rejected keeps the comparison", rules: askPick, answer: rejectOnce, steps: []step{{prompt: "/compare alpha beta say from-both"}, {prompt: "/pick beta"}},
			says: []string{"Cannot pick: you did not allow it"}, never: []string{"Continuing with"}, active: "alpha", asked: 1,
			audit: []string{"acp-router/compare allow ", "acp-router/pick ask ask-pick reject_once"}},
		{name: "pick of another agent is a switch", rules: denySwitch, steps: []step{{prompt: "/compare alpha beta say from-both"}, {prompt: "/pick beta"}},
			says: []string{"Cannot pick: denied by no-beta"}, never: []string{"Continuing with"}, active: "alpha",
			audit: []string{"acp-router/compare allow ", "acp-router/agent deny no-beta"}},
		{name: "a command no rule names runs whatever the default", rules: denyTurn, steps: []step{{prompt: "/agent beta"}, {prompt: "/compare alpha beta say from-both"}},
			says: []string{"Switched this session to beta.", "from-both"}, active: "beta", audit: []string{"acp-router/compare allow "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, auditFile := newPolicyRouterOf(t, []string{"alpha", "beta"},
				"commands:\n  - {name: tobeta, description: Switch to beta, agent: beta, switch: true}\n",
				"  default: deny\n  rules:\n"+c.rules, guard.Options{}, Options{OpenDelay: 1})
			var (
				amu   sync.Mutex
				asked []string
			)
			e.mu.Lock()
			e.perm = func(p json.RawMessage) any {
				var q struct {
					ToolCall struct{ Title string } `json:"toolCall"`
				}
				json.Unmarshal(p, &q)
				amu.Lock()
				asked = append(asked, q.ToolCall.Title)
				amu.Unlock()
				if c.answer == "" {
					t.Errorf("asked %q", q.ToolCall.Title)
					return map[string]any{"outcome": map[string]string{"outcome": "cancelled"}}
				}
				return map[string]any{"outcome": map[string]string{"outcome": "selected", "optionId": c.answer}}
			}
			e.mu.Unlock()
			var ns struct {
				SessionID string `json:"sessionId"`
			}
			json.Unmarshal(e.mustCall(acp.MethodSessionNew, map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}), &ns)
			sid := ns.SessionID
			for _, st := range c.steps {
				if st.prompt != "" {
					var res struct{ StopReason string }
					json.Unmarshal(e.mustCall(acp.MethodSessionPrompt, map[string]any{"sessionId": sid,
						"prompt": []any{map[string]string{"type": "text", "text": st.prompt}}}), &res)
					if res.StopReason != "end_turn" {
						t.Errorf("%s: stopReason %q, want end_turn", st.prompt, res.StopReason)
					}
					continue
				}
				params := map[string]any{"sessionId": sid, "configId": "agent", "value": st.value}
				if st.method == acp.MethodSetMode {
					params = map[string]any{"sessionId": sid, "modeId": st.value}
				}
				_, ch := e.call(st.method, params)
				m := <-ch
				switch {
				case st.errHas == "" && m.Error != nil:
					t.Errorf("%s %s: %s", st.method, st.value, m.Error)
				case st.errHas != "" && !strings.Contains(string(m.Error), st.errHas):
					t.Errorf("%s %s: error %s, result %s; want an error with %q", st.method, st.value, m.Error, m.Result, st.errHas)
				}
			}
			shown := strings.Join(e.transcript(sid, ""), "\n")
			for _, s := range c.says {
				if !strings.Contains(shown, s) {
					t.Errorf("the editor was not shown %q; it was shown:\n%s", s, shown)
				}
			}
			for _, s := range c.never {
				if strings.Contains(shown, s) {
					t.Errorf("the editor was shown %q:\n%s", s, shown)
				}
			}
			amu.Lock()
			defer amu.Unlock()
			if len(asked) != c.asked {
				t.Errorf("the editor was asked %q, want %d question(s)", asked, c.asked)
			}
			e.r.mu.Lock()
			s := e.r.sessions[sid]
			e.r.mu.Unlock()
			if got := s.activeName(); got != c.active {
				t.Errorf("active agent %q, want %q", got, c.active)
			}
			var got []string
			var recs []map[string]any
			if _, err := os.Stat(auditFile); err == nil {
				recs = audittest.ReadLines(t, auditFile)
			}
			for _, rec := range recs {
				rule, _ := rec["rule"].(string)
				if m, _ := rec["method"].(string); strings.HasPrefix(m, "acp-router/") {
					r := m + " " + rec["decision"].(string) + " " + rule
					if choice, _ := rec["userChoice"].(string); choice != "" {
						r += " " + choice
					}
					got = append(got, r)
				}
			}
			if !slices.Equal(got, c.audit) {
				t.Errorf("audit records %q, want %q", got, c.audit)
			}
		})
	}
}
