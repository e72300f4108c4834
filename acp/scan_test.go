package acp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
)

// classifyMap is Classify as it was before the scanner (issue 6): the line
// decoded into a map by encoding/json. It is the reference the scanner must
// agree with on every input, error text included.
func classifyMap(line []byte) (*Message, error) {
	m := &Message{Raw: line}
	if !utf8.Valid(line) {
		return m, ErrParse // JSON text is UTF-8 (RFC 8259 §8.1); encoding/json lets it pass
	}
	trimmed := bytes.TrimLeft(line, " \t")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if !json.Valid(line) {
			return m, ErrParse
		}
		return m, ErrBatch
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return m, fmt.Errorf("%w: top level must be an object", ErrNotRPC)
		}
		return m, ErrParse
	}
	jsonrpc, method := fields["jsonrpc"], fields["method"]
	m.ID, m.Params, m.Result, m.Error = fields["id"], fields["params"], fields["result"], fields["error"]
	if m.ID != nil && !validID(m.ID) {
		m.ID = nil
		return m, fmt.Errorf("%w: id must be a string, a number or null", ErrNotRPC)
	}
	if jsonrpc != nil && string(jsonrpc) != `"2.0"` {
		return m, fmt.Errorf(`%w: "jsonrpc" must be "2.0"`, ErrNotRPC)
	}
	var folded []string
	for k := range fields {
		if name := foldedMember(k); name != "" {
			folded = append(folded, fmt.Sprintf("%q is not %q", k, name))
		}
	}
	if len(folded) > 0 {
		// Map order is random: the reference lists them all and the
		// comparison accepts any one.
		return m, fmt.Errorf("%w: folded %s", ErrNotRPC, strings.Join(folded, "|"))
	}
	hasResult := m.Result != nil
	hasError := m.Error != nil && string(m.Error) != "null"
	switch {
	case method != nil:
		if hasResult || hasError {
			return m, fmt.Errorf("%w: a message cannot have both method and result/error", ErrNotRPC)
		}
		if err := json.Unmarshal(method, &m.Method); err != nil || m.Method == "" {
			return m, fmt.Errorf("%w: method must be a non-empty string", ErrNotRPC)
		}
		if m.ID == nil {
			m.Kind = KindNotification
		} else {
			m.Kind = KindRequest
		}
		if m.Params != nil && string(m.Params) != "null" && !isObjectOrArray(m.Params) {
			return m, fmt.Errorf("%w: params must be an object or array", ErrNotRPC)
		}
	case hasResult && hasError:
		return m, fmt.Errorf("%w: a response cannot have both result and error", ErrNotRPC)
	case hasResult || hasError:
		m.Kind = KindResponse
		if hasError && !isObject(m.Error) {
			return m, fmt.Errorf("%w: error must be an object", ErrNotRPC)
		}
	default:
		return m, fmt.Errorf("%w: no method, result or error", ErrNotRPC)
	}
	return m, nil
}

// sameClassification fails unless Classify and the map reference agree.
func sameClassification(t *testing.T, line []byte) {
	t.Helper()
	got, gotErr := Classify(line)
	want, wantErr := classifyMap(line)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: err %v, reference %v", line, gotErr, wantErr)
	}
	if gotErr != nil {
		if g, w := gotErr.Error(), wantErr.Error(); g != w {
			rest, ok := strings.CutPrefix(w, ErrNotRPC.Error()+": folded ")
			if !ok || !strings.HasPrefix(g, ErrNotRPC.Error()+": member ") ||
				!strings.Contains("|"+rest+"|", "|"+strings.TrimSuffix(strings.TrimPrefix(g, ErrNotRPC.Error()+": member "), " (names are case-sensitive)")+"|") {
				t.Fatalf("%q: err %q, reference %q", line, g, w)
			}
		}
	}
	if got.Kind != want.Kind || got.Method != want.Method || !bytes.Equal(got.Raw, want.Raw) {
		t.Fatalf("%q: kind %s method %q, reference %s %q", line, got.Kind, got.Method, want.Kind, want.Method)
	}
	for _, f := range []struct {
		name      string
		got, want json.RawMessage
	}{{"id", got.ID, want.ID}, {"params", got.Params, want.Params}, {"result", got.Result, want.Result}, {"error", got.Error, want.Error}} {
		if (f.got == nil) != (f.want == nil) || !bytes.Equal(f.got, f.want) {
			t.Fatalf("%q: %s %q, reference %q", line, f.name, f.got, f.want)
		}
		if cap(f.got) != len(f.got) {
			t.Fatalf("%q: %s has room to grow into the line", line, f.name)
		}
	}
}

