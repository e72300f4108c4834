package acp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sourcegraph/jsonrpc2"
)

// testPrescan is shaped like the router's: a session/update's params and
// some of its update's members.
var testPrescan = &Prescan{
	Method:  MethodSessionUpdate,
	Names:   []string{"sessionId", "update"},
	In:      1,
	InNames: []string{"sessionUpdate", "toolCallId", "content", "_meta", "title"},
}

// checkPrescan holds ClassifyPrescan to Classify (the same message, the
// same error) and, when it prescanned, to MembersOfValidIn of the params.
func checkPrescan(t *testing.T, line []byte, p *Prescan) (prescanned bool) {
	t.Helper()
	want, wantErr := Classify(line)
	m, err := ClassifyPrescan(line, p)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: error %v, Classify %v", line, err, wantErr)
	}
	if m.Kind != want.Kind || m.Method != want.Method || !bytes.Equal(m.ID, want.ID) || !bytes.Equal(m.Params, want.Params) ||
		!bytes.Equal(m.Result, want.Result) || !bytes.Equal(m.Error, want.Error) || (m.Params == nil) != (want.Params == nil) {
		t.Fatalf("%q: message %+v, Classify %+v", line, m, want)
	}
	out, inOut := make([]json.RawMessage, len(p.Names)), make([]json.RawMessage, len(p.InNames))
	checkParamsOfValid(t, line, p, want, wantErr)
	if !m.Prescanned(p, out, inOut) {
		return false
	}
	if err != nil || m.Method != p.Method {
		t.Fatalf("%q: prescanned a message that is not a %s (err %v)", line, p.Method, err)
	}
	wantOut, wantIn := make([]json.RawMessage, len(p.Names)), make([]json.RawMessage, len(p.InNames))
	if err := MembersOfValidIn(m.Params, p.Names, wantOut, p.In, p.InNames, wantIn); err != nil {
		t.Fatalf("%q: prescanned params that MembersOfValidIn refuses: %v", line, err)
	}
	for i := range out {
		if !bytes.Equal(out[i], wantOut[i]) || (out[i] == nil) != (wantOut[i] == nil) || cap(out[i]) != len(out[i]) {
			t.Fatalf("%q: %s = %q, MembersOfValidIn %q", line, p.Names[i], out[i], wantOut[i])
		}
	}
	for i := range inOut {
		if !bytes.Equal(inOut[i], wantIn[i]) || (inOut[i] == nil) != (wantIn[i] == nil) || cap(inOut[i]) != len(inOut[i]) {
			t.Fatalf("%q: %s = %q, MembersOfValidIn %q", line, p.InNames[i], inOut[i], wantIn[i])
		}
	}
	if other := (&Prescan{Method: p.Method, Names: p.Names, In: p.In, InNames: p.InNames}); m.Prescanned(other, out, inOut) {
		t.Fatalf("%q: prescanned for another Prescan", line)
	}
	return true
}

// checkParamsOfValid: on a line Classify accepted, ParamsOfValid reads
// what MembersOfValidIn reads of the params, or fails when they are not an
// object.
func checkParamsOfValid(t *testing.T, line []byte, p *Prescan, m *Message, err error) {
	t.Helper()
	out, inOut := make([]json.RawMessage, len(p.Names)), make([]json.RawMessage, len(p.InNames))
	gotErr := ParamsOfValid(line, p, out, inOut) // must not panic, whatever line is
	if err != nil {
		return
	}
	if len(m.Params) == 0 || m.Params[0] != '{' {
		if gotErr == nil {
			t.Fatalf("%q: ParamsOfValid read params that are not an object", line)
		}
		return
	}
	if gotErr != nil {
		t.Fatalf("%q: ParamsOfValid: %v", line, gotErr)
	}
	wantOut, wantIn := make([]json.RawMessage, len(p.Names)), make([]json.RawMessage, len(p.InNames))
	if err := MembersOfValidIn(m.Params, p.Names, wantOut, p.In, p.InNames, wantIn); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if !bytes.Equal(out[i], wantOut[i]) || (out[i] == nil) != (wantOut[i] == nil) {
			t.Fatalf("%q: ParamsOfValid %s = %q, MembersOfValidIn %q", line, p.Names[i], out[i], wantOut[i])
		}
	}
	for i := range inOut {
		if !bytes.Equal(inOut[i], wantIn[i]) || (inOut[i] == nil) != (wantIn[i] == nil) {
			t.Fatalf("%q: ParamsOfValid %s = %q, MembersOfValidIn %q", line, p.InNames[i], inOut[i], wantIn[i])
		}
	}
}

