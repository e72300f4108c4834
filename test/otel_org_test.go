package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/acp-router/acp-router/internal/otlptest"
)

// TestTelemetryOrgLock: an org policy file sets and locks telemetry:
// (issue 17). The user's telemetry: block and OTEL_* variables cannot turn
// it off or send it elsewhere; each attempt is a warning naming where it
// is; check shows the setting and where each key came from; a change of
// the org's block is a "restart to apply".
func TestTelemetryOrgLock(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the org layer must be root-owned: run as root (CI does)")
	}
	org, user := otlptest.Start(t), otlptest.Start(t)
	orgDir := filepath.Join(t.TempDir(), "policy.d")
	os.MkdirAll(orgDir, 0o755)
	orgFile := filepath.Join(orgDir, "10-otel.yaml")
	orgYAML := fmt.Sprintf("telemetry:\n  enabled: true\n  endpoint: %s\n  lock: true\n", org.Endpoint)
	if err := os.WriteFile(orgFile, []byte(orgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := routerWithOrgDir(t, orgDir)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, "")
	b, _ := os.ReadFile(cfg)
	line := strings.Count(string(b), "\n") + 2 // of enabled:, below telemetry:
	os.WriteFile(cfg, append(b, fmt.Sprintf("telemetry:\n  enabled: false\n  endpoint: %s\n", user.Endpoint)...), 0o600)
	env := []string{"OTEL_SDK_DISABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=" + user.Endpoint, "OTEL_METRIC_EXPORT_INTERVAL=100"}

	e := StartEditor(t, []string{bin, "--config", cfg, "--log-level", "debug"}, withEnv(env...))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, t.TempDir())
	e.MustPrompt(t, sid, "say hello", "end_turn")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if !org.Wait(ctx, func(tr []ptrace.Traces, _ []pmetric.Metrics, _ []plog.Logs) bool {
		return containsLine(spanNames(tr), "acp-router turn")
	}) {
		t.Errorf("the org's collector got no turn span\n%s", truncate(e.Stderr(), 4000))
	}
	lockPos := orgFile + ":4:9"
	for _, want := range []string{
		fmt.Sprintf("%s:%d:12: telemetry.enabled is ignored: the org locks telemetry (%s)", cfg, line, lockPos),
		fmt.Sprintf("%s:%d:13: telemetry.endpoint is ignored: the org locks telemetry (%s)", cfg, line+1, lockPos),
		"OTEL_SDK_DISABLED is ignored: the org locks telemetry (" + lockPos + ")",
		"OTEL_EXPORTER_OTLP_ENDPOINT is ignored: the org locks telemetry (" + lockPos + ")",
	} {
		if !strings.Contains(e.Stderr(), want) {
			t.Errorf("the router's log lacks the warning %q:\n%s", want, truncate(e.Stderr(), 4000))
		}
	}

	check := exec.Command(bin, "check", "--config", cfg)
	check.Env = append(os.Environ(), env...)
	out, err := check.CombinedOutput()
	for _, want := range []string{
		"telemetry: on, locked by the org (" + lockPos + ")",
		fmt.Sprintf("  enabled: true   (org %s:2:12)", orgFile),
		fmt.Sprintf("  endpoint: %s   (org %s:3:13)", org.Endpoint, orgFile),
		"  sampler: parentbased_always_on   (default)",
		fmt.Sprintf("%s:%d:13: telemetry.endpoint is ignored", cfg, line+1),
		"OTEL_SDK_DISABLED is ignored",
	} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("check: %v: the output lacks %q:\n%s", err, want, out)
		}
	}

	// The org unlocks and changes the sampler: the running router says a
	// restart applies it.
	next := filepath.Join(orgDir, ".10-otel.yaml.tmp")
	os.WriteFile(next, []byte(strings.Replace(orgYAML, "lock: true", "sampler: always_on", 1)), 0o644)
	if err := os.Rename(next, orgFile); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(e.Stderr(), "restart to apply: telemetry") {
		if time.Now().After(deadline) {
			t.Fatalf("no restart to apply for the org's telemetry change:\n%s", truncate(e.Stderr(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if spans, points, logs := user.Counts(); spans+points+logs != 0 {
		t.Errorf("the user's endpoint got %d spans, %d points, %d logs", spans, points, logs)
	}
}

// spanNames are the names of the spans in tr.
func spanNames(tr []ptrace.Traces) []string {
	var out []string
	for _, td := range tr {
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			ss := td.ResourceSpans().At(i).ScopeSpans()
			for j := 0; j < ss.Len(); j++ {
				for k := 0; k < ss.At(j).Spans().Len(); k++ {
					out = append(out, ss.At(j).Spans().At(k).Name())
				}
			}
		}
	}
	return out
}
