package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// End-to-end tests of the permission policy (DESIGN §6): what the agent
// gets, what the editor sees, what the audit log says.

// policyYAML is a config with the given agents, a permissions: block (its
// lines as written under the key) and an audit file; it returns the config
// path and the audit file.
func policyYAML(t *testing.T, agents []string, permissions string, routing ...string) (string, string) {
	t.Helper()
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	y := routerYAML(t, agents, routing...)
	if permissions != "" {
		y += "permissions:\n" + indent(permissions, "  ")
	}
	y += fmt.Sprintf("audit: {file: %s}\n", yamlQuote(auditFile))
	return writeConfig(t, y), auditFile
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}

// auditRecord is what the tests read of an audit line.
type auditRecord struct {
	Session    string          `json:"session"`
	Parent     string          `json:"parentSession"`
	Agent      string          `json:"agent"`
	Method     string          `json:"method"`
	ToolCallID string          `json:"toolCallId"`
	Decision   string          `json:"decision"`
	Rule       *string         `json:"rule"`
	Layer      string          `json:"layer"`
	Source     string          `json:"source"`
	UserChoice string          `json:"userChoice"`
	PolicyHash string          `json:"policyHash"`
	Evidence   json.RawMessage `json:"evidence"`
	DecisionID string          `json:"decisionId"`
}

func (a auditRecord) rule() string {
	if a.Rule == nil {
		return ""
	}
	return *a.Rule
}

// summary is "METHOD DECISION RULE SOURCE USER_CHOICE", for comparing a
// test's audit log with the records it wants.
func (a auditRecord) summary() string {
	return fmt.Sprintf("%s %s %s %s %s", a.Method, a.Decision, a.rule(), a.Source, a.UserChoice)
}

// readAudit reads the audit log's records of requests and notifications.
// It leaves out the agent start records (acp-router/agent_start, one per
// agent start under the sandbox, the default with a policy): the tests
// that read them use readAuditAll.
func readAudit(t *testing.T, path string) []auditRecord {
	t.Helper()
	return slices.DeleteFunc(readAuditAll(t, path), func(r auditRecord) bool { return r.Method == "acp-router/agent_start" })
}

// readAuditAll reads every record of the audit log.
func readAuditAll(t *testing.T, path string) []auditRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	if fi, _ := f.Stat(); fi.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode %v, want 0600", fi.Mode().Perm())
	}
	var out []auditRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r auditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// permissionCounter answers session/request_permission with choose and
// counts the requests.
type permissionCounter struct {
	mu     sync.Mutex
	params []json.RawMessage
}

func (c *permissionCounter) handler(kind string) Handler {
	return func(p json.RawMessage) (any, *RPCError) {
		c.mu.Lock()
		c.params = append(c.params, p)
		c.mu.Unlock()
		return choosePermission(p, kind)
	}
}

func (c *permissionCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.params)
}

const secretsPolicy = `default: ask
rules:
  - id: no-secrets
    decision: deny
    when: {paths: ["**/.env", "**/.env.*"]}
    unless: {paths: ["**/.env.example"]}
    message: Secrets are not available to agents.
  - id: reads-in-project
    decision: allow
    when: {kind: [read, search], paths: ["${cwd}/**"]}
tests:
  - {call: "fs/read_text_file ${cwd}/.env", expect: deny, rule: no-secrets}
`