// scanCases are the inputs where a hand-written scanner could differ from
// encoding/json: escapes in names, case folding beyond ASCII, whitespace,
// nesting, numbers and literals at the edges.
var scanCases = []string{
	// UTF-8 at the edges (RFC 8259 §8.1): overlong, a surrogate, past
	// U+10FFFF, cut short (in a word and in the tail), 2-, 3- and 4-byte
	// sequences across a word's end.
	"{\"method\":\"\xc0\x80\"}", "{\"method\":\"\xed\xa0\x80\"}", "{\"method\":\"\xf4\x90\x80\x80\"}",
	"{\"method\":\"\xe4\xb8\"}", "{\"method\":\"12345\xe4\xb8\"}", "{\"method\":\"1234567\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"}",
	"{\"method\":\"\xef\xbf\xbf\xee\x80\x80\xe0\xa0\x80\xf0\x90\x80\x80\"}", "{\"method\":\"\xe0\x80\x80\"}",
	`{"\u006dethod":"m","jsonrpc":"2.0"}`,     // an escaped exact name
	`{"\u004dethod":"m","method":"n"}`,        // an escaped folded name
	`{"method":"m","param\u017f":{}}`,         // ſ folds to s
	"{\"method\":\"m\",\"param\u017f\":{}}",   // the same, unescaped
	"{\"method\":\"m\",\"\u212aey\":1}",       // Kelvin sign: folds to k, no member has one
	"{\"method\":\"m\",\"id\xff\":1}",         // invalid UTF-8 in a name
	"{\"method\":\"\xffx\"}",                  // and in the method
	`{"method":"caf\u00e9"}`,                  // an escape in the method
	"{\"method\":\"café\"}",                   // non-ASCII in the method
	`{"method":"session/update","params":[]}`, // a known method
	`{"method":"session/updates"}`,            // almost one
	`{"jsonrpc":"2\u002e0","method":"m"}`,     // "2.0" spelled otherwise
	`{"jsonrpc" : "2.0" , "method" : "m" }`,
	"\r\n\t {\"method\":\"m\"}\r\n\t ",
	"\r[1]", // not a batch to the space-and-tab check, not an object either
	" \t[1,",
	`null`, ` null `, `nul`, `nulll`, `true`, `false`, `fals`, `-`, `-0`, `01`, `1.`, `1.e3`, `1e`, `1e+`, `-1.5E-07`,
	`"\u12"`, `"\u12g4"`, `"\x"`, `"\/"`, "\"\x1f\"", "\"\x7f\"", `"unterminated`,
	`{"id":1,"method":"m","params":{"a":[1,{"b":null}],"c":"\""}}`,
	`{"id":1,"method":"m","params":{"a":[1,{"b":null}],"c":"\"}}`,
	`{"id":1,"method":"m","params":{"a" 1}}`,
	`{"id":1,"method":"m","params":{"a":1,}}`,
	`{"id":1,"method":"m","params":[1 2]}`,
	`{"id":1,"method":"m","params":{1:2}}`,
	`{"id":1,"method":"m","params":{}}}`,
	`{"id":1,"method":"m","params":[]]`,
	`{"id":1,"method":"m","params":{"a":{}}`,
	`{"id":1,"method":"m","params":[[[[]]]]}`,
	`{"id":1,"result":{}, "error":null}`,
	`{"id":1,"method":"m"`,
	`{"id":1,"method":"m",`,
	`{"id":1,`,
	`{"id"`,
	`{"id":}`,
	`{,}`,
	`{}`, `{ }`, `[]`, `[ ]`,
	"{\"method\":\"m\",\"params\":{\"t\":\"" + strings.Repeat(`abcdefg\"\\\n`, 20) + "\"}}",
	"{\"method\":\"m\",\"params\":{\"t\":\"" + strings.Repeat("12345678", 20) + "\x01\"}}",
	"{\"method\":\"m\",\"params\":{\"t\":\"" + strings.Repeat("1234567\xe9", 20) + "\"}}",
	// Past the first special byte of a word, special marks bytes that
	// are not special (a borrow from an escaped backslash reaches the
	// ']'): scanString must look at each byte it marks.
	"{\"method\":\"m\",\"params\":{\"t\":\"" + strings.Repeat(`ab\\]]cd\\]`, 20) + "\"}}",
	"{\"method\":\"m\",\"params\":{\"t\":\"" + strings.Repeat(`a\\\\]#$`, 20) + "\"}}",
	"{\"method\":\"m\",\"params\":{\"t\":\"" + strings.Repeat(`abcdef\u00e9`, 20) + "\x1f\"}}",
}

