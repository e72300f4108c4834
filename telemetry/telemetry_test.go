package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/config"
)

// memLogs is an in-memory log exporter.
type memLogs struct {
	mu   sync.Mutex
	recs []sdklog.Record
}

func (m *memLogs) Export(_ context.Context, recs []sdklog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		m.recs = append(m.recs, r.Clone())
	}
	return nil
}
func (m *memLogs) Shutdown(context.Context) error   { return nil }
func (m *memLogs) ForceFlush(context.Context) error { return nil }

type harness struct {
	tel    *Telemetry
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	logs   *memLogs
}

func setup(t *testing.T, cfg config.Telemetry, env map[string]string) *harness {
	t.Helper()
	cfg.Enabled = true
	h := &harness{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader(), logs: &memLogs{}}
	tel, err := Setup(t.Context(), cfg, Options{Getenv: func(k string) string { return env[k] }, SpanExporter: h.spans,
		MetricReader: h.reader, LogExporter: h.logs, BatchInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h.tel = tel
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	return h
}

func (h *harness) flush(t *testing.T) tracetest.SpanStubs {
	t.Helper()
	if err := h.tel.tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := h.tel.lp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	return h.spans.GetSpans()
}

func (h *harness) metrics(t *testing.T) map[string][]attribute.Set {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]attribute.Set{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], p.Attributes)
				}
			}
		}
	}
	return out
}

