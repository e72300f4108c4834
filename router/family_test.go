package router

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/sandbox"
	"github.com/acp-router/acp-router/telemetry"
	"github.com/acp-router/acp-router/upstream"
)

// envTestAgentLog is the file testAgent's logout writes to (family).
const envTestAgentLog = "ACP_ROUTER_TEST_AGENT_LOG"

// TestAgentFamilySeen: under the sandbox an agent runs one process per set
// of session roots (upstream.Agent.ForRoots); what the router says or does
// about an agent is about all of them: logout reaches every process,
// auth/status asks every one (one signed out makes the agent
// unauthenticated), /agent says the others run, and the bytes-relayed
// gauge counts what went to each.
func TestAgentFamilySeen(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	dir, r, e := startFamily(t, "", Options{Telemetry: testTelemetry(t, tracetest.NewInMemoryExporter(), reader)})
	other, signedOut, logFile := filepath.Join(dir, "other"), filepath.Join(dir, "signed-out"), filepath.Join(dir, "agent.log")

	var sids []string
	for _, cwd := range []string{other, signedOut} {
		var res struct {
			SessionID string `json:"sessionId"`
		}
		json.Unmarshal(e.mustCall(t, acp.MethodSessionNew, map[string]any{"cwd": cwd, "mcpServers": []any{}}), &res)
		e.mustCall(t, acp.MethodSessionPrompt, prompt(res.SessionID, "hello"))
		sids = append(sids, res.SessionID)
	}
	a := r.byName["a"]
	running := a.Running()
	if len(running) != 3 {
		t.Fatalf("%d processes of agent a run, want 3 (its own and one per other set of roots)", len(running))
	}

	// auth/status: the process of signed-out says unauthenticated.
	var status struct{ State string }
	json.Unmarshal(e.mustCall(t, acp.MethodAuthStatus, map[string]any{}), &status)
	if status.State != "unauthenticated" {
		t.Errorf("auth/status: %q, want unauthenticated (one of a's processes is signed out)", status.State)
	}

	// /agent: the other processes are said to run.
	e.mustCall(t, acp.MethodSessionPrompt, prompt(sids[0], "/agent"))
	if got := strings.Join(e.texts(sids[0]), ""); !strings.Contains(got, "2 more process(es) running for sessions in other directories") {
		t.Errorf("/agent says %q, want the 2 processes of other roots", got)
	}

	// The gauge: the bytes relayed to every process of a.
	var want int64
	for _, inst := range a.Running() {
		want += inst.Peer().Stream().Written()
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var got int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "acp_router.agent.bytes_relayed" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := dp.Attributes.Value(telemetry.KeyAgent); v.AsString() == "a" {
					got = dp.Value
				}
			}
		}
	}
	if got != want {
		t.Errorf("bytes relayed to agent a: %d, want %d (its three processes)", got, want)
	}

	// logout: every process.
	e.mustCall(t, acp.MethodLogout, map[string]any{})
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(logFile)
		n := strings.Count(string(b), "logout ")
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logout reached %d processes, want 3:\n%s", n, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startFamily serves a router whose agent a (testAgent, family) runs
// confined in dir/own, with directories other and signed-out beside it
// for sessions of other roots; extra is more of a's config.
func startFamily(t *testing.T, extra string, opts Options) (string, *Router, *testEditor) {
	t.Helper()
	if err := sandbox.Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{"own", "other", "signed-out"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	yaml := fmt.Sprintf("version: 1\nstate_dir: '%s'\nagents:\n  - name: a\n    command: '%s'\n    cwd: '%s'\n    state_dirs: []\n    env: {%s: family, %s: '%s'}\n%srouting: {default: a}\n",
		dir, bin, filepath.Join(dir, "own"), envTestAgent, envTestAgentLog, filepath.Join(dir, "agent.log"), extra)
	opts.Confine = (&sandbox.Confiner{Mode: config.SandboxEnforce}).Confine
	r, e := startRouterYAML(t, dir, yaml, opts)
	return dir, r, e
}

// TestHungTurnRestartsItsProcessOnly: a turn that does not end after
// session/cancel restarts the process it runs on, not the other processes
// of its agent, whose sessions have nothing to do with it (under the
// sandbox, one per set of session roots).
func TestHungTurnRestartsItsProcessOnly(t *testing.T) {
	dir, r, e := startFamily(t, "    cancel_timeout: 50ms\n", Options{DrainGrace: 50 * time.Millisecond})
	newSession := func(cwd string) string {
		var res struct {
			SessionID string `json:"sessionId"`
		}
		json.Unmarshal(e.mustCall(t, acp.MethodSessionNew, map[string]any{"cwd": cwd, "mcpServers": []any{}}), &res)
		return res.SessionID
	}
	mine, others := newSession(filepath.Join(dir, "own")), newSession(filepath.Join(dir, "other"))
	e.mustCall(t, acp.MethodSessionPrompt, prompt(others, "hello"))
	before := r.byName["a"].Running()
	if len(before) != 2 {
		t.Fatalf("%d processes of agent a run, want 2", len(before))
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.call(acp.MethodSessionPrompt, prompt(mine, "slow")) // a second: longer than cancel_timeout and the drain
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := e.peer.Notify(t.Context(), acp.MethodSessionCancel, map[string]any{"sessionId": mine}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the cancelled turn: %v", err)
	}
	waitFor(t, func() bool { return r.byName["a"].Current() != before[0] })
	if cur := before[1].Agent.Current(); cur != before[1] {
		t.Errorf("the process of the other roots was restarted (now %v) with the one of the hung turn", cur)
	}
	e.mustCall(t, acp.MethodSessionPrompt, prompt(others, "still there"))
}

// TestRestartCommandReachesFamily: /agent restart NAME restarts the
// agent's processes for other session roots too, also when its own process
// is stopped idle meanwhile.
func TestRestartCommandReachesFamily(t *testing.T) {
	dir, r, e := startFamily(t, "    idle_timeout: 300ms\n", Options{})
	newSession := func(cwd string) string {
		var res struct {
			SessionID string `json:"sessionId"`
		}
		json.Unmarshal(e.mustCall(t, acp.MethodSessionNew, map[string]any{"cwd": cwd, "mcpServers": []any{}}), &res)
		return res.SessionID
	}
	a := r.byName["a"]
	mine, others := newSession(filepath.Join(dir, "own")), newSession(filepath.Join(dir, "other"))
	e.mustCall(t, acp.MethodSessionPrompt, prompt(others, "hello"))
	running := a.Running()
	if len(running) != 2 {
		t.Fatalf("%d processes of agent a run, want 2", len(running))
	}
	child := running[1]
	go e.call(acp.MethodSessionPrompt, prompt(others, "slower")) // keeps the other process from idling
	waitFor(t, func() bool { st, _ := a.Status(); return st == upstream.Stopped })
	if child.Agent.Current() != child {
		t.Fatal("the process of the other roots stopped before the restart")
	}
	e.mustCall(t, acp.MethodSessionPrompt, prompt(mine, "/agent restart a"))
	if got := strings.Join(e.texts(mine), ""); !strings.Contains(got, "Restarted a.") {
		t.Errorf("/agent restart a says %q", got)
	}
	if child.Agent.Current() == child {
		t.Error("the process of the other roots was not restarted")
	}
}