func TestClassifyMatchesMapDecode(t *testing.T) {
	for _, c := range scanCases {
		sameClassification(t, []byte(c))
	}
	for _, line := range seedLines(t) {
		sameClassification(t, line)
	}
}

func TestScanDepth(t *testing.T) {
	nest := func(n int, open, close string) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	for _, n := range []int{maxDepth - 2, maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, c := range []struct{ open, close string }{{"[", "]"}, {`{"a":`, "1}"}, {`[{"a":`, `1}]`}} {
			inner := nest(n, c.open, c.close)
			for _, line := range []string{
				inner,
				`{"method":"m","params":` + inner + `}`,
				`{"method":"m","params":[` + inner + `]}`,
			} {
				if got, want := validJSON([]byte(line)), json.Valid([]byte(line)); got != want {
					t.Errorf("depth %d %q…: valid %v, json.Valid %v", n, line[:20], got, want)
				}
				sameClassification(t, []byte(line))
			}
		}
	}
}

// FuzzScanValid: the scanner accepts exactly what json.Valid accepts that is
// UTF-8, and
// Classify reads every line as the map decode does.
func FuzzScanValid(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c))
	}
	for _, line := range seedLines(f) {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data) && utf8.Valid(data); got != want {
			t.Fatalf("%q: valid %v, json.Valid %v", data, got, want)
		}
		sameClassification(t, data)
	})
}

// TestSpecial checks the 8-byte test against a byte loop: whether there is
// a special byte, and where the first one is.
func TestSpecial(t *testing.T) {
	check := func(b [8]byte) {
		t.Helper()
		x := binary.LittleEndian.Uint64(b[:])
		first := 8
		for i, c := range b {
			if !strSafe[c] || c >= utf8.RuneSelf { // past ASCII: checked as UTF-8
				first = i
				break
			}
		}
		m := special(x)
		if got := bits.TrailingZeros64(m) >> 3; (m != 0) != (first < 8) || m != 0 && got != first {
			t.Fatalf("%q: special %#x (first at %d), want first at %d", b[:], m, got, first)
		}
	}
	for c := range 256 {
		for pos := range 8 {
			b := [8]byte{'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'}
			b[pos] = byte(c)
			check(b)
			for c2 := range 256 { // a second byte above: borrows run upwards
				if pos < 7 {
					b2 := b
					b2[pos+1] = byte(c2)
					check(b2)
				}
			}
		}
	}
	for _, s := range []string{"\x00\x01aaaaaa", "a\x20\x1fa\x22\x21\x5c\x5d", "\xff\xff\xff\xff\xff\xff\xff\xff", "\x80\x81\xa2\xdc\x9f\xa0\x21\x23", "\x21\x23\x5b\x5d\x1f\x00\x22\x5c"} {
		check([8]byte([]byte(s)))
	}
}

