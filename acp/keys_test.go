package acp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestAmbiguousMember(t *testing.T) {
	many := func(extra string) string {
		var b strings.Builder
		b.WriteString(`{`)
		for i := range 40 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(extra + `}`)
		return b.String()
	}
	for _, c := range []struct {
		in            string
		first, second string // "" when none
	}{
		{in: `{"path":"/a"}`},
		{in: `{"path":"/a","content":"x","sessionId":"s"}`},
		{in: `{"path":"/a","PATH":"/b"}`, first: "path", second: "PATH"},
		{in: `{"Path":"/b","path":"/a"}`, first: "Path", second: "path"},
		{in: `{"path":"/a","pa\u0074h":"/b"}`, first: "path", second: "path"},
		{in: `{"path":"/a","path":"/b"}`, first: "path", second: "path"},
		{in: `{"sessionId":"a","\u017fessionId":"b"}`, first: "sessionId", second: "ſessionId"},
		{in: `{"kind":"read","\u212aind":"execute"}`, first: "kind", second: "\u212aind"},
		{in: `{"KIND":"read","\u212aIND":"execute"}`, first: "KIND", second: "\u212aIND"},
		{in: `{"straße":1,"STRASSE":2}`}, // not a simple fold: encoding/json keeps them apart
		{in: `{"a":{"b":[{"command":"ls","Command":"rm"}]}}`, first: "command", second: "Command"},
		{in: `[{"x":1},{"X":2}]`},         // different objects
		{in: `{"x":{"y":1},"z":{"y":2}}`}, // the same name in different objects
		{in: `{"a":"{\"p\":1,\"P\":2}"}`}, // inside a string: not members
		{in: `{"env":[{"name":"A","value":"1"},{"name":"B","NAME":"LD_PRELOAD"}]}`, first: "name", second: "NAME"},
		{in: many(`"K7":1`), first: "k7", second: "K7"},
		{in: many(`"k40":1`)},
		{in: `"path"`},
		{in: `null`},
		{in: ` { "p" : 1 , "q" : [ 1 , { "r" : 2 , "R" : 3 } ] } `, first: "r", second: "R"},
	} {
		first, second, found := AmbiguousMember(json.RawMessage(c.in))
		if found != (c.first != "") || first != c.first || second != c.second {
			t.Errorf("AmbiguousMember(%s) = %q, %q, %v; want %q, %q", c.in, first, second, found, c.first, c.second)
		}
		if ref := ambiguousRef(t, []byte(c.in)); ref != found {
			t.Errorf("%s: the reference says %v", c.in, ref)
		}
	}
}

// TestAmbiguousMemberIsTheDecoderDifference: without an ambiguous pair, a
// struct decode reads the exactly named member (what peers read); with one,
// it may not. The premise of AmbiguousMember, checked against encoding/json.
func TestAmbiguousMemberIsTheDecoderDifference(t *testing.T) {
	var p struct {
		Path string `json:"path"`
	}
	in := []byte(`{"path":"/home/user/.ssh/id_rsa","PATH":"/home/user/project/ok.go"}`)
	if err := json.Unmarshal(in, &p); err != nil || p.Path != "/home/user/project/ok.go" {
		t.Fatalf("encoding/json read %q (%v): it no longer takes the last case-insensitive match", p.Path, err)
	}
	if _, _, found := AmbiguousMember(in); !found {
		t.Fatal("not found")
	}
}

// ambiguousRef is the reference: every object's names, decoded by
// encoding/json's tokenizer, compared pairwise with bytes.EqualFold.
func ambiguousRef(t testing.TB, in []byte) bool {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		switch tok {
		case json.Delim('{'):
			var names []string
			found := false
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					t.Fatalf("reference: %v", err)
				}
				name := k.(string)
				for _, n := range names {
					found = found || bytes.EqualFold([]byte(n), []byte(name))
				}
				names = append(names, name)
				found = walk() || found
			}
			dec.Token()
			return found
		case json.Delim('['):
			found := false
			for dec.More() {
				found = walk() || found
			}
			dec.Token()
			return found
		}
		return false
	}
	return walk()
}

func FuzzAmbiguousMember(f *testing.F) {
	for _, s := range []string{`{"path":"/a","PATH":"/b"}`, `{"a":[{"b":1,"\u212a":2,"k":3}]}`, `{"s":1,"\u017f":2}`, `[1,{"x":{"y":null}}]`, `{"é":1,"É":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _, found := AmbiguousMember(in) // any input: it ends, without a panic
		if !json.Valid(in) || !validJSON(in) {
			return
		}
		if ref := ambiguousRef(t, in); ref != found {
			t.Fatalf("%s: AmbiguousMember %v, the reference %v", in, found, ref)
		}
	})
}

// FoldedMember finds a member of the object itself spelled otherwise than
// one of the names but folding to it, as encoding/json matches names;
// deeper objects, exact names and other names are left alone.
func TestFoldedMember(t *testing.T) {
	for _, c := range []struct {
		in        string
		want, got string
	}{
		{`{"sessionId":"s","Path":"/p/a.go"}`, "path", "Path"},
		{`{"command":"ls; rm -rf ~","Args":["x"]}`, "args", "Args"},
		{`{"command":"ls","ar\u0067\u017f":[]}`, "args", "arg\u017f"}, // U+017F folds to s
		{`{"CWD":"/tmp","command":"ls"}`, "cwd", "CWD"},
		{`{"path":"/p/a.go","pa\u0074h":"/p/b.go"}`, "", ""}, // escapes resolved: both are path (AmbiguousMember's)
		{`{"path":"/p/a.go","_meta":{"Path":"x"}}`, "", ""},  // not deeper
		{`{"sessionId":"s","path":"/p/a.go","line":3}`, "", ""},
		{`{}`, "", ""},
		{`null`, "", ""},
	} {
		want, got, found := FoldedMember(json.RawMessage(c.in), "path", "args", "cwd")
		if want != c.want || got != c.got || found != (c.want != "") {
			t.Errorf("FoldedMember(%s) = %q, %q, %v; want %q, %q", c.in, want, got, found, c.want, c.got)
		}
	}
	// The premise, against encoding/json: it reads the folded member.
	var p struct {
		Args []string `json:"args"`
	}
	if err := json.Unmarshal([]byte(`{"command":"x","Args":["y"]}`), &p); err != nil || len(p.Args) != 1 {
		t.Fatalf("encoding/json did not read Args as args: %v %v", p.Args, err)
	}
}
