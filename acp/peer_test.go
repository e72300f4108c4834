package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// remoteEnd is the far side of a Peer: what the test writes to In the Peer
// reads; what the Peer writes arrives on Out.
type remoteEnd struct {
	In  *io.PipeWriter
	Out <-chan []byte
}

// newPeerHarness starts a Peer over in-memory pipes. h may be nil (then the
// peer's requests are ignored).
func newPeerHarness(t *testing.T, opts StreamOptions, h jsonrpc2.Handler) (*Peer, *remoteEnd) {
	t.Helper()
	if h == nil {
		h = handlerFunc(func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request) {})
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	remote := &remoteEnd{In: inW, Out: lines(t, outR)}
	p := NewPeer(t.Context(), inR, outW, opts, h)
	t.Cleanup(func() {
		p.Close()
		inW.Close()
		outR.Close()
		waitClosed(t, p.Stream().Done(), "the peer's writer to finish")
	})
	return p, remote
}

// TestPeerCallIDs: the preferred id is reused when free, a fresh one is
// picked when it is pending or unusable, and never 0 or "" (jsonrpc2 would
// replace them with its own counter).
func TestPeerCallIDs(t *testing.T) {
	p, remote := newPeerHarness(t, StreamOptions{}, nil)
	ctx := t.Context()

	// call sends a request preferring prefer and returns the id on the wire,
	// checking that Call reports the same one.
	call := func(t *testing.T, prefer string) (*Call, json.RawMessage) {
		t.Helper()
		var raw json.RawMessage
		if prefer != "-" {
			raw = json.RawMessage(prefer)
		}
		c, err := p.Call(ctx, "m", nil, raw, nil)
		if err != nil {
			t.Fatalf("Call(prefer %s): %v", prefer, err)
		}
		f := decodeFields(t, recv(t, remote.Out))
		assertJSON(t, "method", f["method"], `"m"`)
		if !jsonEqual(f["id"], c.ID) {
			t.Errorf("Call.ID = %s but the wire says %s", c.ID, f["id"])
		}
		if _, ok := f["params"]; ok {
			t.Errorf("nil params were sent as %s", f["params"])
		}
		return c, f["id"]
	}
	answer := func(t *testing.T, c *Call) {
		t.Helper()
		write(t, remote.In, `{"jsonrpc":"2.0","id":`+string(c.ID)+`,"result":"ok"}`+"\n")
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		res, err := c.Wait(wctx)
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		assertJSON(t, "result", res, `"ok"`)
	}

	used := map[string]bool{}
	mustBeFresh := func(t *testing.T, id json.RawMessage, prefer string) {
		t.Helper()
		if s := string(id); s == "0" || s == `""` {
			t.Errorf("prefer %s: wire id %s would be replaced by jsonrpc2", prefer, id)
		}
		if jsonEqual(id, []byte(prefer)) {
			t.Errorf("prefer %s: reused although it must not be", prefer)
		}
		if used[IDKey(id)] {
			t.Errorf("prefer %s: fresh id %s is still pending", prefer, id)
		}
	}

	c7, id := call(t, "7")
	if string(id) != "7" {
		t.Errorf("free id 7 not reused: wire id %s", id)
	}
	used[IDKey(id)] = true
	cs, id := call(t, `"tool-1"`)
	assertJSON(t, "string id", id, `"tool-1"`)
	used[IDKey(id)] = true

	var pending []*Call
	for _, prefer := range []string{"7", `"tool-1"`, `"tool\u002d1"`, "0", `""`, "-1", "1.5", "1e3", "18446744073709551616", `"\u0000acp-router-id:1"`, "null", "-"} {
		t.Run("fresh for "+prefer, func(t *testing.T) {
			c, id := call(t, prefer)
			mustBeFresh(t, id, prefer)
			if id[0] == '"' {
				t.Errorf("fresh id %s is not a number", id)
			}
			used[IDKey(id)] = true
			pending = append(pending, c)
		})
	}

	// The fresh counter skips ids that are pending as preferred ones.
	p.mu.Lock()
	next := p.next + 1
	p.mu.Unlock()
	cn, id := call(t, fmt.Sprint(next))
	if string(id) != fmt.Sprint(next) {
		t.Fatalf("free id %d not reused: %s", next, id)
	}
	c, id := call(t, "-")
	if string(id) == fmt.Sprint(next) {
		t.Errorf("fresh id %s collides with the pending preferred id", id)
	}
	pending = append(pending, cn, c)

	// Once answered, an id is free again: from the Conn's next read, which
	// may come a moment after Wait returned the answer.
	answer(t, c7)
	answer(t, cs)
	for _, raw := range []string{"7", `"tool-1"`} {
		deadline := time.Now().Add(waitTimeout)
		for {
			p.mu.Lock()
			busy := p.pendingLocked(json.RawMessage(raw))
			p.mu.Unlock()
			if !busy {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("answered id %s still pending after %v", raw, waitTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if _, id := call(t, "7"); string(id) != "7" {
		t.Errorf("answered id 7 not reused: %s", id)
	}
	if _, id := call(t, `"tool-1"`); !jsonEqual(id, []byte(`"tool-1"`)) {
		t.Errorf("answered id \"tool-1\" not reused: %s", id)
	}
	for _, c := range pending {
		answer(t, c)
	}
}

// TestPeerCallEmptyPrefer: an empty (non-nil) preferred id is treated as
// none instead of crashing.
func TestPeerCallEmptyPrefer(t *testing.T) {
	p, remote := newPeerHarness(t, StreamOptions{}, nil)
	c, err := p.Call(t.Context(), "m", json.RawMessage(`{"a":1}`), json.RawMessage{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := decodeFields(t, recv(t, remote.Out))
	if !jsonEqual(f["id"], c.ID) || string(f["id"]) == "0" {
		t.Errorf("wire id %s, Call.ID %s", f["id"], c.ID)
	}
	assertJSON(t, "params", f["params"], `{"a":1}`)
}

// TestPeerResponseHookOrder: a response hook runs in the read path, before
// the next message from the peer reaches the Intercept or the handler —
// even when both arrive in one write (a session-creating response and the
// first session/update for it, STYLE.md). In a synctest bubble: the hook's
// pause costs no wall time.
func TestPeerResponseHookOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			events []string
		)
		record := func(e string) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
		seenByHandler := make(chan struct{})
		var hookDone, seenEarly atomic.Bool
		h := handlerFunc(func(_ context.Context, _ *jsonrpc2.Conn, r *jsonrpc2.Request) {
			if !hookDone.Load() {
				seenEarly.Store(true)
			}
			record("handler " + r.Method)
			close(seenByHandler)
		})
		opts := StreamOptions{Intercept: func(m *Message) bool {
			if m.Kind == KindResponse {
				t.Errorf("user Intercept saw a response")
			}
			if !hookDone.Load() {
				seenEarly.Store(true)
			}
			record("intercept " + m.Method)
			return false
		}}
		p, remote := newPeerHarness(t, opts, h)

		c, err := p.Call(t.Context(), MethodSessionNew, json.RawMessage(`{}`), nil, func(m *Message) {
			// Slow on purpose: if the hook ran beside the read loop, the
			// notification would overtake it (in the bubble the clock
			// moves only once every other goroutine is blocked, so the
			// read loop has had every chance to).
			time.Sleep(50 * time.Millisecond)
			var ref SessionRef
			if err := json.Unmarshal(m.Result, &ref); err != nil || ref.SessionID != "s1" {
				t.Errorf("hook got result %s", m.Result)
			}
			record("hook")
			hookDone.Store(true)
		})
		if err != nil {
			t.Fatal(err)
		}
		f := decodeFields(t, recv(t, remote.Out))
		write(t, remote.In, `{"jsonrpc":"2.0","id":`+string(f["id"])+`,"result":{"sessionId":"s1"}}`+"\n"+
			`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{}}}`+"\n")
		waitClosed(t, seenByHandler, "the notification to reach the handler")
		if seenEarly.Load() {
			t.Error("the notification was handed on before the response hook finished")
		}
		mu.Lock()
		got := fmt.Sprint(events)
		mu.Unlock()
		if want := fmt.Sprint([]string{"hook", "intercept session/update", "handler session/update"}); got != want {
			t.Errorf("events %s, want %s", got, want)
		}
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		res, err := c.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		assertJSON(t, "result", res, `{"sessionId":"s1"}`)
	})
}

// TestPeerCallError: the peer's error reaches Wait as a *jsonrpc2.Error
// unchanged, and a closed connection fails pending calls.
func TestPeerCallError(t *testing.T) {
	p, remote := newPeerHarness(t, StreamOptions{}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()

	c, err := p.Call(ctx, "m", nil, json.RawMessage("3"), nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, remote.Out)
	write(t, remote.In, `{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"Authentication required","data":{"x":[1]}}}`+"\n")
	_, err = c.Wait(ctx)
	var rpcErr *jsonrpc2.Error
	if !errors.As(err, &rpcErr) {
		t.Fatalf("Wait error %v is not a *jsonrpc2.Error", err)
	}
	if rpcErr.Code != CodeAuthRequired || rpcErr.Message != "Authentication required" || rpcErr.Data == nil || !jsonEqual(*rpcErr.Data, []byte(`{"x":[1]}`)) {
		t.Errorf("Wait error = %+v", rpcErr)
	}

	c, err = p.Call(ctx, "m", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, remote.Out)
	remote.In.Close() // the agent exits
	if _, err := c.Wait(ctx); !errors.Is(err, jsonrpc2.ErrClosed) {
		t.Errorf("Wait after the peer went away = %v, want jsonrpc2.ErrClosed", err)
	}
	waitClosed(t, p.Done(), "Done")
	if _, err := p.Call(ctx, "m", nil, nil, nil); err == nil {
		t.Error("Call on a closed peer succeeded")
	}
}

// TestPeerReply: a *jsonrpc2.Error is forwarded unchanged (an agent's own
// error, STYLE.md), any other error becomes -32603.
func TestPeerReply(t *testing.T) {
	agentErr := &jsonrpc2.Error{Code: CodeAuthRequired, Message: "Authentication required"}
	agentErr.SetError(map[string]any{"authMethods": []string{"a"}})
	tests := []struct {
		name   string
		result json.RawMessage
		err    error
		want   string // the whole answer, compared structurally
	}{
		{"result", json.RawMessage(`{"stopReason":"end_turn"}`), nil, `{"jsonrpc":"2.0","id":ID,"result":{"stopReason":"end_turn"}}`},
		{"nil result is null", nil, nil, `{"jsonrpc":"2.0","id":ID,"result":null}`},
		{"agent error unchanged", nil, agentErr, `{"jsonrpc":"2.0","id":ID,"error":{"code":-32000,"message":"Authentication required","data":{"authMethods":["a"]}}}`},
		{"wrapped agent error unchanged", nil, fmt.Errorf("upstream: %w", agentErr), `{"jsonrpc":"2.0","id":ID,"error":{"code":-32000,"message":"Authentication required","data":{"authMethods":["a"]}}}`},
		{"NewError", nil, NewError(CodeResourceNotFound, "nope", nil), `{"jsonrpc":"2.0","id":ID,"error":{"code":-32002,"message":"nope"}}`},
		{"go error", nil, errors.New("upstream: start \"codex\": boom"), `{"jsonrpc":"2.0","id":ID,"error":{"code":-32603,"message":"upstream: start \"codex\": boom"}}`},
		{"go error wins over result", json.RawMessage(`1`), errors.New("boom"), `{"jsonrpc":"2.0","id":ID,"error":{"code":-32603,"message":"boom"}}`},
	}
	ids := []string{`1`, `"x"`, `-1`, `1.5`, `0`, `""`}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p *Peer
			h := handlerFunc(func(ctx context.Context, _ *jsonrpc2.Conn, r *jsonrpc2.Request) {
				if err := p.Reply(ctx, r.ID, tt.result, tt.err); err != nil {
					t.Errorf("Reply: %v", err)
				}
			})
			p, remote := newPeerHarness(t, StreamOptions{}, h)
			for _, id := range ids {
				write(t, remote.In, `{"jsonrpc":"2.0","id":`+id+`,"method":"session/prompt","params":{}}`+"\n")
				got := recv(t, remote.Out)
				want := []byte(strings.Replace(tt.want, `"id":ID`, `"id":`+id, 1))
				if !jsonEqual(got, want) {
					t.Errorf("id %s: answer %s, want %s", id, got, want)
				}
				if f := decodeFields(t, got); string(f["id"]) != id && id[0] != '"' {
					t.Errorf("id %s came back as %s", id, f["id"])
				}
			}
		})
	}
}