func attr(kvs []attribute.KeyValue, k attribute.Key) attribute.Value {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestOffIsNil(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  config.Telemetry
		env  map[string]string
	}{
		{"not enabled", config.Telemetry{}, nil},
		{"OTEL_SDK_DISABLED wins", config.Telemetry{Enabled: true}, map[string]string{"OTEL_SDK_DISABLED": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := Setup(t.Context(), tc.cfg, Options{Getenv: func(k string) string { return tc.env[k] }})
			if err != nil || tel != nil {
				t.Fatalf("Setup = %v, %v; want nil, nil", tel, err)
			}
			// Every hook is a no-op on nil.
			u := tel.StartTurn(json.RawMessage(`{}`), "s")
			p := json.RawMessage(`{"_meta":{"traceparent":"x"}}`)
			if got := u.Dispatch("a", "m", p); string(got) != string(p) {
				t.Errorf("Dispatch changed params: %s", got)
			}
			u.End(nil, nil, nil)
			tel.Decision(t.Context(), time.Now(), &audit.Record{}, Evidence{})
			tel.AgentStarted("a", time.Now(), true, nil)
			tel.AgentExited("a", true, nil)
			tel.Switch(t.Context(), time.Now(), "s", "a", "b", true, nil)
			if err := tel.Shutdown(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
}

const (
	editorTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	editorTS = "vendor=abc"
	baggage  = "user=alice"
)

func TestTurnSpanParentsAndInject(t *testing.T) {
	h := setup(t, config.Telemetry{}, nil)
	p := json.RawMessage(`{"sessionId":"s1","prompt":[{"type":"text","text":"secret prompt"}],"_meta":{"traceparent":"` + editorTP + `","tracestate":"` + editorTS + `","baggage":"` + baggage + `","other":1}}`)
	u := h.tel.StartTurn(p, "s1")
	out := u.Dispatch("claude", "default", p)
	u.End(json.RawMessage(`{"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7}}`), nil, &Cost{Amount: 0.5, Currency: "USD"})
	spans := h.flush(t)
	if len(spans) != 2 {
		t.Fatalf("got %d spans, want 2 (turn, session/prompt)", len(spans))
	}
	call, turn := spans[0], spans[1]
	if call.Name != "session/prompt" || turn.Name != "acp-router turn" {
		t.Fatalf("span names %q, %q", call.Name, turn.Name)
	}
	if got := turn.Parent.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" || turn.Parent.SpanID().String() != "00f067aa0ba902b7" || !turn.Parent.IsRemote() {
		t.Errorf("turn parent = %v, want the editor's span", turn.Parent)
	}
	if call.Parent.SpanID() != turn.SpanContext.SpanID() {
		t.Errorf("call parent = %v, want the turn", call.Parent.SpanID())
	}
	if got := turn.SpanContext.TraceState().String(); got != editorTS {
		t.Errorf("tracestate = %q, want the editor's", got)
	}
	for k, want := range map[attribute.Key]attribute.Value{KeySession: attribute.StringValue("s1"), KeyAgent: attribute.StringValue("claude"),
		KeyMode: attribute.StringValue("default"), KeyStopReason: attribute.StringValue("end_turn"), KeyTokens: attribute.Int64Value(7),
		KeyCost: attribute.Float64Value(0.5), KeyCurrency: attribute.StringValue("USD")} {
		if got := attr(turn.Attributes, k); got != want {
			t.Errorf("turn %s = %v, want %v", k, got.String(), want.String())
		}
	}
	if attr(turn.Attributes, KeyPrompt).Type() != attribute.EMPTY {
		t.Error("the prompt text is exported without export_prompts")
	}
	// The agent gets the router's call span as traceparent; everything
	// else in _meta as it was.
	var got struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	wantTP := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + call.SpanContext.SpanID().String() + "-01"
	if string(got.Meta["traceparent"]) != `"`+wantTP+`"` {
		t.Errorf("agent traceparent = %s, want %s", got.Meta["traceparent"], wantTP)
	}
	if string(got.Meta["tracestate"]) != `"`+editorTS+`"` || string(got.Meta["baggage"]) != `"`+baggage+`"` || string(got.Meta["other"]) != "1" {
		t.Errorf("_meta = %v: tracestate, baggage or other changed", got.Meta)
	}
	if !strings.Contains(string(out), `"prompt":[{"type":"text","text":"secret prompt"}]`) {
		t.Errorf("params changed beyond _meta: %s", out)
	}
	m := h.metrics(t)
	for _, name := range []string{"acp_router.turns", "acp_router.turn.duration"} {
		if len(m[name]) != 1 {
			t.Fatalf("%s: %d points", name, len(m[name]))
		}
		want := attribute.NewSet(KeyAgent.String("claude"), KeyStopReason.String("end_turn"))
		if !m[name][0].Equals(&want) {
			t.Errorf("%s labels = %v, want only agent and stop reason", name, m[name][0].ToSlice())
		}
	}
}

func TestTurnExportPrompts(t *testing.T) {
	h := setup(t, config.Telemetry{ExportPrompts: true}, nil)
	u := h.tel.StartTurn(json.RawMessage(`{"prompt":[{"type":"text","text":"hello"}]}`), "s")
	u.End(json.RawMessage(`{"stopReason":"something-new"}`), nil, nil)
	spans := h.flush(t)
	if got := attr(spans[0].Attributes, KeyPrompt).AsString(); got != "hello" {
		t.Errorf("prompt = %q", got)
	}
	if got := attr(spans[0].Attributes, KeyStopReason).AsString(); got != "other" {
		t.Errorf("an unknown stop reason is labelled %q, want other", got)
	}
}

func TestBadTraceparent(t *testing.T) {
	for name, meta := range map[string]string{
		"malformed":   `{"traceparent":"00-zz-00f067aa0ba902b7-01"}`,
		"oversized":   `{"traceparent":"` + editorTP + strings.Repeat("-0", 100000) + `"}`,
		"not string":  `{"traceparent":42}`,
		"zero ids":    `{"traceparent":"00-00000000000000000000000000000000-0000000000000000-01"}`,
		"meta array":  `[1,2]`,
		"huge baggge": `{"traceparent":"` + editorTP + `","baggage":"` + strings.Repeat("k=v,", 100000) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := setup(t, config.Telemetry{}, nil)
			p := json.RawMessage(`{"sessionId":"s","_meta":` + meta + `}`)
			u := h.tel.StartTurn(p, "s")
			out := u.Dispatch("a", "", p)
			u.End(nil, nil, nil)
			spans := h.flush(t)
			turn := spans[len(spans)-1]
			wantRoot := name != "huge baggge"
			if wantRoot && turn.Parent.IsValid() {
				t.Errorf("turn has parent %v; want a new root", turn.Parent)
			}
			if !wantRoot && turn.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("baggage spoilt the traceparent")
			}
			if !json.Valid(out) {
				t.Fatalf("invalid params: %.200s", out)
			}
			if name == "huge baggge" && !strings.Contains(string(out), strings.Repeat("k=v,", 100000)) {
				t.Error("baggage not forwarded as it came")
			}
		})
	}
}

