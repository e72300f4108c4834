package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
)

// benchPipeline is a 10-command pipeline of the kind agents run.
const benchPipeline = `cd src && FOO=1 timeout 30 go test ./... 2>&1 | grep -v '^ok' | sed -e 's/x/y/' | sort | uniq -c | head -n 50 > /tmp/report.txt; git status --short | wc -l && cat ../README.md | tee -a notes/log.txt`

// benchPolicy generates a 500-rule policy over every matcher kind, with
// realistic ** globs; a fixed seed keeps it reproducible.
func benchPolicy(tb testing.TB) *Policy {
	tb.Helper()
	r := rand.New(rand.NewPCG(42, 500))
	words := []string{"src", "vendor", "node_modules", "build", "dist", "secrets", "config", "docs", "internal", "cmd",
		"notes", "scripts", "test", "assets", "migrations", ".git", ".github", "tmp", "cache", "logs"}
	exts := []string{"go", "ts", "js", "py", "pem", "key", "env", "yaml", "json", "md", "txt", "sql", "sh"}
	progs := []string{"go", "git", "grep", "sed", "sort", "uniq", "head", "wc", "cat", "tee", "npm", "make",
		"docker", "kubectl", "terraform", "curl", "wget", "ssh", "scp", "rsync", "python3", "node", "cargo", "rm",
		"mv", "cp", "chmod", "find", "awk", "tar", "zip", "jq", "yq", "helm", "aws", "gcloud", "az", "pip", "uv", "cd"}
	subs := []string{"test", "build", "status", "push", "run", "install", "apply", "get", "diff", "log", "exec", "deploy"}
	domains := []string{"example.com", "corp.example.com", "github.com", "pkg.go.dev", "npmjs.org", "pypi.org",
		"amazonaws.com", "googleapis.com", "evil.io", "pastebin.com"}
	decisions := []string{"allow", "ask", "deny"}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	var b strings.Builder
	b.WriteString("default: ask\nrules:\n")
	for i := range 500 {
		fmt.Fprintf(&b, "  - id: r%03d\n    decision: %s\n", i, pick(decisions))
		switch i % 10 {
		case 0, 1, 2: // paths
			var ps []string
			for range 1 + r.IntN(3) {
				switch r.IntN(6) {
				case 5:
					ps = append(ps, fmt.Sprintf("${roots}/%s/**", pick(words)))
				case 0:
					ps = append(ps, fmt.Sprintf("**/%s/**", pick(words)))
				case 1:
					ps = append(ps, fmt.Sprintf("${roots}/%s/**/*.%s", pick(words), pick(exts)))
				case 2:
					ps = append(ps, fmt.Sprintf("~/.config/%s/**", pick(words)))
				case 3:
					ps = append(ps, fmt.Sprintf("/opt/%s/%s/**", pick(words), pick(words)))
				default:
					ps = append(ps, fmt.Sprintf("**/*.%s", pick(exts)))
				}
			}
			fmt.Fprintf(&b, "    when: {kind: [%s], paths: [\"%s\"]}\n", pick([]string{"read", "edit", "read, edit"}), strings.Join(ps, `", "`))
		case 3, 4: // commands
			fmt.Fprintf(&b, "    when: {command: [\"%s %s **\"]", pick(progs), pick(subs))
			if r.IntN(3) == 0 {
				fmt.Fprintf(&b, ", flags_any: [\"-f\", \"--force\"]")
			}
			b.WriteString("}\n")
		case 5: // programs
			fmt.Fprintf(&b, "    when: {program: [%s, %s]}\n", pick(progs), pick(progs))
		case 6: // domains
			fmt.Fprintf(&b, "    when: {domains: [\"*.%s\", %s]}\n", pick(domains), pick(domains))
		case 7: // request-level matchers
			switch r.IntN(5) {
			case 0:
				fmt.Fprintf(&b, "    when: {agent: [claude, codex], kind: [%s]}\n", pick([]string{"execute", "read", "fetch"}))
			case 1:
				fmt.Fprintf(&b, "    when: {mode: [plan, acceptEdits], kind: [edit]}\n")
			case 2:
				fmt.Fprintf(&b, "    when: {title: [\"re:^(git|go) \"], method: [session/request_permission]}\n")
			case 3:
				fmt.Fprintf(&b, "    when: {cwd: [\"${home}/work/**\", \"/srv/%s/**\"], kind: [execute]}\n", pick(words))
			default:
				fmt.Fprintf(&b, "    when: {method: [fs/write_text_file], kind: [edit]}\n")
			}
		case 8: // env and flags
			fmt.Fprintf(&b, "    when: {env: [%s, \"DEBUG*\"], program: [%s]}\n", pick([]string{"FOO", "LD_PRELOAD", "CI", "GOFLAGS"}), pick(progs))
		case 9: // with unless
			fmt.Fprintf(&b, "    when: {paths: [\"**/%s/**\"]}\n    unless: {paths: [\"**/*.%s\"]}\n", pick(words), pick(exts))
		}
	}
	l, err := ParseFile("bench.yaml", []byte(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	p, err := Compile(l)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func benchRequest() *Request {
	params, _ := json.Marshal(map[string]any{"sessionId": "s", "command": benchPipeline})
	fs := NewMapFS([]string{TestCwd + "/README.md", TestCwd + "/src/main.go", TestCwd + "/src/notes/", TestCwd + "/.env"},
		map[string]string{TestCwd + "/docs": "/srv/docs"})
	return &Request{Method: acp.MethodTerminalCreate, Params: params, FS: fs,
		Session: Session{Agent: "claude", Mode: "default", Cwd: TestCwd, Home: TestHome}}
}

// TestBenchPolicyIsRealistic checks the benchmark's premises: 500 rules
// of every matcher kind, at least 10% of them matching some evidence of
// the pipeline, 10 commands.
func TestBenchPolicyIsRealistic(t *testing.T) {
	p := benchPolicy(t)
	if len(p.Rules()) != 500 {
		t.Fatalf("%d rules", len(p.Rules()))
	}
	d := p.Decide(benchRequest())
	hit := map[string]bool{}
	commands := 0
	for _, f := range d.Findings {
		for _, m := range f.Matches {
			hit[m.Rule] = true
		}
		for _, id := range f.Excepted {
			hit[id] = true
		}
		if f.Item.Type == ItemCommand && !f.Item.Aux {
			commands++
		}
	}
	if len(hit) < 50 {
		t.Errorf("only %d rules match some evidence, want >= 50", len(hit))
	}
	if commands < 10 {
		t.Errorf("%d commands, want >= 10", commands)
	}
	t.Logf("%d evidence items, %d commands, %d of 500 rules match; decision %s by %s", len(d.Findings), commands, len(hit), d.Effect, d.Rule)
}

// BenchmarkDecide: extraction (shell parsing, symlink resolution through
// a MapFS) plus the decision, with the generated 500-rule policy on the
// 10-command pipeline.
func BenchmarkDecide(b *testing.B) {
	p := benchPolicy(b)
	req := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(req)
	}
}

// BenchmarkEvaluate: the decision alone, on evidence already extracted.
func BenchmarkEvaluate(b *testing.B) {
	p := benchPolicy(b)
	ev := Extract(benchRequest())
	b.ReportAllocs()
	for b.Loop() {
		p.Evaluate(ev)
	}
}

// TestDecideLatency prints p50 and p99 of single decisions (extraction
// included) with the benchmark's policy and pipeline; run with -v.
func TestDecideLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("timing loop; skipped in -short")
	}
	p := benchPolicy(t)
	req := benchRequest()
	for range 200 {
		p.Decide(req)
	}
	const n = 5000
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		p.Decide(req)
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	allocs := testing.AllocsPerRun(100, func() { p.Decide(req) })
	t.Logf("Decide, 500 rules, 10-command pipeline: p50 %v  p99 %v  max %v  allocs/op %.0f",
		lat[n/2], lat[n*99/100], lat[n-1], allocs)
}
