package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
)

// malformed are hand-made seeds around the edges the classifier and the
// line reader care about.
var malformed = []string{
	``,
	`   `,
	`{`,
	`[`,
	`[]`,
	`[{"jsonrpc":"2.0","id":1,"method":"m"}]`,
	`42`,
	`null`,
	`"s"`,
	`{"foo":1}`,
	`{"jsonrpc":"2.0","id":null,"method":"m"}`,
	`{"jsonrpc":"2.0","id":-1,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1e3,"method":"m"}`,
	`{"jsonrpc":"2.0","id":18446744073709551616,"method":"m"}`,
	`{"jsonrpc":"2.0","id":"\u0000acp-router-id:1","method":"m"}`,
	`{"jsonrpc":"2.0","id":{},"method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"method":1}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":"p"}`,
	`{"jsonrpc":"1.0","id":1,"method":"m"}`,
	`{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"}}`,
	`{"jsonrpc":"2.0","id":1,"result":null}`,
	`{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"Method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"result":1,"ID":2}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","meta":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"\ud800"}}`,
	"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}",
}

// seedLines returns every fixture message and the malformed seeds.
func seedLines(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, fm := range fixtures(tb) {
		out = append(out, fm.msg)
	}
	for _, s := range malformed {
		out = append(out, []byte(s))
	}
	return out
}

// FuzzClassify: Classify never panics, and what it accepts is consistent:
// with the message's own members read independently (exact member names),
// with the kind's rules, and with how jsonrpc2 decodes the same line.
func FuzzClassify(f *testing.F) {
	for _, line := range seedLines(f) {
		f.Add(line)
		if len(line) > 2 {
			f.Add(line[:len(line)/2]) // truncated
			f.Add(append([]byte{'['}, line...))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		m, err := Classify(data)
		if !bytes.Equal(data, in) {
			t.Fatal("Classify modified its input")
		}
		if m == nil {
			t.Fatal("nil message")
		}
		if !bytes.Equal(m.Raw, data) {
			t.Fatal("Raw is not the line")
		}
		if m.ID != nil && !validID(m.ID) {
			t.Fatalf("unusable id %q kept (err %v)", m.ID, err)
		}
		if err != nil {
			n := 0
			for _, e := range []error{ErrParse, ErrNotRPC, ErrBatch} {
				if errors.Is(err, e) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %v is not exactly one of the classification errors", err)
			}
			if errors.Is(err, ErrParse) == (json.Valid(data) && utf8.Valid(data)) {
				t.Fatalf("error %v but json.Valid = %v, utf8.Valid = %v", err, json.Valid(data), utf8.Valid(data))
			}
			return
		}
		if !json.Valid(data) {
			t.Fatal("accepted invalid JSON")
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
			t.Fatalf("accepted a non-object: %v", err)
		}
		for name, got := range map[string]json.RawMessage{"id": m.ID, "params": m.Params, "result": m.Result, "error": m.Error} {
			want, ok := fields[name]
			if ok != (got != nil) || !bytes.Equal(got, want) {
				t.Fatalf("%s = %q, but the line's %q member is %q (present %v)", name, got, name, want, ok)
			}
		}
		if v, ok := fields["jsonrpc"]; ok && string(v) != `"2.0"` {
			t.Fatalf("accepted jsonrpc %s", v)
		}
		rawMethod, hasMethod := fields["method"]
		switch m.Kind {
		case KindRequest, KindNotification:
			var method string
			if !hasMethod || json.Unmarshal(rawMethod, &method) != nil || method != m.Method || m.Method == "" {
				t.Fatalf("Method = %q but the line's method member is %s", m.Method, rawMethod)
			}
			if (m.Kind == KindRequest) != (m.ID != nil) {
				t.Fatalf("%s with id %q", m.Kind, m.ID)
			}
			if m.Result != nil || (m.Error != nil && string(m.Error) != "null") {
				t.Fatalf("%s with a result or an error", m.Kind)
			}
			if m.Params != nil && string(m.Params) != "null" && m.Params[0] != '{' && m.Params[0] != '[' {
				t.Fatalf("params %s accepted", m.Params)
			}
		case KindResponse:
			if hasMethod || m.Method != "" {
				t.Fatal("response with a method")
			}
			hasErr := m.Error != nil && string(m.Error) != "null"
			if (m.Result != nil) == hasErr {
				t.Fatalf("response with result %q and error %q", m.Result, m.Error)
			}
			if hasErr && m.Error[0] != '{' {
				t.Fatalf("error %s accepted", m.Error)
			}
		default:
			t.Fatalf("accepted with kind %s", m.Kind)
		}
		// Where jsonrpc2 can decode the line, it must read the same thing:
		// otherwise the Intercept and the Conn would disagree about one
		// message.
		if m.HasID() && !plainID(m.ID) {
			return // the stream tokenizes or drops these first
		}
		switch m.Kind {
		case KindRequest, KindNotification:
			var r jsonrpc2.Request
			if json.Unmarshal(data, &r) != nil {
				return
			}
			if r.Method != m.Method || r.Notif != (m.Kind == KindNotification || string(m.ID) == "null") {
				t.Fatalf("jsonrpc2 reads method %q notif %v, Classify %q %s", r.Method, r.Notif, m.Method, m.Kind)
			}
			if m.HasID() && !jsonEqual(RawID(r.ID), m.ID) {
				t.Fatalf("jsonrpc2 reads id %s, Classify %s", RawID(r.ID), m.ID)
			}
		case KindResponse:
			var r jsonrpc2.Response
			if json.Unmarshal(data, &r) != nil {
				return
			}
			if m.HasID() && !jsonEqual(RawID(r.ID), m.ID) {
				t.Fatalf("jsonrpc2 reads id %s, Classify %s", RawID(r.ID), m.ID)
			}
			if (r.Error != nil) != (m.Error != nil && string(m.Error) != "null") {
				t.Fatalf("jsonrpc2 reads error %v, Classify %s", r.Error, m.Error)
			}
		}
	})
}

