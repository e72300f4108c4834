package test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelpAndVersion: `--help` and `-h` print the usage on stdout and exit
// 0, as `help` does; `--version` prints what `version` prints (issue 28,
// point 5: a newcomer's first commands).
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runRouterCmd(t, nil, args...)
		if code != 0 || !strings.Contains(out, "usage:") || !strings.Contains(out, "acp-router policy test") || errOut != "" {
			t.Errorf("acp-router %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", args[0], code, out, errOut)
		}
	}
	_, want, _ := runRouterCmd(t, nil, "version")
	if code, out, errOut := runRouterCmd(t, nil, "--version"); code != 0 || out != want || !strings.HasPrefix(out, "acp-router ") {
		t.Errorf("acp-router --version: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}
	// A wrong flag is still a usage error, on stderr.
	if code, out, errOut := runRouterCmd(t, nil, "--no-such-flag"); code != 2 || out != "" || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("acp-router --no-such-flag: exit %d, stdout %q, stderr %q; want 2 and the problem on stderr", code, out, errOut)
	}
}

// TestSubcommandHelp: each subcommand's --help is its own: its synopsis,
// its flags and no other's, and an example, on stdout with exit 0 (today
// `policy test --help` listed explain's flags). `policy explain --help`
// lists the methods it decides with their arguments.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args    []string
		has     []string
		hasNot  []string
		example string
	}{
		{[]string{"try", "--help"}, []string{"-agent", "-yes", "-no", "-config"}, []string{"-cwd", "-org-dir"}, "acp-router try "},
		{[]string{"check", "-h"}, []string{"-config", "-org-dir"}, []string{"-agent", "-cwd", "-yes"}, "acp-router check "},
		{[]string{"policy", "test", "--help"}, []string{"-config", "-org-dir"}, []string{"-agent", "-cwd", "-mode", "-subagent-cwd"}, "acp-router policy test "},
		{[]string{"policy", "explain", "--help"}, []string{"-agent", "-cwd", "-mode", "-subagent-cwd", "-org-dir",
			"fs/read_text_file PATH", "fs/write_text_file PATH", "terminal/create COMMAND", "session/request_permission KIND",
			"execute", "switch_mode", "title=", "mcp/message SERVER TOOL [ARGUMENTS]", "mcp/message SERVER resources/read URI"}, []string{"-yes"}, "acp-router policy explain "},
		{[]string{"login", "--help"}, []string{"AGENT"}, []string{"-agent", "-yes"}, "acp-router login "},
		{[]string{"help", "try"}, []string{"-agent", "-yes"}, nil, "acp-router try "},
		{[]string{"token", "create", "--help"}, []string{"-role", "-own", "-config", "NAME"}, []string{"-org-dir", "-agent"}, "acp-router token create "},
		{[]string{"token", "list", "-h"}, []string{"-config"}, []string{"-role", "-own", "-org-dir"}, "acp-router token list"},
		{[]string{"serve", "--help"}, []string{"-listen", "-config"}, []string{"-token", "-org-dir", "-agent"}, "acp-router serve "},
		{[]string{"connect", "-h"}, []string{"-token", "URL"}, []string{"-listen", "-org-dir", "-agent"}, "acp-router connect "},
		{[]string{"token", "revoke", "--help"}, []string{"-config", "NAME"}, []string{"-role", "-own", "-org-dir"}, "acp-router token revoke "},
	} {
		name := strings.Join(c.args, " ")
		code, out, errOut := runRouterCmd(t, nil, c.args...)
		if code != 0 || errOut != "" {
			t.Errorf("acp-router %s: exit %d, stderr %q; want 0 and the help on stdout", name, code, errOut)
		}
		synopsis := "usage: acp-router " + strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "help "), " -h"), " --help")
		if !strings.HasPrefix(out, synopsis) {
			t.Errorf("acp-router %s: help does not start with %q:\n%s", name, synopsis, out)
		}
		_, example, ok := strings.Cut(out, "\nexample:\n")
		if !ok || !strings.Contains(example, c.example) {
			t.Errorf("acp-router %s: no example running %q:\n%s", name, c.example, out)
		}
		for _, s := range c.has {
			if !strings.Contains(out, s) {
				t.Errorf("acp-router %s: help lacks %q:\n%s", name, s, out)
			}
		}
		for _, s := range c.hasNot {
			if regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(s) + `\b`).MatchString(out) {
				t.Errorf("acp-router %s: help lists another command's flag %q:\n%s", name, s, out)
			}
		}
	}
	// A flag of explain is not one of test's any more.
	if code, _, errOut := runRouterCmd(t, nil, "policy", "test", "--agent", "x"); code != 2 || !strings.Contains(errOut, "-agent") {
		t.Errorf("policy test --agent: exit %d, stderr %q; want 2 naming the flag", code, errOut)
	}
}

// TestTryFlagAfterPrompt: `try "Hello" --no` is a usage error naming the
// flag, not a prompt "Hello --no" whose permission requests are asked;
// after "--" every word is the prompt's.
func TestTryFlagAfterPrompt(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}))
	code, out, errOut := runRouterCmd(t, nil, "try", "--config", cfg, "Hello", "--no")
	if code != 2 || out != "" || !strings.Contains(errOut, `"--no" after the prompt`) || !strings.Contains(errOut, "flags go before it") {
		t.Errorf("try Hello --no: exit %d, stdout %q, stderr %q; want 2 and the flag named", code, out, errOut)
	}
	// The fake agent says what follows "say".
	code, out, errOut = runRouterCmd(t, nil, "try", "--config", cfg, "--", "say", "-rf", "removes")
	if code != 0 || !strings.Contains(out, "-rf removes") {
		t.Errorf("try -- say -rf removes: exit %d, stdout %q, stderr %q; want the turn to run with -rf in the prompt", code, out, errOut)
	}
}