// TestPolicyPermissionRequests: a permission request for a denied write
// gets the agent's reject_once option, and the editor a failed tool call
// naming the rule instead of a prompt; an allowed read is never shown to
// the editor; both are in the audit log with their rule.
func TestPolicyPermissionRequests(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, fmt.Sprintf(`permission-tool {"kind":"edit","title":"Write secrets","locations":[{"path":"%[1]s/.env"}]}
permission-tool {"kind":"read","title":"Read main.go","locations":[{"path":"%[1]s/main.go"}]}`, cwd), "end_turn")

	texts := strings.Join(e.Texts(sid), "\n")
	for _, want := range []string{`permission: {"outcome":"selected","optionId":"reject"}`, `permission: {"outcome":"selected","optionId":"allow"}`} {
		if !strings.Contains(texts, want) {
			t.Errorf("agent said %q; want %q", texts, want)
		}
	}
	if n := asks.count(); n != 0 {
		t.Errorf("the editor was asked %d times; the policy decided both", n)
	}
	failed := e.Rec.Filter(func(m *Msg) bool {
		return m.Update() == "tool_call_update" && strings.Contains(string(m.Params), `"status":"failed"`)
	})
	if len(failed) != 1 || !strings.Contains(string(failed[0].Params), "no-secrets") || !strings.Contains(string(failed[0].Params), "Secrets are not available") {
		t.Fatalf("failed tool call updates: %v", failed)
	}
	var fu struct {
		Update struct {
			ToolCallID string            `json:"toolCallId"`
			Content    []json.RawMessage `json:"content"`
		} `json:"update"`
	}
	json.Unmarshal(failed[0].Params, &fu)
	if fu.Update.ToolCallID != "call-1" || len(fu.Update.Content) != 1 {
		t.Errorf("failed update %s: want tool call call-1 with the note", failed[0].Params)
	}

	recs := readAudit(t, auditFile)
	if len(recs) != 2 {
		t.Fatalf("audit has %d records, want 2: %+v", len(recs), recs)
	}
	if r := recs[0]; r.Decision != "deny" || r.rule() != "no-secrets" || r.Layer != "user" || r.Source != "rule" || r.Session != sid ||
		r.Agent != "claude" || r.Method != "session/request_permission" || r.ToolCallID != "call-1" || !strings.HasPrefix(r.PolicyHash, "sha256:") ||
		!strings.Contains(string(r.Evidence), cwd+"/.env") {
		t.Errorf("deny record %+v", r)
	}
	if r := recs[1]; r.Decision != "allow" || r.rule() != "reads-in-project" || r.ToolCallID != "call-2" {
		t.Errorf("allow record %+v", r)
	}
}

// TestPolicyDirectCalls: a denied fs/write_text_file never reaches the
// editor and the agent's error names the rule; an allowed read is
// forwarded; a read the policy asks about is preceded by the router's own
// permission request (one option of each kind), and carried out or refused
// as the user chose.
func TestPolicyDirectCalls(t *testing.T) {
	t.Parallel()
	cwd, elsewhere := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main"), 0o644)
	os.WriteFile(filepath.Join(elsewhere, "notes.txt"), []byte("notes"), 0o644)
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	var mu sync.Mutex
	var writes int
	e.Handle("fs/write_text_file", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		writes++
		mu.Unlock()
		return writeTextFile(p)
	})
	asks := &permissionCounter{}
	answer := "allow_once"
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		mu.Lock()
		kind := answer
		mu.Unlock()
		return asks.handler(kind)(p)
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, fmt.Sprintf("write %[1]s/.env KEY=1\nread %[1]s/main.go\nread %[2]s/notes.txt", cwd, elsewhere), "end_turn")
	mu.Lock()
	answer = "reject_once"
	mu.Unlock()
	e.MustPrompt(t, sid, fmt.Sprintf("read %s/notes.txt", elsewhere), "end_turn")

	texts := e.Texts(sid)
	want := []string{
		"write error: -32603 acp-router: denied by no-secrets: Secrets are not available to agents.",
		"read: package main",
		"read: notes",
		"read error: -32603 acp-router: the user did not allow claude wants to read " + elsewhere + "/notes.txt",
	}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Errorf("agent said\n%s\nwant\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
	if writes != 0 {
		t.Errorf("the denied write reached the editor")
	}
	if _, err := os.Stat(filepath.Join(cwd, ".env")); err == nil {
		t.Errorf(".env was written")
	}
	if asks.count() != 2 {
		t.Fatalf("the editor was asked %d times, want 2 (the reads outside the project)", asks.count())
	}
	var ask struct {
		SessionID string `json:"sessionId"`
		ToolCall  struct {
			Title     string `json:"title"`
			Kind      string `json:"kind"`
			Locations []struct {
				Path string `json:"path"`
			} `json:"locations"`
		} `json:"toolCall"`
		Options []struct{ Kind string } `json:"options"`
	}
	json.Unmarshal(asks.params[0], &ask)
	var kinds []string
	for _, o := range ask.Options {
		kinds = append(kinds, o.Kind)
	}
	if ask.SessionID != sid || ask.ToolCall.Kind != "read" || len(ask.ToolCall.Locations) != 1 || ask.ToolCall.Locations[0].Path != elsewhere+"/notes.txt" ||
		strings.Join(kinds, " ") != "allow_once allow_always reject_once reject_always" {
		t.Errorf("router's permission request %s", asks.params[0])
	}
	var decisions []string
	for _, r := range readAudit(t, auditFile) {
		decisions = append(decisions, r.summary())
	}
	wantAudit := []string{
		"fs/write_text_file deny no-secrets rule ",
		"fs/read_text_file allow reads-in-project rule ",
		"fs/read_text_file ask  user allow_once",
		"fs/read_text_file ask  user reject_once",
	}
	if strings.Join(decisions, "\n") != strings.Join(wantAudit, "\n") {
		t.Errorf("audit\n%s\nwant\n%s", strings.Join(decisions, "\n"), strings.Join(wantAudit, "\n"))
	}
}

