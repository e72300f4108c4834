package acp

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// FuzzAppendLines: the fast path's raw-byte id rewriting (AppendRequest,
// AppendResponse: a request or a response given another id without
// decoding it, issue 16) against a decode-rewrite-encode reference: decode
// the line into a map, replace the id, keep the members the builder keeps,
// encode. The two must be equal as JSON, be one line, and classify as the
// same message with exactly the new id. The new id is the line's own id,
// as read (any odd shape Classify accepts: escapes, negative, fractions,
// huge), or a number.
func FuzzAppendLines(f *testing.F) {
	for i, line := range seedLines(f) {
		f.Add(line, i%2 == 0, uint64(i))
	}
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":"caf\u00e9 \ud83d\ude00","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"<a&b>\u2028"}]}}`,
		`{"jsonrpc":"2.0","id":-0.5e-3,"method":"session/prompt","params":{"sessionId":"s"}}`,
		`{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{"stopReason":"end_turn"}}`,
		`{"jsonrpc":"2.0","id":"\"\\\/\b\f\n\r\t","result":{"a":[1,2,{"b":null}]}}`,
		`{ "jsonrpc" : "2.0" , "id" : 7 , "method" : "fs/read_text_file" , "params" : { "path" : "/x" } , "extra" : 1 }`,
		`{"id":1,"method":"m\u0041","params":[1,"2"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1},"params":{"b":2}}`,
		`{"jsonrpc":"2.0","id":"x","result":null}`,
	} {
		f.Add([]byte(s), true, uint64(0))
		f.Add([]byte(s), false, uint64(1<<63))
	}
	f.Fuzz(func(t *testing.T, line []byte, ownID bool, num uint64) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // never one line of the reader
		}
		m, err := Classify(line)
		if err != nil || (m.Kind != KindRequest && (m.Kind != KindResponse || m.Result == nil)) {
			return
		}
		id := json.RawMessage(strconv.FormatUint(num, 10))
		if ownID && m.HasID() {
			id = m.ID
		}
		var got []byte
		keep := []string{"jsonrpc", "id", "method", "params"}
		if m.Kind == KindRequest {
			got = AppendRequest(nil, id, m.Method, m.Params)
		} else {
			got = AppendResponse(nil, id, m.Result)
			keep = []string{"jsonrpc", "id", "result"}
		}

		var fields map[string]json.RawMessage
		if err := json.Unmarshal(line, &fields); err != nil {
			t.Fatalf("Classify accepted what json.Unmarshal refuses: %v", err)
		}
		ref := map[string]json.RawMessage{}
		for _, k := range keep {
			if v, ok := fields[k]; ok {
				ref[k] = v
			}
		}
		ref["jsonrpc"] = json.RawMessage(`"2.0"`)
		ref["id"] = id
		want, err := json.Marshal(ref)
		if err != nil {
			t.Fatalf("reference: %v", err)
		}

		if bytes.IndexByte(got, '\n') >= 0 {
			t.Fatalf("not one line: %q", got)
		}
		if !jsonEqual(got, want) {
			t.Fatalf("raw rewrite differs from the reference:\n got %s\nwant %s", got, want)
		}
		g, err := Classify(got)
		if err != nil {
			t.Fatalf("rewritten line refused: %v: %s", err, got)
		}
		if g.Kind != m.Kind || g.Method != m.Method || !bytes.Equal(g.ID, id) || IDKey(g.ID) != IDKey(id) {
			t.Fatalf("rewritten line reads as %v %q id %s, want %v %q id %s", g.Kind, g.Method, g.ID, m.Kind, m.Method, id)
		}
		if !bytes.Equal(g.Params, m.Params) || !bytes.Equal(g.Result, m.Result) {
			t.Fatalf("params or result not carried byte for byte: %s", got)
		}
	})
}
