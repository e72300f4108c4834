package test

// Claude delegating a write to a subagent session through the router
// (issue 13: subagent sessions, stable in ACP since 2026-11-20).
//
// What Claude 0.101.0 sends when the editor advertises
// clientCapabilities.subagents (measured, testdata/real-agents/
// agentclientprotocol-claude-agent-acp-0.101.0-mock-subagent.jsonl): the
// model's Agent tool call starts a background child session; on the parent,
// a subagent_update names the child's id (17 hex digits, "a…") with its
// state (running → requires_action → running → idle), and session_message
// updates carry the delegated prompt (senderSessionId = parent,
// recipientSessionId = child) and the launch reply; the child's own
// updates and requests, session/request_permission included, carry the
// child's id as sessionId. Without the capability it runs the same child
// inside the parent session (its updates and requests under the parent's
// id, with _meta.claudeCode.parentToolUseId), which the router handles.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// capsSubagents is capsAll plus the subagents client capability.
var capsSubagents = map[string]any{
	"fs": map[string]any{"readTextFile": true, "writeTextFile": true}, "terminal": true,
	"subagents": map[string]any{},
}

// TestClaudeSubagents: a write delegated to Claude's subagent is asked in
// the editor under the child's id and written when the editor allows it;
// refused and audited, naming the child and its parent, when the policy
// denies it.
func TestClaudeSubagents(t *testing.T) {
	t.Parallel()
	agent, fake := claudeSetup(t)
	cfg, audit := policyYAML(t, []string{agent.yaml()}, secretPolicy(), "default: claude")
	rig := startPeerRig(t, cfg, audit, capsSubagents)

	// delegate runs a turn whose model hands the write of path to a
	// subagent, waits for the child to finish, and returns the parent's
	// and the child's ids as the editor knows them.
	delegate := func(t *testing.T, dir, path string) (string, string, *anthropicScriptState) {
		t.Helper()
		child := fake.Script(anthropicScript{
			Write: &fileWrite{Path: path, Content: "from the subagent\n"},
			Text:  []string{"Child finished."},
		})
		parent := fake.Script(anthropicScript{
			Delegate: &anthropicDelegate{Description: "Write the file", Prompt: "Please write the file. " + child.token, SubagentType: "general-purpose"},
			Text:     []string{"Delegated."},
		})
		sid, _ := rig.newSession(t, dir)
		m := rig.prompt(t, sid, "Please delegate the write "+parent.token)
		requireGeminiStop(t, m, "end_turn")
		// The child runs in the background: wait until it is idle.
		var childID string
		rig.e.Rec.WaitFor(t, peerTimeout, "the child's subagent_update idle", func(m *Msg) bool {
			if m.SessionID() != sid || m.Update() != "subagent_update" {
				return false
			}
			for _, u := range subagentUpdates(rig.e, sid) {
				if childID == "" {
					childID = u[0]
				}
				if u[0] == childID && u[1] == "idle" {
					return true
				}
			}
			return false
		})
		t.Logf("subagent updates on the parent: %q", subagentUpdates(rig.e, sid))
		if childID == "" || childID == sid {
			t.Fatalf("subagent_update names child %q (parent %q)", childID, sid)
		}
		if n := child.ToolCalls(); n != 1 {
			t.Fatalf("the child's model made %d tool calls, want its one Write", n)
		}
		return sid, childID, child
	}

	t.Run("asked under the child's id", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "notes.txt")
		sid, childID, child := delegate(t, dir, path)

		// The editor was asked, under the child's id, and allowed it.
		var asked []json.RawMessage
		rig.asks.mu.Lock()
		for _, p := range rig.asks.params {
			if strings.Contains(string(p), path) {
				asked = append(asked, p)
			}
		}
		rig.asks.mu.Unlock()
		if len(asked) != 1 || jsonString(asked[0], "sessionId") != childID {
			t.Errorf("permission requests for %s that reached the editor: %s; want one under the child's id %s", path, asked, childID)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "from the subagent\n" {
			t.Errorf("file after the child's turn: %q (%v), want the child's write", b, err)
		}
		if r := child.Results(); len(r) != 1 || r[0].IsError {
			t.Errorf("the child's model got %+v, want a successful Write", r)
		}
		// The child's updates reached the editor under its id.
		if len(updatesOf(rig.e, childID, "tool_call")) == 0 {
			t.Errorf("no tool_call of the child reached the editor under %s", childID)
		}
		requireChildAudit(t, audit, sid, childID, path, "ask")
	})

	t.Run("denied by the policy", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "secret.txt")
		sid, childID, child := delegate(t, dir, path)

		requireNotWritten(t, path)
		rig.asks.mu.Lock()
		for _, p := range rig.asks.params {
			if strings.Contains(string(p), path) {
				t.Errorf("the editor was asked about the denied write: %s", p)
			}
		}
		rig.asks.mu.Unlock()
		if r := child.Results(); len(r) != 1 || !r[0].IsError {
			t.Errorf("the child's model got %+v, want a failed Write", r)
		}
		// The editor sees the child's tool call fail with the rule.
		failed := rig.e.Rec.Filter(func(m *Msg) bool {
			return m.SessionID() == childID && m.Update() == "tool_call_update" &&
				strings.Contains(string(m.Params), `"status":"failed"`) && strings.Contains(string(m.Params), "no-secret-writes")
		})
		if len(failed) == 0 {
			t.Errorf("no failed tool_call_update naming no-secret-writes reached the editor under the child's id %s", childID)
		}
		requireChildAudit(t, audit, sid, childID, path, "deny")
	})
}

// requireChildAudit checks that one audit record decides the child's
// permission request for path, with decision, and names the child and its
// parent (whatever the members are called: the raw line holds both ids).
func requireChildAudit(t *testing.T, audit, parent, child, path, decision string) {
	t.Helper()
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r auditRecord
		if json.Unmarshal([]byte(line), &r) != nil || r.Method != "session/request_permission" || !strings.Contains(string(r.Evidence), path) {
			continue
		}
		found = append(found, line)
		if r.Decision != decision || !strings.Contains(line, `"`+child+`"`) || !strings.Contains(line, `"`+parent+`"`) {
			t.Errorf("audit record %s: want decision %s naming child %s and parent %s", line, decision, child, parent)
		}
	}
	if len(found) != 1 {
		t.Errorf("%d audit records for the child's request about %s, want 1:\n%s", len(found), path, b)
	}
}