// setFieldMap is SetField as it was before (a map decode and re-encode):
// the reference its output must equal structurally.
func setFieldMap(obj json.RawMessage, key string, value any) (json.RawMessage, error) {
	if !utf8.Valid(obj) {
		return nil, errors.New("not UTF-8") // encoding/json lets it pass; RFC 8259 §8.1 does not
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(obj, &fields); err != nil {
		return nil, err
	}
	if fields == nil {
		return nil, errors.New("null")
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	fields[key] = v
	return json.Marshal(fields)
}

func TestSetField(t *testing.T) {
	big := strings.Repeat(`x\"y`, 1000)
	tests := []struct {
		name, obj, key string
		value          any
		want           string // exact output; "" for an error
	}{
		{"replace", `{"sessionId":"a","prompt":[1]}`, "sessionId", "b", `{"sessionId":"b","prompt":[1]}`},
		{"replace, order and spacing kept", `{ "prompt" : [ 1 ] , "sessionId" : "a" }`, "sessionId", "b", `{ "prompt" : [ 1 ] , "sessionId" : "b" }`},
		{"add", `{"a":1}`, "sessionId", "b", `{"a":1,"sessionId":"b"}`},
		{"add to an empty object", `{ }`, "k", 1, `{"k":1}`},
		{"add after spaces", `{"a":1 }`, "k", 1, `{"a":1,"k":1}`},
		{"spaces around are dropped", " \t{\"a\":1}\r\n", "a", 2, `{"a":2}`},
		{"one line", "{\"a\":\n1,\r\n\"b\":2}", "a", 3, `{"a":3,"b":2}`},
		{"one line when added", "{\"a\":\n1}", "b", 3, `{"a":1,"b":3}`},
		{"every duplicate replaced", `{"id":1,"x":0,"id":2}`, "id", "t", `{"id":"t","x":0,"id":"t"}`},
		{"an escaped name is the same name", `{"i\u0064":1}`, "id", 2, `{"i\u0064":2}`},
		{"another case is another name", `{"Id":1}`, "id", 2, `{"Id":1,"id":2}`},
		{"nested members untouched", `{"a":{"id":1},"id":0}`, "id", 5, `{"a":{"id":1},"id":5}`},
		{"object value", `{"p":"x"}`, "p", json.RawMessage(`[{"type":"text"}]`), `{"p":[{"type":"text"}]}`},
		{"large member kept", `{"text":"` + big + `","sessionId":"a"}`, "sessionId", "b", `{"text":"` + big + `","sessionId":"b"}`},
		{"value escaped", `{"a":1}`, "a", "<&>\n", `{"a":"\u003c\u0026\u003e\n"}`},
		{"not an object", `[1]`, "a", 1, ""},
		{"null", `null`, "a", 1, ""},
		{"invalid", `{"a":1`, "a", 1, ""},
		{"trailing garbage", `{"a":1} x`, "a", 1, ""},
		{"empty", ``, "a", 1, ""},
		{"unmarshalable value", `{}`, "a", func() {}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.obj)
			got, err := SetField(in, tt.key, tt.value)
			if string(in) != tt.obj {
				t.Fatal("SetField modified its input")
			}
			if tt.want == "" {
				if err == nil {
					t.Fatalf("SetField = %s, want an error", got)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("SetField = %s, %v; want %s", got, err, tt.want)
			}
			if ref, err := setFieldMap(in, tt.key, tt.value); err != nil || !jsonEqual(got, ref) {
				t.Fatalf("SetField = %s, the map decode gives %s (%v)", got, ref, err)
			}
		})
	}
}

// FuzzSetField: SetField agrees with a map decode and re-encode wherever
// that works, fails wherever it fails, and always returns one valid line.
func FuzzSetField(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c), "id")
	}
	for _, line := range seedLines(f) {
		f.Add(line, "sessionId")
	}
	f.Add([]byte("{\"a\" :\n1 ,\r\n\"sessionId\":[ ]}"), "sessionId")
	f.Fuzz(func(t *testing.T, obj []byte, key string) {
		got, err := SetField(obj, key, "v")
		ref, refErr := setFieldMap(obj, key, "v")
		if (err == nil) != (refErr == nil) {
			t.Fatalf("%q: err %v, the map decode %v", obj, err, refErr)
		}
		if err != nil {
			return
		}
		if !json.Valid(got) || bytes.ContainsAny(got, "\n") {
			t.Fatalf("%q: invalid output %q", obj, got)
		}
		// Compare as maps: duplicates collapse in the reference only.
		var g, r map[string]json.RawMessage
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(ref, &r) != nil || len(g) != len(r) {
			t.Fatalf("%q: %s, the map decode %s", obj, got, ref)
		}
		for k, v := range r {
			if !jsonEqual(g[k], v) {
				t.Fatalf("%q: member %q is %s, the map decode %s", obj, k, g[k], v)
			}
		}
	})
}