// TestExampleConfigTry: the first `try` of config.example.yaml, as the
// README has a newcomer run it, prints no warning about the example's own
// agent (it used to warn that the router does not know its modes). The
// agent is the Go SDK example the config names, built once here instead
// of by `go run`; the rest of the file is used as shipped.
func TestExampleConfigTry(t *testing.T) {
	t.Parallel()
	agent, _ := goSDKPeers(t)
	data, err := os.ReadFile(filepath.Join(moduleRoot, "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(data)
	for old, new := range map[string]string{
		"    command: go\n": "    command: " + yamlQuote(agent) + "\n",
		`    args: ["run", "github.com/coder/acp-go-sdk/example/agent@v0.13.0"]` + "\n": "",
	} {
		if !strings.Contains(y, old) {
			t.Fatalf("config.example.yaml no longer has %q: update this test", old)
		}
		y = strings.Replace(y, old, new, 1)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte(y), 0o644)
	state := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + state, "HOME=" + state}
	code, out, errOut := runRouterCmd(t, env, "try", "--config", cfg, "--yes", "Hello")
	if code != 0 || !strings.Contains(out, "[end_turn]") {
		t.Fatalf("try on config.example.yaml: exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(errOut, "WARN") || strings.Contains(errOut, `"example"`) || strings.Contains(errOut, "agent=example") {
		t.Errorf("try on config.example.yaml warns:\n%s", errOut)
	}
	code, out, _ = runRouterCmd(t, env, "check", "--config", cfg)
	if code != 0 || strings.Contains(out, `- agent "example"`) {
		t.Errorf("check on config.example.yaml: exit %d, warns about its agent:\n%s", code, out)
	}
}

// TestCheckShowsAuditAndOrgDir: `check` says where the audit log is
// written and which org policy directory it read.
func TestCheckShowsAuditAndOrgDir(t *testing.T) {
	t.Parallel()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "default: ask\n")
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	// The e2e router is built with an org directory that never exists.
	if !regexp.MustCompile(`(?m)^  org directory: /\S+/no-org-policy \(built in\): missing, no org layer$`).MatchString(out) {
		t.Errorf("check does not name the org directory it looked at:\n%s", out)
	}
	if !strings.Contains(out, "  audit log: "+auditFile+", rotated at the default size   ("+cfg+":") {
		t.Errorf("check does not say where the audit log is written (%s):\n%s", auditFile, out)
	}
}

// TestCheckOrgDir: `check --org-dir DIR` and `policy test --org-dir DIR`
// read an org policy directory that is not installed, as a user without
// root and without a rebuild: its layer is shown and its tests run, and
// the ownership problems the router would refuse are warnings.
func TestCheckOrgDir(t *testing.T) {
	t.Parallel()
	org := t.TempDir()
	file := filepath.Join(org, "10-acme.yaml")
	os.WriteFile(file, []byte(`default: ask
rules:
  - {id: acme-no-dd, decision: deny, when: {program: dd}}
tests:
  - {call: "terminal/create dd if=/dev/zero of=disk.img", expect: deny, rule: acme-no-dd}
`), 0o644)
	// Writable by others: refused by the router whoever owns it (the test
	// may run as root).
	os.Chmod(file, 0o666)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "default: ask\n")
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg, "--org-dir", org)
	if code != 0 {
		t.Fatalf("check --org-dir: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"  org directory: " + org + " (--org-dir; ownership problems are warnings): 1 .yaml file",
		"  org layer sha256:", "deny  acme-no-dd   (" + file + ":3:",
		"  - org policy " + file + ": not owned by root or writable by group or others",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check --org-dir output lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = runRouterCmd(t, nil, "policy", "test", "--config", cfg, "--org-dir", org)
	if code != 0 || !strings.Contains(out, "warning: org policy "+file+": not owned by root") || !strings.Contains(out, "1 calls in 1 tests: 1 passed, 0 failed") {
		t.Errorf("policy test --org-dir: exit %d\n%s%s", code, out, errOut)
	}
	// The org layer's tests fail the check as an installed one's would.
	os.WriteFile(file, []byte("default: ask\ntests:\n  - {call: \"terminal/create dd if=/dev/zero of=disk.img\", expect: deny}\n"), 0o666)
	if code, out, _ = runRouterCmd(t, nil, "policy", "test", "--config", cfg, "--org-dir", org); code != 1 || !strings.Contains(out, "FAIL "+file+":") {
		t.Errorf("policy test --org-dir with a failing org test: exit %d\n%s", code, out)
	}
	// A directory that is not there is a mistake, not "no org layer".
	if code, _, errOut = runRouterCmd(t, nil, "check", "--config", cfg, "--org-dir", filepath.Join(org, "nope")); code != 1 || !strings.Contains(errOut, "--org-dir "+filepath.Join(org, "nope")+": not a directory") {
		t.Errorf("check --org-dir of a missing directory: exit %d, stderr %q", code, errOut)
	}
}

// TestConfigIndentationError: a config with an indentation mistake is
// reported at the offending line, not at the start of its block.
func TestConfigIndentationError(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("version: 1\nagents:\n  - name: a\n    command: x\n    env:\n      A: b\n     B: c\n"), 0o644)
	if code, _, errOut := runRouterCmd(t, nil, "check", "--config", cfg); code != 1 || !strings.Contains(errOut, cfg+":7:6: did not find expected key") {
		t.Errorf("check: exit %d, stderr %q; want 1 and %s:7:6", code, errOut, cfg)
	}
}