func TestDecision(t *testing.T) {
	h := setup(t, config.Telemetry{}, nil)
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	rule := "no-secrets"
	rec := &audit.Record{Time: time.Now(), DecisionID: "1-2-3", Session: "child", ParentSession: "top", Agent: "claude",
		Method: "fs/read_text_file", Evidence: []map[string]string{{"type": "path", "path": "/home/u/.ssh/id_rsa"}},
		Decision: "deny", Rule: &rule, Layer: "org", Source: "rule", UserChoice: "", PolicyHash: "abc", LatencyUs: 12}
	h.tel.Decision(ctx, time.Now().Add(-time.Millisecond), rec, Evidence{Types: []string{"path"}, Kinds: []string{"read"}, Items: 1})
	rec2 := *rec
	rec2.Decision, rec2.Rule, rec2.Source, rec2.UserChoice = "allow", nil, "user", "allow_once"
	h.tel.Decision(ctx, time.Now(), &rec2, Evidence{})
	spans := h.flush(t)
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	d := spans[0]
	if d.Parent.SpanID() != parent.SpanID() || d.Name != "policy decision" {
		t.Errorf("decision span %q parent %v", d.Name, d.Parent)
	}
	for k, want := range map[attribute.Key]attribute.Value{KeyEffect: attribute.StringValue("deny"), KeyRule: attribute.StringValue("no-secrets"),
		KeyLayer: attribute.StringValue("org"), KeyParent: attribute.StringValue("top"), KeyEvKinds: attribute.StringSliceValue([]string{"read"}),
		KeyEvCount: attribute.IntValue(1), KeyDecisionID: attribute.StringValue("1-2-3")} {
		if got := attr(d.Attributes, k); got.String() != want.String() {
			t.Errorf("decision %s = %v, want %v", k, got.String(), want.String())
		}
	}
	for _, kv := range d.Attributes {
		if strings.Contains(kv.Value.String(), ".ssh") {
			t.Errorf("the span carries the evidence's path: %s=%s", kv.Key, kv.Value.String())
		}
	}
	m := h.metrics(t)
	want := attribute.NewSet(KeyEffect.String("deny"), KeyRule.String("no-secrets"), KeyLayer.String("org"))
	found := false
	for _, s := range m["acp_router.policy.decisions"] {
		found = found || s.Equals(&want)
	}
	if !found {
		t.Errorf("decisions = %v", m["acp_router.policy.decisions"])
	}
	if asks := m["acp_router.policy.asks"]; len(asks) != 1 || asks[0].Len() != 1 {
		t.Errorf("asks = %v", asks)
	}
	// The OTLP log record: the JSONL line's fields, in the decision's span.
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	if len(h.logs.recs) != 2 {
		t.Fatalf("%d log records", len(h.logs.recs))
	}
	lr := h.logs.recs[0]
	if lr.SpanID() != d.SpanContext.SpanID() || lr.EventName() != audit.OTLPEventName {
		t.Errorf("log record span %v event %q", lr.SpanID(), lr.EventName())
	}
	got := map[string]string{}
	lr.WalkAttributes(func(kv attribute.KeyValue) bool { got[string(kv.Key)] = kv.Value.String(); return true })
	for k, v := range map[string]string{"decisionId": "1-2-3", "session": "child", "parentSession": "top", "agent": "claude",
		"method": "fs/read_text_file", "decision": "deny", "rule": "no-secrets", "layer": "org", "source": "rule", "policyHash": "abc", "latencyUs": "12"} {
		if got[k] != v {
			t.Errorf("log %s = %q, want %q", k, got[k], v)
		}
	}
	line, _ := json.Marshal(rec)
	if lr.Body().AsString() != string(line) {
		t.Errorf("log body = %s, want the JSONL line %s", lr.Body().AsString(), line)
	}
}

