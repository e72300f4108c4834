package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/acp-router/acp-router/internal/otlptest"
)

// Telemetry end to end (issue 17): the router binary exports a turn's
// trace to a real Jaeger (tools/jaeger, run on loopback) and its metrics
// and audit log records to an OTLP receiver that decodes them with the
// collector's pdata.

var (
	jaegerOnce sync.Once
	jaegerBin  string
	jaegerErr  error
)

// buildJaeger builds the pinned Jaeger (tools/jaeger/go.mod) once.
func buildJaeger(t *testing.T) string {
	t.Helper()
	skipShort(t, "builds and runs Jaeger (minutes cold)")
	jaegerOnce.Do(func() {
		jaegerBin = filepath.Join(binDir, "jaeger")
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", jaegerBin, "github.com/jaegertracing/jaeger/cmd/jaeger")
		cmd.Dir = filepath.Join(moduleRoot, "tools", "jaeger")
		if out, err := cmd.CombinedOutput(); err != nil {
			jaegerErr = fmt.Errorf("go build jaeger: %v\n%s", err, out)
		}
		t.Logf("jaeger built in %v", time.Since(start).Round(time.Millisecond))
	})
	if jaegerErr != nil {
		t.Fatal(jaegerErr)
	}
	return jaegerBin
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startJaeger runs Jaeger with in-memory storage, OTLP/gRPC in and its
// query API out, both on loopback. It returns the OTLP endpoint and the
// query API's base URL.
func startJaeger(t *testing.T) (otlp, query string) {
	t.Helper()
	bin := buildJaeger(t)
	otlpAddr, queryAddr, queryGRPC := freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
extensions:
  jaeger_query:
    storage: {traces: mem}
    http: {endpoint: %q}
    grpc: {endpoint: %q}
  jaeger_storage:
    backends:
      mem:
        memory: {max_traces: 1000}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`, queryAddr, queryGRPC, otlpAddr)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd := exec.Command(bin, "--config", "file:"+path)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("jaeger output:\n%s", truncate(out.String(), 4000))
		}
	})
	query = "http://" + queryAddr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger did not start: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "http://" + otlpAddr, query
}

// jaegerSpan is what the test reads of a span from Jaeger's query API.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
		TraceID string `json:"traceID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s jaegerSpan) tag(k string) string {
	for _, tag := range s.Tags {
		if tag.Key == k {
			return fmt.Sprint(tag.Value)
		}
	}
	return ""
}

// jaegerTrace polls the query API until the trace has at least n spans.
func jaegerTrace(t *testing.T, query, traceID string, n int) (spans []jaegerSpan, services map[string]string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var body struct {
			Data []struct {
				Spans     []jaegerSpan `json:"spans"`
				Processes map[string]struct {
					ServiceName string `json:"serviceName"`
				} `json:"processes"`
			} `json:"data"`
		}
		resp, err := http.Get(query + "/api/traces/" + traceID)
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
		}
		if len(body.Data) == 1 && len(body.Data[0].Spans) >= n {
			services = map[string]string{}
			for id, p := range body.Data[0].Processes {
				services[id] = p.ServiceName
			}
			return body.Data[0].Spans, services
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger has no trace %s with %d spans (err %v, got %+v)", traceID, n, err, body.Data)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const (
	editorTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	editorSpanID  = "00f067aa0ba902b7"
)

// TestTelemetryJaeger drives a turn with two policy decisions (a deny by
// rule, an ask the user allows) through the router with the editor's
// traceparent, and reads the trace back from Jaeger: the turn is the
// editor span's child, the agent call the turn's, each agent request the
// call's, each decision its request's; the agent received the router's
// call span as its traceparent. Metrics and the audit records as OTLP logs
// arrive at a pdata receiver.
func TestTelemetryJaeger(t *testing.T) {
	otlp, query := startJaeger(t)
	rcv := otlptest.Start(t)
	cwd, elsewhere := t.TempDir(), t.TempDir()
	agentLogFile := filepath.Join(t.TempDir(), "agent.log")
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{LogFile: agentLogFile})}, secretsPolicy)
	b, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, append(b, "telemetry:\n  enabled: true\n  service_name: acp-router-e2e\n"...), 0o600)
	// Traces to Jaeger, metrics and logs to the receiver: the standard
	// per-signal variables, as a user would set them.
	e := StartRouter(t, cfg, nil, withEnv(
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+otlp,
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="+rcv.Endpoint,
		"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT="+rcv.Endpoint,
	))
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	req := promptReq(sid, fmt.Sprintf(`permission-tool {"kind":"edit","title":"Write secrets","locations":[{"path":"%s/.env"}]}
permission-tool {"kind":"read","title":"Read notes","locations":[{"path":"%s/notes.txt"}]}`, cwd, elsewhere))
	req["_meta"] = map[string]any{"traceparent": "00-" + editorTraceID + "-" + editorSpanID + "-01", "tracestate": "editor=1", "baggage": "user=alice"}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	m, err := e.Request(ctx, "session/prompt", req)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "end_turn")
	if asks.count() != 1 {
		t.Fatalf("the editor was asked %d times, want 1", asks.count())
	}
	// The router flushes at exit.
	e.CloseStdin()
	if _, _, ok := e.Wait(15 * time.Second); !ok {
		t.Fatal("the router did not exit")
	}

	spans, services := jaegerTrace(t, query, editorTraceID, 6)
	byName := map[string][]jaegerSpan{}
	for _, s := range spans {
		byName[s.OperationName] = append(byName[s.OperationName], s)
		if services[s.ProcessID] != "acp-router-e2e" {
			t.Errorf("span %s from service %q", s.OperationName, services[s.ProcessID])
		}
	}
	one := func(name string) jaegerSpan {
		t.Helper()
		if len(byName[name]) != 1 {
			t.Fatalf("%d spans %q in %v", len(byName[name]), name, byName)
		}
		return byName[name][0]
	}
	turn, call := one("acp-router turn"), one("session/prompt")
	if turn.parent() != editorSpanID {
		t.Errorf("turn's parent = %q, want the editor's span %s", turn.parent(), editorSpanID)
	}
	if turn.tag("acp.session.id") != sid || turn.tag("acp.agent") != "claude" || turn.tag("acp.stop_reason") != "end_turn" {
		t.Errorf("turn tags %+v", turn.Tags)
	}
	if turn.tag("acp.prompt.text") != "" {
		t.Error("the prompt text was exported without export_prompts")
	}
	if call.parent() != turn.SpanID || call.tag("acp.agent") != "claude" {
		t.Errorf("session/prompt: parent %s (turn %s), tags %+v", call.parent(), turn.SpanID, call.Tags)
	}
	perms := byName["session/request_permission"]
	decisions := byName["policy decision"]
	if len(perms) != 2 || len(decisions) != 2 {
		t.Fatalf("%d agent requests, %d decisions; want 2 and 2", len(perms), len(decisions))
	}
	permIDs := map[string]bool{}
	for _, p := range perms {
		permIDs[p.SpanID] = true
		if p.parent() != call.SpanID {
			t.Errorf("request_permission's parent = %s, want the agent call %s", p.parent(), call.SpanID)
		}
	}
	effects := map[string]jaegerSpan{}
	for _, d := range decisions {
		if !permIDs[d.parent()] {
			t.Errorf("decision's parent %s is not an agent request", d.parent())
		}
		effects[d.tag("acp_router.decision.effect")] = d
		for _, tag := range d.Tags {
			if strings.Contains(fmt.Sprint(tag.Value), cwd) {
				t.Errorf("decision span tag %s carries a path: %v", tag.Key, tag.Value)
			}
		}
	}
	if d := effects["deny"]; d.tag("acp_router.decision.rule") != "no-secrets" || d.tag("acp_router.decision.layer") != "user" || d.tag("acp_router.evidence.count") != "1" {
		t.Errorf("deny decision tags %+v", d.Tags)
	}
	if d := effects["ask"]; d.tag("acp_router.decision.user_choice") != "allow_once" || d.tag("acp_router.decision.source") != "user" {
		t.Errorf("asked decision tags %+v", d.Tags)
	}

	// The agent got the router's call span as its parent, the rest of
	// _meta as the editor sent it.
	wantTP := "00-" + editorTraceID + "-" + call.SpanID + "-01"
	if got := agentLog(agentLogFile); !containsLine(got, "prompt-traceparent "+wantTP) {
		t.Errorf("agent log %q; want prompt-traceparent %s", got, wantTP)
	}

	// Metrics and the audit records, as the receiver decoded them.
	recs := readAudit(t, auditFile)
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	var gotLogs map[string]map[string]string
	var gotMetrics map[string]bool
	ok := rcv.Wait(wctx, func(_ []ptrace.Traces, ms []pmetric.Metrics, ls []plog.Logs) bool {
		gotLogs, gotMetrics = auditLogs(ls), metricNames(ms)
		return len(gotLogs) >= 2 && gotMetrics["acp_router.turns"] && gotMetrics["acp_router.policy.decisions"] && gotMetrics["acp_router.policy.asks"]
	})
	if !ok {
		t.Fatalf("receiver: logs %v, metrics %v", gotLogs, gotMetrics)
	}
	for _, r := range recs {
		l := gotLogs[r.DecisionID]
		if l == nil {
			t.Errorf("audit record %s is not among the OTLP log records", r.DecisionID)
			continue
		}
		if l["decision"] != r.Decision || l["rule"] != r.rule() || l["layer"] != r.Layer || l["session"] != r.Session || l["source"] != r.Source {
			t.Errorf("OTLP log %v differs from the audit record %+v", l, r)
		}
		if l["traceId"] != editorTraceID {
			t.Errorf("OTLP log record of %s in trace %s", r.DecisionID, l["traceId"])
		}
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// auditLogs are the audit log records received, by decision id: their
// attributes and trace id.
func auditLogs(ls []plog.Logs) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, ld := range ls {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			sl := ld.ResourceLogs().At(i).ScopeLogs()
			for j := 0; j < sl.Len(); j++ {
				recs := sl.At(j).LogRecords()
				for k := 0; k < recs.Len(); k++ {
					r := recs.At(k)
					attrs := map[string]string{"traceId": r.TraceID().String()}
					r.Attributes().Range(func(k string, v pcommon.Value) bool {
						attrs[k] = v.AsString()
						return true
					})
					out[attrs["decisionId"]] = attrs
				}
			}
		}
	}
	return out
}

