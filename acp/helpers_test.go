package acp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// waitTimeout bounds every wait in this package's tests: a hang fails the
// test instead of hanging it. Generous because of -race.
const waitTimeout = 10 * time.Second

// quietLog keeps jsonrpc2's own log lines out of the test output.
var quietLog = jsonrpc2.SetLogger(log.New(io.Discard, "", 0))

// handlerFunc adapts a function to jsonrpc2.Handler.
type handlerFunc func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request)

func (f handlerFunc) Handle(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) {
	f(ctx, c, r)
}

// lines reads r line by line (without the "\n") until it fails and returns
// the lines on a channel that is closed at the end.
func lines(t *testing.T, r io.Reader) <-chan []byte {
	t.Helper()
	ch := make(chan []byte, 1024)
	go func() {
		defer close(ch)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 && err == nil {
				ch <- line[:len(line)-1]
			}
			if err != nil {
				if len(line) > 0 {
					ch <- line // an unterminated tail: the tests flag it
				}
				return
			}
		}
	}()
	return ch
}

// recv returns the next line from ch or fails the test after waitTimeout.
func recv(t *testing.T, ch <-chan []byte) []byte {
	t.Helper()
	return recvWithin(t, ch, waitTimeout)
}

// recvWithin is recv with its own timeout, for lines that take long to
// move (20 MiB through jsonrpc2's map decoding under -race on a loaded
// 2-core machine).
func recvWithin(t *testing.T, ch <-chan []byte, waitTimeout time.Duration) []byte {
	t.Helper()
	select {
	case line, ok := <-ch:
		if !ok {
			t.Fatal("output closed while a line was expected")
		}
		return line
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for an output line")
	}
	return nil
}

// write writes data to w, failing the test if that takes longer than
// waitTimeout (an io.Pipe write blocks until the other side reads it).
func write(t *testing.T, w io.Writer, data string) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := io.WriteString(w, data)
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("timed out writing to the stream: it stopped reading")
	}
}

// waitClosed fails unless ch is closed within waitTimeout.
func waitClosed[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// decodeFields decodes one top-level JSON object into its raw members.
func decodeFields(t *testing.T, line []byte) map[string]json.RawMessage {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		t.Fatalf("output line is not a JSON object: %v: %s", err, line)
	}
	return fields
}

// jsonEqual reports whether a and b are the same JSON value (structurally:
// member order, whitespace and string escapes do not matter).
func jsonEqual(a, b []byte) bool {
	var va, vb any
	da := json.NewDecoder(bytes.NewReader(a))
	da.UseNumber()
	db := json.NewDecoder(bytes.NewReader(b))
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func assertJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	if !jsonEqual(got, []byte(want)) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

// rpcError is the error member of a response.
type rpcError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// assertErrorReply checks that line is an error response with the given id
// (compared structurally) and code.
func assertErrorReply(t *testing.T, line []byte, id string, code int64) {
	t.Helper()
	f := decodeFields(t, line)
	assertJSON(t, "jsonrpc", f["jsonrpc"], `"2.0"`)
	if _, ok := f["id"]; !ok {
		t.Errorf("error reply without an id member: %s", line)
	}
	assertJSON(t, "id", f["id"], id)
	if _, ok := f["result"]; ok {
		t.Errorf("error reply has a result: %s", line)
	}
	var e rpcError
	if err := json.Unmarshal(f["error"], &e); err != nil {
		t.Fatalf("error member: %v: %s", err, line)
	}
	if e.Code != code {
		t.Errorf("error code = %d, want %d (%s)", e.Code, code, line)
	}
	if e.Message == "" {
		t.Errorf("error without a message: %s", line)
	}
}

// syncBuffer is an io.WriteCloser collecting what a Stream writes.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.ErrClosedPipe
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *syncBuffer) Lines() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][]byte
	for _, l := range bytes.SplitAfter(b.buf.Bytes(), []byte("\n")) {
		if len(l) > 0 {
			out = append(out, bytes.TrimSuffix(l, []byte("\n")))
		}
	}
	return out
}

// discardCloser is an io.WriteCloser that throws everything away.
type discardCloser struct{}

func (discardCloser) Write(p []byte) (int, error) { return len(p), nil }
func (discardCloser) Close() error                { return nil }

// readAll feeds input to a Stream and calls ReadObject until it fails. It
// returns what ReadObject produced, the lines the stream wrote (answers to
// bad input) and ReadObject's final error.
func readAll(t *testing.T, input string, opts StreamOptions) (objs []json.RawMessage, replies [][]byte, err error) {
	t.Helper()
	out := &syncBuffer{}
	s := NewStream(io.NopCloser(bytes.NewReader([]byte(input))), out, opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var v json.RawMessage
			if err = s.ReadObject(&v); err != nil {
				return
			}
			objs = append(objs, v)
		}
	}()
	waitClosed(t, done, "ReadObject to reach the end of the input")
	s.Close()
	waitClosed(t, s.Done(), "the stream's writer to finish")
	return objs, out.Lines(), err
}

// connHarness is a Stream with a real jsonrpc2.Conn on top, driven through
// in-memory pipes: the test writes the peer's lines to In and reads what the
// stream writes from Out.
type connHarness struct {
	In     *io.PipeWriter
	Out    <-chan []byte
	Stream *Stream
	Conn   *jsonrpc2.Conn
	// Requests and Notes receive what the Conn's handler was given.
	Requests chan *jsonrpc2.Request
	Notes    chan *jsonrpc2.Request
}

// echoResult is what the harness's handler answers to every request.
type echoResult struct {
	Method    string `json:"method"`
	ParamsLen int    `json:"paramsLen"`
}

// newConnHarness starts a Stream and a jsonrpc2.Conn whose handler answers
// every request inline with an echoResult and records every message.
func newConnHarness(t *testing.T, opts StreamOptions) *connHarness {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &connHarness{
		In:       inW,
		Out:      lines(t, outR),
		Requests: make(chan *jsonrpc2.Request, 1024),
		Notes:    make(chan *jsonrpc2.Request, 1024),
	}
	h.Stream = NewStream(inR, outW, opts)
	h.Conn = jsonrpc2.NewConn(t.Context(), h.Stream, handlerFunc(func(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) {
		if r.Notif {
			h.Notes <- r
			return
		}
		h.Requests <- r
		n := 0
		if r.Params != nil {
			n = len(*r.Params)
		}
		if err := c.Reply(ctx, r.ID, echoResult{Method: r.Method, ParamsLen: n}); err != nil && !errors.Is(err, jsonrpc2.ErrClosed) {
			t.Errorf("reply: %v", err)
		}
	}), quietLog)
	t.Cleanup(func() {
		h.Conn.Close()
		inW.Close()
		outR.Close()
		waitClosed(t, h.Stream.Done(), "the stream's writer to finish")
	})
	return h
}

// call sends one request with the given raw id and checks the echo answer.
func (h *connHarness) call(t *testing.T, id, method string) []byte {
	t.Helper()
	write(t, h.In, `{"jsonrpc":"2.0","id":`+id+`,"method":"`+method+`"}`+"\n")
	line := recv(t, h.Out)
	f := decodeFields(t, line)
	assertJSON(t, "id of the answer to "+method, f["id"], id)
	assertJSON(t, "result of "+method, f["result"], `{"method":"`+method+`","paramsLen":0}`)
	return line
}

// note waits for the handler to receive a notification.
func (h *connHarness) note(t *testing.T) *jsonrpc2.Request {
	t.Helper()
	select {
	case r := <-h.Notes:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for a notification to reach the handler")
	}
	return nil
}
