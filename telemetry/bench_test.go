package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
// OTLP exporter to a loopback receiver that decodes them with pdata (the
// benchmark's collector), running in a process of its own.
// exporter-cpu-us/turn is this process's CPU time (user and system) per
// turn: what the export costs the router's process; receiver-cpu-us/turn
// the receiver process's: what a collector on the same machine takes too.
func BenchmarkExport(b *testing.B) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		b.Run(protocol, func(b *testing.B) {
			rcv := startReceiverProcess(b)
			endpoint := rcv.grpc
			if protocol != "grpc" {
				endpoint = rcv.http
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
			self0, rcv0 := cpuTime(b, "self"), cpuTime(b, rcv.pid)
			n := 0
			for b.Loop() {
				if err := exp.ExportSpans(ctx, col.spans); err != nil {
					b.Fatal(err)
				}
				n++
			}
			self, other := cpuTime(b, "self")-self0, cpuTime(b, rcv.pid)-rcv0
			b.ReportMetric(self.Seconds()*1e6/float64(n*turns), "exporter-cpu-us/turn")
			b.ReportMetric(other.Seconds()*1e6/float64(n*turns), "receiver-cpu-us/turn")
			b.ReportMetric(0, "ns/op")
			if got := rcv.spans(b); got < (n+1)*2*turns {
				b.Fatalf("the receiver counted %d spans, want %d", got, (n+1)*2*turns)
			}
		})
	}
}

// receiverProcess is an otlptest receiver in a child process (the test
// binary run as TestReceiverProcess), so that its CPU is not the
// benchmark's.
type receiverProcess struct {
	grpc, http, pid string
	in              io.WriteCloser
	out             *bufio.Reader
}

func startReceiverProcess(b *testing.B) *receiverProcess {
	cmd := exec.Command(os.Args[0], "-test.run=^TestReceiverProcess$")
	cmd.Env = append(os.Environ(), "ACP_ROUTER_RECEIVER_PROCESS=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	r := &receiverProcess{pid: strconv.Itoa(cmd.Process.Pid), in: in, out: bufio.NewReader(out)}
	if _, err := fmt.Fscan(r.out, &r.grpc, &r.http); err != nil {
		b.Fatalf("receiver process: %v", err)
	}
	return r
}

// spans asks the receiver process how many spans it has decoded.
func (r *receiverProcess) spans(b *testing.B) int {
	n := 0
	if _, err := fmt.Fprintln(r.in, "count"); err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Fscan(r.out, &n); err != nil {
		b.Fatal(err)
	}
	return n
}

// TestReceiverProcess is the receiver process of BenchmarkExport: it
// prints its endpoints, answers each line on stdin with the spans counted,
// and ends with stdin. Skipped as a test.
func TestReceiverProcess(t *testing.T) {
	if os.Getenv("ACP_ROUTER_RECEIVER_PROCESS") != "1" {
		t.Skip("the receiver process of BenchmarkExport")
	}
	rcv := otlptest.Start(t)
	rcv.Discard()
	fmt.Println(rcv.Endpoint, rcv.HTTPEndpoint)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		spans, _, _ := rcv.Counts()
		fmt.Println(spans)
	}
}

// cpuTime is the user and system CPU time of process pid ("self": this
// one), from /proc.
func cpuTime(b *testing.B, pid string) time.Duration {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the whole line, in clock ticks (100 Hz).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("cannot read %s's CPU time", pid)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}
