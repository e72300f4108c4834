package test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestReloadTellsTheTruth: a config edit that changes more than the
// policy is applied where the router can (the audit file) and otherwise
// named key by key as "restart to apply", in the router's log and by
// `acp-router check` — never logged as done (issue 12, point 8).
func TestReloadTellsTheTruth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	auditA, auditB := dir+"/a.jsonl", dir+"/b.jsonl"
	yaml := func(args, audit string) string {
		return routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{}, "args: ["+args+"]")}) +
			"permissions: {default: ask}\naudit: {file: " + audit + "}\n"
	}
	cfg := writeConfig(t, yaml(`"one"`, auditA))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, nil)

	waitStderr := func(what string) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for !strings.Contains(e.Stderr(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the router's log:\n%s", what, e.Stderr())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Same state dir: routerYAML made one per call; keep the first.
	first, _ := os.ReadFile(cfg)
	stateLine := strings.SplitN(string(first), "\n", 3)[1]
	rewrite := func(text string) {
		lines := strings.SplitN(text, "\n", 3)
		lines[1] = stateLine
		if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	rewrite(yaml(`"two"`, auditB))
	waitStderr("restart to apply: agents.alpha.args")
	log := e.Stderr()
	if !strings.Contains(log, "audit.file") || strings.Contains(log, "restart to apply: agents.alpha.args, audit.file") {
		t.Errorf("the audit file was not reported applied:\n%s", log)
	}

	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	want := fmt.Sprintf("the router running as pid %d uses this config: restart to apply: agents.alpha.args", e.cmd.Process.Pid)
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("check: exit %d\n%s%s\nwant a warning %q", code, out, errOut, want)
	}
	if strings.Contains(out, "audit.file") {
		t.Errorf("check names the audit file, which the running router applied:\n%s", out)
	}

	// Put back: nothing is pending any more.
	rewrite(yaml(`"one"`, auditB))
	deadline := time.Now().Add(waitTimeout)
	for {
		_, out, _ = runRouterCmd(t, nil, "check", "--config", cfg)
		if !strings.Contains(out, "restart to apply") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("check still reports a pending restart after the edit was undone:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