// TestPrescan: a session/update whose method comes first is read in the
// same pass, and gives what a second scan gives; the other shapes fall
// back (Prescanned false) and are classified as Classify does.
func TestPrescan(t *testing.T) {
	for _, tt := range []struct {
		line string
		pre  bool
	}{
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi \"x\""}}}}`, true},
		{`{"method":"session/update","jsonrpc":"2.0","params":{"update":{"toolCallId":"t","sessionUpdate":"tool_call","title":null},"sessionId":"s","_meta":{}}}`, true},
		{` { "jsonrpc" : "2.0" , "method" : "session/update" , "params" : { "sessionId" : "s" , "update" : { } } } `, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"content":1,"content":2}}}`, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"update":{"content":1},"update":"x","sessionId":"s"}}`, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"update":{"content":1},"update":{"title":"t"}}}`, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"s\u0065ssionId":"s","upd\u0061te":{"_m\u0065ta":{"a":1}}}}`, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a"},"params":{"sessionId":"b"}}`, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{}}`, true},
		{`{"jsonrpc":"2.0","params":{"sessionId":"s","update":{}},"method":"session/update"}`, false}, // params first
		{`{"jsonrpc":"2.0","method":"session/upd\u0061te","params":{"sessionId":"s","update":{}}}`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":null}`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":[1]}`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a"},"method":"session/prompt"}`, false},
		{`{"jsonrpc":"2.0","method":"session/prompt","params":{"sessionId":"a"},"method":"session/update"}`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a"},"params":null}`, false},
		{`{"jsonrpc":"2.0","id":1,"method":"session/update","params":{"sessionId":"a"}}`, true}, // a request: still read
		{`{"jsonrpc":"2.0","method":"session/prompt","params":{"sessionId":"s"}}`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"x":tru}}}`, false}, // invalid
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}x`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s" "update":{}}}`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"a":` + strings.Repeat("[", 9997) + strings.Repeat("]", 9997) + `}}}`, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"a":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}}}`, false},
	} {
		if got := checkPrescan(t, []byte(tt.line), testPrescan); got != tt.pre {
			t.Errorf("%.120s: prescanned %v, want %v", tt.line, got, tt.pre)
		}
	}
	// Every real agent's session/update is read in one pass.
	n := 0
	for _, line := range seedLines(t) {
		m, err := Classify(line)
		if err != nil || m.Method != MethodSessionUpdate || m.Params == nil || m.Params[0] != '{' {
			continue
		}
		n++
		if !checkPrescan(t, line, testPrescan) {
			t.Errorf("a real agent's update was not prescanned: %.200s", line)
		}
	}
	if n < 100 {
		t.Errorf("only %d session/update lines in the fixtures", n)
	}
	if (&Prescan{Method: "m", Names: []string{"a"}, In: 1}).Check() == nil {
		t.Error("In out of Names: no error")
	}
	if testPrescan.Check() != nil {
		t.Error(testPrescan.Check())
	}
}

// FuzzPrescan: ClassifyPrescan classifies as Classify does, and what it
// (and ParamsOfValid) reads of the params is what MembersOfValidIn reads;
// neither ever panics.
func FuzzPrescan(f *testing.F) {
	for _, line := range seedLines(f) {
		f.Add(line, "update", "content")
		if len(line) > 2 {
			f.Add(line[:len(line)/2], "sessionId", "x")
		}
	}
	f.Add([]byte(`{"method":"session/update","params":{"update":{"a":1},"update":{"b":2},"update":3}}`), "update", "a")
	f.Add([]byte(`{"method":"session/update","params":{"a\u0062":{"b":1}}}`), "ab", "b")
	f.Fuzz(func(t *testing.T, line []byte, name, inner string) {
		p := &Prescan{Method: MethodSessionUpdate, Names: []string{"sessionId", name}, In: 1, InNames: []string{inner, "_meta"}}
		checkPrescan(t, line, p)
	})
}

