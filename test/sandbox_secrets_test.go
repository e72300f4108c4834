//go:build linux

package test

// The class issue 29 opens with, for Gemini CLI and OpenCode: each agent,
// in the mode where it approves every tool call itself (so nothing is
// asked, and the router sees only what the agent routes of its own
// accord), is asked by its model to read a .env that a deny rule names:
// with its own read tool, its own search tool, its shell tool (cat .env)
// and an interpreter its shell starts (python3 -c, which does not name the
// file). Under the default sandbox (best-effort, on because the config has
// permissions:) the secret's bytes are in no request the fake model
// receives and no message the editor receives, while the same shell still
// reads the project's other files. The same turns with sandbox.mode off
// hand the secret to the model, so the tests can fail.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretRig starts the router on agentYAML, working in project, under
// sandboxSecretPolicy plus extra; mode "" leaves out the sandbox: key, so
// that the default holds (best-effort, as the config has permissions:).
func secretRig(t *testing.T, agentYAML, name, project, mode, extra string) *peerRig {
	t.Helper()
	agentYAML += "    cwd: " + yamlQuote(project) + "\n"
	cfg, audit := policyYAML(t, []string{agentYAML}, sandboxSecretPolicy+extra, "default: "+name)
	if mode != "" {
		data, err := os.ReadFile(cfg)
		must(t, err)
		must(t, os.WriteFile(cfg, append(data, "sandbox: {mode: "+mode+"}\n"...), 0o644))
	}
	return startPeerRig(t, cfg, audit, capsAll)
}

// secretModes runs run under the default sandbox and with the sandbox off,
// in parallel.
func secretModes(t *testing.T, run func(t *testing.T, mode string, confined bool)) {
	for _, tc := range []struct {
		name, mode string
		confined   bool
	}{{"default", "", true}, {"off", "off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run(t, tc.mode, tc.confined)
		})
	}
}

// secretProjectNotes adds notes.txt, which the policy does not hide, to
// a secretProject: what the shell must still read under the sandbox.
func secretProjectNotes(t *testing.T) (dir, secret string) {
	t.Helper()
	dir, secret = secretProject(t)
	must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("visible-notes\n"), 0o644))
	return dir, secret
}

// readNotes is the shell command of the control turn: cat and python3
// read notes.txt (python3 prints it in capitals, VISIBLE-NOTES).
const readNotes = `cat notes.txt; python3 -c "print(open('notes.txt').read().upper())"`

// secretRead is one tool call the model made and what it got back.
type secretRead struct {
	name    string
	results []string
	// refusal, when set, is the agent's own refusal of the call, in the
	// result with and without the sandbox: the agent never reads the file.
	refusal string
	// control: a read of notes.txt, which must work in both modes.
	control bool
}

// eachRead runs turn for every read at once, each in a session of its
// own (the agent serves them concurrently, so the wall time is the slowest
// turn's), and returns the reads with the results turn returned.
func eachRead(t *testing.T, reads []secretRead, turn func(t *testing.T, i int) []string) []secretRead {
	t.Run("reads", func(t *testing.T) {
		for i := range reads {
			t.Run(reads[i].name, func(t *testing.T) {
				t.Parallel()
				reads[i].results = turn(t, i)
			})
		}
	})
	return reads
}

// requireSecretReads checks each call's single result. A control read
// notes.txt; a refused call was refused by the agent; any other must not
// hold the secret under the sandbox and must hold it without, or the turn
// does not exercise the leak.
func requireSecretReads(t *testing.T, reads []secretRead, secret string, confined bool) {
	t.Helper()
	for _, r := range reads {
		if len(r.results) != 1 {
			t.Errorf("%s: %d tool results, want 1 (run without asking): %q", r.name, len(r.results), r.results)
			continue
		}
		got := r.results[0]
		t.Logf("%s (confined %v): the model got %q", r.name, confined, truncate(got, 400))
		leaked := strings.Contains(got, secret)
		switch {
		case r.control:
			if !strings.Contains(got, "visible-notes") || !strings.Contains(got, "VISIBLE-NOTES") {
				t.Errorf("%s: cat and python3 did not read notes.txt: %q", r.name, got)
			}
		case r.refusal != "":
			if leaked || !strings.Contains(got, r.refusal) {
				t.Errorf("%s: %q, want the agent's own refusal %q", r.name, got, r.refusal)
			}
		case leaked && confined:
			t.Errorf("%s under the sandbox gave the model the secret: %q", r.name, got)
		case !leaked && !confined:
			t.Errorf("%s without the sandbox did not read the secret (%q): the turn does not exercise the leak", r.name, got)
		}
	}
}

// requireEditorKept checks that no message the editor received holds the
// secret; without the sandbox it only says whether one did.
func requireEditorKept(t *testing.T, e *Editor, secret string, confined bool) {
	t.Helper()
	n := 0
	for _, m := range e.Rec.All() {
		if strings.Contains(string(m.Raw), secret) {
			n++
			if confined {
				t.Errorf("the editor received the secret: %s", truncate(string(m.Raw), 1000))
			}
		}
	}
	t.Logf("%d messages to the editor held the secret (confined %v)", n, confined)
}

