//go:build linux

package test

// The real agents under the kernel sandbox (issue 29): each completes a turn
// confined (its model API on loopback, its own state, an edit), and the
// class the issue opens with holds end to end: the agent's own tool, asked
// by the model to read a .env a deny rule hides, with or without asking
// the user (who says yes), never gets the secret to the model. The fakes
// record every request body; the secret's bytes must never be among them.
// The same turns with sandbox.mode off show the leak, so the tests can
// fail.
//
// Codex under the router's sandbox: its own command sandbox (read-only,
// workspace-write) is bubblewrap, which needs a user namespace and mounts;
// Landlock forbids every mount to a confined process, so bubblewrap
// cannot start ("bwrap: setting up uid map: Permission denied") and Codex
// (0.156 and later) refuses its Landlock fallback for a restricted policy.
// A command Codex runs in its sandbox therefore fails, and nothing runs
// unasked; run outside it (require_escalated), it is asked through
// session/request_permission, so the router's policy decides it, and it
// runs under the router's profile.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sandboxSecretPolicy denies every .env, as the user does.
const sandboxSecretPolicy = `default: ask
rules:
  - id: no-secrets
    decision: deny
    when: {paths: ["**/.env"]}
    message: secrets are not for agents.
`

// sandboxRig starts the router on agentYAML, working in project, under
// sandboxSecretPolicy with sandbox.mode mode; the editor allows what it is
// asked.
func sandboxRig(t *testing.T, agentYAML, name, project, mode string) *peerRig {
	t.Helper()
	agentYAML += "    cwd: " + yamlQuote(project) + "\n"
	cfg, audit := policyYAML(t, []string{agentYAML}, sandboxSecretPolicy, "default: "+name)
	data, err := os.ReadFile(cfg)
	must(t, err)
	must(t, os.WriteFile(cfg, append(data, "sandbox: {mode: "+mode+"}\n"...), 0o644))
	return startPeerRig(t, cfg, audit, capsAll)
}

// secretProject is a session directory holding a .env with a secret
// unique to the test; it returns the directory and the secret.
func secretProject(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	secret := fmt.Sprintf("sk-acp-sandbox-%d", os.Getpid()^len(t.Name())<<20)
	must(t, os.WriteFile(filepath.Join(dir, ".env"), []byte("API_KEY="+secret+"\n"), 0o600))
	return dir, secret
}

// readEnvPython reads ./.env without naming it on the command line: what
// the router's reading of commands cannot see (the "python3 -c").
const readEnvPython = `python3 -c "import os; print(open(os.path.join('.', '.' + 'e' + 'nv')).read())"`

// requireConfinedStart checks that the audit log records agent's start
// as confined.
func requireConfinedStart(t *testing.T, audit, agent string) {
	t.Helper()
	for _, r := range readAuditAll(t, audit) {
		if r.Method == "acp-router/agent_start" && r.Agent == agent && strings.Contains(string(r.Evidence), `"confined":true`) {
			return
		}
	}
	t.Errorf("no confined start of %s in the audit log: %+v", agent, readAuditAll(t, audit))
}

// requireSecretKept checks what the model received: never the secret when
// confined; the secret when not (the same turn leaks without the sandbox).
func requireSecretKept(t *testing.T, received []byte, secret string, confined bool) {
	t.Helper()
	leaked := strings.Contains(string(received), secret)
	switch {
	case confined && leaked:
		t.Errorf("the secret %q reached the model under the sandbox", secret)
	case !confined && !leaked:
		t.Errorf("without the sandbox the secret did not reach the model: the turn does not exercise the leak")
	}
}

func sandboxModes(t *testing.T, run func(t *testing.T, mode string, confined bool)) {
	for _, tc := range []struct {
		mode     string
		confined bool
	}{{"enforce", true}, {"off", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			run(t, tc.mode, tc.confined)
		})
	}
}