// errStream records the error that ended ReadObject.
type errStream struct {
	*Stream
	mu  sync.Mutex
	err error
}

func (s *errStream) ReadObject(v any) error {
	err := s.Stream.ReadObject(v)
	if err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
	return err
}

// FuzzStream: arbitrary bytes through a Stream (with a real jsonrpc2.Conn
// on top, answering every request) never panic, never end the connection
// with anything but EOF, and everything written back is valid JSON-RPC.
func FuzzStream(f *testing.F) {
	lines := seedLines(f)
	for i, line := range lines {
		f.Add(append(bytes.Clone(line), '\n'), i%3 == 0)
	}
	var all []byte
	for _, line := range lines {
		all = append(all, line...)
		all = append(all, '\n')
	}
	f.Add(all, false)
	f.Add(all, true)
	f.Add(bytes.ReplaceAll(all, []byte("\n"), []byte("\r\n")), false)
	f.Add([]byte("\n\n \r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}"), true)
	f.Add(bytes.Repeat([]byte("x"), 70000), false)

	f.Fuzz(func(t *testing.T, data []byte, small bool) {
		opts := StreamOptions{AnswerInvalid: true}
		if small {
			opts.MaxLine = 64
		}
		out := &syncBuffer{}
		s := &errStream{Stream: NewStream(io.NopCloser(bytes.NewReader(data)), out, opts)}
		answered := 0
		conn := jsonrpc2.NewConn(context.Background(), s, handlerFunc(func(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) {
			if !r.Notif {
				answered++
				if err := c.Reply(ctx, r.ID, r.Params); err != nil {
					t.Errorf("reply: %v", err)
				}
			}
		}), quietLog)
		select {
		case <-conn.DisconnectNotify():
		case <-time.After(waitTimeout):
			t.Fatal("the connection did not end at the end of the input")
		}
		select {
		case <-s.Done():
		case <-time.After(waitTimeout):
			t.Fatal("the writer did not finish")
		}
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		if !errors.Is(err, io.EOF) {
			t.Fatalf("ReadObject ended with %v, want io.EOF", err)
		}
		replies := out.Lines()
		results := 0
		for _, line := range replies {
			var f map[string]json.RawMessage
			if err := json.Unmarshal(line, &f); err != nil {
				t.Fatalf("reply is not a JSON object: %v: %q", err, line)
			}
			if string(f["jsonrpc"]) != `"2.0"` {
				t.Fatalf("reply without jsonrpc 2.0: %s", line)
			}
			id, ok := f["id"]
			if !ok || (string(id) != "null" && !validID(id)) {
				t.Fatalf("reply with id %q: %s", id, line)
			}
			if IsToken(id) && !bytes.Contains(data, id) {
				t.Fatalf("a stand-in id leaked: %s", line)
			}
			_, hasResult := f["result"]
			_, hasError := f["error"]
			if hasResult == hasError {
				t.Fatalf("reply must have exactly one of result and error: %s", line)
			}
			if hasResult {
				results++
				continue
			}
			var e rpcError
			if err := json.Unmarshal(f["error"], &e); err != nil || (e.Code != CodeParseError && e.Code != CodeInvalidRequest) {
				t.Fatalf("bad error reply: %s", line)
			}
		}
		if results != answered {
			t.Fatalf("%d requests answered by the handler, %d answers written", answered, results)
		}
	})
}
