package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy/extract"
	"go.yaml.in/yaml/v3"
)

func mustParse(t *testing.T, file, src string) *Layer {
	t.Helper()
	l, err := ParseFile(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustUser(t *testing.T, src string) *Layer {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	l, err := ParseLayer("config.yaml", &n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustCompile(t *testing.T, layers ...*Layer) *Policy {
	t.Helper()
	p, err := Compile(layers...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func terminal(cmd string) *extract.Request {
	params, _ := json.Marshal(map[string]any{"sessionId": "s", "command": cmd})
	return &extract.Request{Method: acp.MethodTerminalCreate, Params: params,
		Session: extract.Session{Agent: "claude", Cwd: TestCwd, Home: TestHome}}
}

// TestExtract pins the evidence of representative command lines: the
// items a line becomes, in order (type, what, kinds, and aux/opaque).
func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`\rm -rf x`, []string{"command rm -rf x [execute]", "path /home/user/project/x/** [edit]"}},
		{`r\m x`, []string{"command rm x [execute]", "path /home/user/project/x [edit]"}},
		// expand.Literal panics on "$d"; the router never calls it.
		{`rm -rf "$d"`, []string{"command rm -rf \"$d\" [execute]", "tool (tool call) [execute] opaque"}},
		{`FOO=1 BAR=2 /tmp/git push`, []string{"command /tmp/git push [execute]"}},
		{`timeout 5 nice -n 5 cat a/b`, []string{"command timeout 5 nice -n 5 cat a/b [execute] aux",
			"command nice -n 5 cat a/b [execute] aux", "command cat a/b [execute]", "path /home/user/project/a/b [read]"}},
		{`bash -lc 'ls > out'`, []string{"command bash -lc ls > out [execute] aux", "path /home/user/project/out [edit]",
			"command ls [execute]", "path /home/user/project [read]"}},
		{`curl -so x.html https://Bücher.example/a`, []string{"command curl -so x.html https://Bücher.example/a [execute]",
			"path /home/user/project/x.html [edit]", "domain xn--bcher-kva.example [fetch]"}},
		{`eval "$X"`, []string{"command eval \"$X\" [execute] opaque", "tool (tool call) [execute] opaque"}},
		{`X=1`, []string{"tool (tool call) [execute]"}},
		{`cat <<< "a b" >> log`, []string{"path /home/user/project/log [edit]", "command cat [execute]"}},
	} {
		ev := extract.Extract(terminal(tc.line))
		var got []string
		for _, it := range ev.Items {
			s := it.Type.String() + " " + it.String() + " " + "[" + joinKinds(it.Kinds) + "]"
			if it.Aux {
				s += " aux"
			}
			if it.Opaque != "" {
				s += " opaque"
			}
			got = append(got, s)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.line, got, tc.want)
		}
	}
	// The env names of a command are kept as evidence.
	ev := extract.Extract(terminal("FOO=1 env BAR=2 go test"))
	last := ev.Items[len(ev.Items)-1]
	if !slices.Equal(last.Env, []string{"FOO", "BAR"}) || last.Program != "go" {
		t.Errorf("payload %+v: want env FOO, BAR and program go", last)
	}
}

// TestLayers: merging files of a layer, includes, the effective default,
// deny_modes of every layer, lower_layers_may and the hash.
func TestLayers(t *testing.T) {
	a := mustParse(t, "10-a.yaml", "default: ask\ndeny_modes: ['claude:auto']\nlower_layers_may: [deny, ask]\n"+
		"rules:\n  - {id: a, decision: deny, when: {program: rm}}\n")
	b := mustParse(t, "20-b.yaml", "default: deny\nlower_layers_may: [ask]\n"+
		"rules:\n  - {id: b, decision: ask, when: {program: git}}\n")
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	if a.Default != Deny || !slices.Equal(a.LowerLayersMay, []Effect{Ask}) || len(a.Rules) != 2 || len(a.Files) != 2 {
		t.Fatalf("merged: default %s, lower_layers_may %v, %d rules, files %v", a.Default, a.LowerLayersMay, len(a.Rules), a.Files)
	}
	dup := mustParse(t, "30-c.yaml", "rules:\n  - {id: a, decision: ask, when: {program: ls}}\n")
	if err := a.Merge(dup); err == nil || !strings.Contains(err.Error(), `30-c.yaml:2:5: duplicate rule id "a" (first at 10-a.yaml:5:5)`) {
		t.Errorf("duplicate id across files: %v", err)
	}

	u := mustUser(t, "default: allow\ndeny_modes: ['*:yolo']\ninclude: [more.yaml, /abs/x.yaml]\n"+
		"rules:\n  - {id: u1, decision: allow, when: {program: ls}}\n  - {id: u2, decision: ask, when: {program: cat}}\n")
	if got := []string{u.Includes[0].Path, u.Includes[1].Path}; !slices.Equal(got, []string{"more.yaml", "/abs/x.yaml"}) {
		t.Errorf("includes %q", got)
	}
	if err := u.AddInclude("more.yaml", []byte("rules:\n  - {id: u3, decision: deny, when: {program: dd}}\n")); err != nil {
		t.Fatal(err)
	}
	if err := u.AddInclude("bad.yaml", []byte("include: [x]\n")); err == nil {
		t.Error("an include file with include: loaded")
	}
	p := mustCompile(t, a, u)
	if d, l := p.Default(); d != Deny || l != LayerOrg {
		t.Errorf("default %s from %s, want deny from org", d, l)
	}
	var ids []string
	for _, r := range p.Rules() {
		ids = append(ids, r.Layer+":"+r.ID)
	}
	if !slices.Equal(ids, []string{"org:a", "org:b", "user:u2"}) {
		t.Errorf("rules in force %q: u1 (allow) and u3 (deny) are dropped by lower_layers_may [ask]", ids)
	}
	if len(p.Dropped()) != 2 {
		t.Errorf("dropped %d rules, want 2", len(p.Dropped()))
	}
	claude, gemini := AgentID{Name: "claude"}, AgentID{Name: "gemini"}
	if v, w := p.Mode(claude, "auto"), p.Mode(gemini, "yolo"); v.Rule != RuleDeniedMode || v.Layer != LayerOrg || w.Rule != RuleDeniedMode || w.Layer != LayerUser || p.ModeDenied(claude, "default") {
		t.Errorf("deny_modes of both layers must apply, and only them: %+v %+v", v, w)
	}
	if !strings.HasPrefix(p.Hash(), "sha256:") || p.Hash() != mustCompile(t, a, u).Hash() {
		t.Error("hash not stable")
	}
	if p.Hash() == mustCompile(t, a).Hash() {
		t.Error("hash ignores the user layer")
	}
	if kinds := selfApproving(AgentID{Name: "my-claude"}, "acceptEdits"); !slices.Contains(kinds, extract.KindEdit) || selfApproving(AgentID{Name: "codex"}, "acceptEdits") != nil {
		t.Errorf("SelfApproving table: %v (a mode of one family is not one of another's)", kinds)
	}
}

// TestShadowedUntested: the static shadow check and test coverage.
func TestShadowedUntested(t *testing.T) {
	l := mustParse(t, "p.yaml", `
rules:
  - {id: push, decision: ask, when: {command: ["git push **"]}}
  - {id: push-feature, decision: allow, when: {command: ["git push origin feature/**"]}}
  - {id: secrets, decision: deny, when: {paths: ["**/.env", "~/.ssh/**"]}}
  - {id: env-read, decision: allow, when: {kind: [read], paths: ["${cwd}/.env"]}}
  - {id: ssh-config, decision: ask, when: {paths: ["~/.ssh/config"]}}
  - {id: src, decision: allow, when: {paths: ["${roots}/src/**"]}}
  - {id: roots, decision: ask, when: {paths: ["${roots}/**"]}, unless: {paths: ["**/*.go"]}}
  - {id: sub, decision: allow, when: {domains: [a.corp.com]}}
  - {id: corp, decision: deny, when: {domains: ["*.corp.com"]}}
tests:
  - {call: "terminal/create git push origin main", expect: ask, rule: push}
  - {call: "fs/read_text_file ${cwd}/.env", expect: deny, rule: secrets}
`)
	p := mustCompile(t, l)
	var got []string
	for _, s := range p.Shadowed() {
		got = append(got, s.Rule.ID+" by "+s.By.ID)
	}
	// src is not reported: roots has an unless, so it may not cover src.
	want := []string{"env-read by secrets", "push-feature by push", "ssh-config by secrets", "sub by corp"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("shadowed %q, want %q", got, want)
	}
	results := p.RunTests()
	for _, r := range results {
		if !r.Pass {
			t.Errorf("%s: %s", r.Call.Text, r.Problem)
		}
	}
	var untested []string
	for _, r := range p.Untested(results) {
		untested = append(untested, r.ID)
	}
	// env-read matched the .env read (shadowed, but exercised).
	if !slices.Equal(untested, []string{"corp", "push-feature", "src", "ssh-config", "sub"}) {
		t.Errorf("untested %q", untested)
	}
}

// TestRunTestsUserRepeatsOrg: a user layer that repeats a decision the
// org layer already enforces is not a mistake. Its test that expects its
// own rule passes when a rule of a layer above decides the same, the
// user's rule firing too, and says so in a note; the org's rule is the one
// that decides and the one the audit log names. Before, the test failed
// ("expected deny by rule user-no-env, got deny by org-no-env") and the
// router refused to start with the policy.
func TestRunTestsUserRepeatsOrg(t *testing.T) {
	org := mustParse(t, "10-org.yaml", "rules:\n  - {id: org-no-env, decision: deny, when: {paths: [\"**/.env\"]}}\n"+
		"  - {id: org-ask-ssh, decision: ask, when: {paths: [\"~/.ssh/**\"]}}\n")
	user := mustUser(t, `default: allow
rules:
  - {id: user-no-env, decision: deny, when: {paths: ["**/.env", "**/.env.*"]}}
  - {id: user-no-ssh, decision: deny, when: {paths: ["~/.ssh/**"]}}
tests:
  - {call: "fs/read_text_file ${cwd}/.env", expect: deny, rule: user-no-env}
  - {call: "fs/read_text_file ${cwd}/.env.local", expect: deny, rule: user-no-env}
  - {call: "fs/read_text_file ~/.ssh/id_rsa", expect: deny, rule: user-no-ssh}
  - {call: "fs/read_text_file ${cwd}/main.go", expect: deny, rule: user-no-env}
  - {call: "fs/read_text_file ${cwd}/.env", expect: ask, rule: user-no-env}
`)
	p := mustCompile(t, org, user)
	results := p.RunTests()
	want := []struct {
		pass bool
		note string
	}{
		{true, "deny by user-no-env (user layer) repeats org-no-env (org layer), which decides"},
		{true, ""},
		{true, ""},  // the user's deny is stricter than the org's ask: its own rule decides
		{false, ""}, // user-no-env does not fire on main.go
		{false, ""}, // the decision is deny, not ask
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d", len(results), len(want))
	}
	for i, r := range results {
		if r.Pass != want[i].pass || !strings.Contains(r.Note, want[i].note) || want[i].note == "" && r.Note != "" {
			t.Errorf("%s: pass %v (%s), note %q; want pass %v, note %q", r.Call.Text, r.Pass, r.Problem, r.Note, want[i].pass, want[i].note)
		}
	}
}

// TestShadowedEqual: a rule covered by one of the same decision that
// decides first (Policy.Rules order: layer, then id) never decides and is
// reported; everything else that can still decide something is not.
func TestShadowedEqual(t *testing.T) {
	for _, tc := range []struct {
		name      string
		org, user string // rules: entries
		want      []string
	}{
		{name: "identical denies: the later by id",
			org: `
  - {id: a, decision: deny, when: {paths: ["**/.env"]}}
  - {id: b, decision: deny, when: {paths: ["**/.env"]}}`,
			want: []string{"b (p.yaml:3:5) by a (p.yaml:2:5)"}},
		{name: "file order does not matter",
			org: `
  - {id: b, decision: deny, when: {paths: ["**/.env"]}}
  - {id: a, decision: deny, when: {paths: ["**/.env"]}}`,
			want: []string{"b (p.yaml:2:5) by a (p.yaml:3:5)"}},
		{name: "a wider deny first",
			org: `
  - {id: a, decision: deny, when: {paths: ["**/.env", "~/.ssh/**"]}}
  - {id: b, decision: deny, when: {paths: ["~/.ssh/id_*"]}}`,
			want: []string{"b (p.yaml:3:5) by a (p.yaml:2:5)"}},
		{name: "a narrower rule first decides what it matches",
			org: `
  - {id: a, decision: deny, when: {paths: ["~/.ssh/id_*"]}}
  - {id: b, decision: deny, when: {paths: ["**/.env", "~/.ssh/**"]}}`},
		{name: "allow by allow",
			org: `
  - {id: a, decision: allow, when: {kind: [read], paths: ["${cwd}/**"]}}
  - {id: b, decision: allow, when: {kind: [read], paths: ["${cwd}/src/*.go"]}}`,
			want: []string{"b (p.yaml:3:5) by a (p.yaml:2:5)"}},
		{name: "an allow of git does not allow /usr/bin/git",
			org: `
  - {id: a, decision: allow, when: {command: ["git **"]}}
  - {id: b, decision: allow, when: {command: ["/usr/bin/git push **"]}}
  - {id: c, decision: allow, when: {program: ["*"]}}
  - {id: d, decision: allow, when: {program: [/usr/bin/env]}}`},
		{name: "the org layer first",
			org:  `[{id: z, decision: ask, when: {command: ["git push **"]}}]`,
			user: `[{id: a, decision: ask, when: {command: ["git push origin **"]}}]`,
			want: []string{"a (config.yaml:1:9) by z (p.yaml:1:9)"}},
		{name: "an unless that may reopen",
			org: `
  - {id: a, decision: deny, when: {paths: ["/tmp/**"]}, unless: {paths: ["/tmp/ok/**"]}}
  - {id: b, decision: deny, when: {paths: ["/tmp/x/**"]}}
  - {id: c, decision: deny, when: {paths: ["/tmp/**"]}, unless: {paths: ["/tmp/keep/**"]}}`},
		{name: "an unless the covered rule shares",
			org: `
  - {id: a, decision: deny, when: {paths: ["/tmp/**"]}, unless: {paths: ["/tmp/ok/**"]}}
  - {id: b, decision: deny, when: {paths: ["/tmp/x/**"]}, unless: {paths: ["/tmp/ok/**", "/tmp/x/keep"]}}`,
			want: []string{"b (p.yaml:3:5) by a (p.yaml:2:5)"}},
		{name: "an allow's unless does not cover a deny's",
			org: `
  - {id: a, decision: deny, when: {kind: [read]}, unless: {paths: ["/tmp/**"]}}
  - {id: b, decision: allow, when: {kind: [read]}, unless: {paths: ["/tmp/**"]}}`},
		{name: "deny over ask on commands",
			org: `
  - {id: a, decision: ask, when: {command: ["git push **"]}}
  - {id: b, decision: deny, when: {command: ["git **"]}}`,
			want: []string{"a (p.yaml:2:5) by b (p.yaml:3:5)"}},
		// Below a recursively read directory a deny only asks: on ~, both
		// ask and a, first, is named.
		{name: "deny over ask on paths, the ask first",
			org: `
  - {id: a, decision: ask, when: {paths: ["~/.ssh/config"]}}
  - {id: b, decision: deny, when: {paths: ["~/.ssh/**"]}}`},
		{name: "deny over ask on paths, the deny first",
			org: `
  - {id: a, decision: deny, when: {paths: ["~/.ssh/**"]}}
  - {id: b, decision: ask, when: {paths: ["~/.ssh/config"]}}`,
			want: []string{"b (p.yaml:3:5) by a (p.yaml:2:5)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layers := []*Layer{mustParse(t, "p.yaml", "rules: "+tc.org+"\n")}
			if tc.user != "" {
				layers = append(layers, mustUser(t, "rules: "+tc.user+"\n"))
			}
			var got []string
			for _, s := range mustCompile(t, layers...).Shadowed() {
				got = append(got, fmt.Sprintf("%s (%s) by %s (%s)", s.Rule.ID, s.Rule.Pos, s.By.ID, s.By.Pos))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("shadowed %q, want %q", got, tc.want)
			}
		})
	}
}

// TestExplain: the text names the decision, every item with its rule, and
// the answer for each kind of request.
func TestExplain(t *testing.T) {
	p := mustCompile(t, mustParse(t, "p.yaml", `
default: ask
rules:
  - {id: no-env, decision: deny, when: {paths: ["**/.env"]}, message: "No secrets."}
  - {id: cat-ok, decision: allow, when: {program: cat}}
  - {id: reads, decision: allow, when: {kind: [read], paths: ["${roots}/**"]}, unless: {paths: ["**/.env.local"]}}
`))
	d := p.Decide(terminal("timeout 5 cat .env README.md"))
	text := Explain(&d)
	for _, want := range []string{
		"decision: DENY   by no-env (org layer)",
		"message:  No secrets.",
		"policy:   " + p.Hash(),
		"command  timeout 5 cat .env README.md",
		"wrapper: only makes the decision stricter",
		"path     /home/user/project/.env                  deny   no-env (org layer)",
		"also matched: reads (org, allow)",
		"path     /home/user/project/README.md             allow  reads (org layer)",
		`answer:   JSON-RPC error -32603 "acp-router: denied by no-env: No secrets."`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("explain lacks %q:\n%s", want, text)
		}
	}
	if d.ErrorMessage() != "acp-router: denied by no-env: No secrets." {
		t.Errorf("ErrorMessage %q", d.ErrorMessage())
	}
	for _, tc := range []struct {
		method string
		effect Effect
		want   string
	}{
		{acp.MethodRequestPermission, Allow, "first allow_once option"},
		{acp.MethodRequestPermission, Deny, "reject_once option (else reject_always, else outcome cancelled)"},
		{acp.MethodRequestPermission, Ask, "forwarded to the editor"},
		{acp.MethodReadTextFile, Allow, "forwarded to the editor"},
		{acp.MethodWriteTextFile, Deny, "JSON-RPC error -32603"},
		{acp.MethodTerminalCreate, Ask, "the router asks the editor first"},
	} {
		if got := outcome(&Decision{Method: tc.method, Effect: tc.effect, Rule: "r", Layer: "org"}); !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: %q lacks %q", tc.method, tc.effect, got, tc.want)
		}
	}
	d = p.Decide(terminal("cat ../x.txt"))
	if d.Effect != Ask || d.Source != SourceDefault || d.Rule != "" {
		t.Errorf("../x.txt outside the rules: %s %s %q", d.Effect, d.Source, d.Rule)
	}
	if !strings.Contains(d.ErrorMessage(), "denied by the default policy (org layer)") {
		t.Errorf("default ErrorMessage %q", d.ErrorMessage())
	}
}

