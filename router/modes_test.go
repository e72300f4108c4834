package router

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/guard"
)

// TestModeResetAbandonedIsCancelled (issue 27, point 4): an agent that
// does not answer the router's reset of a denied mode in time is sent
// $/cancel_request for it (the fake agent answers set_mode only then),
// and prompts are refused meanwhile; what the agent answers and reports
// afterwards is taken for what it says: a late success (it did set the
// mode), or a refusal followed by a current_mode_update to an allowed
// mode, lifts the refusal.
func TestModeResetAbandonedIsCancelled(t *testing.T) {
	for _, tc := range []struct{ how, lifted string }{
		{"apply", "prompts in this session are accepted again"},
		{"refuse-then-report", ""},
	} {
		t.Run(tc.how, func(t *testing.T) {
			e := newPolicyRouter(t, "  default: ask\n  deny_modes: [\"fake:acceptEdits\"]\n", guard.Options{},
				Options{OpenDelay: time.Millisecond, ModeResetTimeout: 50 * time.Millisecond})
			var res struct {
				SessionID string `json:"sessionId"`
			}
			json.Unmarshal(e.mustCall("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}), &res)
			sid := res.SessionID
			prompt := func(script string) *edMsg {
				t.Helper()
				_, ch := e.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []map[string]string{{"type": "text", "text": script}}})
				select {
				case m := <-ch:
					return m
				case <-time.After(20 * time.Second):
					t.Fatalf("prompt %q: no answer", script)
				}
				return nil
			}
			if m := prompt("on-cancel " + tc.how + "\nmode acceptEdits"); m.Error != nil {
				t.Fatalf("prompt: %s", m.Error)
			}
			said := func(text string) func(*edMsg) bool {
				return func(m *edMsg) bool {
					var p struct {
						SessionID string `json:"sessionId"`
						Update    struct {
							Kind    string `json:"sessionUpdate"`
							Content struct{ Text string }
						} `json:"update"`
					}
					json.Unmarshal(m.Params, &p)
					return m.Method == "session/update" && p.SessionID == sid && p.Update.Kind == "agent_message_chunk" && strings.Contains(p.Update.Content.Text, text)
				}
			}
			e.waitFor("the reset given up", 20*time.Second, said(`could not be set back (no answer within 50ms; the request was cancelled)`))
			if tc.lifted != "" {
				e.waitFor("the late answer taken", 20*time.Second, said(tc.lifted))
			} else {
				e.waitFor("the agent's report of its mode", 20*time.Second, func(m *edMsg) bool {
					return m.Method == "session/update" && strings.Contains(string(m.Params), `"currentModeId":"fake:default"`)
				})
			}
			if m := prompt("say accepted"); m.Error != nil {
				t.Errorf("a prompt after the agent set an allowed mode: %s", m.Error)
			}
		})
	}
}