// TestIDKey: the fast path gives what decoding the id gives.
func TestIDKey(t *testing.T) {
	for _, raw := range []string{`1`, `-1`, `1.5`, `"a"`, `""`, `"\u0061"`, `"caf\u00e9"`, "\"café\"", "\"\xff\"", `"a\"b"`, `"a"b"`, `"`, "\"\x01\"", `null`} {
		want := "n" + raw
		var s string
		if raw[0] == '"' && json.Unmarshal([]byte(raw), &s) == nil {
			want = "s" + s
		}
		if got := IDKey(json.RawMessage(raw)); got != want {
			t.Errorf("IDKey(%s) = %q, want %q", raw, got, want)
		}
	}
	if IDKey(json.RawMessage(`"\u0061"`)) != IDKey(json.RawMessage(`"a"`)) {
		t.Error("one id written two ways gets two keys")
	}
}

// rawMarshaler returns its bytes as they are.
type rawMarshaler string

func (m rawMarshaler) MarshalJSON() ([]byte, error) { return []byte(m), nil }

// TestEncodeLine: the stream writes exactly what json.Marshal would.
func TestEncodeLine(t *testing.T) {
	params := json.RawMessage(" {\"text\": \"a <b> & c\u2028\u2029 é \\u00e9 \\\" \\\\\", \"n\": [1, 2.5e3, null, true] } ")
	id := jsonrpc2.ID{Str: "x<y>", IsString: true}
	objs := []any{
		&jsonrpc2.Request{Method: "session/update", Params: &params, Notif: true},
		&jsonrpc2.Request{Method: "m&n", Params: &params, ID: id},
		&jsonrpc2.Response{ID: jsonrpc2.ID{Num: 7}, Result: &params},
		&jsonrpc2.Response{ID: id, Error: &jsonrpc2.Error{Code: -32000, Message: "<no>", Data: &params}},
		rawMarshaler(`{"a":1}`),
		rawMarshaler(` {"a" : 1} `),
		rawMarshaler("{\"a\":\n1}"),
		rawMarshaler(`{"a":"<"}`),
		rawMarshaler(`{"a":"\u2028"}`),
		rawMarshaler("{\"a\":\"\u2029\"}"),
		rawMarshaler("{\"a\":\"\xff\"}"),
		rawMarshaler(`{"a":}`),
		(*jsonrpc2.Request)(nil),
		map[string]any{"b": 1, "a": "<"},
	}
	for i, obj := range objs {
		got, err := encodeLine(obj)
		want, wantErr := json.Marshal(obj)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
			t.Errorf("%d: encodeLine = %s, %v; json.Marshal = %s, %v", i, got, err, want, wantErr)
		}
	}
}

func TestMembers(t *testing.T) {
	names := []string{"sessionId", "update", "id"}
	tests := []struct {
		name, obj string
		want      []string // raw values; "" for absent; nil for an error
	}{
		{"some", `{"sessionId":"s","update":{"content":{"text":"\""}},"x":1}`, []string{`"s"`, `{"content":{"text":"\""}}`, ""}},
		{"spaced", ` { "id" : 1 , "update" : [ 1 ] } `, []string{"", `[ 1 ]`, `1`}},
		{"last occurrence", `{"id":1,"id":2}`, []string{"", "", `2`}},
		{"escaped name", `{"i\u0064":3}`, []string{"", "", `3`}},
		{"exact names only", `{"ID":1,"SessionId":"s"}`, []string{"", "", ""}},
		{"nested names are not members", `{"update":{"id":1}}`, []string{"", `{"id":1}`, ""}},
		{"empty", `{}`, []string{"", "", ""}},
		{"null", ` null `, []string{"", "", ""}},
		{"array", `[1]`, nil},
		{"string", `"s"`, nil},
		{"invalid", `{"id":1`, nil},
		{"invalid inside a value", `{"id":1,"x":"\q"}`, nil},
		{"empty input", ``, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := []json.RawMessage{json.RawMessage("stale"), nil, nil, json.RawMessage("beyond")}
			err := Members(json.RawMessage(tt.obj), names, out)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("Members = %q, want an error", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fast := make([]json.RawMessage, len(names))
			if err := MembersOfValid(json.RawMessage(tt.obj), names, fast); err != nil {
				t.Fatalf("MembersOfValid: %v", err)
			}
			for i := range names {
				if !bytes.Equal(fast[i], out[i]) || (fast[i] == nil) != (out[i] == nil) || cap(fast[i]) != len(fast[i]) {
					t.Errorf("MembersOfValid: %s = %q, Members %q", names[i], fast[i], out[i])
				}
			}
			for i, want := range tt.want {
				if got := out[i]; (want == "") != (got == nil) || string(got) != want {
					t.Errorf("%s = %q, want %q", names[i], got, want)
				}
				if cap(out[i]) != len(out[i]) {
					t.Errorf("%s has room to grow into obj", names[i])
				}
			}
			if string(out[3]) != "beyond" {
				t.Error("Members wrote past len(names)")
			}
		})
	}
	if err := Members(json.RawMessage(`{}`), names, make([]json.RawMessage, 2)); err == nil {
		t.Error("out shorter than names: no error")
	}
}

