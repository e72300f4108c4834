package test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Texts of the acp-go-sdk v0.13.0 example agent (example/agent/main.go) for
// each permission answer, and the example client's success line
// (example/client/main.go).
const (
	sdkAgentAllowText  = "Perfect! I've successfully updated the configuration. The changes have been applied."
	sdkAgentRejectText = "I understand you prefer not to make that change. I'll skip the configuration update."
	sdkAgentDisclaimer = "ACP Go Example Agent — demo only (no AI model)."
	sdkClientDone      = "✅ Agent completed"
)

// runSDKClient runs the example client with argv as its agent command line
// and choice ("1" allow, "2" reject) on its stdin, and returns its stdout.
func runSDKClient(t *testing.T, client string, choice string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, client, argv...)
	cmd.Dir = t.TempDir() // the client's cwd is the session's cwd
	cmd.Stdin = strings.NewReader(choice + "\n")
	var stdout, stderr tailBuffer
	stdout.max, stderr.max = 1<<20, 1<<20
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("client stdout:\n%s\nclient stderr (with the router's log):\n%s", stdout.String(), stderr.String())
		}
	})
	if ctx.Err() != nil {
		t.Fatalf("the example client did not finish within a minute")
	}
	if err != nil {
		t.Fatalf("example client: %v", err)
	}
	return stdout.String()
}

// checkSDKTurn checks the client's output for a whole example turn ending
// with the text for the permission choice.
func checkSDKTurn(t *testing.T, out, choice string) {
	t.Helper()
	want, notWant := sdkAgentAllowText, sdkAgentRejectText
	if choice == "2" {
		want, notWant = notWant, want
	}
	for _, s := range []string{sdkAgentDisclaimer, want, sdkClientDone} {
		if !strings.Contains(out, s) {
			t.Errorf("client output lacks %q", s)
		}
	}
	if strings.Contains(out, notWant) {
		t.Errorf("client output has %q", notWant)
	}
	// The agent's turn ends with the choice's text, then the client's line.
	if i, j := strings.LastIndex(out, want), strings.LastIndex(out, sdkClientDone); i < 0 || j < i {
		t.Errorf("the turn does not end with %q", want)
	}
}

// TestGoSDKPeersDirect checks the real peers without the router, so that a
// failure of TestGoSDKPeersThroughRouter points at the router.
func TestGoSDKPeersDirect(t *testing.T) {
	t.Parallel()
	agent, client := goSDKPeers(t)
	checkSDKTurn(t, runSDKClient(t, client, "1", agent), "1")
}

// TestGoSDKPeersThroughRouter pins that peers nobody here wrote interoperate
// through the router: the acp-go-sdk example client drives the router, which
// runs the SDK's example agent as its default agent; a whole turn with a
// tool call and a permission request works for both answers.
func TestGoSDKPeersThroughRouter(t *testing.T) {
	t.Parallel()
	agent, client := goSDKPeers(t)
	router := needRouter(t)
	cfg := writeConfig(t, routerYAML(t,
		[]string{"  - name: goexample\n    command: " + yamlQuote(agent) + "\n"},
		"default: goexample",
	))
	for _, tc := range []struct{ name, choice string }{{"allow", "1"}, {"reject", "2"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := runSDKClient(t, client, tc.choice, router, "--config", cfg, "--log-level", "debug")
			checkSDKTurn(t, out, tc.choice)
		})
	}
}

// TestTryCommand pins `acp-router try` (the README's first command): it
// prints the agent's text, its tool calls with their status and the
// permission question, answers it with --yes / --no, and exits 0 when the
// turn ended normally. The agent is the SDK's example agent, as in
// config.example.yaml.
func TestTryCommand(t *testing.T) {
	t.Parallel()
	agent, _ := goSDKPeers(t)
	router := needRouter(t)
	cfg := writeConfig(t, routerYAML(t,
		[]string{"  - name: goexample\n    command: " + yamlQuote(agent) + "\n"},
		"default: goexample",
	))
	for _, tc := range []struct{ flag, want, notWant, choice string }{
		{"--yes", sdkAgentAllowText, sdkAgentRejectText, "[permission] Modifying critical configuration file: Allow this change"},
		{"--no", sdkAgentRejectText, sdkAgentAllowText, "[permission] Modifying critical configuration file: Skip this change"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(router, "try", "--config", cfg, tc.flag, "Hello")
			cmd.Dir = t.TempDir()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("try %s: %v\n%s", tc.flag, err, out)
			}
			for _, want := range []string{sdkAgentDisclaimer, "[tool read] Reading project files (pending)",
				"[tool] Reading project files: completed", tc.choice, tc.want, "[end_turn]"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("try %s output lacks %q:\n%s", tc.flag, want, out)
				}
			}
			if strings.Contains(string(out), tc.notWant) {
				t.Errorf("try %s output has %q", tc.flag, tc.notWant)
			}
		})
	}
}