// TestPolicyAlwaysAndCoverage: an "always" choice is remembered by the
// router (the agent gets the "once" option, the next identical request is
// not shown to the editor, a different one is); an approved tool call
// covers the direct write that carries it out in the same turn, not in the
// next one.
func TestPolicyAlwaysAndCoverage(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_always"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	npmTest := `permission-tool {"kind":"execute","title":"npm test","rawInput":{"command":"npm test"}}`
	e.MustPrompt(t, sid, npmTest+"\n"+npmTest, "end_turn")
	if asks.count() != 1 {
		t.Fatalf("asked %d times for two identical requests after an \"always\" choice, want 1", asks.count())
	}
	e.MustPrompt(t, sid, `permission-tool {"kind":"execute","title":"npm publish","rawInput":{"command":"npm publish"}}`, "end_turn")
	if asks.count() != 2 {
		t.Fatalf("a different command was not asked about (asked %d times)", asks.count())
	}
	for _, txt := range e.Texts(sid) {
		if txt != `permission: {"outcome":"selected","optionId":"allow"}` {
			t.Errorf("agent got %q; the router holds the grant, the agent gets allow_once", txt)
		}
	}

	// Coverage: the edit approved once covers the write of the same turn.
	e2 := StartRouter(t, cfg, nil)
	asks2 := &permissionCounter{}
	e2.Handle("session/request_permission", asks2.handler("allow_once"))
	e2.Initialize(t, capsAll)
	sid2 := e2.NewSession(t, cwd)
	out := cwd + "/out.txt"
	e2.MustPrompt(t, sid2, fmt.Sprintf("permission-tool {\"kind\":\"edit\",\"title\":\"Write out.txt\",\"locations\":[{\"path\":%q}]}\nwrite %s one", out, out), "end_turn")
	if asks2.count() != 1 {
		t.Fatalf("asked %d times; the approved edit covers its write", asks2.count())
	}
	e2.MustPrompt(t, sid2, "write "+out+" two", "end_turn")
	if asks2.count() != 2 {
		t.Fatalf("asked %d times; an approval covers its own turn only", asks2.count())
	}
	if b, _ := os.ReadFile(out); string(b) != "two" {
		t.Errorf("out.txt = %q", b)
	}
	var covered bool
	for _, r := range readAudit(t, auditFile) {
		if r.Session == sid2 && r.Method == "fs/write_text_file" && r.Decision == "allow" && r.Source == "user" {
			covered = true
		}
	}
	if !covered {
		t.Errorf("no audit record of the covered write")
	}
}

