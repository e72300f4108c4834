package telemetry

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/acp-router/acp-router/config"
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