// TestSandboxCodexSecret: Codex's cat .env runs in its own read-only
// sandbox without asking, and a python3 -c that opens .env is asked
// (require_escalated) and allowed; under the router's sandbox neither
// gets the secret to the model, and a text turn and an edit in the
// project (apply_patch, asked and allowed) still complete.
func TestSandboxCodexSecret(t *testing.T) {
	t.Parallel()
	sandboxModes(t, func(t *testing.T, mode string, confined bool) {
		agent, fake := codexSetup(t)
		dir, secret := secretProject(t)
		rig := sandboxRig(t, agent.yaml(), "codex", dir, mode)
		sid, _ := rig.newSession(t, dir)
		if confined {
			requireConfinedStart(t, rig.audit, "codex")
		}

		unasked := fake.Script(responsesScript{Command: "cat .env", Text: []string{"Read."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Show .env "+unasked.token), "end_turn")
		asks := rig.asks.count()
		if asks != 0 {
			t.Errorf("cat .env was asked %d times; Codex runs it in its read-only sandbox", asks)
		}
		escalated := fake.Script(responsesScript{Command: readEnvPython, Escalate: true, Text: []string{"Read."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Show it with python "+escalated.token), "end_turn")
		if rig.asks.count() == asks {
			t.Errorf("the escalated command was not asked")
		}
		requireSecretKept(t, fake.Received(), secret, confined)
		if confined {
			for _, out := range unasked.Results() {
				if !strings.Contains(out, "bwrap") {
					t.Errorf("cat .env under the router's sandbox: %q, want Codex's sandbox refused (bwrap)", out)
				}
			}
		}

		path := filepath.Join(dir, "notes.txt")
		edit := fake.Script(responsesScript{Write: &fileWrite{Path: path, Content: "edited\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Write notes.txt "+edit.token), "end_turn")
		if b, err := os.ReadFile(path); err != nil || string(b) != "edited\n" {
			t.Errorf("the edit in the project: %q, %v", b, err)
		}
	})
}

// TestSandboxClaudeSecret: Claude's Read of .env runs without asking and
// its Bash python3 -c that opens .env is asked and allowed; under the
// router's sandbox neither gets the secret to the model, and an edit in
// the project (Write, asked and allowed) still completes.
func TestSandboxClaudeSecret(t *testing.T) {
	t.Parallel()
	sandboxModes(t, func(t *testing.T, mode string, confined bool) {
		agent, fake := claudeSetup(t)
		dir, secret := secretProject(t)
		rig := sandboxRig(t, agent.yaml(), "claude", dir, mode)
		sid, _ := rig.newSession(t, dir)
		if confined {
			requireConfinedStart(t, rig.audit, "claude")
		}

		read := fake.Script(anthropicScript{Tool: "Read", Input: map[string]any{"file_path": filepath.Join(dir, ".env")}, Text: []string{"Read."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Show .env "+read.token), "end_turn")
		bash := fake.Script(anthropicScript{Tool: "Bash", Input: map[string]any{"command": readEnvPython, "description": "Print the settings"}, Text: []string{"Ran."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Show it with python "+bash.token), "end_turn")
		if len(bash.Results()) != 1 {
			t.Errorf("Bash results %+v, want one (asked and allowed)", bash.Results())
		}
		requireSecretKept(t, fake.Received(), secret, confined)

		path := filepath.Join(dir, "notes.txt")
		edit := fake.Script(anthropicScript{Write: &fileWrite{Path: path, Content: "edited\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Write notes.txt "+edit.token), "end_turn")
		if b, err := os.ReadFile(path); err != nil || string(b) != "edited\n" {
			t.Errorf("the edit in the project: %q, %v", b, err)
		}
	})
}

// TestSandboxGeminiOpencodeTurns: Gemini CLI and OpenCode start confined
// and complete a turn with an edit in the project, their state in their
// HOME and their model API on loopback.
func TestSandboxGeminiOpencodeTurns(t *testing.T) {
	t.Parallel()
	t.Run("gemini", func(t *testing.T) {
		t.Parallel()
		bin := needGemini(t)
		fake := startFakeGemini(t)
		dir := t.TempDir()
		rig := sandboxRig(t, geminiAgentYAML(bin, geminiEnv(geminiHome(t), fake)), "gemini", dir, "enforce")
		sid, _ := rig.newSession(t, dir)
		requireConfinedStart(t, rig.audit, "gemini")
		// Gemini reads the file before it writes it (fs/read_text_file).
		path := filepath.Join(dir, "notes.txt")
		must(t, os.WriteFile(path, []byte("old\n"), 0o644))
		s := fake.Script(geminiScript{WriteFile: &geminiWrite{Path: path, Content: "edited\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Write notes.txt "+s.token), "end_turn")
		if b, err := os.ReadFile(path); err != nil || string(b) != "edited\n" {
			t.Errorf("the edit in the project: %q, %v", b, err)
		}
	})
	t.Run("opencode", func(t *testing.T) {
		t.Parallel()
		agent, fake := opencodeSetup(t, "")
		dir := t.TempDir()
		rig := sandboxRig(t, agent.yaml(), "opencode", dir, "enforce")
		sid, _ := rig.newSession(t, dir)
		requireConfinedStart(t, rig.audit, "opencode")
		path := filepath.Join(dir, "notes.txt")
		s := fake.Script(chatScript{Write: &fileWrite{Path: path, Content: "edited\n"}, Text: []string{"Written."}})
		requireGeminiStop(t, rig.prompt(t, sid, "Write notes.txt "+s.token), "end_turn")
		if b, err := os.ReadFile(path); err != nil || string(b) != "edited\n" {
			t.Errorf("the edit in the project: %q, %v", b, err)
		}
	})
}