func TestCallErrorCode(t *testing.T) {
	h := setup(t, config.Telemetry{}, nil)
	_, end := h.tel.Call(t.Context(), "fs/read_text_file", "claude")
	end(&jsonrpc2.Error{Code: -32603, Message: "denied"})
	spans := h.flush(t)
	if got := attr(spans[0].Attributes, KeyErrorCode).AsInt64(); got != -32603 {
		t.Errorf("error code = %d", got)
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     config.Telemetry
		env     map[string]string
		wantErr string
		check   func(*testing.T, *Settings)
	}{
		{name: "defaults", check: func(t *testing.T, s *Settings) {
			if s.Protocol["traces"] != "grpc" || s.SamplerName != "parentbased_always_on" {
				t.Errorf("%+v", s)
			}
		}},
		{name: "env protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc"},
			check: func(t *testing.T, s *Settings) {
				if s.Protocol["traces"] != "http/protobuf" || s.Protocol["logs"] != "grpc" {
					t.Errorf("%v", s.Protocol)
				}
			}},
		{name: "config wins over env", cfg: config.Telemetry{Protocol: "grpc", Sampler: "always_off"},
			env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_SAMPLER": "always_on"},
			check: func(t *testing.T, s *Settings) {
				if s.Protocol["metrics"] != "grpc" || s.SamplerName != "always_off" {
					t.Errorf("%+v", s)
				}
			}},
		{name: "sampler env", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
			check: func(t *testing.T, s *Settings) {
				if !strings.Contains(s.Sampler.Description(), "0.25") {
					t.Errorf("%s", s.Sampler.Description())
				}
			}},
		{name: "bad protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "udp"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "bad sampler", env: map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, wantErr: "OTEL_TRACES_SAMPLER"},
		{name: "bad ratio", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "bad endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"}, wantErr: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "bad timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, wantErr: "OTEL_EXPORTER_OTLP_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Resolve(tc.cfg, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
	for name, env := range map[string]map[string]string{
		"OTEL_RESOURCE_ATTRIBUTES": {"OTEL_RESOURCE_ATTRIBUTES": "novalue"},
		"OTEL_SDK_DISABLED":        {"OTEL_SDK_DISABLED": "maybe"},
	} {
		_, err := Setup(t.Context(), config.Telemetry{Enabled: true}, Options{Getenv: func(k string) string { return env[k] },
			SpanExporter: tracetest.NewInMemoryExporter(), MetricReader: sdkmetric.NewManualReader(), LogExporter: &memLogs{}})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want one naming it", name, err)
		}
	}
}

func TestResource(t *testing.T) {
	h := setup(t, config.Telemetry{}, map[string]string{"OTEL_SERVICE_NAME": "my-router", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=dev,team=a%20b"})
	h.tel.StartTurn(nil, "s").End(nil, errors.New("x"), nil)
	spans := h.flush(t)
	res := spans[0].Resource
	for k, v := range map[attribute.Key]string{"service.name": "my-router", "deployment.environment": "dev", "team": "a b"} {
		if got, _ := res.Set().Value(k); got.AsString() != v {
			t.Errorf("%s = %q, want %q", k, got.AsString(), v)
		}
	}
	h2 := setup(t, config.Telemetry{ServiceName: "from-yaml"}, map[string]string{"OTEL_SERVICE_NAME": "my-router"})
	h2.tel.StartTurn(nil, "s").End(nil, nil, nil)
	if got, _ := h2.flush(t)[0].Resource.Set().Value("service.name"); got.AsString() != "from-yaml" {
		t.Errorf("service.name = %q; the config's wins", got.AsString())
	}
}

// The span queue never blocks: past its size, spans are dropped and
// counted.
func TestQueueFullDrops(t *testing.T) {
	block := make(chan struct{})
	exp := &blockingExporter{block: block}
	tel, err := Setup(t.Context(), config.Telemetry{Enabled: true}, Options{Getenv: func(string) string { return "" },
		SpanExporter: exp, MetricReader: sdkmetric.NewManualReader(), LogExporter: &memLogs{}, QueueSize: 4, BatchInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 100 {
		tel.StartTurn(nil, "s").End(nil, nil, nil)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("100 spans took %v with a stuck exporter", d)
	}
	if spans, _, _ := tel.Dropped(); spans < 90 {
		t.Errorf("dropped %d spans, want >= 90", spans)
	}
	close(block)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tel.Shutdown(ctx)
}

type blockingExporter struct{ block chan struct{} }

func (b *blockingExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	select {
	case <-b.block:
	case <-ctx.Done():
	}
	return nil
}
func (b *blockingExporter) Shutdown(context.Context) error { return nil }

// TestInject: the traceparent goes into _meta in one splice, every other
// byte kept; the unusual shapes (no _meta, an empty one, one that is not
// an object, the name twice, whitespace, "_meta" inside a string) too.
func TestInject(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{0xab, 2}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	tp := `"traceparent":"00-4bf90100000000000000000000000000-ab02000000000000-01"`
	for _, tc := range []struct{ name, in, want string }{
		{"no _meta", `{"sessionId":"s","prompt":[{"text":"\"_meta\":{}"}]}`, `{"sessionId":"s","prompt":[{"text":"\"_meta\":{}"}],"_meta":{` + tp + `}}`},
		{"no _meta, whitespace", "{\"a\":1 }\n", `{"a":1,"_meta":{` + tp + "}}\n"},
		{"empty object", `{}`, `{"_meta":{` + tp + `}}`},
		{"editor's traceparent replaced", `{"a":1,"_meta":{"tracestate":"x=1","traceparent":"00-11111111111111111111111111111111-2222222222222222-01","baggage":"k=v"},"b":2}`,
			`{"a":1,"_meta":{"tracestate":"x=1",` + tp + `,"baggage":"k=v"},"b":2}`},
		{"_meta without traceparent", `{"_meta": {"baggage":"k=v"},"a":1}`, `{"_meta": {` + tp + `,"baggage":"k=v"},"a":1}`},
		{"empty _meta", `{"_meta":{ },"a":1}`, `{"_meta":{` + tp + ` },"a":1}`},
		{"_meta null", `{"_meta":null,"a":1}`, `{"_meta":{` + tp + `},"a":1}`},
		{"traceparent twice", `{"_meta":{"traceparent":"x","traceparent":"y"}}`, `{"_meta":{` + tp + `,` + tp + `}}`},
		{"params null", `null`, `null`},
		{"not an object", `[1]`, `[1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(Inject(ctx, json.RawMessage(tc.in))); got != tc.want {
				t.Errorf("Inject(%s)\n = %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
	if got := string(Inject(context.Background(), json.RawMessage(`{"a":1}`))); got != `{"a":1}` {
		t.Errorf("without a span: %s", got)
	}
}

// TestQueueConcurrentEnds: spans ended from many goroutines while the
// queue exports (full batches and ticks) are each exported once, none
// lost; under -race, OnEnd never writes where an export reads.
func TestQueueConcurrentEnds(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tel, err := Setup(t.Context(), config.Telemetry{Enabled: true}, Options{Getenv: func(string) string { return "" }, SpanExporter: spans,
		MetricReader: sdkmetric.NewManualReader(), LogExporter: &memLogs{}, BatchInterval: time.Millisecond, QueueSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	// Bursts with pauses: exports of full batches, of partial ones, and
	// ticks that find nothing, each followed by more ends.
	const workers, rounds, each = 8, 30, 100
	for range rounds {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					_, s := tel.Tracer.Start(context.Background(), "s")
					s.End()
				}
			})
		}
		wg.Wait()
		time.Sleep(3 * time.Millisecond)
	}
	defer tel.Shutdown(context.Background())
	if err := tel.tp.ForceFlush(t.Context()); err != nil { // (the in-memory exporter's Shutdown forgets)
		t.Fatal(err)
	}
	seen := map[trace.SpanID]bool{}
	for _, s := range spans.GetSpans() {
		if seen[s.SpanContext.SpanID()] {
			t.Fatalf("span %s exported twice", s.SpanContext.SpanID())
		}
		seen[s.SpanContext.SpanID()] = true
	}
	if spansDropped, _, _ := tel.Dropped(); len(seen) != workers*rounds*each || spansDropped != 0 {
		t.Errorf("exported %d spans, dropped %d; want %d and 0", len(seen), spansDropped, workers*rounds*each)
	}
}