// TestPolicyModes: deny_modes holds on every mode the router observes: a
// session that starts in a denied mode is set back before the editor sees
// it, an agent reporting current_mode_update into a denied mode is set
// back (audited, shown), the editor cannot choose it, and an agent that
// cannot leave it gets its prompts refused.
func TestPolicyModes(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "claude.log")
	modes := func(current string, ids ...string) json.RawMessage {
		var avail []map[string]string
		for _, id := range ids {
			avail = append(avail, map[string]string{"id": id, "name": id})
		}
		return mustJSON(map[string]any{"modes": map[string]any{"currentModeId": current, "availableModes": avail}})
	}
	dirStuck := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{
		fakeAgentYAML("claude", fakeOpts{LogFile: logFile, SessionResult: modes("bypassPermissions", "bypassPermissions", "default", "plan")}),
		fakeAgentYAML("gemini", fakeOpts{SessionResult: modes("yolo", "yolo")}),
	}, `deny_modes: ["claude:bypassPermissions", "*:yolo"]`, "default: claude", "rules:", cwdRule(dirStuck, "gemini"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	res := e.MustCall(t, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
	var nr struct {
		SessionID string `json:"sessionId"`
		Modes     struct {
			CurrentModeID  string `json:"currentModeId"`
			AvailableModes []struct {
				ID string `json:"id"`
			} `json:"availableModes"`
		} `json:"modes"`
	}
	json.Unmarshal(res, &nr)
	sid := nr.SessionID
	if nr.Modes.CurrentModeID != "claude:default" {
		t.Errorf("session starts in %q; want claude:default (set back from bypassPermissions)", nr.Modes.CurrentModeID)
	}
	for _, m := range nr.Modes.AvailableModes {
		if m.ID == "claude:bypassPermissions" || strings.HasSuffix(m.ID, ":yolo") {
			t.Errorf("denied mode %s offered", m.ID)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, rerr := e.Call(ctx, "session/set_mode", map[string]any{"sessionId": sid, "modeId": "claude:bypassPermissions"}); rerr == nil || !strings.Contains(rerr.Message, "deny_modes") {
		t.Errorf("set_mode to a denied mode: %v", rerr)
	}
	e.MustPrompt(t, sid, `update {"sessionUpdate":"current_mode_update","currentModeId":"bypassPermissions"}`, "end_turn")
	notices := func() int {
		n := 0
		for _, txt := range e.Texts(sid) {
			if strings.Contains(txt, `"bypassPermissions", which the permission policy does not allow; it has been set back to "default"`) {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(waitTimeout); notices() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d reset notices, want 2 (session/new, mode update): %q", notices(), e.Texts(sid))
		}
	}
	var sets int
	for _, l := range readLines(t, logFile) {
		if l == "session/set_mode" {
			sets++
		}
	}
	if sets != 2 {
		t.Errorf("the agent got %d set_mode requests, want 2 (at session/new and after its mode update)", sets)
	}
	var resets int
	for _, r := range readAudit(t, auditFile) {
		if r.Method == "mode" && r.Decision == "deny" && r.rule() == "acp-router:denied-mode" && r.Layer == "user" {
			resets++
		}
	}
	if resets != 2 {
		t.Errorf("%d mode resets audited, want 2: %+v", resets, readAudit(t, auditFile))
	}

	// An agent with no allowed mode: its prompts are refused.
	stuck := e.NewSession(t, dirStuck)
	m, err := e.Prompt(waitTimeout, stuck, "say hi")
	if err != nil {
		t.Fatal(err)
	}
	if m.Error == nil || !strings.Contains(m.Error.Message, "could not be set back") {
		t.Errorf("prompt in a session stuck in a denied mode: %v %s", m.Error, m.Result)
	}
}

// TestPolicyOrgLayer: the org layer is enforced whatever the user's config
// says (no permissions: at all; or a user default allow), and a group- or
// world-writable org file stops the router with a clear message.
func TestPolicyOrgLayer(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the org layer must be root-owned: run as root (CI does)")
	}
	orgDir := filepath.Join(t.TempDir(), "policy.d")
	os.MkdirAll(orgDir, 0o755)
	orgFile := filepath.Join(orgDir, "10-org.yaml")
	os.WriteFile(orgFile, []byte(`default: ask
lower_layers_may: [deny, ask]
rules:
  - id: org-no-push
    decision: deny
    when: {program: [git], command: ["git push **"]}
    message: Pushing is done by CI.
`), 0o644)
	bin := routerWithOrgDir(t, orgDir)
	cwd := t.TempDir()
	for _, perms := range []string{"", "default: allow\nrules:\n  - {id: everything, decision: allow, when: {kind: [execute]}}"} {
		cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, perms)
		e := StartEditor(t, []string{bin, "--config", cfg, "--log-level", "debug"})
		e.Initialize(t, capsAll)
		sid := e.NewSession(t, cwd)
		e.MustPrompt(t, sid, "terminal-create git push origin main", "end_turn")
		if got := strings.Join(e.Texts(sid), "\n"); got != "terminal error: -32603 acp-router: denied by org-no-push: Pushing is done by CI." {
			t.Errorf("with permissions %q: agent said %q", perms, got)
		}
	}
	out, err := exec.Command(bin, "check", "--config", writeConfig(t, routerYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}))).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "org layer") || !strings.Contains(string(out), orgFile+":4:") {
		t.Errorf("check: %v\n%s", err, out)
	}

	os.Chmod(orgFile, 0o666)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, "")
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdin = strings.NewReader("")
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "not owned by root or writable by group or others") || !strings.Contains(string(out), orgFile) {
		t.Errorf("router with a world-writable org file: %v\n%s", err, out)
	}
}