// TestWarnings: modes that approve by themselves are reported when
// allow_modes allows them while deny or ask rules cover what they
// approve; agents the router cannot keep asking are reported with what to
// do.
func TestWarnings(t *testing.T) {
	p := mustCompile(t, mustParse(t, "p.yaml", `
deny_modes: ["claude:bypassPermissions"]
allow_modes: ["claude:acceptEdits", "claude:auto", "claude:default", "codex:agent"]
rules:
  - {id: no-env, decision: deny, when: {kind: [edit], paths: ["**/.env"]}}
  - {id: fetch-asks, decision: ask, when: {kind: [fetch]}}
  - {id: pastebin, decision: deny, when: {domains: [pastebin.com]}}
`))
	w := strings.Join(p.Warnings(AgentID{Name: "claude"}, AgentID{Name: "codex-work"}, AgentID{Name: "oc", Info: "OpenCode"}, AgentID{Name: "fake", Info: "fake"}), "\n")
	for _, want := range []string{
		`agent "claude": mode "acceptEdits" approves edit, delete, move, execute without asking, and allow_modes "claude:acceptEdits" (p.yaml:3:15) allows it, so deny/ask rules (no-env) are not enforced`,
		`agent "claude": mode "auto" approves`,
		`agent "codex-work": mode "agent" approves`,
		`p.yaml:3:52: allow_modes "claude:default" has no effect`,
		`agent "oc": OpenCode (opencode acp 1.18) asks nothing under its default permissions, in any mode; set "permission": {"edit": "ask", "bash": "ask", "webfetch": "ask"} in its opencode.json`,
		`agent "fake": the router does not know its modes`,
	} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if strings.Contains(w, "acceptEdits\" approves edit, delete, move, execute without asking, so deny/ask rules (no-env, pastebin)") {
		t.Errorf("a domain rule is not about edits:\n%s", w)
	}
	for _, not := range []string{"bypassPermissions", `"agent-full-access"`, "refuses"} {
		if strings.Contains(w, not) {
			t.Errorf("warnings mention %s:\n%s", not, w)
		}
	}
}

