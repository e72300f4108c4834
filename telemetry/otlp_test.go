package telemetry

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/internal/otlptest"
)

// logCounter counts the router's own log lines by message.
type logCounter struct {
	hclog.Logger
	lines chan string
}

func newLogCounter() *logCounter {
	c := &logCounter{lines: make(chan string, 1000)}
	c.Logger = hclog.New(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Info,
		Exclude: func(_ hclog.Level, msg string, _ ...any) bool {
			select {
			case c.lines <- msg:
			default:
			}
			return true
		}})
	return c
}

func (c *logCounter) count(msg string) int {
	n := 0
	for {
		select {
		case m := <-c.lines:
			if m == msg {
				n++
			}
		default:
			return n
		}
	}
}

// Real OTLP exporters over gRPC to a receiver that decodes with pdata:
// the decision's log record and the metrics arrive as OTLP.
func TestOTLPExportToReceiver(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			rcv := otlptest.Start(t)
			endpoint := rcv.Endpoint
			if protocol != "grpc" {
				endpoint = rcv.HTTPEndpoint
			}
			tel, err := Setup(t.Context(), config.Telemetry{Enabled: true, Endpoint: endpoint, Protocol: protocol},
				Options{Getenv: func(string) string { return "" }, BatchInterval: 10 * time.Millisecond, MetricInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			u := tel.StartTurn(json.RawMessage(`{}`), "s1")
			u.Dispatch("claude", "", nil)
			rule := "r1"
			tel.Decision(u.Context(t.Context()), time.Now(), &audit.Record{Time: time.Now(), DecisionID: "d1", Method: "fs/write_text_file",
				Agent: "claude", Decision: "allow", Rule: &rule, Layer: "user", Source: "rule"}, Evidence{})
			u.End(json.RawMessage(`{"stopReason":"end_turn"}`), nil, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			ok := rcv.Wait(ctx, func(tr []ptrace.Traces, ms []pmetric.Metrics, ls []plog.Logs) bool {
				spans, decisionLog, turns := 0, false, false
				for _, td := range tr {
					spans += td.SpanCount()
				}
				for _, ld := range ls {
					rl := ld.ResourceLogs()
					for i := 0; i < rl.Len(); i++ {
						sl := rl.At(i).ScopeLogs()
						for j := 0; j < sl.Len(); j++ {
							recs := sl.At(j).LogRecords()
							for k := 0; k < recs.Len(); k++ {
								r := recs.At(k)
								id, _ := r.Attributes().Get("decisionId")
								rl, _ := r.Attributes().Get("rule")
								decisionLog = decisionLog || (r.EventName() == audit.OTLPEventName && id.Str() == "d1" && rl.Str() == "r1" && !r.SpanID().IsEmpty())
							}
						}
					}
				}
				for _, md := range ms {
					rm := md.ResourceMetrics()
					for i := 0; i < rm.Len(); i++ {
						sm := rm.At(i).ScopeMetrics()
						for j := 0; j < sm.Len(); j++ {
							m := sm.At(j).Metrics()
							for k := 0; k < m.Len(); k++ {
								if m.At(k).Name() == "acp_router.turns" && m.At(k).Sum().DataPoints().Len() == 1 {
									a, _ := m.At(k).Sum().DataPoints().At(0).Attributes().Get("acp.agent")
									turns = turns || a.Str() == "claude"
								}
							}
						}
					}
				}
				return spans >= 3 && decisionLog && turns
			})
			if !ok {
				t.Fatal("the receiver did not get the spans, the decision's log record and the turn metric")
			}
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			if err := tel.Shutdown(sctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// A collector that is down: the router goes on, what is lost is counted
// and the failure is logged once, not at every export.
func TestCollectorUnreachable(t *testing.T) {
	logs := newLogCounter()
	tel, err := Setup(t.Context(), config.Telemetry{Enabled: true, Endpoint: otlptest.Refusing(t)},
		Options{Getenv: func(string) string { return "" }, Logger: logs, BatchInterval: 5 * time.Millisecond,
			MetricInterval: 20 * time.Millisecond, ExportTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 50 {
		u := tel.StartTurn(nil, "s")
		u.End(nil, nil, nil)
		if i%10 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("turns took %v with the collector down", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for spans, _, _ := tel.Dropped(); spans == 0 && time.Now().Before(deadline); spans, _, _ = tel.Dropped() {
		time.Sleep(20 * time.Millisecond)
	}
	if spans, _, _ := tel.Dropped(); spans == 0 {
		t.Fatal("no dropped span counted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	began := time.Now()
	tel.Shutdown(ctx)
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	if n := logs.count("telemetry export failing; dropping until it works again"); n < 1 || n > 3 {
		t.Errorf("the failure was logged %d times; want once per signal", n)
	}
}

// A collector that refuses connections holds the exit no longer over gRPC
// than over HTTP (issue 27): the flush at exit, with everything still
// queued (spans, the decision's log record, the metrics), fails at once
// instead of retrying a refused connection until the flush's deadline. The
// default export timeout (10s) and a 5s flush, as the router exits.
func TestCollectorRefusingExit(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			logs := newLogCounter()
			tel, err := Setup(t.Context(), config.Telemetry{Enabled: true, Endpoint: otlptest.Refusing(t), Protocol: protocol},
				Options{Getenv: func(string) string { return "" }, Logger: logs})
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				tel.StartTurn(nil, "s").End(nil, nil, nil)
				tel.Decision(context.Background(), time.Now(), &audit.Record{Time: time.Now(), Decision: "allow"}, Evidence{})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			began := time.Now()
			tel.Shutdown(ctx)
			elapsed := time.Since(began)
			t.Logf("Shutdown took %v", elapsed)
			if elapsed > time.Second {
				t.Errorf("Shutdown took %v with the collector refusing connections; want well under the 5s flush", elapsed)
			}
			if spans, metrics, records := tel.Dropped(); spans == 0 || metrics == 0 || records == 0 {
				t.Errorf("dropped spans %d, metric exports %d, log records %d; want each counted", spans, metrics, records)
			}
		})
	}
}

// A collector that accepts connections and never answers: exports time
// out, nothing blocks, and Shutdown returns within its deadline.
func TestCollectorHanging(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			tel, err := Setup(t.Context(), config.Telemetry{Enabled: true, Endpoint: otlptest.Hanging(t), Protocol: protocol},
				Options{Getenv: func(string) string { return "" }, BatchInterval: 5 * time.Millisecond, ExportTimeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for range 5000 {
				u := tel.StartTurn(nil, "s")
				u.End(nil, nil, nil)
				tel.Decision(context.Background(), time.Now(), &audit.Record{Time: time.Now(), Decision: "allow"}, Evidence{})
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("5000 turns took %v with the collector hanging", d)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			began := time.Now()
			tel.Shutdown(ctx)
			if d := time.Since(began); d > 2500*time.Millisecond {
				t.Errorf("Shutdown took %v with a 1s deadline", d)
			}
			if spans, _, _ := tel.Dropped(); spans == 0 {
				t.Error("no dropped span counted")
			}
		})
	}
}

// A collector port that answers garbage: exports fail, are counted and
// logged, and nothing blocks.
func TestCollectorGarbage(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			logs := newLogCounter()
			tel, err := Setup(t.Context(), config.Telemetry{Enabled: true, Endpoint: otlptest.Garbage(t), Protocol: protocol},
				Options{Getenv: func(string) string { return "" }, Logger: logs, BatchInterval: 5 * time.Millisecond, ExportTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				tel.StartTurn(nil, "s").End(nil, nil, nil)
			}
			deadline := time.Now().Add(5 * time.Second)
			for spans, _, _ := tel.Dropped(); spans == 0 && time.Now().Before(deadline); spans, _, _ = tel.Dropped() {
				time.Sleep(20 * time.Millisecond)
			}
			if spans, _, _ := tel.Dropped(); spans == 0 {
				t.Error("no dropped span counted")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			tel.Shutdown(ctx)
			if n := logs.count("telemetry export failing; dropping until it works again"); n < 1 || n > 3 {
				t.Errorf("the failure was logged %d times", n)
			}
		})
	}
}

// With no endpoint anywhere, the exporters use the OTLP default,
// http://localhost:4317 (gRPC) in plaintext, as a local collector
// listens; a per-signal variable is left to the exporter.
func TestDefaultEndpoint(t *testing.T) {
	for _, tc := range []struct {
		env              map[string]string
		protocol, traces string
	}{
		{nil, "grpc", "http://localhost:4317"},
		{nil, "http/protobuf", "http://localhost:4318"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:1"}, "grpc", ""},
	} {
		s, err := Resolve(config.Telemetry{Protocol: tc.protocol}, func(k string) string { return tc.env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if got := s.endpoint("traces"); got != tc.traces {
			t.Errorf("%v %s: traces endpoint %q, want %q", tc.env, tc.protocol, got, tc.traces)
		}
	}
}

// An org's locked block (config.Telemetry.Lock): the user's OTEL_*
// variables cannot turn telemetry off or send it elsewhere, although the
// exporters read some of them from the process environment themselves.
func TestLockedIgnoresEnv(t *testing.T) {
	org, user := otlptest.Start(t), otlptest.Start(t)
	t.Setenv("OTEL_SDK_DISABLED", "true")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", user.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", user.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-user=1")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	cfg := config.Telemetry{Enabled: true, Endpoint: org.Endpoint, Lock: true}

	if off, err := Disabled(cfg, nil); off || err != nil {
		t.Errorf("Disabled = %v, %v: OTEL_SDK_DISABLED turned a locked block off", off, err)
	}
	set, err := Resolve(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set.Headers == nil || len(set.Headers) != 0 || set.SamplerName != "parentbased_always_on" || set.Protocol["traces"] != "grpc" {
		t.Errorf("locked settings took the environment: %+v", set)
	}
	if got := IgnoredEnv(cfg, config.Pos{File: "/etc/p/10.yaml", Line: 2, Col: 9}, nil); len(got) != 6 ||
		got[0] != "OTEL_SDK_DISABLED is ignored: the org locks telemetry (/etc/p/10.yaml:2:9)" {
		t.Errorf("IgnoredEnv = %q", got)
	}
	unlocked := cfg
	unlocked.Lock = false
	if got := IgnoredEnv(unlocked, config.Pos{}, nil); got != nil {
		t.Errorf("not locked: IgnoredEnv = %q", got)
	}
	if off, _ := Disabled(unlocked, nil); !off {
		t.Error("not locked: OTEL_SDK_DISABLED=true left telemetry on")
	}

	tel, err := Setup(t.Context(), cfg, Options{BatchInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	u := tel.StartTurn(json.RawMessage(`{}`), "s1")
	u.End(json.RawMessage(`{"stopReason":"end_turn"}`), nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !org.Wait(ctx, func(tr []ptrace.Traces, _ []pmetric.Metrics, _ []plog.Logs) bool { return len(tr) > 0 }) {
		t.Error("the org's endpoint got no span")
	}
	tel.Shutdown(ctx)
	if spans, points, logs := user.Counts(); spans+points+logs != 0 {
		t.Errorf("the user's endpoint got %d spans, %d points, %d logs", spans, points, logs)
	}
}