// TestPolicyUserRepeatsOrg: a user layer whose rule repeats a deny the
// org layer already enforces, with a test naming the user's rule, is not
// an error. Before, the user's test failed ("expected deny by rule
// user-no-env, got deny by org-no-env"): the router refused to start,
// and check and policy test failed. Now the router starts (the org's rule
// decides and is the one named), policy test passes, and both say so in a
// note.
func TestPolicyUserRepeatsOrg(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the org layer must be root-owned: run as root (CI does)")
	}
	orgDir := filepath.Join(t.TempDir(), "policy.d")
	os.MkdirAll(orgDir, 0o755)
	os.WriteFile(filepath.Join(orgDir, "10-org.yaml"), []byte(`rules:
  - {id: org-no-env, decision: deny, when: {paths: ["**/.env"]}}
`), 0o644)
	bin := routerWithOrgDir(t, orgDir)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, `default: allow
rules:
  - {id: user-no-env, decision: deny, when: {paths: ["**/.env"]}}
tests:
  - {call: "fs/read_text_file ${cwd}/.env", expect: deny, rule: user-no-env}
`)
	const note = "deny by user-no-env (user layer) repeats org-no-env (org layer), which decides"
	for _, args := range [][]string{{"policy", "test"}, {"check"}} {
		out, err := exec.Command(bin, append(args, "--config", cfg)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "note: "+cfg+":") || !strings.Contains(string(out), note) {
			t.Errorf("%s: %v, want exit 0 and the note %q:\n%s", strings.Join(args, " "), err, note, out)
		}
	}

	cwd := t.TempDir()
	env := filepath.Join(cwd, ".env")
	os.WriteFile(env, []byte("X=1"), 0o644)
	e := StartEditor(t, []string{bin, "--config", cfg})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "read "+env, "end_turn")
	if got := strings.Join(e.Texts(sid), "\n"); !strings.HasPrefix(got, "read error: -32603 acp-router: denied by org-no-env") {
		t.Errorf("agent said %q, want the read denied by org-no-env", got)
	}
}

var (
	orgBuildMu sync.Mutex
	orgBuilds  = map[string]string{}
)

