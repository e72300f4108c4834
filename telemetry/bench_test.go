package telemetry

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	noopmetric "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/internal/otlptest"
)

// discardSpans is a span exporter that keeps nothing.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// benchTelemetry is telemetry on, exporting spans to nowhere and metrics
// to a reader nobody reads, shut down at the benchmark's end.
func benchTelemetry(b *testing.B) *Telemetry {
	tel, err := Setup(b.Context(), config.Telemetry{Enabled: true}, Options{Getenv: func(string) string { return "" },
		SpanExporter: discardSpans{}, MetricReader: sdkmetric.NewManualReader(), LogExporter: &memLogs{}, BatchInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tel.Shutdown(context.Background()) })
	return tel
}

// BenchmarkTurn is what telemetry adds to one prompt turn on the relay's
// path: the turn's span (parent from the editor's traceparent), the
// session/prompt call's span with its traceparent injected into the
// params, the end with the stop reason, and the metrics (issue 17, the
// on-path cost). The export itself runs in the queue's goroutine.
func BenchmarkTurn(b *testing.B) {
	tel := benchTelemetry(b)
	params := json.RawMessage(`{"sessionId":"0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90","prompt":[{"type":"text","text":"Explain the relay."}],"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"vendor=1"}}`)
	result := json.RawMessage(`{"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":20,"totalTokens":30}}`)
	b.ReportAllocs()
	for b.Loop() {
		u := tel.StartTurn(params, "s1")
		p := u.Dispatch("claude", "default", params)
		if string(p) == string(params) {
			b.Fatal("no traceparent injected")
		}
		u.End(result, nil, nil)
	}
}

// BenchmarkSpan is the floor of a traced turn: one span of the SDK
// (started, one attribute, ended, queued for a discarding exporter), what
// any span per turn costs before it is exported.
func BenchmarkSpan(b *testing.B) {
	tel := benchTelemetry(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, span := tel.Tracer.Start(ctx, "acp-router turn")
		span.SetAttributes(KeySession.String("s1"))
		span.End()
	}
}

// BenchmarkTurnUnsampled is BenchmarkTurn with a sampler that records no
// turn (OTEL_TRACES_SAMPLER=always_off; a ratio sampler's other turns):
// what telemetry costs a turn that is not traced.
func BenchmarkTurnUnsampled(b *testing.B) {
	tel, err := Setup(b.Context(), config.Telemetry{Enabled: true, Sampler: "always_off"}, Options{Getenv: func(string) string { return "" },
		SpanExporter: discardSpans{}, MetricReader: sdkmetric.NewManualReader(), LogExporter: &memLogs{}, BatchInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tel.Shutdown(context.Background()) })
	params := json.RawMessage(`{"sessionId":"0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90","prompt":[{"type":"text","text":"Explain the relay."}]}`)
	result := json.RawMessage(`{"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":20,"totalTokens":30}}`)
	b.ReportAllocs()
	for b.Loop() {
		u := tel.StartTurn(params, "s1")
		u.Dispatch("claude", "default", params)
		u.End(result, nil, nil)
	}
}

// collectSpans keeps the spans that end (a span processor).
type collectSpans struct{ spans []sdktrace.ReadOnlySpan }

func (c *collectSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *collectSpans) OnEnd(s sdktrace.ReadOnlySpan)                   { c.spans = append(c.spans, s) }
func (c *collectSpans) Shutdown(context.Context) error                  { return nil }
func (c *collectSpans) ForceFlush(context.Context) error                { return nil }

// BenchmarkExport is the other half of a traced turn's floor: exporting
// its two spans (the turn's and its session/prompt call's, with the
// attributes the router gives them) in batches of 512 through the real
// OTLP exporter to the loopback receiver, which decodes them with pdata
// (the benchmark's collector). cpu-us/turn is the process's CPU time (user
// and system, both ends of the connection) per turn: what the export takes
// from a machine whose cores the relay would otherwise use.
func BenchmarkExport(b *testing.B) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		b.Run(protocol, func(b *testing.B) {
			rcv := otlptest.Start(b)
			rcv.Discard()
			endpoint := rcv.Endpoint
			if protocol != "grpc" {
				endpoint = rcv.HTTPEndpoint
			}
			set, err := Resolve(config.Telemetry{Enabled: true, Endpoint: endpoint, Protocol: protocol}, func(string) string { return "" })
			if err != nil {
				b.Fatal(err)
			}
			exp, err := spanExporter(b.Context(), set, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer exp.Shutdown(context.Background())
			// 256 turns' spans, made as the router makes them.
			col := &collectSpans{}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(col))
			tel := &Telemetry{Tracer: tp.Tracer(Scope)}
			if err := tel.m.init(noopmetric.NewMeterProvider().Meter(Scope), &drops{}); err != nil {
				b.Fatal(err)
			}
			params := json.RawMessage(`{"sessionId":"0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90","prompt":[{"type":"text","text":"Explain the relay."}],"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`)
			result := json.RawMessage(`{"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":20,"totalTokens":30}}`)
			const turns = 256
			for range turns {
				u := tel.StartTurn(params, "0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90")
				u.Dispatch("claude", "default", params)
				u.End(result, nil, nil)
			}
			if len(col.spans) != 2*turns {
				b.Fatalf("%d spans, want %d", len(col.spans), 2*turns)
			}
			ctx := context.Background()
			if err := exp.ExportSpans(ctx, col.spans); err != nil { // connect
				b.Fatal(err)
			}
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			n := 0
			for b.Loop() {
				if err := exp.ExportSpans(ctx, col.spans); err != nil {
					b.Fatal(err)
				}
				n++
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
			b.ReportMetric(float64(cpu.Microseconds())/float64(n*turns), "cpu-us/turn")
			b.ReportMetric(0, "ns/op")
			if spans, _, _ := rcv.Counts(); spans < (n+1)*2*turns {
				b.Fatalf("the receiver counted %d spans, want %d", spans, (n+1)*2*turns)
			}
		})
	}
}
