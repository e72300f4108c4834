package router

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/telemetry"
)

// discardLogs is a log exporter that keeps nothing.
type discardLogs struct{}

func (discardLogs) Export(context.Context, []sdklog.Record) error { return nil }
func (discardLogs) Shutdown(context.Context) error                { return nil }
func (discardLogs) ForceFlush(context.Context) error              { return nil }

// TestTelemetryTurn runs turns with decided agent requests through an
// in-process router with telemetry on (run it with -race: the hooks read
// the turn from the agent's read path while the turn goes on), and checks
// the spans' parents: turn under the editor's traceparent, the agent call
// under the turn, the agent's request under the call, its decision under
// the request.
func TestTelemetryTurn(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tel := testTelemetry(t, spans, sdkmetric.NewManualReader())
	e := newOrderRouterTel(t, &slowFS{prefix: "/never/"}, time.Minute, tel)
	var res struct{ SessionID string }
	json.Unmarshal(e.mustCall("session/new", map[string]any{"cwd": "/b", "mcpServers": []any{}}), &res)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for range 3 {
		e.mustCall("session/prompt", map[string]any{"sessionId": res.SessionID,
			"prompt": []map[string]string{{"type": "text", "text": "say a\nread /b/y\nsay b\nwait\nsay c"}},
			"_meta":  map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// The turn's span ends after its answer is written, so the last one
	// may be exported after the answer arrived: wait for every span.
	var got tracetest.SpanStubs
	var byID map[string]tracetest.SpanStub
	var count map[string]int
	for {
		got = spans.GetSpans()
		byID, count = map[string]tracetest.SpanStub{}, map[string]int{}
		for _, s := range got {
			byID[s.SpanContext.SpanID().String()] = s
			count[s.Name]++
		}
		if count["acp-router turn"] >= 3 && count["session/prompt"] >= 3 && count["fs/read_text_file"] >= 3 && count["policy decision"] >= 3 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if count["acp-router turn"] != 3 || count["session/prompt"] != 3 || count["fs/read_text_file"] != 3 || count["policy decision"] != 3 {
		t.Fatalf("spans by name %v", count)
	}
	for _, s := range got {
		parent := byID[s.Parent.SpanID().String()]
		want := map[string]string{"session/prompt": "acp-router turn", "fs/read_text_file": "session/prompt", "policy decision": "fs/read_text_file"}[s.Name]
		switch {
		case s.Name == "acp-router turn":
			if s.Parent.SpanID().String() != parentID || s.SpanContext.TraceID().String() != traceID {
				t.Errorf("turn parent %v", s.Parent)
			}
			var mode string
			for _, kv := range s.Attributes {
				if kv.Key == telemetry.KeyMode {
					mode = kv.Value.AsString()
				}
			}
			if mode != "default" { // the agent's mode (orderAgent's session/new)
				t.Errorf("turn span's %s = %q, want the agent's mode", telemetry.KeyMode, mode)
			}
		case want != "" && parent.Name != want:
			t.Errorf("%s's parent is %q, want %q", s.Name, parent.Name, want)
		}
	}
}

// TestTelemetryWriteQueueDepth: the write-queue gauge reports the bytes
// waiting for the editor (here: an editor that stopped reading while its
// agent says 256 KiB) and a point for each running agent, read at the
// metric export (a manual reader here).
func TestTelemetryWriteQueueDepth(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel := testTelemetry(t, tracetest.NewInMemoryExporter(), reader)
	e := newOrderRouterTel(t, &slowFS{prefix: "/never/"}, time.Minute, tel)
	var res struct{ SessionID string }
	json.Unmarshal(e.mustCall("session/new", map[string]any{"cwd": "/b", "mcpServers": []any{}}), &res)

	depth := func() (editor int64, agents map[string]int64) {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		agents = map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "acp_router.write_queue.bytes" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					peer, _ := dp.Attributes.Value(telemetry.KeyPeer)
					agent, _ := dp.Attributes.Value(telemetry.KeyAgent)
					switch peer.AsString() {
					case "editor":
						editor = dp.Value
					case "agent":
						agents[agent.AsString()] = dp.Value
					default:
						t.Errorf("a point with peer %q", peer.AsString())
					}
				}
			}
		}
		return editor, agents
	}
	// Idle once the writers wrote what session/new produced (an update
	// after the answer may still be on its way).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ed, agents := depth()
		if ed == 0 && len(agents) == 1 && agents["fake"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle: editor %d, agents %v; want 0 and {fake: 0}", ed, agents)
		}
	}

	const big = 256 << 10
	_, done := e.call("session/prompt", map[string]any{"sessionId": res.SessionID,
		"prompt": []map[string]string{{"type": "text", "text": "say a\nsay " + strings.Repeat("x", big) + "\nsay b"}}})
	e.mu.Lock() // the editor stops reading after its next message
	locked := true
	defer func() {
		if locked {
			e.mu.Unlock()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ed, _ := depth()
		if ed >= big {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the editor's queue holds %d bytes; want at least %d", ed, big)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.mu.Unlock()
	locked = false
	e.await("session/prompt", done)
	// Drained: what the turn's end writes after its answer (a notice, a
	// usage update) may still be on its way when the answer is read.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ed, _ := depth()
		if ed == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the turn the editor's queue holds %d bytes", ed)
		}
	}
}

// TestTelemetryAgentCalls: every request the router sends an agent besides
// session/prompt has a client span (acp.Peer.ObserveCalls): initialize,
// session/new under the traceparent of the editor's session/new, and
// session/set_mode, which this agent refuses, with its error code.
func TestTelemetryAgentCalls(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tel := testTelemetry(t, spans, sdkmetric.NewManualReader())
	e := newOrderRouterTel(t, &slowFS{prefix: "/never/"}, time.Minute, tel)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	var res struct{ SessionID string }
	json.Unmarshal(e.mustCall("session/new", map[string]any{"cwd": "/b", "mcpServers": []any{},
		"_meta": map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}}), &res)
	_, done := e.call("session/set_mode", map[string]any{"sessionId": res.SessionID, "modeId": "plan"})
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("session/set_mode was not answered")
	}

	byName := map[string]tracetest.SpanStub{}
	deadline := time.Now().Add(5 * time.Second)
	for len(byName) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		for _, s := range spans.GetSpans() {
			byName[s.Name] = s
		}
		delete(byName, "agent start")
	}
	attrs := func(s tracetest.SpanStub) map[string]string {
		m := map[string]string{}
		for _, kv := range s.Attributes {
			m[string(kv.Key)] = kv.Value.String()
		}
		return m
	}
	for _, tc := range []struct {
		name, code string
		parent     string // "" for a new trace
	}{
		{name: "initialize"},
		{name: "session/new", parent: parentID},
		{name: "session/set_mode", code: "-32601"},
	} {
		s, ok := byName[tc.name]
		if !ok {
			t.Errorf("no %s span (spans: %v)", tc.name, slices.Collect(maps.Keys(byName)))
			continue
		}
		a := attrs(s)
		if a["rpc.method"] != tc.name || a["acp.agent"] != "fake" || a["rpc.jsonrpc.error_code"] != tc.code {
			t.Errorf("%s: attributes %v", tc.name, a)
		}
		if s.SpanKind != trace.SpanKindClient {
			t.Errorf("%s: kind %v", tc.name, s.SpanKind)
		}
		if got := s.Parent.SpanID(); tc.parent != "" && (got.String() != tc.parent || s.SpanContext.TraceID().String() != traceID) {
			t.Errorf("%s: parent %s in trace %s; want %s in %s", tc.name, got, s.SpanContext.TraceID(), tc.parent, traceID)
		}
		if (s.Status.Code == codes.Error) != (tc.code != "") {
			t.Errorf("%s: status %v", tc.name, s.Status)
		}
	}
}

// testTelemetry is telemetry on, its spans to spans, its metrics read by
// reader, no OTEL_* variables, shut down at the end of the test.
func testTelemetry(t *testing.T, spans *tracetest.InMemoryExporter, reader sdkmetric.Reader) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.Setup(t.Context(), config.Telemetry{Enabled: true}, telemetry.Options{Getenv: func(string) string { return "" },
		SpanExporter: spans, MetricReader: reader, LogExporter: discardLogs{}, BatchInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	return tel
}