func metricNames(ms []pmetric.Metrics) map[string]bool {
	out := map[string]bool{}
	for _, md := range ms {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			sm := md.ResourceMetrics().At(i).ScopeMetrics()
			for j := 0; j < sm.Len(); j++ {
				for k := 0; k < sm.At(j).Metrics().Len(); k++ {
					out[sm.At(j).Metrics().At(k).Name()] = true
				}
			}
		}
	}
	return out
}

// TestTelemetryCollectorDown: with the collector refusing connections, or
// accepting them and never answering, prompts run as usual, the failure is
// logged once per signal, and the router exits within its bounded flush.
func TestTelemetryCollectorDown(t *testing.T) {
	t.Parallel()
	for name, endpoint := range map[string]func(testing.TB) string{"refusing": otlptest.Refusing, "hanging": otlptest.Hanging} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, "")
			b, _ := os.ReadFile(cfg)
			os.WriteFile(cfg, append(b, fmt.Sprintf("telemetry:\n  enabled: true\n  endpoint: %s\n", endpoint(t))...), 0o600)
			env := []string{"OTEL_METRIC_EXPORT_INTERVAL=100"}
			if name == "refusing" {
				// Hanging keeps the 10s export timeout: the flush at exit
				// must cut it short.
				env = append(env, "OTEL_EXPORTER_OTLP_TIMEOUT=300")
			}
			e := StartRouter(t, cfg, nil, withEnv(env...))
			e.Initialize(t, capsAll)
			sid := e.NewSession(t, t.TempDir())
			start := time.Now()
			for i := range 20 {
				e.MustPrompt(t, sid, fmt.Sprintf("say turn %d", i), "end_turn")
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("20 prompts took %v with the collector %s", d, name)
			}
			time.Sleep(time.Second) // a few failed exports
			e.CloseStdin()
			code, elapsed, ok := e.Wait(15 * time.Second)
			if !ok || code != 0 {
				t.Fatalf("router exit: code %d ok %v", code, ok)
			}
			t.Logf("exited %v after its stdin closed", elapsed)
			if elapsed > 8*time.Second {
				t.Errorf("the router took %v to exit; the flush is bounded at 5s", elapsed)
			}
			if n := strings.Count(e.Stderr(), "telemetry export failing"); n < 1 || n > 3 {
				t.Errorf("the export failure was logged %d times; want once per signal:\n%s", n, e.Stderr())
			}
		})
	}
}