// routerWithOrgDir builds the router with its org policy directory set to
// dir, as a packager would (-ldflags).
func routerWithOrgDir(t *testing.T, dir string) string {
	t.Helper()
	skipShort(t, "links a router of its own with another org directory, 10-30 s on a loaded 2-core machine")
	orgBuildMu.Lock()
	defer orgBuildMu.Unlock()
	if bin, ok := orgBuilds[dir]; ok {
		return bin
	}
	bin := filepath.Join(binDir, fmt.Sprintf("acp-router-org-%d", len(orgBuilds)))
	cmd := exec.Command("go", "build", "-ldflags", "-X main.orgPolicyDir="+dir, "-o", bin, "./cmd/acp-router")
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	orgBuilds[dir] = bin
	return bin
}

// TestPolicyReload: a policy change is picked up on save and on SIGHUP; a
// broken file keeps the last good policy in force.
func TestPolicyReload(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	agents := []string{fakeAgentYAML("claude", fakeOpts{})}
	denyRead := func(name string) string {
		return fmt.Sprintf("default: allow\nrules:\n  - {id: no-%[1]s, decision: deny, when: {paths: [\"**/%[1]s\"]}}\n", name)
	}
	cfg, _ := policyYAML(t, agents, denyRead("a.txt"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("A"), 0o644)
	os.WriteFile(filepath.Join(cwd, "b.txt"), []byte("B"), 0o644)
	readBoth := fmt.Sprintf("read %[1]s/a.txt\nread %[1]s/b.txt", cwd)
	expect := func(want ...string) {
		t.Helper()
		before := len(e.Texts(sid))
		e.MustPrompt(t, sid, readBoth, "end_turn")
		got := e.Texts(sid)[before:]
		for i := range want {
			if i >= len(got) || !strings.HasPrefix(got[i], want[i]) {
				t.Fatalf("agent said %q, want prefixes %q", got, want)
			}
		}
	}
	expect("read error: -32603 acp-router: denied by no-a.txt", "read: B")
	save := func(content string) {
		// As editors save: a temporary file renamed over the config.
		tmp := cfg + ".tmp"
		os.WriteFile(tmp, []byte(content), 0o644)
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	y, _ := os.ReadFile(cfg)
	good := string(y)
	waitStderr := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for strings.Count(e.Stderr(), what) < n {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the router's log:\n%s", what, e.Stderr())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	save(strings.Replace(good, `["**/a.txt"]`, `["**/[a.txt"]`, 1)) // an invalid glob
	waitStderr("policy reload failed", 1)
	expect("read error: -32603 acp-router: denied by no-a.txt", "read: B")

	save(strings.Replace(good, "a.txt", "b.txt", -1))
	waitStderr("policy reloaded", 1)
	expect("read: A", "read error: -32603 acp-router: denied by no-b.txt")

	// SIGHUP reloads too (here: a policy whose own test fails is refused).
	broken := strings.Replace(good, "a.txt", "b.txt", -1) + "  " // keep the file valid YAML
	broken = strings.Replace(broken, "permissions:\n", "permissions:\n  tests:\n    - {call: \"fs/read_text_file ${cwd}/b.txt\", expect: allow}\n", 1)
	os.WriteFile(cfg, []byte(broken), 0o644) // in place; the watcher may see it too
	e.cmd.Process.Signal(syscall.SIGHUP)
	waitStderr("policy reload failed", 2)
	expect("read: A", "read error: -32603 acp-router: denied by no-b.txt")
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestPolicyBriefHidesDenied: the handoff brief tells nothing from paths a
// deny rule matches (DESIGN §5): a tool call about .env is named only as
// hidden; one about an allowed path keeps its title.
func TestPolicyBriefHidesDenied(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, _ := policyYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-"}),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}),
		fakeAgentYAML("gamma", fakeOpts{SessionPrefix: "g-"}),
	}, secretsPolicy, "default: alpha")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, fmt.Sprintf(`update {"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read %[1]s/.env","kind":"read","status":"completed","locations":[{"path":"%[1]s/.env"}]}
update {"sessionUpdate":"tool_call","toolCallId":"t2","title":"Read main.go","kind":"read","status":"completed","locations":[{"path":"%[1]s/main.go"}]}
update {"sessionUpdate":"tool_call","toolCallId":"t3","title":"Read a file","kind":"read","status":"pending"}
update {"sessionUpdate":"tool_call_update","toolCallId":"t3","status":"completed","rawInput":{"path":"%[1]s/config/.env.local"}}
say done
say more`, cwd), "end_turn")
	// The third tool call names its path only in its update; the reply
	// came in two chunks.
	hidden := "Tool: [hidden by the permission policy] (completed)"
	e.MustPrompt(t, sid, "/beta prompt-text", "end_turn")
	got := lastText(e, sid)
	_, tools, _ := strings.Cut(got, "say more\n") // the user's prompt (this script) names .env itself
	if !strings.HasPrefix(got, "[acp-router handoff]") || strings.Contains(tools, ".env") || strings.Count(tools, hidden) != 2 ||
		!strings.Contains(tools, "Tool: Read main.go (completed)") || !strings.Contains(tools, "alpha: donemore") {
		t.Errorf("beta's brief: %q", got)
	}
	// After a router restart the brief is read back from the session
	// store: still hidden.
	stopRouter(t, e)
	e = StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	e.MustCall(t, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	e.MustPrompt(t, sid, "/gamma prompt-text", "end_turn")
	got = lastText(e, sid)
	_, tools, _ = strings.Cut(got, "say more\n")
	tools, _, _ = strings.Cut(tools, "--- beta ---") // beta's reply echoes its prompt
	if !strings.HasPrefix(got, "[acp-router handoff]") || strings.Contains(tools, ".env") || strings.Count(tools, hidden) != 2 ||
		!strings.Contains(tools, "Tool: Read main.go (completed)") || !strings.Contains(tools, "alpha: donemore") {
		t.Errorf("gamma's brief after a reload: %q", got)
	}
}

// TestPolicyAuditUnavailable: when the audit directory goes away while the
// router runs, a request the policy would allow is denied with a clear
// error (an allow that cannot be audited must not happen), the log says so
// once, turns that need no decision go on, and once the directory is back
// decisions are allowed and audited again (issue 12, bad input).
func TestPolicyAuditUnavailable(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "main.go"), []byte("package main"), 0o644)
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/read_text_file", readTextFile)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "read "+cwd+"/main.go", "end_turn")

	auditDir := filepath.Dir(auditFile)
	if err := os.RemoveAll(auditDir); err != nil {
		t.Fatal(err)
	}
	e.MustPrompt(t, sid, "read "+cwd+"/main.go\nread "+cwd+"/main.go", "end_turn")
	e.MustPrompt(t, sid, "say still here", "end_turn")
	texts := e.Texts(sid)
	if len(texts) < 4 || !strings.HasPrefix(texts[1], "read error: -32603 acp-router: denied by acp-router:audit-unavailable: the audit log cannot be written") ||
		texts[1] != texts[2] || texts[3] != "still here" {
		t.Fatalf("agent said\n%s\nwant the reads denied naming the audit log, then the turn without a decision to work", strings.Join(texts, "\n"))
	}
	if n := e.LogCount("cannot write the audit log", 1); n != 1 {
		t.Errorf("the audit failure was logged %d times, want once:\n%s", n, e.Stderr())
	}

	if err := os.MkdirAll(auditDir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.MustPrompt(t, sid, "read "+cwd+"/main.go", "end_turn")
	if got := e.Texts(sid); got[len(got)-1] != "read: package main" {
		t.Errorf("after the directory came back the agent said %q", got[len(got)-1])
	}
	if e.LogCount("the audit log works again", 1) == 0 {
		t.Errorf("no recovery line in the log:\n%s", e.Stderr())
	}
	if recs := readAudit(t, auditFile); len(recs) != 1 || recs[0].Decision != "allow" {
		t.Errorf("the new audit file holds %d records, want the one allow", len(recs))
	}
}
