package acp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		err    error // nil, ErrParse, ErrNotRPC or ErrBatch
		kind   Kind
		id     string // the raw id; "" for absent
		method string
		params string // raw; "" for absent
		result string
		rpcErr string
	}{
		// Requests.
		{name: "request", line: `{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/"}}`, kind: KindRequest, id: `1`, method: "session/new", params: `{"cwd":"/"}`},
		{name: "request without params", line: `{"jsonrpc":"2.0","id":"a","method":"m"}`, kind: KindRequest, id: `"a"`, method: "m"},
		{name: "request with null params", line: `{"jsonrpc":"2.0","id":2,"method":"m","params":null}`, kind: KindRequest, id: `2`, method: "m", params: `null`},
		{name: "request with array params", line: `{"jsonrpc":"2.0","id":2,"method":"m","params":[1,2]}`, kind: KindRequest, id: `2`, method: "m", params: `[1,2]`},
		{name: "request, members in another order and spaced", line: ` { "params" : { } , "method" : "m" , "id" : 3 , "jsonrpc" : "2.0" } `, kind: KindRequest, id: `3`, method: "m", params: `{ }`},
		{name: "request with extra members", line: `{"jsonrpc":"2.0","id":1,"method":"m","_meta":{"a":1}}`, kind: KindRequest, id: `1`, method: "m"},
		{name: "extension method", line: `{"jsonrpc":"2.0","id":1,"method":"_zed/x"}`, kind: KindRequest, id: `1`, method: "_zed/x"},
		{name: "jsonrpc absent is tolerated", line: `{"id":1,"method":"m"}`, kind: KindRequest, id: `1`, method: "m"},
		{name: "null id request", line: `{"jsonrpc":"2.0","id":null,"method":"m"}`, kind: KindRequest, id: `null`, method: "m"},
		// Notifications.
		{name: "notification", line: `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}}`, kind: KindNotification, method: "session/update", params: `{"sessionId":"s"}`},
		{name: "notification without params", line: `{"jsonrpc":"2.0","method":"initialized"}`, kind: KindNotification, method: "initialized"},
		// Responses.
		{name: "result", line: `{"jsonrpc":"2.0","id":1,"result":{"a":1}}`, kind: KindResponse, id: `1`, result: `{"a":1}`},
		{name: "null result is a response", line: `{"jsonrpc":"2.0","id":1,"result":null}`, kind: KindResponse, id: `1`, result: `null`},
		{name: "scalar result", line: `{"jsonrpc":"2.0","id":"x","result":0}`, kind: KindResponse, id: `"x"`, result: `0`},
		{name: "error", line: `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`, kind: KindResponse, id: `1`, rpcErr: `{"code":-32601,"message":"no"}`},
		{name: "result with null error", line: `{"jsonrpc":"2.0","id":1,"result":1,"error":null}`, kind: KindResponse, id: `1`, result: `1`, rpcErr: `null`},
		{name: "id-less error (Codex)", line: `{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"}}`, kind: KindResponse, rpcErr: `{"code":-32600,"message":"x"}`},
		{name: "null id error", line: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`, kind: KindResponse, id: `null`, rpcErr: `{"code":-32700,"message":"x"}`},
		// Ids of every type.
		{name: "id zero", line: `{"jsonrpc":"2.0","id":0,"method":"m"}`, kind: KindRequest, id: `0`, method: "m"},
		{name: "id negative", line: `{"jsonrpc":"2.0","id":-1,"method":"m"}`, kind: KindRequest, id: `-1`, method: "m"},
		{name: "id fraction", line: `{"jsonrpc":"2.0","id":1.5,"method":"m"}`, kind: KindRequest, id: `1.5`, method: "m"},
		{name: "id exponent", line: `{"jsonrpc":"2.0","id":1e3,"method":"m"}`, kind: KindRequest, id: `1e3`, method: "m"},
		{name: "id huge", line: `{"jsonrpc":"2.0","id":18446744073709551616,"method":"m"}`, kind: KindRequest, id: `18446744073709551616`, method: "m"},
		{name: "id empty string", line: `{"jsonrpc":"2.0","id":"","method":"m"}`, kind: KindRequest, id: `""`, method: "m"},
		{name: "id escaped string", line: `{"jsonrpc":"2.0","id":"\u00e9\"","method":"m"}`, kind: KindRequest, id: `"\u00e9\""`, method: "m"},
		{name: "id object", line: `{"jsonrpc":"2.0","id":{"a":1},"method":"m"}`, err: ErrNotRPC},
		{name: "id array", line: `{"jsonrpc":"2.0","id":[1],"method":"m"}`, err: ErrNotRPC},
		{name: "id true", line: `{"jsonrpc":"2.0","id":true,"method":"m"}`, err: ErrNotRPC},
		{name: "id false on a response", line: `{"jsonrpc":"2.0","id":false,"result":1}`, err: ErrNotRPC},
		// Invalid envelopes; the id is kept when it could be read.
		{name: "error and result", line: `{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}`, err: ErrNotRPC, id: `1`},
		{name: "null result and error", line: `{"jsonrpc":"2.0","id":1,"result":null,"error":{"code":1,"message":"m"}}`, err: ErrNotRPC, id: `1`},
		{name: "method and result", line: `{"jsonrpc":"2.0","id":1,"method":"m","result":1}`, err: ErrNotRPC, id: `1`},
		{name: "method and error", line: `{"jsonrpc":"2.0","id":1,"method":"m","error":{"code":1,"message":"m"}}`, err: ErrNotRPC, id: `1`},
		{name: "method a number", line: `{"jsonrpc":"2.0","id":1,"method":1}`, err: ErrNotRPC, id: `1`},
		{name: "method null", line: `{"jsonrpc":"2.0","id":1,"method":null}`, err: ErrNotRPC, id: `1`},
		{name: "method empty", line: `{"jsonrpc":"2.0","id":1,"method":""}`, err: ErrNotRPC, id: `1`},
		{name: "method an object", line: `{"jsonrpc":"2.0","method":{}}`, err: ErrNotRPC},
		{name: "params a string", line: `{"jsonrpc":"2.0","id":4,"method":"m","params":"p"}`, err: ErrNotRPC, id: `4`},
		{name: "params a number", line: `{"jsonrpc":"2.0","method":"m","params":1}`, err: ErrNotRPC},
		{name: "params true", line: `{"jsonrpc":"2.0","id":4,"method":"m","params":true}`, err: ErrNotRPC, id: `4`},
		{name: "jsonrpc 1.0", line: `{"jsonrpc":"1.0","id":5,"method":"m"}`, err: ErrNotRPC, id: `5`},
		{name: "jsonrpc a number", line: `{"jsonrpc":2.0,"id":5,"method":"m"}`, err: ErrNotRPC, id: `5`},
		{name: "jsonrpc 1.0 with an object id", line: `{"jsonrpc":"1.0","id":{},"method":"m"}`, err: ErrNotRPC},
		{name: "jsonrpc null", line: `{"jsonrpc":null,"method":"m"}`, err: ErrNotRPC},
		{name: "error a string", line: `{"jsonrpc":"2.0","id":1,"error":"boom"}`, err: ErrNotRPC, id: `1`},
		{name: "error an array", line: `{"jsonrpc":"2.0","id":1,"error":[]}`, err: ErrNotRPC, id: `1`},
		{name: "null error only", line: `{"jsonrpc":"2.0","id":1,"error":null}`, err: ErrNotRPC, id: `1`},
		{name: "no method, result or error", line: `{"jsonrpc":"2.0","id":1}`, err: ErrNotRPC, id: `1`},
		{name: "unrelated object", line: `{"foo":1}`, err: ErrNotRPC},
		{name: "empty object", line: `{}`, err: ErrNotRPC},
		// Member names are case-sensitive (JSON-RPC 2.0 §4); a member that
		// differs from an envelope member only in case would be read one way
		// here and another way by jsonrpc2 or the far peer.
		{name: "METHOD", line: `{"jsonrpc":"2.0","id":1,"METHOD":"m"}`, err: ErrNotRPC},
		{name: "Method beside method", line: `{"jsonrpc":"2.0","id":1,"method":"session/prompt","Method":"fs/write_text_file"}`, err: ErrNotRPC},
		{name: "ID beside id", line: `{"jsonrpc":"2.0","id":1,"result":1,"ID":2}`, err: ErrNotRPC},
		{name: "Result", line: `{"jsonrpc":"2.0","id":1,"Result":1}`, err: ErrNotRPC},
		{name: "Params beside params", line: `{"jsonrpc":"2.0","method":"m","params":{},"PARAMS":{"a":1}}`, err: ErrNotRPC},
		{name: "nested Method is fine", line: `{"jsonrpc":"2.0","method":"m","params":{"Method":"x","ID":1}}`, kind: KindNotification, method: "m", params: `{"Method":"x","ID":1}`},
		{name: "duplicate id, the last wins as everywhere", line: `{"jsonrpc":"2.0","id":1,"method":"m","id":2}`, kind: KindRequest, id: `2`, method: "m"},
		// Not objects.
		{name: "number", line: `42`, err: ErrNotRPC},
		{name: "string", line: `"x"`, err: ErrNotRPC},
		{name: "true", line: `true`, err: ErrNotRPC},
		{name: "null", line: `null`, err: ErrNotRPC},
		{name: "empty batch", line: `[]`, err: ErrBatch},
		{name: "batch", line: `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, err: ErrBatch},
		{name: "indented batch", line: " \t[1]", err: ErrBatch},
		// Not JSON.
		{name: "empty", line: ``, err: ErrParse},
		{name: "blank", line: `   `, err: ErrParse},
		{name: "garbage", line: `hello`, err: ErrParse},
		{name: "truncated", line: `{"jsonrpc":"2.0","id":1`, err: ErrParse},
		{name: "truncated batch", line: `[{"jsonrpc":"2.0"`, err: ErrParse},
		{name: "trailing garbage", line: `{"jsonrpc":"2.0","method":"m"} x`, err: ErrParse},
		{name: "two objects", line: `{"jsonrpc":"2.0","method":"m"}{"jsonrpc":"2.0","method":"m"}`, err: ErrParse},
		{name: "single quotes", line: `{'jsonrpc':'2.0'}`, err: ErrParse},
		{name: "trailing comma", line: `{"jsonrpc":"2.0","method":"m",}`, err: ErrParse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Classify([]byte(tt.line))
			if m == nil {
				t.Fatal("Classify returned a nil message")
			}
			if !bytes.Equal(m.Raw, []byte(tt.line)) {
				t.Errorf("Raw = %q, want the line", m.Raw)
			}
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				for _, other := range []error{ErrParse, ErrNotRPC, ErrBatch} {
					if other != tt.err && errors.Is(err, other) {
						t.Errorf("err = %v also matches %v", err, other)
					}
				}
				if tt.id != "" && string(m.ID) != tt.id {
					t.Errorf("ID = %s, want %s kept for the error reply", m.ID, tt.id)
				}
				if tt.id == "" && m.ID != nil && !validID(m.ID) {
					t.Errorf("ID = %s: an unusable id is kept for the reply", m.ID)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want %s", err, tt.kind)
			}
			if m.Kind != tt.kind {
				t.Errorf("Kind = %s, want %s", m.Kind, tt.kind)
			}
			if m.Method != tt.method {
				t.Errorf("Method = %q, want %q", m.Method, tt.method)
			}
			for _, f := range []struct {
				name string
				got  json.RawMessage
				want string
			}{
				{"ID", m.ID, tt.id},
				{"Params", m.Params, tt.params},
				{"Result", m.Result, tt.result},
				{"Error", m.Error, tt.rpcErr},
			} {
				if f.want == "" {
					if f.got != nil {
						t.Errorf("%s = %s, want absent", f.name, f.got)
					}
				} else if string(f.got) != f.want {
					t.Errorf("%s = %s, want %s", f.name, f.got, f.want)
				}
			}
			if want := tt.id != "" && tt.id != "null"; m.HasID() != want {
				t.Errorf("HasID() = %v, want %v", m.HasID(), want)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindInvalid: "invalid", KindRequest: "request", KindNotification: "notification", KindResponse: "response", Kind(99): "invalid"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

// fixtureMsg is one message of a real agent's transcript.
type fixtureMsg struct {
	file string
	line int
	dir  string // "client->agent", "agent->client" or "" (raw wire file)
	msg  json.RawMessage
}

// fixtures reads every transcript in ../testdata/real-agents (copied from
// shared/fixtures/real-agents). Most files hold {"dir":…,"msg":{…}} lines;
// a *.wire.jsonl file holds the raw wire messages themselves.
func fixtures(tb testing.TB) []fixtureMsg {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "real-agents", "*.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		tb.Fatal("no fixtures in testdata/real-agents")
	}
	var out []fixtureMsg
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 64<<20)
		n := 0
		for sc.Scan() {
			n++
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var rec struct {
				Dir string          `json:"dir"`
				Msg json.RawMessage `json:"msg"`
			}
			if err := json.Unmarshal(line, &rec); err != nil {
				tb.Fatalf("%s:%d: %v", file, n, err)
			}
			fm := fixtureMsg{file: filepath.Base(file), line: n, dir: rec.Dir, msg: rec.Msg}
			if rec.Msg == nil {
				// The wire layout: the line is the message.
				if rec.Dir != "" {
					tb.Fatalf("%s:%d: dir without msg", file, n)
				}
				fm.msg = bytes.Clone(line)
			}
			out = append(out, fm)
		}
		if err := sc.Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// expectedKind works a message's kind out independently of Classify.
func expectedKind(tb testing.TB, msg []byte) Kind {
	tb.Helper()
	var f map[string]json.RawMessage
	if err := json.Unmarshal(msg, &f); err != nil {
		tb.Fatal(err)
	}
	_, hasMethod := f["method"]
	_, hasID := f["id"]
	switch {
	case hasMethod && hasID:
		return KindRequest
	case hasMethod:
		return KindNotification
	default:
		return KindResponse
	}
}

// TestClassifyFixtures: every message real agents and clients exchanged
// classifies without error and with the right kind.
func TestClassifyFixtures(t *testing.T) {
	msgs := fixtures(t)
	counts := map[Kind]int{}
	wire := 0
	for _, fm := range msgs {
		if fm.dir == "" {
			wire++
		}
		m, err := Classify(fm.msg)
		if err != nil {
			t.Errorf("%s:%d: %v: %.120s", fm.file, fm.line, err, fm.msg)
			continue
		}
		want := expectedKind(t, fm.msg)
		if m.Kind != want {
			t.Errorf("%s:%d: kind %s, want %s", fm.file, fm.line, m.Kind, want)
		}
		counts[m.Kind]++
		if m.Kind == KindResponse && !m.HasID() {
			t.Errorf("%s:%d: a recorded response without an id", fm.file, fm.line)
		}
		switch fm.dir {
		case "client->agent", "agent->client", "":
		default:
			t.Errorf("%s:%d: unknown direction %q", fm.file, fm.line, fm.dir)
		}
	}
	if counts[KindRequest] == 0 || counts[KindNotification] == 0 || counts[KindResponse] == 0 || wire == 0 {
		t.Errorf("fixtures cover too little: %v, %d wire-layout lines", counts, wire)
	}
	t.Logf("%d fixture messages: %d requests, %d notifications, %d responses (%d in the wire layout)",
		len(msgs), counts[KindRequest], counts[KindNotification], counts[KindResponse], wire)
}

// TestStreamFixtures: the recorded messages pass the stream into a
// jsonrpc2.Conn unharmed, in order, requests answered with their own ids.
func TestStreamFixtures(t *testing.T) {
	msgs := fixtures(t)
	h := newConnHarness(t, StreamOptions{AnswerInvalid: true})
	for _, fm := range msgs {
		var compact bytes.Buffer
		if err := json.Compact(&compact, fm.msg); err != nil {
			t.Fatal(err)
		}
		switch expectedKind(t, fm.msg) {
		case KindRequest:
			write(t, h.In, compact.String()+"\n")
			got := decodeFields(t, recv(t, h.Out))
			var sent map[string]json.RawMessage
			json.Unmarshal(fm.msg, &sent)
			if !bytes.Equal(got["id"], sent["id"]) {
				t.Errorf("%s:%d: answer id %s, want %s", fm.file, fm.line, got["id"], sent["id"])
			}
		case KindNotification:
			write(t, h.In, compact.String()+"\n")
			r := h.note(t)
			var sent struct {
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			json.Unmarshal(fm.msg, &sent)
			if r.Method != sent.Method || r.Params == nil || !jsonEqual(*r.Params, sent.Params) {
				t.Errorf("%s:%d: handler got %s %s", fm.file, fm.line, r.Method, *r.Params)
			}
		}
		// Responses would resolve nothing here (the Conn sent no calls).
	}
}