// FuzzAppendString: AppendString writes the JSON string a decoder reads
// back as json.Marshal's encoding of s reads; RawID gives back the id
// jsonrpc2 decodes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", `a"b`, `\`, "\x00", "<&>", "é", "\xff", "\u2028", "0199a3c2-7f1e"} {
		f.Add(s, uint64(7))
	}
	f.Fuzz(func(t *testing.T, s string, n uint64) {
		got := AppendString([]byte("x"), s)
		if got[0] != 'x' {
			t.Fatal("dst not kept")
		}
		want, _ := json.Marshal(s)
		var a, b string
		if err := json.Unmarshal(got[1:], &a); err != nil {
			t.Fatalf("%q: %s: %v", s, got[1:], err)
		}
		json.Unmarshal(want, &b)
		if a != b {
			t.Fatalf("%q: AppendString reads back %q, json.Marshal %q", s, a, b)
		}
		for _, id := range []jsonrpc2.ID{{Num: n}, {Str: s, IsString: true}} {
			var back jsonrpc2.ID
			if err := json.Unmarshal(RawID(id), &back); err != nil {
				t.Fatalf("RawID(%+v) = %s: %v", id, RawID(id), err)
			}
			ref, _ := id.MarshalJSON()
			var refBack jsonrpc2.ID
			json.Unmarshal(ref, &refBack)
			if back != refBack {
				t.Fatalf("RawID(%+v) = %s reads %+v; MarshalJSON reads %+v", id, RawID(id), back, refBack)
			}
		}
	})
}

