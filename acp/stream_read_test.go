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
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
)

// TestStreamBadLines: every kind of line the Conn must not see is answered
// (editor side) or dropped silently (agent side), and the connection keeps
// working afterwards (DESIGN §7).
func TestStreamBadLines(t *testing.T) {
	tests := []struct {
		name string
		line string
		id   string // the id of the error reply
		code int64
	}{
		{"not json", `this is not json`, `null`, CodeParseError},
		{"truncated object", `{"jsonrpc":"2.0","id":1,"method":"x"`, `null`, CodeParseError},
		{"two objects on one line", `{"jsonrpc":"2.0","method":"a"}{"jsonrpc":"2.0","method":"b"}`, `null`, CodeParseError},
		{"broken batch", `[{"jsonrpc":"2.0"`, `null`, CodeParseError},
		{"object without method result or error", `{"foo":1}`, `null`, CodeInvalidRequest},
		{"number", `42`, `null`, CodeInvalidRequest},
		{"string", `"hello"`, `null`, CodeInvalidRequest},
		{"null", `null`, `null`, CodeInvalidRequest},
		{"empty array", `[]`, `null`, CodeInvalidRequest},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}]`, `null`, CodeInvalidRequest},
		{"wrong jsonrpc version names the id", `{"jsonrpc":"1.0","id":7,"method":"x"}`, `7`, CodeInvalidRequest},
		{"params a string names the id", `{"jsonrpc":"2.0","id":"s","method":"x","params":"p"}`, `"s"`, CodeInvalidRequest},
		{"method not a string", `{"jsonrpc":"2.0","id":3,"method":3}`, `3`, CodeInvalidRequest},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"x"}`, `null`, CodeInvalidRequest},
		{"object id and wrong version", `{"jsonrpc":"0","id":{}}`, `null`, CodeInvalidRequest},
		{"boolean id", `{"jsonrpc":"2.0","id":true,"method":"x"}`, `null`, CodeInvalidRequest},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"x"}`, `null`, CodeInvalidRequest},
		{"both result and error", `{"jsonrpc":"2.0","id":9,"result":1,"error":{"code":1,"message":"m"}}`, `9`, CodeInvalidRequest},
		{"error not an object", `{"jsonrpc":"2.0","id":9,"error":"boom"}`, `null`, CodeInvalidRequest},
		{"error object jsonrpc2 cannot decode", `{"jsonrpc":"2.0","id":9,"error":{"code":"x","message":"m"}}`, `null`, CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Run("answered", func(t *testing.T) {
				h := newConnHarness(t, StreamOptions{AnswerInvalid: true})
				write(t, h.In, tt.line+"\n")
				assertErrorReply(t, recv(t, h.Out), tt.id, tt.code)
				h.call(t, "1", "still/alive")
			})
			t.Run("dropped", func(t *testing.T) {
				h := newConnHarness(t, StreamOptions{})
				write(t, h.In, tt.line+"\n")
				// The first line out must be the answer to the next
				// request: nothing was written for the bad line.
				h.call(t, "1", "still/alive")
			})
		})
	}
}

// TestStreamFraming: framing variants that must reach the Conn.
func TestStreamFraming(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // the messages ReadObject returns, in order
	}{
		{
			name:  "empty and whitespace lines are ignored",
			input: "\n \n\t\n\r\n" + `{"jsonrpc":"2.0","method":"a"}` + "\n   \n" + `{"jsonrpc":"2.0","method":"b"}` + "\n\n",
			want:  []string{`{"jsonrpc":"2.0","method":"a"}`, `{"jsonrpc":"2.0","method":"b"}`},
		},
		{
			name:  "CRLF line endings",
			input: `{"jsonrpc":"2.0","id":1,"method":"a"}` + "\r\n" + `{"jsonrpc":"2.0","method":"b"}` + "\r\n",
			want:  []string{`{"jsonrpc":"2.0","id":1,"method":"a"}`, `{"jsonrpc":"2.0","method":"b"}`},
		},
		{
			name:  "last line without newline",
			input: `{"jsonrpc":"2.0","method":"a"}` + "\n" + `{"jsonrpc":"2.0","id":2,"method":"b"}`,
			want:  []string{`{"jsonrpc":"2.0","method":"a"}`, `{"jsonrpc":"2.0","id":2,"method":"b"}`},
		},
		{
			name:  "surrounding blanks on a line",
			input: "  \t" + `{"jsonrpc":"2.0","method":"a"}` + " \t\r\n",
			want:  []string{`{"jsonrpc":"2.0","method":"a"}`},
		},
		{
			name:  "only blank lines",
			input: "\n\n \r\n",
		},
		{
			name:  "empty input",
			input: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, replies, err := readAll(t, tt.input, StreamOptions{AnswerInvalid: true})
			if !errors.Is(err, io.EOF) {
				t.Errorf("ReadObject ended with %v, want io.EOF", err)
			}
			if len(replies) != 0 {
				t.Errorf("the stream answered valid input: %q", replies)
			}
			if len(objs) != len(tt.want) {
				t.Fatalf("ReadObject returned %d messages %q, want %d", len(objs), objs, len(tt.want))
			}
			for i := range objs {
				assertJSON(t, fmt.Sprintf("message %d", i), objs[i], tt.want[i])
			}
		})
	}
}

// TestStreamFramingThroughConn: the same framing variants with a real
// jsonrpc2.Conn on top, split across writes.
func TestStreamFramingThroughConn(t *testing.T) {
	h := newConnHarness(t, StreamOptions{AnswerInvalid: true})
	write(t, h.In, "\n \n")
	write(t, h.In, `{"jsonrpc":"2.0","id":1,"method":"crlf"}`+"\r\n")
	assertJSON(t, "id", decodeFields(t, recv(t, h.Out))["id"], `1`)
	// One line split over several writes, then two lines in one write.
	write(t, h.In, `{"jsonrpc":"2.0",`)
	write(t, h.In, `"id":2,"method":"split"}`)
	write(t, h.In, "\n"+`{"jsonrpc":"2.0","method":"n1"}`+"\n"+`{"jsonrpc":"2.0","id":3,"method":"joined"}`+"\n")
	assertJSON(t, "id", decodeFields(t, recv(t, h.Out))["id"], `2`)
	if got := h.note(t).Method; got != "n1" {
		t.Errorf("notification method = %q, want n1", got)
	}
	assertJSON(t, "id", decodeFields(t, recv(t, h.Out))["id"], `3`)
	// The last line without "\n" is still handled when the peer closes.
	write(t, h.In, `{"jsonrpc":"2.0","id":4,"method":"last"}`)
	h.In.Close()
	assertJSON(t, "id", decodeFields(t, recv(t, h.Out))["id"], `4`)
	waitClosed(t, h.Conn.DisconnectNotify(), "the Conn to see the end of the input")
}

// paddedRequest returns a request line (without terminator) of exactly n
// bytes.
func paddedRequest(t *testing.T, id string, n int) string {
	t.Helper()
	head := `{"jsonrpc":"2.0","id":` + id + `,"method":"pad","params":{"pad":"`
	tail := `"}}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("cannot pad a request to %d bytes", n)
	}
	return head + strings.Repeat("x", pad) + tail
}

// TestStreamLineLimit: a line of exactly MaxLine bytes passes; one byte more
// is skipped with an error reply and the next line still works.
func TestStreamLineLimit(t *testing.T) {
	const limit = 1024
	tests := []struct {
		name    string
		line    string
		term    string
		allowed bool
	}{
		{"at the limit", paddedRequest(t, "1", limit), "\n", true},
		{"at the limit with CRLF", paddedRequest(t, "1", limit), "\r\n", true},
		{"one byte over", paddedRequest(t, "1", limit+1), "\n", false},
		{"one byte over with CRLF", paddedRequest(t, "1", limit+1), "\r\n", false},
		{"far over", paddedRequest(t, "1", 200*limit), "\n", false},
		{"far over, bigger than the read buffer", paddedRequest(t, "1", 300<<10), "\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newConnHarness(t, StreamOptions{AnswerInvalid: true, MaxLine: limit})
			write(t, h.In, tt.line+tt.term)
			line := recv(t, h.Out)
			if tt.allowed {
				f := decodeFields(t, line)
				assertJSON(t, "id", f["id"], `1`)
				var res echoResult
				if err := json.Unmarshal(f["result"], &res); err != nil || res.Method != "pad" {
					t.Fatalf("answer %s, want the echo of pad", line)
				}
			} else {
				assertErrorReply(t, line, `1`, CodeInvalidRequest) // its id read from its start
			}
			h.call(t, "2", "next/line")
		})
	}
}

// TestStreamLineLimitLastLine: the limit also holds for a last line that has
// no "\n".
func TestStreamLineLimitLastLine(t *testing.T) {
	const limit = 1024
	tests := []struct {
		name    string
		n       int
		allowed bool
	}{
		{"at the limit", limit, true},
		{"one byte over", limit + 1, false},
		{"two bytes over", limit + 2, false},
		{"far over", 10 * limit, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, replies, err := readAll(t, paddedRequest(t, "1", tt.n), StreamOptions{AnswerInvalid: true, MaxLine: limit})
			if !errors.Is(err, io.EOF) {
				t.Errorf("ReadObject ended with %v, want io.EOF", err)
			}
			if tt.allowed {
				if len(objs) != 1 || len(replies) != 0 {
					t.Errorf("got %d messages and replies %q, want the message", len(objs), replies)
				}
				return
			}
			if len(objs) != 0 {
				t.Errorf("a %d-byte last line passed a %d-byte limit", tt.n, limit)
			}
			if len(replies) != 1 {
				t.Fatalf("replies = %q, want one error", replies)
			}
			assertErrorReply(t, replies[0], `1`, CodeInvalidRequest)
		})
	}
}

// TestStreamLineLimitAnswers: a message over the limit is answered by the
// id its start gives, whatever the side: a request gets its error (an
// agent's too, which used to wait for ever), a response to one of our calls
// resolves that call with an error in its place (before, the call waited
// for ever: an agent reading a file too large to relay hung); an id after
// the long member, or a notification, leaves nothing to answer but null.
func TestStreamLineLimitAnswers(t *testing.T) {
	const limit = 1024
	pad := strings.Repeat("x", 8*limit) // past the 4 KiB head kept to find the id
	t.Run("a request, agent side", func(t *testing.T) {
		h := newConnHarness(t, StreamOptions{MaxLine: limit}) // AnswerInvalid off: the agent side
		write(t, h.In, `{"jsonrpc":"2.0","id":"r-1","method":"fs/read_text_file","params":{"path":"`+pad+`"}}`+"\n")
		assertErrorReply(t, recv(t, h.Out), `"r-1"`, CodeInvalidRequest)
		h.call(t, "2", "next/line")
	})
	t.Run("a response to our call", func(t *testing.T) {
		h := newConnHarness(t, StreamOptions{MaxLine: limit})
		done := make(chan error, 1)
		go func() {
			var res json.RawMessage
			done <- h.Conn.Call(t.Context(), "fs/read_text_file", map[string]string{"path": "/big.log"}, &res)
		}()
		req := decodeFields(t, recv(t, h.Out))
		write(t, h.In, `{"jsonrpc":"2.0","id":`+string(req["id"])+`,"result":{"content":"`+pad+`"}}`+"\n")
		select {
		case err := <-done:
			var rpcErr *jsonrpc2.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != CodeInternalError || !strings.Contains(rpcErr.Message, "exceeds the 1024-byte limit") {
				t.Fatalf("the call ended with %v, want an internal error naming the limit", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the call waits for ever for an answer that was too long")
		}
		h.call(t, "2", "next/line")
	})
	for _, c := range []struct{ name, line string }{
		{"the id after the long member", `{"jsonrpc":"2.0","method":"x","params":{"p":"` + pad + `"},"id":7}`},
		{"a notification", `{"jsonrpc":"2.0","method":"x","params":{"p":"` + pad + `"}}`},
		{"not JSON at its start", `{"jsonrpc" "2.0","id":7,"method":"x","params":{"p":"` + pad + `"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newConnHarness(t, StreamOptions{AnswerInvalid: true, MaxLine: limit})
			write(t, h.In, c.line+"\n")
			assertErrorReply(t, recv(t, h.Out), `null`, CodeInvalidRequest)
			h.call(t, "2", "next/line")
		})
	}
}