// TestSandboxGeminiSecret: Gemini CLI in yolo (allowed by allow_modes, so
// the router leaves it there) runs, without asking, grep_search over the
// project and run_shell_command with `cat .env` and with a python3 -c
// that opens .env; under the default sandbox none gets the secret to the
// model or the editor, and the shell still reads notes.txt. read_file
// cannot be made to read .env: Gemini 0.61 refuses any path with a .env
// segment itself ("Path not in workspace"), before it would call
// fs/read_text_file, so the model asks for it and gets that refusal in
// both modes.
func TestSandboxGeminiSecret(t *testing.T) {
	t.Parallel()
	secretModes(t, func(t *testing.T, mode string, confined bool) {
		bin := needGemini(t)
		fake := startFakeGemini(t)
		dir, secret := secretProjectNotes(t)
		env := geminiEnv(geminiHome(t), fake)
		// Gemini refuses yolo in a folder it does not trust.
		env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
		agent := peerAgent{"gemini", "Gemini CLI", []string{bin, "--acp", "--approval-mode", "yolo"}, env}
		rig := secretRig(t, agent.yaml(), "gemini", dir, mode, `allow_modes: ["gemini:yolo"]`+"\n")
		_, resp := rig.newSession(t, dir)
		if got := optionValue(jsonPath(resp.Result, "configOptions"), "mode"); got != "yolo" {
			t.Fatalf("session/new mode %q, want yolo: %s", got, truncate(string(resp.Result), 1000))
		}
		if confined {
			requireConfinedStart(t, rig.audit, "gemini")
		}

		shell := func(command string) geminiCall {
			return geminiCall{"run_shell_command", map[string]any{"command": command, "description": "Show the settings"}}
		}
		calls := []geminiCall{
			{"read_file", map[string]any{"file_path": filepath.Join(dir, ".env")}},
			{"grep_search", map[string]any{"pattern": "API_KEY", "dir_path": dir, "no_ignore": true}},
			shell("cat .env"),
			shell(readEnvPython),
			shell(readNotes),
		}
		reads := eachRead(t, []secretRead{
			{name: "read_file", refusal: "Path not in workspace"},
			{name: "grep_search"},
			{name: "cat .env"},
			{name: "python3 -c"},
			{name: "control", control: true},
		}, func(t *testing.T, i int) []string {
			s := fake.Script(geminiScript{Call: &calls[i], Text: []string{"Read."}})
			sid, _ := rig.newSession(t, dir)
			requireGeminiStop(t, rig.prompt(t, sid, "Show .env "+s.token), "end_turn")
			return s.FunctionResponses()
		})
		requireSecretReads(t, reads, secret, confined)
		requireSecretKept(t, fake.Received(), secret, confined)
		requireEditorKept(t, rig.e, secret, confined)
		if n := rig.asks.count(); n != 0 {
			t.Errorf("the editor was asked %d times; Gemini in yolo asks nothing", n)
		}
		// read_file refused itself: nothing reached the router to decide.
		for _, r := range readAuditAll(t, rig.audit) {
			if r.Decision == "deny" {
				t.Errorf("audit record %+v: Gemini's own refusal should have kept read_file from the router", r)
			}
		}
	})
}

// opencodeAllowAll is OpenCode's own permission setting that lets its
// build agent do everything without asking, .env reads included (its
// default asks for those).
const opencodeAllowAll = `{"read":{"*":"allow","*.env":"allow","*.env.*":"allow"},"edit":"allow","bash":"allow","external_directory":"allow"}`

// TestSandboxOpencodeSecret: OpenCode's build agent, set to allow every
// tool, runs read of .env and bash with `cat .env` and with a python3 -c
// that opens .env, without asking (none of them reaches the router); under
// the default sandbox none gets the secret to the model or the editor, and
// bash still reads notes.txt. Its grep tool is ripgrep, which OpenCode
// downloads on first use: offline it answers "ripgrep execution failed"
// with or without the sandbox, so it is not among the reads.
func TestSandboxOpencodeSecret(t *testing.T) {
	t.Parallel()
	secretModes(t, func(t *testing.T, mode string, confined bool) {
		agent, fake := opencodeSetup(t, opencodeAllowAll)
		dir, secret := secretProjectNotes(t)
		rig := secretRig(t, agent.yaml(), "opencode", dir, mode, "")
		_, resp := rig.newSession(t, dir)
		if v := optionValue(jsonPath(resp.Result, "configOptions"), "mode"); v != "build" {
			t.Errorf("mode option %q, want build", v)
		}
		if confined {
			requireConfinedStart(t, rig.audit, "opencode")
		}

		bash := func(command string) map[string]any {
			return map[string]any{"command": command, "description": "Show the settings"}
		}
		calls := []chatScript{
			{Tool: "read", Input: map[string]any{"filePath": filepath.Join(dir, ".env")}},
			{Tool: "bash", Input: bash("cat .env")},
			{Tool: "bash", Input: bash(readEnvPython)},
			{Tool: "bash", Input: bash(readNotes)},
		}
		reads := eachRead(t, []secretRead{
			{name: "read"},
			{name: "cat .env"},
			{name: "python3 -c"},
			{name: "control", control: true},
		}, func(t *testing.T, i int) []string {
			calls[i].Text = []string{"Read."}
			s := fake.Script(calls[i])
			sid, _ := rig.newSession(t, dir)
			requireGeminiStop(t, rig.prompt(t, sid, "Show .env "+s.token), "end_turn")
			return s.Results()
		})
		requireSecretReads(t, reads, secret, confined)
		requireSecretKept(t, fake.Received(), secret, confined)
		requireEditorKept(t, rig.e, secret, confined)
		if n := rig.asks.count(); n != 0 {
			t.Errorf("the editor was asked %d times; OpenCode allowed everything itself", n)
		}
	})
}