// FuzzMembers: Members reads what a map decode reads, and so does
// MembersOfValid on valid input; on any input it never panics.
func FuzzMembers(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c), "id")
	}
	for _, line := range seedLines(f) {
		f.Add(line, "method")
	}
	f.Fuzz(func(t *testing.T, obj []byte, name string) {
		out := make([]json.RawMessage, 2)
		err := Members(obj, []string{name, "params"}, out)
		fast := make([]json.RawMessage, 2)
		fastErr := MembersOfValid(obj, []string{name, "params"}, fast) // must not panic
		var ref map[string]json.RawMessage
		refErr := json.Unmarshal(obj, &ref)
		if refErr == nil && !utf8.Valid(obj) {
			refErr = errors.New("not UTF-8")
		}
		if (err == nil) != (refErr == nil) {
			t.Fatalf("%q: err %v, the map decode %v", obj, err, refErr)
		}
		if err != nil {
			return
		}
		if fastErr != nil {
			t.Fatalf("%q: MembersOfValid: %v", obj, fastErr)
		}
		for i, n := range []string{name, "params"} {
			want, ok := ref[n]
			if ok != (out[i] != nil) || !bytes.Equal(out[i], want) {
				t.Fatalf("%q: %q = %q, the map decode %q", obj, n, out[i], want)
			}
			if ok != (fast[i] != nil) || !bytes.Equal(fast[i], want) {
				t.Fatalf("%q: MembersOfValid %q = %q, the map decode %q", obj, n, fast[i], want)
			}
		}
	})
}

// TestParseID: the fast paths read ids as jsonrpc2 does.
func TestParseID(t *testing.T) {
	for _, raw := range []string{`0`, `7`, `9223372036854775807`, `18446744073709551615`, `01`, `-1`, `1.5`, `1e3`, `"a"`, `""`, `"\u0061"`, "\"\xff\"", `"a\"b"`, `null`, `true`, `{}`} {
		got, err := parseID(json.RawMessage(raw))
		var want jsonrpc2.ID
		wantErr := json.Unmarshal([]byte(raw), &want)
		if (err == nil) != (wantErr == nil) || got != want {
			t.Errorf("parseID(%s) = %+v, %v; jsonrpc2 reads %+v, %v", raw, got, err, want, wantErr)
		}
	}
}

