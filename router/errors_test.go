package router

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/store"
)

// TestMalformedParamsAnswered: an editor request whose params do not
// decode as its method needs is answered -32602 naming what is wrong,
// where the router used to carry it out with the members it could not
// read left empty (session/set_mode with mode "", session/list of every
// cwd, ...). A malformed $/cancel_request, which has no answer, is a
// logged drop.
func TestMalformedParamsAnswered(t *testing.T) {
	log, buf := testLogger(t)
	_, e := startRouter(t, Options{Logger: log})
	sid := e.newSession(t)
	for _, tc := range []struct {
		method string
		params map[string]any
	}{
		{acp.MethodSetMode, map[string]any{"sessionId": sid, "modeId": 5}},
		{acp.MethodSetConfigOption, map[string]any{"sessionId": sid, "configId": 7, "value": "x"}},
		{acp.MethodSessionList, map[string]any{"cwd": 5}},
		{acp.MethodSessionFork, map[string]any{"sessionId": sid, "cwd": 5}},
	} {
		t.Run(tc.method, func(t *testing.T) {
			_, err := e.call(tc.method, tc.params)
			var rpcErr *jsonrpc2.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != acp.CodeInvalidParams || !strings.Contains(rpcErr.Message, "malformed "+tc.method+" params") {
				t.Fatalf("%s with malformed params answered %v, want -32602 naming the malformed params", tc.method, err)
			}
		})
	}
	ctx := t.Context()
	for _, p := range []string{`[1,2]`, `{}`} {
		if err := e.peer.Notify(ctx, acp.MethodCancelRequest, json.RawMessage(p)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return buf.count("a malformed notification dropped") >= 2 })
}

// TestFailCodes: every kind of failure has its JSON-RPC code, in one
// table.
func TestFailCodes(t *testing.T) {
	for kind, code := range map[error]int64{
		errParams: acp.CodeInvalidParams, errNotNow: acp.CodeInvalidRequest, errNoMethod: acp.CodeMethodNotFound,
		errNoResource: acp.CodeResourceNotFound, errInternal: acp.CodeInternalError, errCancelRequested: acp.CodeRequestCancelled,
	} {
		if got := fail(kind, "m", nil).Code; got != code {
			t.Errorf("%v: code %d, want %d", kind, got, code)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("fail accepted a kind with no code")
		}
	}()
	fail(errors.New("no such kind"), "m", nil)
}

// TestStoredRecordMalformed: a stored session whose router record does not
// decode is logged, and the session reopened with what of it did, where the
// error was dropped without a word.
func TestStoredRecordMalformed(t *testing.T) {
	log, buf := testLogger(t)
	r, e := startRouter(t, Options{Logger: log})
	sid := e.newSession(t)
	e.mustCall(t, acp.MethodSessionClose, map[string]any{"sessionId": sid})
	spoil := func() {
		err := r.opts.Store.UpdateStored(t.Context(), sid, func(m *store.Meta) { m.Extra = json.RawMessage(`{"enforce":"yes"}`) })
		if err != nil {
			t.Fatal(err)
		}
	}
	spoil()
	e.mustCall(t, acp.MethodSessionSetTitle, map[string]any{"sessionId": sid, "title": "renamed"}) // rewrites the record
	spoil()
	e.mustCall(t, acp.MethodSessionLoad, map[string]any{"sessionId": sid, "cwd": t.TempDir(), "mcpServers": []any{}})
	if n := buf.count("a stored session's record does not decode"); n != 2 {
		t.Errorf("the malformed record logged %d times, want 2 (set_title, load)\n%s", n, buf)
	}
}