// TestRawID: RawID is the wire form jsonrpc2 writes.
func TestRawID(t *testing.T) {
	tests := []struct {
		id   jsonrpc2.ID
		want string
	}{
		{jsonrpc2.ID{Num: 0}, `0`},
		{jsonrpc2.ID{Num: 42}, `42`},
		{jsonrpc2.ID{Str: "a", IsString: true}, `"a"`},
		{jsonrpc2.ID{IsString: true}, `""`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := RawID(tt.id); string(got) != tt.want {
				t.Errorf("RawID(%+v) = %s, want %s", tt.id, got, tt.want)
			}
		})
	}
}

// TestPeerIDReuseWhileAnswerInFlight: an id stays taken until the Conn has
// resolved the call it answers. Freed earlier (in the read path, before the
// Conn sees the response), a Call preferring the same id — another agent's
// request with the same id, forwarded at that moment — would take over
// jsonrpc2's pending entry and receive the first call's answer.
func TestPeerIDReuseWhileAnswerInFlight(t *testing.T) {
	p, remote := newPeerHarness(t, StreamOptions{}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	var (
		second    *Call
		secondErr error
	)
	first, err := p.Call(ctx, "fs/read_text_file", nil, json.RawMessage("3"), func(*Message) {
		// Another goroutine forwards a request preferring the same id
		// while this response is on its way to the Conn.
		done := make(chan struct{})
		go func() {
			defer close(done)
			second, secondErr = p.Call(ctx, "fs/read_text_file", nil, json.RawMessage("3"), nil)
		}()
		select { // not waitClosed: this is the read loop, not the test goroutine
		case <-done:
		case <-time.After(waitTimeout):
			t.Error("timed out waiting for the second Call")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "first id", decodeFields(t, recv(t, remote.Out))["id"], `3`)
	write(t, remote.In, `{"jsonrpc":"2.0","id":3,"result":"first"}`+"\n")

	firstCtx, cancelFirst := context.WithTimeout(ctx, 2*time.Second)
	defer cancelFirst()
	res, err := first.Wait(firstCtx)
	if err != nil {
		t.Fatalf("first call: %v (its answer went to the second call)", err)
	}
	assertJSON(t, "first result", res, `"first"`)

	if secondErr != nil {
		t.Fatal(secondErr)
	}
	wire := decodeFields(t, recv(t, remote.Out))["id"]
	if string(wire) == "3" {
		t.Errorf("second call reused id 3 before the first answer was delivered")
	}
	write(t, remote.In, `{"jsonrpc":"2.0","id":`+string(wire)+`,"result":"second"}`+"\n")
	res, err = second.Wait(ctx)
	if err != nil {
		t.Fatalf("second call: %v", err)
	}
	assertJSON(t, "second result", res, `"second"`)

	// Once delivered, the id is free again.
	third, err := p.Call(ctx, "m", nil, json.RawMessage("3"), nil)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "third id", decodeFields(t, recv(t, remote.Out))["id"], `3`)
	assertJSON(t, "third Call.ID", third.ID, `3`)
}

// TestPeerObserveCalls: the observer sees each request sent (Call and
// CallRaw) and is told once how it ended: the answer, the error answer,
// the connection closing first, or a send that failed.
func TestPeerObserveCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, remote := newPeerHarness(t, StreamOptions{}, nil)
		type ended struct {
			method, result, error string
			err                   error
		}
		got := make(chan ended, 8)
		p.ObserveCalls(func(_ context.Context, method string) func(*Message, error) {
			if method == "skipped" {
				return nil
			}
			return func(m *Message, err error) {
				e := ended{method: method, err: err}
				if m != nil {
					e.result, e.error = string(m.Result), string(m.Error)
				}
				got <- e
			}
		})
		next := func() ended {
			t.Helper()
			select {
			case e := <-got:
				return e
			case <-time.After(waitTimeout):
				t.Fatal("the observer was not told")
				return ended{}
			}
		}
		ctx := t.Context()
		if _, err := p.Call(ctx, "ok", nil, json.RawMessage("1"), nil); err != nil {
			t.Fatal(err)
		}
		recv(t, remote.Out)
		write(t, remote.In, `{"jsonrpc":"2.0","id":1,"result":{"a":1}}`+"\n")
		if e := next(); e != (ended{method: "ok", result: `{"a":1}`}) {
			t.Errorf("answered: %+v", e)
		}
		if id, key, err := p.CallRaw("raw", json.RawMessage(`{}`), json.RawMessage("2"), nil); err != nil {
			t.Fatal(err)
		} else if key != IDKey(id) {
			t.Errorf("CallRaw's key %q for id %s, not its IDKey", key, id)
		}
		recv(t, remote.Out)
		write(t, remote.In, `{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no"}}`+"\n")
		if e := next(); e.method != "raw" || e.error != `{"code":-32601,"message":"no"}` || e.err != nil {
			t.Errorf("error answer: %+v", e)
		}
		if _, err := p.Call(ctx, "skipped", nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		recv(t, remote.Out)
		if _, err := p.Call(ctx, "pending", nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		recv(t, remote.Out)
		remote.In.Close() // the agent exits
		if e := next(); e.method != "pending" || !errors.Is(e.err, jsonrpc2.ErrClosed) {
			t.Errorf("closed: %+v", e)
		}
		waitClosed(t, p.Done(), "Done")
		if _, err := p.Call(ctx, "late", nil, nil, nil); err == nil {
			t.Fatal("Call on a closed peer succeeded")
		}
		if e := next(); e.method != "late" || e.err == nil {
			t.Errorf("not sent: %+v", e)
		}
		// A minute passes at once (synctest), then every goroutine is blocked:
		// a second word about a call has come by then.
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case e := <-got:
			t.Errorf("told once more: %+v", e)
		default:
		}
	})
}

