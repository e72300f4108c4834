package router

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/acp-router/acp-router/merge"
)

// briefReads, which lets turnsFrom skip a stored line by its kind, says
// "needed" of every update that changes a turn's record: each kind of the
// ACP schema (and one it does not know) is recorded into a turn with room in
// its reply and into one whose reply is full; where briefReads says "not
// needed", the record must come out unchanged.
func TestBriefReadsCoversRecord(t *testing.T) {
	title := "Edit main.go"
	kinds := []string{
		"user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update",
		"plan", "plan_update", "plan_removed", "available_commands_update", "current_mode_update",
		"config_option_update", "session_info_update", "usage_update", "compaction_update",
		"compaction_summary_chunk", "subagent_update", "session_message", "notice", "some_future_kind",
	}
	for _, full := range []bool{false, true} {
		for _, kind := range kinds {
			cur := &turn{rec: &merge.TurnRecord{Agent: "a", Tools: []merge.ToolRecord{{ID: "t1", Status: "pending"}}}, reply: merge.Capped{Max: 8}}
			if full {
				cur.reply.WriteString("0123456789")
			}
			before := *cur.rec
			before.Tools = append([]merge.ToolRecord(nil), cur.rec.Tools...)
			replyBefore := cur.reply.String()
			cur.recordLocked(&updateFields{Kind: kind, ToolCallID: "t1", Title: &title, Status: "completed",
				Content: json.RawMessage(`{"type":"text","text":"hello"}`), Summary: json.RawMessage(`[{"type":"text","text":"sum"}]`)})
			changed := !reflect.DeepEqual(before, *cur.rec) || cur.reply.String() != replyBefore
			probe := &turn{rec: &merge.TurnRecord{}, reply: merge.Capped{Max: 8}}
			if full {
				probe.reply.WriteString("0123456789")
			}
			if changed && !briefReads(kind, probe) {
				t.Errorf("%s (reply full: %v) changes a turn's record, but briefReads skips it", kind, full)
			}
		}
	}
	if briefReads("agent_message_chunk", nil) || briefReads("tool_call", nil) || !briefReads("user_message_chunk", nil) {
		t.Error("outside a turn, only a prompt is read")
	}
}
