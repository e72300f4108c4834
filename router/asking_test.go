package router

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
)

// TestAskedToolCallHeldUnderEditorID: while the editor has an agent's
// permission request, the updates of its tool call are held (asking.go)
// under the id the editor knows that tool call by, the one its updates are
// relayed under, however the request spells it. Here the agent's tool call
// "t1" is "t1~bench" to the editor (another agent of the session showed it
// a "t1"), and the request names it under "toolcall", which encoding/json
// reads as toolCall: the router reads "t1" there and relays the tool
// call's updates as "t1~bench", but it cannot write that id in the member
// the agent misspelt, so re-reading the params it sends (as askingToolOf
// once did) found "t1", another agent's tool call to the editor, and the
// agent's update of its tool call went under the user's buttons.
func TestAskedToolCallHeldUnderEditorID(t *testing.T) {
	f := newRelayFixture(t, false)
	defer f.stop()
	r, s := f.r, f.s
	s.mu.Lock()
	s.toolIDs.Out("other", "t1")
	s.mu.Unlock()

	params := json.RawMessage(fmt.Sprintf(`{"sessionId":%q,"toolcall":{"toolCallId":"t1","title":"Edit .bashrc","kind":"edit"},`+
		`"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]}`, f.sid))
	req := &jsonrpc2.Request{Method: acp.MethodRequestPermission, ID: jsonrpc2.ID{Num: 9}, Params: &params}
	r.decidePermission(context.Background(), readPermission(f.inst, req, func(json.RawMessage, error) {}))
	if !r.interceptAgent(f.inst, toolUpdate(t, f.sid, "tool_call_update", "t1", "in_progress")) {
		t.Fatal("the tool call's update was not consumed")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if id, _ := s.toolIDs.Lookup(benchAgent, "t1"); id != "t1~bench" {
		t.Fatalf("the agent's t1 is %q to the editor, want t1~bench (the test's premise)", id)
	}
	if h := s.asking["t1~bench"]; h == nil || len(h.lines) != 1 {
		var ids []string
		for id := range s.asking {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		t.Errorf("the update of the tool call the editor asks about (t1~bench) is not held: the router holds updates for %q", ids)
	}
}