// TestPeerWaitOrCancel: a caller that stops waiting tells the peer, with
// $/cancel_request naming the id the peer saw (a string id and a number
// id alike), and can still read the answer the peer sends afterwards; a
// call answered in time sends nothing more (issue 27, point 4).
func TestPeerWaitOrCancel(t *testing.T) {
	p, remote := newPeerHarness(t, StreamOptions{}, nil)
	for _, prefer := range []string{`"agent-7"`, `12`} {
		c, err := p.Call(t.Context(), "session/set_mode", map[string]string{"modeId": "default"}, json.RawMessage(prefer), nil)
		if err != nil {
			t.Fatal(err)
		}
		recv(t, remote.Out)
		short, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		_, err = c.WaitOrCancel(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitOrCancel = %v, want the deadline", err)
		}
		var m struct {
			Method string `json:"method"`
			Params struct {
				RequestID json.RawMessage `json:"requestId"`
			} `json:"params"`
		}
		if err := json.Unmarshal(recv(t, remote.Out), &m); err != nil || m.Method != MethodCancelRequest || string(m.Params.RequestID) != prefer {
			t.Fatalf("after giving up the peer got %+v (%v), want $/cancel_request naming %s", m, err, prefer)
		}
		// The work was done anyway: the late answer is still read.
		write(t, remote.In, `{"jsonrpc":"2.0","id":`+prefer+`,"result":{"late":true}}`+"\n")
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		res, err := c.Wait(ctx)
		cancel()
		if err != nil || !jsonEqual(res, []byte(`{"late":true}`)) {
			t.Errorf("the late answer: %s, %v", res, err)
		}
	}

	c, err := p.Call(t.Context(), "m", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	json.Unmarshal(recv(t, remote.Out), &req)
	write(t, remote.In, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{}}`+"\n")
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if _, err := c.WaitOrCancel(ctx); err != nil {
		t.Fatal(err)
	}
	p.Notify(ctx, "$/marker", nil) // the next line the peer writes
	if got := recv(t, remote.Out); !strings.Contains(string(got), "$/marker") {
		t.Errorf("after an answer in time the peer got %s, want nothing before the marker", got)
	}
}

// TestPeerSend: what a proxy writes its peer in one call. A note is
// written as it is; a request has its replacements written in the other
// peer's bytes, every other byte kept, and its answer goes to OnResponse;
// a replacement that cannot be made is said and the request still goes;
// params over several lines go as one line.
func TestPeerSend(t *testing.T) {
	p, remote := newPeerHarness(t, StreamOptions{}, nil)
	note := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"b","update":{"sessionUpdate":"tool_call_update","toolCallId":"t0","status":"failed"}}}`
	if _, err := p.Send(Outgoing{Lane: "b", Note: []byte(note)}); err != nil {
		t.Fatal(err)
	}
	if got := string(recv(t, remote.Out)); got != note {
		t.Errorf("the note went as %s", got)
	}

	answers := make(chan string, 1)
	sent, err := p.Send(Outgoing{
		Method:     "session/request_permission",
		Params:     json.RawMessage(`{"sessionId":"a", "toolCall":{"toolCallId":"t1","title":"<&>"},"options":[]}`),
		Replace:    []Replacement{{Path: []string{"sessionId"}, Value: "b"}, {Path: []string{"toolCall", "toolCallId"}, Value: "t1~x"}},
		Prefer:     json.RawMessage(`7`),
		OnResponse: func(m *Message) { answers <- string(m.Result) },
	})
	if err != nil || sent.Unreplaced != nil {
		t.Fatalf("Send: %v (unreplaced: %v)", err, sent.Unreplaced)
	}
	if string(sent.ID) != "7" || sent.Key != IDKey(sent.ID) {
		t.Errorf("sent as id %s, key %q", sent.ID, sent.Key)
	}
	want := `{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"b", "toolCall":{"toolCallId":"t1~x","title":"<&>"},"options":[]}}`
	if got := string(recv(t, remote.Out)); got != want {
		t.Errorf("the request went as\n\t%s\nwant\n\t%s", got, want)
	}
	write(t, remote.In, `{"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"cancelled"}}}`+"\n")
	select {
	case got := <-answers:
		if got != `{"outcome":{"outcome":"cancelled"}}` {
			t.Errorf("OnResponse got %s", got)
		}
	case <-time.After(waitTimeout):
		t.Fatal("OnResponse was not called")
	}

	sent, err = p.Send(Outgoing{Method: "m", Params: json.RawMessage("{\"a\": 1,\n \"b\": [2]}"), Replace: []Replacement{{Path: []string{"a", "deeper"}, Value: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sent.Unreplaced == nil {
		t.Error("a replacement inside a number was made, or not said")
	}
	if got := recv(t, remote.Out); !jsonEqual(got, []byte(`{"jsonrpc":"2.0","id":`+string(sent.ID)+`,"method":"m","params":{"a":1,"b":[2]}}`)) || bytes.IndexByte(got, '\n') >= 0 {
		t.Errorf("params over two lines went as %q", got)
	}
}