// TestStreamHugeLine: a 20 MiB message passes under the default limit
// (DESIGN §7: no size limit below 64 MiB).
func TestStreamHugeLine(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 20 MiB through jsonrpc2; skipped with -short to keep that run fast")
	}
	h := newConnHarness(t, StreamOptions{AnswerInvalid: true})
	big := paddedRequest(t, "1", 20<<20)
	write(t, h.In, big+"\n")
	f := decodeFields(t, recvWithin(t, h.Out, 90*time.Second))
	assertJSON(t, "id", f["id"], `1`)
	var res echoResult
	if err := json.Unmarshal(f["result"], &res); err != nil {
		t.Fatal(err)
	}
	if want := len(big) - len(`{"jsonrpc":"2.0","id":1,"method":"pad","params":`) - 1; res.ParamsLen != want {
		t.Errorf("handler saw %d bytes of params, want %d", res.ParamsLen, want)
	}
	h.call(t, "2", "after/huge")
}

// TestStreamIDLessResponse: Codex answers with id-less errors; jsonrpc2
// would resolve its pending call 0 with them (STYLE.md). They are dropped.
func TestStreamIDLessResponse(t *testing.T) {
	tests := []struct {
		name string
		line string
	}{
		{"error without id", `{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"}}`},
		{"error with null id", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`},
		{"result without id", `{"jsonrpc":"2.0","result":{"wrong":true}}`},
		{"result with null id", `{"jsonrpc":"2.0","id":null,"result":{"wrong":true}}`},
		{"negative id", `{"jsonrpc":"2.0","id":-0,"result":{"wrong":true}}`},
		{"fractional id", `{"jsonrpc":"2.0","id":0.0,"result":{"wrong":true}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, answer := range []bool{true, false} {
				t.Run(fmt.Sprintf("AnswerInvalid=%v", answer), func(t *testing.T) {
					h := newConnHarness(t, StreamOptions{AnswerInvalid: answer})
					// A bare jsonrpc2 call: its id is 0, the one an id-less
					// response would resolve.
					w, err := h.Conn.DispatchCall(t.Context(), "initialize", nil)
					if err != nil {
						t.Fatal(err)
					}
					f := decodeFields(t, recv(t, h.Out))
					assertJSON(t, "id of the first jsonrpc2 call", f["id"], `0`)

					write(t, h.In, tt.line+"\n")
					write(t, h.In, `{"jsonrpc":"2.0","id":0,"result":{"real":true}}`+"\n")
					ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
					defer cancel()
					var res json.RawMessage
					if err := w.Wait(ctx, &res); err != nil {
						t.Fatalf("call 0: %v", err)
					}
					assertJSON(t, "result of call 0", res, `{"real":true}`)
					// Nothing is ever answered to a response.
					h.call(t, "5", "still/alive")
				})
			}
		})
	}
}

