package extract_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
	"mvdan.cc/sh/v3/syntax"
)

// permissive allows everything a rule can allow: only what the router
// cannot see through (or refuses) is not allowed.
const permissive = `
default: allow
rules:
  - {id: all-kinds, decision: allow, when: {kind: [read, edit, delete, move, search, execute, think, fetch, switch_mode, other]}}
  - {id: all-commands, decision: allow, when: {command: ["**"]}}
  - {id: all-paths, decision: allow, when: {paths: ["/**"]}}
  - {id: all-domains, decision: allow, when: {domains: ["*"]}}
  - {id: shadow, decision: deny, when: {paths: ["/etc/shadow"]}}
`

func permissivePolicy(f interface{ Fatal(...any) }) *policy.Policy {
	l, err := policy.ParseFile("permissive.yaml", []byte(permissive))
	if err != nil {
		f.Fatal(err)
	}
	p, err := policy.Compile(l)
	if err != nil {
		f.Fatal(err)
	}
	return p
}

// caseCommands returns the terminal/create command lines of
// testdata/cases, to seed the fuzzers.
func caseCommands(f *testing.F) []string {
	files, _ := filepath.Glob("../testdata/cases/*.yaml")
	var out []string
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			if _, cmd, ok := strings.Cut(line, "terminal/create "); ok {
				out = append(out, strings.Trim(strings.TrimSpace(cmd), `"`))
			}
		}
	}
	return out
}

// FuzzExtract: any command line, as a terminal/create script, as an argv
// and as a request_permission rawInput.command: extraction and decision
// never panic, and under a policy that allows everything, a line that does
// not parse (or anything opaque) is never allowed.
func FuzzExtract(f *testing.F) {
	for _, c := range caseCommands(f) {
		f.Add(c)
	}
	f.Add(`a=$'\u12' "${x[@]:1:2}" {1..3}{a,b} ~+/x ~-/y $((1+$(id))) <(:) >(:) @(x|y) *([a-z])`)
	p := permissivePolicy(f)
	fs := extract.NewMapFS([]string{policy.TestCwd + "/.env", policy.TestCwd + "/src/main.go", "/etc/shadow"},
		map[string]string{policy.TestCwd + "/link": "/etc", policy.TestCwd + "/loop": "loop"})
	sess := extract.Session{Agent: "claude", Cwd: policy.TestCwd, Home: policy.TestHome}
	f.Fuzz(func(t *testing.T, line string) {
		// JSON carries valid UTF-8 only: decide the line the router would
		// receive.
		b, _ := json.Marshal(line)
		_ = json.Unmarshal(b, &line)
		start := time.Now()
		defer func() {
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("%q took %v", line, el)
			}
		}()
		_, parseErr := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
		params, _ := json.Marshal(map[string]any{"sessionId": "s", "command": line})
		d := p.Decide(&extract.Request{Method: acp.MethodTerminalCreate, Params: params, Session: sess, FS: fs})
		check(t, line, &d, parseErr != nil)

		perm, _ := json.Marshal(map[string]any{"sessionId": "s", "options": []any{},
			"toolCall": map[string]any{"toolCallId": "t", "kind": "execute", "rawInput": map[string]any{"command": line}}})
		d = p.Decide(&extract.Request{Method: acp.MethodRequestPermission, Params: perm, Session: sess, FS: fs})
		check(t, line, &d, parseErr != nil && strings.TrimSpace(line) != "")

		argv, _ := json.Marshal(map[string]any{"sessionId": "s", "command": "bash", "args": []string{"-c", line}})
		d = p.Decide(&extract.Request{Method: acp.MethodTerminalCreate, Params: argv, Session: sess, FS: fs})
		check(t, line, &d, parseErr != nil)
	})
}

func check(t *testing.T, line string, d *policy.Decision, unparsable bool) {
	t.Helper()
	if unparsable && d.Effect == policy.Allow {
		t.Fatalf("%q does not parse but is allowed:\n%s", line, policy.Explain(d))
	}
	for _, f := range d.Findings {
		if (f.Item.Opaque != "" || f.Item.Refused != "") && f.Effect < policy.Ask {
			t.Fatalf("%q: an opaque or refused item is %s:\n%s", line, f.Effect, policy.Explain(d))
		}
		if f.Item.Type == extract.ItemPath && !f.Item.Unresolved {
			for _, form := range f.Item.Forms {
				if form == "/etc/shadow" && f.Effect != policy.Deny {
					t.Fatalf("%q: /etc/shadow is %s:\n%s", line, f.Effect, policy.Explain(d))
				}
			}
		}
	}
	if len(d.Findings) == 0 {
		t.Fatalf("%q: no evidence", line)
	}
}

// FuzzParams: any params for any decided method never panic, and params
// that do not decode are never allowed.
func FuzzParams(f *testing.F) {
	for i, m := range decidedMethods {
		f.Add(uint8(i), `{"sessionId":"s","path":"/home/user/project/a","command":"ls","toolCall":{"toolCallId":"t","kind":"read","locations":[{"path":"/a"}]}}`)
		f.Add(uint8(i), `{"toolCall":{"kind":5,"rawInput":{"command":["bash","-lc","rm -rf /"],"url":"http://[::1"}}}`)
		_ = m
	}
	p := permissivePolicy(f)
	f.Fuzz(func(t *testing.T, method uint8, params string) {
		m := decidedMethods[int(method)%len(decidedMethods)]
		d := p.Decide(&extract.Request{Method: m, Params: json.RawMessage(params),
			Updates: []json.RawMessage{json.RawMessage(params)}, Session: extract.Session{Cwd: policy.TestCwd, Home: policy.TestHome}})
		var v any
		if json.Unmarshal([]byte(params), &v) != nil && d.Effect == policy.Allow {
			t.Fatalf("params %q do not decode but %s is allowed:\n%s", params, m, policy.Explain(&d))
		}
		check(t, params, &d, false)
	})
}

// decidedMethods are the methods the policy decides, in its order (a
// seed's method is an index into it).
var decidedMethods = []string{
	acp.MethodRequestPermission,
	acp.MethodReadTextFile,
	acp.MethodWriteTextFile,
	acp.MethodTerminalCreate,
	acp.MethodMcpMessage,
}