// FuzzMembersOfValidIn: on valid input, MembersOfValidIn's one pass finds
// what MembersOfValid finds in obj and then in its member (as a map decode
// reads both: the last occurrence); on any input it never panics.
func FuzzMembersOfValidIn(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c), "id", "sessionId")
	}
	for _, line := range seedLines(f) {
		f.Add(line, "params", "sessionId")
		f.Add(line, "params", "update")
	}
	f.Add([]byte(`{"params":{"a":1},"params":{"b":2}}`), "params", "a")
	f.Add([]byte(`{"params":{"a":1},"params":3}`), "params", "a")
	f.Add([]byte(`{"par\u0061ms":{"a":1,"a":[2]}}`), "params", "a")
	f.Fuzz(func(t *testing.T, obj []byte, name, inner string) {
		names, inNames := []string{"id", name}, []string{inner, "sessionId"}
		out, inOut := make([]json.RawMessage, 2), make([]json.RawMessage, 2)
		err := MembersOfValidIn(obj, names, out, 1, inNames, inOut) // must not panic
		if !json.Valid(obj) {
			return
		}
		want := make([]json.RawMessage, 2)
		wantErr := MembersOfValid(obj, names, want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: err %v, MembersOfValid %v", obj, err, wantErr)
		}
		if err != nil {
			return
		}
		wantIn := make([]json.RawMessage, 2)
		if v := want[1]; len(v) > 0 && v[0] == '{' {
			if err := MembersOfValid(v, inNames, wantIn); err != nil {
				t.Fatalf("%q: MembersOfValid of %q: %v", obj, v, err)
			}
		}
		for i := range 2 {
			if !bytes.Equal(out[i], want[i]) || (out[i] == nil) != (want[i] == nil) {
				t.Fatalf("%q: %q = %q, want %q", obj, names[i], out[i], want[i])
			}
			if !bytes.Equal(inOut[i], wantIn[i]) || (inOut[i] == nil) != (wantIn[i] == nil) || cap(inOut[i]) != len(inOut[i]) {
				t.Fatalf("%q: %q.%q = %q, want %q", obj, name, inNames[i], inOut[i], wantIn[i])
			}
		}
	})
}

// FuzzEachElementOfValid: on a valid JSON array, the elements are those a
// decode into []json.RawMessage finds; on any input it never panics.
func FuzzEachElementOfValid(f *testing.F) {
	for _, c := range []string{`[]`, `[1]`, ` [ 1 , "a,]" , {"b":[2,3]} , null ] `, `null`, `[[],[[]]]`, `["\\"]"]`} {
		f.Add([]byte(c))
	}
	for _, c := range scanCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, arr []byte) {
		var got []json.RawMessage
		err := EachElementOfValid(arr, func(e json.RawMessage) bool { got = append(got, e); return true })
		var want []json.RawMessage
		if json.Unmarshal(arr, &want) != nil {
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", arr, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d elements, want %d", arr, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: element %d = %q, want %q", arr, i, got[i], want[i])
			}
		}
	})
}

// UpdateKindOfValid finds the kind of every session/update of the real
// agents' transcripts as a full decode does, and the odd shapes: after the
// content, beside a nested member of the same name, escaped, absent.
func TestUpdateKindOfValid(t *testing.T) {
	n := 0
	for _, fm := range fixtures(t) {
		var m struct {
			Method string `json:"method"`
			Params struct {
				Update struct {
					Kind *string `json:"sessionUpdate"`
				} `json:"update"`
			} `json:"params"`
		}
		if json.Unmarshal(fm.msg, &m) != nil || m.Method != "session/update" || m.Params.Update.Kind == nil {
			continue
		}
		n++
		kind, ok := UpdateKindOfValid(fm.msg)
		if !ok || string(kind) != *m.Params.Update.Kind {
			t.Errorf("%s:%d: UpdateKindOfValid = %q, %v; want %q", fm.file, fm.line, kind, ok, *m.Params.Update.Kind)
		}
	}
	if n < 100 {
		t.Fatalf("only %d session/update lines in the fixtures", n)
	}
	for _, c := range []struct {
		line, want string
		ok         bool
	}{
		{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"content":{"type":"text","text":"a \"b\" {"},"sessionUpdate":"agent_message_chunk"}}}`, "agent_message_chunk", true},
		{`{"params":{"update":{"_meta":{"sessionUpdate":"tool_call"},"sessionUpdate":"plan"},"sessionId":"s"},"method":"session/update","jsonrpc":"2.0"}`, "plan", true},
		{` { "params" : { "update" : { "sessionUpdate" : "tool_call" } } } `, "tool_call", true},
		{`{"params":{"update":{"sessionUpdate":"tool\u005fcall"}}}`, "", false},
		{`{"params":{"update":{"content":{}}}}`, "", false},
		{`{"params":{"update":null}}`, "", false},
		{`{"params":[1]}`, "", false},
		{`{"method":"session/update"}`, "", false},
		{`{"params":{"update":{"sessionUpdate":7}}}`, "", false},
	} {
		kind, ok := UpdateKindOfValid([]byte(c.line))
		if string(kind) != c.want || ok != c.ok {
			t.Errorf("UpdateKindOfValid(%s) = %q, %v; want %q, %v", c.line, kind, ok, c.want, c.ok)
		}
	}
}