// TestStreamIDLessResponsePeer: the same through a Peer, whose first id is 1.
func TestStreamIDLessResponsePeer(t *testing.T) {
	p, remote := newPeerHarness(t, StreamOptions{}, nil)
	hooked := make(chan *Message, 1)
	call, err := p.Call(t.Context(), "initialize", nil, nil, func(m *Message) { hooked <- m })
	if err != nil {
		t.Fatal(err)
	}
	f := decodeFields(t, recv(t, remote.Out))
	write(t, remote.In, `{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"}}`+"\n")
	write(t, remote.In, `{"jsonrpc":"2.0","id":`+string(f["id"])+`,"result":{"real":true}}`+"\n")
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	res, err := call.Wait(ctx)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	assertJSON(t, "result", res, `{"real":true}`)
	select {
	case m := <-hooked:
		assertJSON(t, "hooked result", m.Result, `{"real":true}`)
	default:
		t.Error("the response hook did not run before Wait returned")
	}
}

// TestStreamIDs: ids jsonrpc2 cannot echo exactly come back exactly as sent,
// byte for byte; ids it can echo come back with the same type and value.
func TestStreamIDs(t *testing.T) {
	tests := []struct {
		name string
		id   string
		raw  bool // compare the id member byte for byte
	}{
		{"zero", `0`, true},
		{"one", `1`, true},
		{"max int64", `9223372036854775807`, true},
		{"max int64 + 1", `9223372036854775808`, true},
		{"max uint64", `18446744073709551615`, true},
		{"huge", `18446744073709551616`, true},
		{"huger", `123456789012345678901234567890`, true},
		{"negative", `-1`, true},
		{"negative zero", `-0`, true},
		{"min int64", `-9223372036854775808`, true},
		{"fraction", `1.5`, true},
		{"integral fraction", `1.0`, true},
		{"exponent", `1e3`, true},
		{"upper exponent", `1E3`, true},
		{"signed exponent", `2.5e-3`, true},
		{"string", `"abc"`, false},
		{"empty string", `""`, false},
		{"numeric string", `"0"`, false},
		{"unicode string", `"é—😀"`, false},
		{"escaped string", `"\u00e9\u2014\ud83d\ude00"`, false},
		{"quotes and backslashes", `"a\"b\\c\/d"`, false},
		{"html characters", `"<a&b>"`, false},
		{"control characters", `"tab\there\nnl\u0001"`, false},
		{"looks like a token", `"acp-router-id:1"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newConnHarness(t, StreamOptions{AnswerInvalid: true})
			write(t, h.In, `{"jsonrpc":"2.0","id":`+tt.id+`,"method":"echo","params":{"a":1}}`+"\n")
			f := decodeFields(t, recv(t, h.Out))
			if tt.raw {
				if !bytes.Equal(f["id"], []byte(tt.id)) {
					t.Errorf("id = %s, want exactly %s", f["id"], tt.id)
				}
			} else {
				assertJSON(t, "id", f["id"], tt.id)
			}
			assertJSON(t, "result", f["result"], `{"method":"echo","paramsLen":7}`)
			if _, ok := f["error"]; ok {
				t.Errorf("unexpected error member %s", f["error"])
			}
		})
	}
}

// TestStreamIDsAnsweredLater: tokenized ids are restored when the answers
// come later and in another order, from WriteObject of a Conn.
func TestStreamIDsAnsweredLater(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	out := lines(t, outR)
	got := make(chan *jsonrpc2.Request, 16)
	s := NewStream(inR, outW, StreamOptions{AnswerInvalid: true})
	conn := jsonrpc2.NewConn(t.Context(), s, handlerFunc(func(_ context.Context, _ *jsonrpc2.Conn, r *jsonrpc2.Request) {
		got <- r
	}), quietLog)
	t.Cleanup(func() { conn.Close(); inW.Close(); outR.Close() })

	// Answered last to first: the peer's own id that looks like the stand-in
	// for -1 is answered first and must not take -1's place.
	ids := []string{`-1`, `1.5`, `1e3`, `18446744073709551616`, `7`, `"s"`, `"\u0000acp-router-id:1"`}
	for _, id := range ids {
		write(t, inW, `{"jsonrpc":"2.0","id":`+id+`,"method":"later"}`+"\n")
	}
	var reqs []*jsonrpc2.Request
	for range ids {
		select {
		case r := <-got:
			reqs = append(reqs, r)
		case <-time.After(waitTimeout):
			t.Fatal("timed out waiting for the requests")
		}
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		if err := conn.Reply(t.Context(), reqs[i].ID, i); err != nil {
			t.Fatal(err)
		}
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		f := decodeFields(t, recv(t, out))
		if !bytes.Equal(f["id"], []byte(ids[i])) {
			t.Errorf("answer %d: id = %s, want %s", i, f["id"], ids[i])
		}
		assertJSON(t, "result", f["result"], fmt.Sprint(i))
	}
}

// TestStreamNullIDRequest: jsonrpc2 would treat a null-id request as a
// notification and never answer; the stream answers it itself.
func TestStreamNullIDRequest(t *testing.T) {
	h := newConnHarness(t, StreamOptions{AnswerInvalid: true})
	write(t, h.In, `{"jsonrpc":"2.0","id":null,"method":"session/prompt","params":{}}`+"\n")
	assertErrorReply(t, recv(t, h.Out), `null`, CodeInvalidRequest)
	h.call(t, "1", "still/alive")
	select {
	case r := <-h.Notes:
		t.Errorf("the null-id request reached the handler as notification %q", r.Method)
	case r := <-h.Requests:
		if r.Method != "still/alive" {
			t.Errorf("the null-id request reached the handler as request %q", r.Method)
		}
	default:
		t.Error("still/alive did not reach the handler")
	}
}

// TestStreamIntercept: Intercept sees every valid message in order before
// the Conn; consumed ones never reach it.
func TestStreamIntercept(t *testing.T) {
	var seen []string
	h := newConnHarness(t, StreamOptions{AnswerInvalid: true, Intercept: func(m *Message) bool {
		seen = append(seen, m.Kind.String()+" "+m.Method)
		return m.Method == "eaten"
	}})
	write(t, h.In, strings.Join([]string{
		`{"jsonrpc":"2.0","method":"eaten"}`,
		`not json`,
		`{"jsonrpc":"2.0","method":"passed"}`,
		`{"jsonrpc":"2.0","id":1,"method":"eaten"}`,
		`{"jsonrpc":"2.0","id":2,"method":"handled"}`,
	}, "\n")+"\n")
	assertErrorReply(t, recv(t, h.Out), `null`, CodeParseError)
	if got := h.note(t).Method; got != "passed" {
		t.Errorf("notification %q reached the handler, want passed", got)
	}
	assertJSON(t, "id", decodeFields(t, recv(t, h.Out))["id"], `2`)
	// seen is written by the read loop; the answer to 2 was written after
	// the loop handed request 2 over, so it is complete.
	want := []string{"notification eaten", "notification passed", "request eaten", "request handled"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("Intercept saw %q, want %q", seen, want)
	}
}

// TestStreamBatch: lines read together are handed to Intercept between one
// Batch call and its end, which comes before the read loop waits for more
// (and when ReadObject returns); a line read alone is in no batch.
func TestStreamBatch(t *testing.T) {
	r, w := io.Pipe()
	var mu sync.Mutex
	var events []string
	note := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	s := NewStream(r, discardCloser{}, StreamOptions{
		Intercept: func(m *Message) bool { note(string(m.Method)); return true },
		Batch: func() func() {
			note("start")
			return func() { note("end") }
		},
	})
	done := make(chan error, 1)
	go func() {
		var v json.RawMessage
		done <- s.ReadObject(&v)
	}()
	w.Write([]byte(`{"jsonrpc":"2.0","method":"a"}` + "\n" + `{"jsonrpc":"2.0","method":"b"}` + "\n"))
	w.Write([]byte(`{"jsonrpc":"2.0","method":"c"}` + "\n"))
	w.Close()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("ReadObject: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(events, " "), "start a b end c"; got != want {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestStreamRepairsUTF8: a line whose strings hold bytes that are not UTF-8
// is passed on with each such run read as U+FFFD (the bytes a Rust peer's
// read_line would end its connection on never leave the router), in a
// member name too, short lines and pooled long ones alike; bytes that are
// not UTF-8 outside a string are still a parse error.
func TestStreamRepairsUTF8(t *testing.T) {
	long := strings.Repeat("é", 40<<10) // past the reader's buffer: a pooled line
	lines := []string{
		"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"s\",\"update\":{\"text\":\"a\xffb\xed\xa0\x80c\"}}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"k\xc3\":\"v\"}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"t\":\"" + long + "\xe9\"}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"t\":\"ok: \u00e9\u4e2d\U0001F600\"}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\xff}",
	}
	want := []string{
		"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"s\",\"update\":{\"text\":\"a\uFFFDb\uFFFDc\"}}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"k\uFFFD\":\"v\"}}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"t\":\"" + long + "\uFFFD\"}}",
		lines[3], // UTF-8 already: the same bytes
	}
	var got []string
	s := NewStream(io.NopCloser(strings.NewReader(strings.Join(lines, "\n")+"\n")), discardCloser{}, StreamOptions{
		Intercept: func(m *Message) bool {
			got = append(got, string(m.Raw))
			return true
		},
	})
	var v json.RawMessage
	if err := s.ReadObject(&v); !errors.Is(err, io.EOF) {
		t.Fatalf("ReadObject: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines passed on, want %d (the last is not JSON)", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %.120q, want %.120q", i, got[i], want[i])
		}
		if !utf8.ValidString(got[i]) {
			t.Errorf("line %d is not UTF-8", i)
		}
	}
}
