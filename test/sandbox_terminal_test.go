//go:build linux

package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSandboxTerminal: a command an editor runs for a confined agent
// (terminal/create) runs under the agent's profile, while the editor still
// runs it and returns its output (issue 29 point 2): it cannot read the
// denied .env, nor write outside the session's roots; it reads and writes
// in the project. The policy decided on, and the audit records, the
// command the agent asked for; the editor was asked to run the router's
// terminal helper with it.
func TestSandboxTerminal(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	// Outside /tmp, which every profile may write.
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-e2e-term-%d", os.Getpid()))
	proj, outside := filepath.Join(base, "proj"), filepath.Join(base, "outside")
	for _, d := range []string{proj, outside} {
		must(t, os.MkdirAll(d, 0o755))
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	must(t, os.WriteFile(proj+"/.env", []byte("SECRET-TERM-5e6f"), 0o600))
	must(t, os.WriteFile(proj+"/main.go", []byte("package main"), 0o644))
	probe := proj + "/probe.sh"
	must(t, os.WriteFile(probe, []byte(fmt.Sprintf(`cat %[1]s/.env; echo
echo x > %[2]s/w && echo WROTE-OUTSIDE
echo ok > %[1]s/in.txt && echo WROTE-INSIDE
cat %[1]s/main.go; echo
`, proj, outside)), 0o644))

	cfg, auditFile := sandboxYAML(t, "enforce", fakeOpts{}, nil, "**/.env")
	data, _ := os.ReadFile(cfg)
	data = []byte(strings.Replace(string(data), "rules:\n", "rules:\n    - {id: run-sh, decision: allow, when: {command: ['sh **']}}\n", 1))
	must(t, os.WriteFile(cfg, data, 0o644))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, proj)
	e.MustPrompt(t, sid, "terminal sh "+probe, "end_turn")

	out := strings.Join(e.Texts(sid), "\n")
	if !strings.HasPrefix(out, "terminal: ") {
		t.Fatalf("no terminal output: %q", out)
	}
	for _, bad := range []string{"SECRET-TERM-5e6f", "WROTE-OUTSIDE"} {
		if strings.Contains(out, bad) {
			t.Errorf("the terminal's command printed %s: %q", bad, out)
		}
	}
	for _, want := range []string{"WROTE-INSIDE", "package main"} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal's command could not do what its profile allows (%s): %q", want, out)
		}
	}
	if _, err := os.Stat(outside + "/w"); err == nil {
		t.Error("the terminal's command wrote outside the roots")
	}
	if b, _ := os.ReadFile(proj + "/in.txt"); string(b) != "ok\n" {
		t.Errorf("in.txt: %q", b)
	}

	creates := e.Rec.Filter(func(m *Msg) bool { return m.Method == "terminal/create" })
	if len(creates) != 1 {
		t.Fatalf("terminal/create sent to the editor %d times", len(creates))
	}
	var sent struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	must(t, json.Unmarshal(creates[0].Params, &sent))
	if !filepath.IsAbs(sent.Command) || len(sent.Args) < 4 || sent.Args[2] != "--" || sent.Args[3] != "sh" || sent.Args[4] != probe {
		t.Errorf("the editor ran %s %q; want the router's terminal helper with -- sh %s", sent.Command, sent.Args, probe)
	}
	// The fake editor's user allows reading probe.sh, which the policy
	// asks about.
	var audited bool
	for _, r := range readAudit(t, auditFile) {
		if r.Method == "terminal/create" {
			audited = r.UserChoice == "allow_once" && strings.Contains(string(r.Evidence), fmt.Sprintf(`"command":["sh",%q]`, probe)) &&
				!strings.Contains(string(r.Evidence), "__acp-router")
		}
	}
	if !audited {
		t.Errorf("the audit lacks the original command's allow: %+v", readAudit(t, auditFile))
	}
}

// TestSandboxTerminalPerProcess: under the sandbox, sessions with
// different roots talk to different processes of one agent (issue 29
// point 3), and a terminal belongs to the process that created it: another
// process of the same agent cannot use it, and when that other process
// crashes the terminal lives on (before, terminals were the agent name's,
// and the crash killed them all).
func TestSandboxTerminalPerProcess(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	cfg, _ := sandboxYAML(t, "enforce", fakeOpts{}, nil, "**/.env")
	data, _ := os.ReadFile(cfg)
	data = []byte(strings.Replace(string(data), "rules:\n", "rules:\n    - {id: run-sleep, decision: allow, when: {command: ['sleep **']}}\n", 1))
	must(t, os.WriteFile(cfg, data, 0o644))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sidA, sidB := e.NewSession(t, t.TempDir()), e.NewSession(t, t.TempDir())

	e.MustPrompt(t, sidA, "terminal-create sleep 30", "end_turn")
	var termID string
	for _, text := range e.Texts(sidA) {
		if id, ok := strings.CutPrefix(text, "terminal-id: "); ok {
			termID = id
		}
	}
	if termID == "" {
		t.Fatalf("no terminal: %q", e.Texts(sidA))
	}
	e.MustPrompt(t, sidB, "terminal-output "+termID, "end_turn")
	if got := strings.Join(e.Texts(sidB), "\n"); !strings.Contains(got, "terminal error: -32602") {
		t.Errorf("the process of B's roots used A's terminal: %q, want the router's -32602", got)
	}
	if _, err := e.Prompt(waitTimeout, sidB, "crash"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the router handles the exit meanwhile
	e.MustPrompt(t, sidA, "terminal-output "+termID, "end_turn")
	if got := strings.Join(e.Texts(sidA), "\n"); strings.Contains(got, "terminal error") {
		t.Errorf("A's terminal after B's process crashed: %q", got)
	}
	if kills := e.Rec.Filter(func(m *Msg) bool { return m.Method == "terminal/kill" && jsonString(m.Params, "terminalId") == termID }); len(kills) > 0 {
		t.Errorf("the crash of B's process killed A's terminal")
	}
}

// TestSandboxDeleteReachesRootsProcess: under the sandbox a session lives
// at the agent's process for its roots (issue 29 point 3), so
// session/delete goes there, to the process that knows the session, not to
// the agent's own process, which never had it (archive of a stored session
// finds its process the same way: cleanDirs and ForRoots).
func TestSandboxDeleteReachesRootsProcess(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "claude.log")
	init := `{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"sessionCapabilities":{"delete":{}}},"authMethods":[],"agentInfo":{"name":"fake","version":"1"}}`
	cfg, _ := sandboxYAML(t, "enforce", fakeOpts{InitResult: json.RawMessage(init), LogFile: logFile, UniqueSessionIDs: true}, nil, "**/.env")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say hello", "end_turn")
	e.MustCall(t, "session/delete", map[string]any{"sessionId": sid})
	var deletes []string
	for _, l := range agentLog(logFile) {
		if strings.HasPrefix(l, "delete ") {
			deletes = append(deletes, l)
		}
	}
	if len(deletes) != 1 || !strings.HasSuffix(deletes[0], " known=true") {
		t.Errorf("session/delete at the agent: %q, want one, at the process that has the session", deletes)
	}
}
