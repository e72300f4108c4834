package guard

import (
	"io"

	"encoding/json"
	"github.com/hashicorp/go-hclog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// testCwd is the cwd of the test sessions; testHome is ${home}.
const (
	testCwd  = "/p"
	testHome = "/home/u"
)

// testPermissions is the user layer most tests run with.
const testPermissions = `permissions:
  default: ask
  deny_modes: [claude:yolo]
  rules:
    - id: no-secrets
      decision: deny
      when: {paths: ["**/.env"]}
      message: Secrets are not available to agents.
    - id: reads-in-project
      decision: allow
      when: {kind: [read], paths: ["${cwd}/**"]}
    - id: safe-commands
      decision: allow
      when: {command: ["git status **", "ls **"]}
    - id: no-etc-writes
      decision: deny
      when: {kind: [edit], paths: ["/etc/**"]}
`

// configYAML is a config with one agent (claude, /bin/sh: never started)
// and extra appended.
func configYAML(extra string) string {
	return "version: 1\nagents:\n  - name: claude\n    command: /bin/sh\n" + extra
}

// testEnv is the environment configs are parsed with.
func testEnv(name string) (string, bool) {
	switch name {
	case "HOME":
		return testHome, true
	case "XDG_STATE_HOME":
		return "/nonexistent/state", true
	}
	return "", false
}

// parseConfig parses a config held in memory.
func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("c.yaml", []byte(yaml), testEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// noOrg is an org policy directory that does not exist.
func noOrg(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "policy.d")
}

// loadTestPolicy compiles the permissions: section perms (a config's
// "permissions:" block), with no org layer; its tests must pass.
func loadTestPolicy(t *testing.T, perms string) *policy.Policy {
	t.Helper()
	lp, err := LoadPolicy(noOrg(t), parseConfig(t, configYAML(perms)))
	if err != nil {
		t.Fatalf("LoadPolicy: %v", err)
	}
	if err := lp.TestsError(); err != nil {
		t.Fatal(err)
	}
	if lp.Policy == nil {
		t.Fatal("no policy")
	}
	return lp.Policy
}

// testFS is the filesystem of the test sessions: a project with a secret
// and a symlink out of it.
func testFS() *extract.MapFS {
	return extract.NewMapFS([]string{testCwd + "/README.md", testCwd + "/src/a.go", testCwd + "/.env", "/etc/hosts"},
		map[string]string{testCwd + "/etc": "/etc"})
}

// newTestGuard is a guard enforcing perms (testPermissions when "") on fs
// (testFS when nil), auditing to a file in a temporary directory.
func newTestGuard(t *testing.T, perms string, opts Options) *Guard {
	t.Helper()
	if perms == "" {
		perms = testPermissions
	}
	if opts.FS == nil {
		opts.FS = testFS()
	}
	if opts.AuditFile == "" {
		opts.AuditFile = filepath.Join(t.TempDir(), "audit", "audit.jsonl")
	}
	opts.Home = testHome
	g, err := New(loadTestPolicy(t, perms), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// Params of the requests the policy decides.
func readParams(path string) json.RawMessage {
	return mustJSON(map[string]any{"sessionId": "s", "path": path})
}

func writeParams(path string) json.RawMessage {
	return mustJSON(map[string]any{"sessionId": "s", "path": path, "content": "secret content"})
}

func terminalParams(command string, args ...string) json.RawMessage {
	return mustJSON(map[string]any{"sessionId": "s", "command": command, "args": args})
}

// permParams is a session/request_permission about tool call id, whose
// toolCall has the members of toolCall besides its id.
func permParams(id string, toolCall map[string]any) json.RawMessage {
	tc := map[string]any{"toolCallId": id}
	for k, v := range toolCall {
		tc[k] = v
	}
	return mustJSON(map[string]any{"sessionId": "s", "toolCall": tc, "options": []map[string]string{
		{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
		{"optionId": "reject", "name": "Reject", "kind": "reject_once"},
	}})
}

// locations is a toolCall's locations member.
func locations(paths ...string) []map[string]string {
	var out []map[string]string
	for _, p := range paths {
		out = append(out, map[string]string{"path": p})
	}
	return out
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// outcome is what the tests compare of a verdict.
type outcome struct {
	Effect Effect
	Source string
	Rule   string
	Layer  string
}

func outcomeOf(v *Verdict) outcome { return outcome{v.Effect, v.Source, v.Rule, v.Layer} }

// requireRecord compares an audit record with want (JSON), structurally,
// after checking and removing the members that vary: time, decisionId,
// latencyUs.
func requireRecord(t *testing.T, got map[string]any, want string) {
	t.Helper()
	for _, k := range []string{"time", "decisionId", "latencyUs"} {
		if _, ok := got[k]; !ok {
			t.Errorf("audit record without %s: %v", k, got)
		}
		delete(got, k)
	}
	var w map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want: %v", err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Errorf("audit record\n got %s\nwant %s", g, mustJSON(w))
	}
}

// blockFS is testFS whose Resolve blocks for paths under prefix until
// release is closed; entered gets each such path (when it has room).
type blockFS struct {
	*extract.MapFS
	prefix  string
	release chan struct{}
	entered chan string
}

func newBlockFS(prefix string) *blockFS {
	return &blockFS{MapFS: testFS(), prefix: prefix, release: make(chan struct{}), entered: make(chan string, 1024)}
}

func (b *blockFS) Resolve(p string) (string, error) {
	if strings.HasPrefix(p, b.prefix) {
		select {
		case b.entered <- p:
		default:
		}
		<-b.release
	}
	return b.MapFS.Resolve(p)
}

// panicFS panics on every path: a bug in the resolver or the policy.
type panicFS struct{ extract.FS }

func (panicFS) Resolve(p string) (string, error) { panic("resolver exploded on " + p) }

// syncBuffer is a log destination safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hclogTo is a logger writing to w.
func hclogTo(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Trace})
}

func jsonUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