// decodeUseNumber decodes JSON keeping numbers as written.
func decodeUseNumber(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// checkReplace holds ReplaceInParams to a decode of the line with the
// replacements set in the decoded params: the same JSON, all else kept.
func checkReplace(t *testing.T, line []byte, reps []Replacement) (ok bool) {
	t.Helper()
	m, err := Classify(line)
	if err != nil {
		return false
	}
	out, ok := m.ReplaceInParams(reps) // must not panic
	if !ok {
		return false
	}
	if bytes.IndexByte(out, '\n') >= 0 && bytes.IndexByte(line, '\n') < 0 {
		t.Fatalf("%q: a line break in %q", line, out)
	}
	want, err := decodeUseNumber(line)
	if err != nil {
		t.Fatal(err)
	}
	params := want.(map[string]any)["params"]
	for _, r := range reps {
		obj := params.(map[string]any)
		for _, k := range r.Path[:len(r.Path)-1] {
			next, isObj := obj[k].(map[string]any)
			if !isObj {
				t.Fatalf("%q: replaced %v, which a decode does not find", line, r.Path)
			}
			obj = next
		}
		if _, there := obj[r.Path[len(r.Path)-1]]; !there {
			t.Fatalf("%q: replaced %v, which a decode does not find", line, r.Path)
		}
		// As a JSON string holds it (invalid UTF-8 becomes U+FFFD).
		b, _ := json.Marshal(r.Value)
		var v string
		json.Unmarshal(b, &v)
		obj[r.Path[len(r.Path)-1]] = v
	}
	got, err := decodeUseNumber(out)
	if err != nil {
		t.Fatalf("%q: ReplaceInParams gave %q: %v", line, out, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: ReplaceInParams gave\n%s\nwant the decode %v", line, out, want)
	}
	// The same on the params alone.
	po, ok := ReplaceInValid(m.Params, reps)
	if !ok {
		t.Fatalf("%q: ReplaceInValid refused what ReplaceInParams did", line)
	}
	if got, err := decodeUseNumber(po); err != nil || !reflect.DeepEqual(got, params) {
		t.Fatalf("%q: ReplaceInValid gave %s (%v), want %v", line, po, err, params)
	}
	return true
}

// TestReplaceInParams: the relay's id rewrite keeps every other byte and
// gives what setting the ids in a decode gives; paths through repeated or
// non-object members, or not there, take the slow path.
func TestReplaceInParams(t *testing.T) {
	sid := []string{"sessionId"}
	tool := []string{"update", "toolCallId"}
	meta := []string{"update", "_meta", "claudeCode", "toolUseId"}
	for _, tt := range []struct {
		line string
		reps []Replacement
		ok   bool
	}{
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x\"y"}}}}`, []Replacement{{sid, "r-1", nil}}, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"update":{"toolCallId":"t1","sessionUpdate":"tool_call","_meta":{"claudeCode":{"toolUseId":"t1"}}},"sessionId":"a"},"x":1}`, []Replacement{{sid, "r\"1\n", nil}, {tool, "t9", nil}, {meta, "t9", nil}}, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","sessionId":"b","update":{}}}`, []Replacement{{sid, "r", nil}}, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"s\u0065ssionId":"a"}}`, []Replacement{{sid, "r", nil}}, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":7}}`, []Replacement{{sid, "r", nil}}, true},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"update":{"toolCallId":"a"},"update":{"toolCallId":"b"}}}`, []Replacement{{tool, "t", nil}}, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"update":"x"}}`, []Replacement{{tool, "t", nil}}, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"update":{}}}`, []Replacement{{tool, "t", nil}}, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a"},"params":{"sessionId":"b"}}`, []Replacement{{sid, "r", nil}}, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"update":{"toolCallId":"a"}}}`, []Replacement{{[]string{"update"}, "u", nil}, {tool, "t", nil}}, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a"}}`, []Replacement{{sid, "r", nil}, {sid, "q", nil}}, false},
		{`{"jsonrpc":"2.0","method":"session/update","params":[1]}`, []Replacement{{sid, "r", nil}}, false},
	} {
		if got := checkReplace(t, []byte(tt.line), tt.reps); got != tt.ok {
			t.Errorf("%s: ReplaceInParams ok = %v, want %v", tt.line, got, tt.ok)
		}
	}
	if _, ok := (&Message{Raw: []byte(`{"params":{"sessionId":"a"}}`), Params: []byte(`{"sessionId":"a"}`)}).ReplaceInParams([]Replacement{{sid, "r", nil}}); ok {
		t.Error("a Message Classify did not read: replaced")
	}
	// Every real agent's update, with its session id replaced.
	for _, line := range seedLines(t) {
		m, err := Classify(line)
		if err != nil || m.Method != MethodSessionUpdate {
			continue
		}
		if !checkReplace(t, line, []Replacement{{sid, "router-session", nil}}) {
			t.Errorf("a real agent's update took the slow path: %.200s", line)
		}
	}
}

// FuzzReplaceInParams: on any line, ReplaceInParams never panics, and when
// it replaces, the result is the decode's with the values set.
func FuzzReplaceInParams(f *testing.F) {
	for _, line := range seedLines(f) {
		f.Add(line, "sessionId", "update", "toolCallId", "x")
	}
	f.Add([]byte(`{"method":"m","params":{"a":{"b":1,"b":2},"c":3}}`), "c", "a", "b", "v\u2028")
	f.Fuzz(func(t *testing.T, line []byte, k1, k2, k3, v string) {
		checkReplace(t, line, []Replacement{{[]string{k1}, v, nil}, {[]string{k2, k3}, v + "2", nil}})
	})
}

// TestRewrite: a permission request's options (raw), session id and tool
// call id written in one pass, every other byte kept; where one pass cannot
// (a member absent, a path under another name), each set in turn, and one
// that cannot be set left out, the others made.
func TestRewrite(t *testing.T) {
	opts := json.RawMessage(`[{"optionId":"o","name":"Allow once","kind":"allow_once"}]`)
	reps := []Replacement{{Path: []string{"options"}, Raw: opts}, {Path: []string{"sessionId"}, Value: "r-1"}, {Path: []string{"toolCall", "toolCallId"}, Value: "t9"}}
	for _, c := range []struct{ in, want string }{
		{`{"toolCall": {"toolCallId":"t1","title":"x"}, "sessionId":"a","options":[{"optionId":"o","name":"Reject","kind":"allow_once"}],"z":1}`,
			`{"toolCall": {"toolCallId":"t9","title":"x"}, "sessionId":"r-1","options":[{"optionId":"o","name":"Allow once","kind":"allow_once"}],"z":1}`},
		{`{"sessionId":"a","toolCall":{"toolCallId":"t1"}}`,
			`{"options":[{"optionId":"o","name":"Allow once","kind":"allow_once"}],"sessionId":"r-1","toolCall":{"toolCallId":"t9"}}`},
	} {
		out, err := Rewrite(json.RawMessage(c.in), reps)
		if err != nil || string(out) != c.want {
			t.Errorf("Rewrite(%s) = %s, %v; want %s", c.in, out, err, c.want)
		}
	}
	in := `{"sessionId":"a","ToolCall":{"toolCallId":"t1"},"options":[]}`
	out, err := Rewrite(json.RawMessage(in), reps)
	if want := `{"sessionId":"r-1","ToolCall":{"toolCallId":"t1"},"options":[{"optionId":"o","name":"Allow once","kind":"allow_once"}]}`; err == nil || string(out) != want {
		t.Errorf("Rewrite(%s) = %s, %v; want %s and an error for toolCall.toolCallId", in, out, err, want)
	}
}
