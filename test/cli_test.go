package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runRouterCmd runs the router binary with args and env, returning its exit
// code, stdout and stderr.
func runRouterCmd(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(needRouter(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// TestCheckCommand pins `acp-router check` (DESIGN §3): it prints agents
// and routes of a valid config and exits 0; a broken config exits 1 with
// file:line:col on stderr; no config at all says where it looked.
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeConfig(t, routerYAML(t,
		[]string{fakeAgentYAML("alpha", fakeOpts{}), fakeAgentYAML("beta", fakeOpts{}, "lazy: true")},
		"default: alpha", "fallback: beta", "rules:", cwdRule(dir, "beta"),
	))
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", good)
	if code != 0 {
		t.Fatalf("check on a valid config: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"alpha", "beta", "lazy", "default: alpha", "fallback: beta", dir + "/** -> beta", good + ":"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ACP_FAKE_AGENT=") || strings.Contains(out, `"name"`) {
		t.Errorf("check prints environment values:\n%s", out)
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nagents:\n  - name: a\n    comand: x\n"), 0o644)
	code, out, errOut = runRouterCmd(t, nil, "check", "--config", bad)
	if code != 1 || !strings.Contains(errOut, bad+":4:5: ") || !strings.Contains(errOut, `"comand"`) {
		t.Errorf("check on a typo: exit %d, stderr %q; want 1 and %s:4:5 naming the key", code, errOut, bad)
	}
	if out != "" {
		t.Errorf("check wrote %q to stdout on error", out)
	}

	home := t.TempDir()
	code, _, errOut = runRouterCmd(t, []string{"HOME=" + home, "XDG_CONFIG_HOME=", "ACP_ROUTER_CONFIG="}, "check")
	if code != 1 || !strings.Contains(errOut, filepath.Join(home, ".config", "acp-router", "config.yaml")) || !strings.Contains(errOut, "config.example.yaml") {
		t.Errorf("check without a config: exit %d, stderr %q; want 1, the places looked at and how to start", code, errOut)
	}
	// The agent mode fails the same way, on stderr only: editors show it.
	code, out, errOut = runRouterCmd(t, []string{"HOME=" + home, "XDG_CONFIG_HOME=", "ACP_ROUTER_CONFIG="})
	if code != 1 || out != "" || !strings.Contains(errOut, "config.example.yaml") {
		t.Errorf("router without a config: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := runRouterCmd(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "acp-router ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

// TestCheckWarnsHiddenCommands pins that `check` warns when a router
// command hides an agent's own command, learned from the agent's sessions.
func TestCheckWarnsHiddenCommands(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{UpdateWithNew: true})})+
		"commands:\n  - {name: fake-cmd, description: hides the agent's, agent: alpha}\n")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say hi", "end_turn")
	e.CloseStdin()
	e.Wait(10 * time.Second)
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "/fake-cmd hides alpha's own /fake-cmd") {
		t.Errorf("check: exit %d, output:\n%s%s\nwant a warning that /fake-cmd hides alpha's", code, out, errOut)
	}
}

// TestPolicyCommands pins `acp-router policy test|explain` and the policy
// part of `check` (DESIGN §3, §6): the example config's policy passes its
// own tests; a failing test exits 1 and names the test, and the router
// refuses to start with that policy; a shadowed and an untested rule are
// reported; explain shows the decision, each piece of evidence with its
// rule, and the answer; a policy error has file:line:col.
func TestPolicyCommands(t *testing.T) {
	t.Parallel()
	example := filepath.Join(moduleRoot, "config.example.yaml")
	code, out, errOut := runRouterCmd(t, nil, "policy", "test", "--config", example)
	if code != 0 || !strings.Contains(out, "0 failed") || strings.Contains(out, "untested") || strings.Contains(out, "never takes effect") {
		t.Errorf("policy test on config.example.yaml: exit %d\n%s%s", code, out, errOut)
	}

	policy := `default: ask
rules:
  - {id: no-env, decision: deny, when: {paths: ["**/.env"]}}
  - {id: src-env, decision: allow, when: {kind: [read], paths: ["**/.env"]}}
  - {id: reads, decision: allow, when: {kind: [read], paths: ["${cwd}/**"]}}
  - {id: writes, decision: ask, when: {kind: [edit], paths: ["${cwd}/**"]}}
tests:
  - {call: "fs/read_text_file ${cwd}/.env", expect: allow}
`
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, policy)
	code, out, _ = runRouterCmd(t, nil, "policy", "test", "--config", cfg)
	for _, want := range []string{"FAIL " + cfg + ":", "1 failed", "never takes effect: allow rule src-env", "shadowed by deny rule no-env", "untested: rule writes"} {
		if !strings.Contains(out, want) {
			t.Errorf("policy test output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 {
		t.Errorf("policy test with a failing test: exit %d, want 1", code)
	}
	code, out, errOut = runRouterCmd(t, nil, "--config", cfg)
	if code != 1 || out != "" || !strings.Contains(errOut, "policy's tests failed") {
		t.Errorf("router with a failing policy test: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 1 || !strings.Contains(out, "user layer sha256:") || !strings.Contains(out, "deny  no-env   ("+cfg+":") {
		t.Errorf("check with the policy: exit %d\n%s", code, out)
	}

	cwd := t.TempDir()
	code, out, errOut = runRouterCmd(t, nil, "policy", "explain", "--config", example, "--cwd", cwd, "terminal/create", "git push -f origin main && cat .env")
	for _, want := range []string{"DENY", "no-force-push", "no-secrets", cwd + "/.env", "-32603"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s%s", want, out, errOut)
		}
	}
	if code != 0 {
		t.Errorf("explain: exit %d", code)
	}

	// The router's own files: explain says the router asks where a rule
	// allows (guard's acp-router:own-files), and only for them.
	own, ownAudit := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "rules:\n  - {id: anywhere, decision: allow, when: {kind: [edit], paths: [\"/**\"]}}\n")
	for _, c := range []struct {
		path string
		asks bool
	}{{own, true}, {ownAudit, true}, {filepath.Join(cwd, "notes.md"), false}} {
		_, out, errOut = runRouterCmd(t, nil, "policy", "explain", "--config", own, "--cwd", cwd, "fs/write_text_file", c.path)
		if got := strings.Contains(out, "router:   ASK   by acp-router:own-files"); got != c.asks || !strings.Contains(out, "ALLOW   by anywhere") {
			t.Errorf("explain of a write of %s: the router asks %v, want %v:\n%s%s", c.path, got, c.asks, out, errOut)
		}
	}

	broken, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, "rules:\n  - {id: x, decision: deny, when: {paths: [\"**/[a\"]}}\n")
	code, _, errOut = runRouterCmd(t, nil, "--config", broken)
	if code != 1 || !strings.Contains(errOut, broken+":") || !strings.Contains(errOut, "permission policy") {
		t.Errorf("router with an invalid glob: exit %d, stderr %q; want 1 and file:line:col", code, errOut)
	}
}

// TestPolicyTestFindsMistakes: `acp-router policy test` reports a test
// that names a rule that does not exist as that error (not as "expected
// deny, got ask"), and a deny rule covered by another deny — which can
// never decide — with both rules' file:line (issue 12, point 9).
func TestPolicyTestFindsMistakes(t *testing.T) {
	t.Parallel()
	policy := `default: ask
rules:
  - {id: no-env, decision: deny, when: {paths: ["**/.env"]}}
  - {id: no-env-again, decision: deny, when: {paths: ["**/.env"]}}
tests:
  - {call: "fs/read_text_file ${cwd}/.env", expect: deny, rule: no-envs}
`
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, policy)
	code, out, errOut := runRouterCmd(t, nil, "policy", "test", "--config", cfg)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{`unknown rule "no-envs"`, `did you mean "no-env"`,
		"never takes effect: deny rule no-env-again (" + cfg + ":", "shadowed by deny rule no-env (" + cfg + ":"} {
		if !strings.Contains(out, want) {
			t.Errorf("policy test output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "expected deny") {
		t.Errorf("the unknown rule is reported as a wrong decision:\n%s", out)
	}
}