// TestTelemetryCollectorRefusedExit: with the collector refusing
// connections and the default export timeout, the router exits about as
// soon as its stdin closes, over gRPC as over HTTP (issue 27: gRPC retried
// the refused connection until the 5s flush at exit ran out).
func TestTelemetryCollectorRefusedExit(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			t.Parallel()
			cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, "")
			b, _ := os.ReadFile(cfg)
			os.WriteFile(cfg, append(b, fmt.Sprintf("telemetry:\n  enabled: true\n  endpoint: %s\n  protocol: %s\n", otlptest.Refusing(t), protocol)...), 0o600)
			e := StartRouter(t, cfg, nil)
			e.Initialize(t, capsAll)
			sid := e.NewSession(t, t.TempDir())
			e.MustPrompt(t, sid, "say hello", "end_turn")
			e.CloseStdin()
			code, elapsed, ok := e.Wait(15 * time.Second)
			if !ok || code != 0 {
				t.Fatalf("router exit: code %d ok %v", code, ok)
			}
			t.Logf("exited %v after its stdin closed", elapsed)
			if elapsed > 2*time.Second {
				t.Errorf("the router took %v to exit with the collector refusing connections over %s; want well under the 5s flush", elapsed, protocol)
			}
		})
	}
}

// TestTelemetryBadEnvironment: an invalid OTEL_* value stops the router at
// start-up with an error naming the variable; with telemetry off the
// variables are not read at all.
func TestTelemetryBadEnvironment(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})})+"telemetry: {enabled: true}\n")
	for name, value := range map[string]string{"OTEL_TRACES_SAMPLER": "sometimes", "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_RESOURCE_ATTRIBUTES": "novalue"} {
		code, out, errOut := runRouterCmd(t, []string{name + "=" + value}, "--config", cfg)
		if code != 1 || out != "" || !strings.Contains(errOut, name) {
			t.Errorf("%s=%s: exit %d, stdout %q, stderr %q; want 1 and an error naming it", name, value, code, out, truncate(errOut, 2000))
		}
	}
	off := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}))
	e := StartRouter(t, off, nil, withEnv("OTEL_TRACES_SAMPLER=sometimes"))
	e.Initialize(t, capsAll)
}
