package router

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
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

// turnsFrom's shortcut (a line skipped by its kind) reads the same turns
// as the full read of every line: a line the full read cannot read does
// not end the prompt it follows, and the line right after a prompt is
// always read in full. The one difference, by design (turnsFrom): a line
// that names its kind twice is skipped by the first name, so a brief may
// leave out what it says, never add to it.
func TestTurnsFromAsFullRead(t *testing.T) {
	prompt := func(text string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","_meta":{"acpRouter":{"agent":"a"}},"content":{"type":"text","text":"` + text + `"}}}}`)
	}
	update := func(u string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":` + u + `}}`)
	}
	reply := update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"done"}}`)
	for _, c := range []struct {
		name  string
		lines [][]byte
		want  []merge.TurnRecord
	}{
		// A name given twice: the brief reads the line by the first
		// (turnsFrom), so a kind it skips leaves the text out; one it
		// reads is read in full, by the last, as the relay does.
		{"kind twice, first skipped", [][]byte{prompt("hi"), reply,
			update(`{"sessionUpdate":"plan","content":{"type":"text","text":"said"},"sessionUpdate":"agent_message_chunk"}`)},
			[]merge.TurnRecord{{Agent: "a", Title: "a", User: "hi", Reply: "done"}}},
		{"kind twice, escaped, first skipped", [][]byte{prompt("hi"), reply,
			update(`{"sessionUpdate":"plan","content":{"type":"text","text":"said"},"sessionUpd\u0061te":"agent_message_chunk"}`)},
			[]merge.TurnRecord{{Agent: "a", Title: "a", User: "hi", Reply: "done"}}},
		{"kind twice, right after the prompt: read in full", [][]byte{prompt("hi"),
			update(`{"sessionUpdate":"plan","content":{"type":"text","text":"said"},"sessionUpdate":"agent_message_chunk"}`)},
			[]merge.TurnRecord{{Agent: "a", Title: "a", User: "hi", Reply: "said"}}},
		{"kind twice, first read", [][]byte{prompt("hi"),
			update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"said"},"sessionUpdate":"plan"}`)},
			[]merge.TurnRecord{{Agent: "a", Title: "a", User: "hi"}}},
		{"update twice, first read", [][]byte{prompt("hi"),
			[]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call"},"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"said"}}}}`)},
			[]merge.TurnRecord{{Agent: "a", Title: "a", User: "hi", Reply: "said"}}},
		{"unreadable line within a prompt", [][]byte{prompt("one"),
			update(`{"sessionUpdate":"agent_thought_chunk","toolCallId":5}`), prompt("two"), reply},
			[]merge.TurnRecord{{Agent: "a", Title: "a", User: "one\ntwo", Reply: "done"}}},
		{"skipped line ends a prompt", [][]byte{prompt("one"),
			update(`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"x"}}`), prompt("two"), reply},
			[]merge.TurnRecord{{Agent: "a", Title: "a", User: "one"}, {Seq: 1, Agent: "a", Title: "a", User: "two", Reply: "done"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Router{cfg: &config.Config{Handoff: config.Handoff{MaxBytes: 1 << 10}}, upstreams: upstreams{byName: map[string]*upstream.Agent{}}}
			turns, seen := r.turnsFrom(&Session{r: r}, c.lines)
			for i := range turns {
				turns[i].Tools = nil
			}
			if !reflect.DeepEqual(turns, c.want) {
				t.Errorf("turns\n%+v\nwant\n%+v", turns, c.want)
			}
			if want := map[string]int{"a": len(c.want)}; !reflect.DeepEqual(seen, want) {
				t.Errorf("seen %v, want %v", seen, want)
			}
		})
	}
}