// TestConcurrentDecide: a Policy is shared by every session of the router.
func TestConcurrentDecide(t *testing.T) {
	p := benchPolicy(t)
	req := benchRequest()
	want := p.Decide(req)
	done := make(chan Decision)
	for range 8 {
		go func() {
			var d Decision
			for range 50 {
				d = p.Decide(req)
			}
			done <- d
		}()
	}
	for range 8 {
		if d := <-done; !sameDecision(d, want) {
			t.Errorf("concurrent decision differs:\n%s", Explain(&d))
		}
	}
}

// TestCovers: an approved tool call covers the direct calls that carry it
// out, and nothing more.
func TestCovers(t *testing.T) {
	perm := func(kind, raw string) *extract.Evidence {
		params := `{"sessionId":"s","options":[],"toolCall":{"toolCallId":"t","kind":"` + kind + `","rawInput":` + raw + `}}`
		return extract.Extract(&extract.Request{Method: acp.MethodRequestPermission, Params: json.RawMessage(params),
			Session: extract.Session{Cwd: TestCwd, Home: TestHome}})
	}
	direct := func(method, params string) *extract.Evidence {
		return extract.Extract(&extract.Request{Method: method, Params: json.RawMessage(params), Session: extract.Session{Cwd: TestCwd, Home: TestHome}})
	}
	write := perm("edit", `{"file_path":"`+TestCwd+`/a.go","content":"x"}`)
	run := perm("execute", `{"command":"go test ./... > out.txt"}`)
	for _, tc := range []struct {
		name     string
		approved *extract.Evidence
		call     *extract.Evidence
		want     bool
	}{
		{"the approved write", write, direct(acp.MethodWriteTextFile, `{"path":"`+TestCwd+`/./a.go","content":"x"}`), true},
		{"another file", write, direct(acp.MethodWriteTextFile, `{"path":"`+TestCwd+`/b.go","content":"x"}`), false},
		{"a read is not an edit", perm("read", `{"path":"`+TestCwd+`/a.go"}`), direct(acp.MethodWriteTextFile, `{"path":"`+TestCwd+`/a.go"}`), false},
		{"the approved command", run, direct(acp.MethodTerminalCreate, `{"command":"go test ./... > out.txt"}`), true},
		{"the same command in bash -c", run, direct(acp.MethodTerminalCreate, `{"command":"bash","args":["-c","go test ./... > out.txt"]}`), true},
		{"a command more", run, direct(acp.MethodTerminalCreate, `{"command":"go test ./... > out.txt; rm -rf /"}`), false},
		{"a relative fs path", write, direct(acp.MethodWriteTextFile, `{"path":"a.go"}`), false},
		// make reads the Makefile of the directory it runs in.
		{"the approved command in its directory", perm("execute", `{"command":"make"}`), direct(acp.MethodTerminalCreate, `{"command":"make","cwd":"`+TestCwd+`"}`), true},
		{"the approved command in another directory", perm("execute", `{"command":"make"}`), direct(acp.MethodTerminalCreate, `{"command":"make","cwd":"/tmp/elsewhere"}`), false},
		{"approved in a directory, run in the session's", perm("execute", `{"command":"make","cwd":"/tmp/elsewhere"}`), direct(acp.MethodTerminalCreate, `{"command":"make"}`), false},
		{"approved in a directory, run there", perm("execute", `{"command":"make","cwd":"/tmp/elsewhere"}`), direct(acp.MethodTerminalCreate, `{"command":"make","cwd":"/tmp/elsewhere"}`), true},
	} {
		if got := tc.approved.Covers(tc.call); got != tc.want {
			t.Errorf("%s: Covers = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestModeSettingsMerge: files of one layer add up their allow_modes (in
// that layer) and the stricter unknown_agents wins; both change the hash.
func TestModeSettingsMerge(t *testing.T) {
	a := mustParse(t, "10-a.yaml", "unknown_agents: refuse\n")
	b := mustParse(t, "20-b.yaml", "unknown_agents: warn\nallow_modes: ['claude:auto']\n")
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	if a.UnknownAgents != unknownRefuse || a.UnknownAgentsPos.File != "10-a.yaml" {
		t.Errorf("unknown_agents %q at %s, want refuse from 10-a.yaml", a.UnknownAgents, a.UnknownAgentsPos)
	}
	if len(a.AllowModes) != 1 || a.AllowModes[0].Layer != LayerOrg {
		t.Errorf("allow_modes %+v", a.AllowModes)
	}
	p := mustCompile(t, a)
	if p.unknown == nil || p.unknown.Layer != LayerOrg {
		t.Errorf("UnknownAgents %+v", p.unknown)
	}
	plain := mustCompile(t, mustParse(t, "x.yaml", "default: ask\n"))
	for _, other := range []string{"unknown_agents: refuse\n", "allow_modes: ['claude:auto']\n"} {
		if mustCompile(t, mustParse(t, "x.yaml", "default: ask\n"+other)).Hash() == plain.Hash() {
			t.Errorf("the hash ignores %q", other)
		}
	}
	if mustCompile(t, mustParse(t, "x.yaml", "default: ask\nunknown_agents: warn\n")).Hash() != plain.Hash() {
		t.Error("unknown_agents: warn (the default) changes the hash")
	}
}

// TestExplainModes: what check and policy explain print about an agent's
// modes.
func TestExplainModes(t *testing.T) {
	p := mustCompile(t, mustParse(t, "p.yaml", "deny_modes: ['*:plan']\nallow_modes: ['claude:acceptEdits']\nunknown_agents: refuse\n"))
	got := p.ExplainModes(AgentID{Name: "work", Info: "@agentclientprotocol/claude-agent-acp"})
	for _, want := range []string{
		`agent "work": Claude Agent (@agentclientprotocol/claude-agent-acp 0.101) (from agentInfo @agentclientprotocol/claude-agent-acp): asks in default, plan`,
		`allowed acceptEdits        it approves edit, delete, move, execute by itself (approves edits and file commands in the working directory); allowed by allow_modes "claude:acceptEdits" (p.yaml:2:15)`,
		`denied  auto               it approves every tool call by itself (a model approves each action); the policy allows it only with allow_modes: ["claude:auto"]`,
		`denied  plan               deny_modes "*:plan" (p.yaml:1:14)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ExplainModes lacks %q:\n%s", want, got)
		}
	}
	got = p.ExplainModes(AgentID{Name: "fake", Info: "fake"}, "default")
	for _, want := range []string{
		`agent "fake" (fake): not in the built-in table of modes`,
		`allowed default            the router does not know what it approves`,
		`the router refuses its sessions: unknown_agents: refuse (org layer, p.yaml:3:17)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ExplainModes lacks %q:\n%s", want, got)
		}
	}
}
