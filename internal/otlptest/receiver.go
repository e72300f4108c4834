// Package otlptest is a loopback OTLP/gRPC receiver for tests. It decodes
// what it receives with the OpenTelemetry Collector's pdata, the same code
// a real collector runs, so that a test checks real OTLP, not what a
// hand-rolled parser believes it is.
package otlptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
)

// Receiver accepts OTLP traces, metrics and logs on 127.0.0.1, over gRPC
// and over HTTP (protobuf), on two ports.
type Receiver struct {
	// Endpoint is its gRPC URL, HTTPEndpoint its OTLP/HTTP base URL, for
	// telemetry.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint     string
	HTTPEndpoint string

	mu      sync.Mutex
	traces  []ptrace.Traces
	metrics []pmetric.Metrics
	logs    []plog.Logs
	changed chan struct{}
	discard bool
	// counted are what Discard dropped: spans, points, log records.
	counted [3]int
}

// Start starts a receiver, stopped when the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r, stop, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return r
}

// Listen starts a receiver outside a test (the benchmark); stop stops it.
func Listen() (r *Receiver, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	r = &Receiver{Endpoint: "http://" + ln.Addr().String(), changed: make(chan struct{})}
	srv := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(srv, &traceServer{r: r})
	pmetricotlp.RegisterGRPCServer(srv, &metricServer{r: r})
	plogotlp.RegisterGRPCServer(srv, &logServer{r: r})
	go srv.Serve(ln)
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	r.HTTPEndpoint = "http://" + hln.Addr().String()
	hs := &http.Server{Handler: r.httpHandler()}
	go hs.Serve(hln)
	return r, func() { srv.Stop(); hs.Close() }, nil
}

// httpHandler serves OTLP/HTTP with protobuf bodies (the /v1/SIGNAL
// paths), decoded by the same servers as gRPC.
func (r *Receiver) httpHandler() http.Handler {
	type request interface{ UnmarshalProto([]byte) error }
	type response interface{ MarshalProto() ([]byte, error) }
	handle := func(newReq func() request, export func(request) (response, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, hr *http.Request) {
			body, err := io.ReadAll(hr.Body)
			req := newReq()
			if err == nil {
				err = req.UnmarshalProto(body)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			res, err := export(req)
			var out []byte
			if err == nil {
				out, err = res.MarshalProto()
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.Write(out)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", handle(func() request { return ptraceotlp.NewExportRequest() }, func(q request) (response, error) {
		return (&traceServer{r: r}).Export(context.Background(), q.(ptraceotlp.ExportRequest))
	}))
	mux.HandleFunc("POST /v1/metrics", handle(func() request { return pmetricotlp.NewExportRequest() }, func(q request) (response, error) {
		return (&metricServer{r: r}).Export(context.Background(), q.(pmetricotlp.ExportRequest))
	}))
	mux.HandleFunc("POST /v1/logs", handle(func() request { return plogotlp.NewExportRequest() }, func(q request) (response, error) {
		return (&logServer{r: r}).Export(context.Background(), q.(plogotlp.ExportRequest))
	}))
	return mux
}

// Counts are how many spans, metric data points and log records arrived.
func (r *Receiver) Counts() (spans, points, logs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	spans, points, logs = r.counted[0], r.counted[1], r.counted[2]
	for _, td := range r.traces {
		spans += td.SpanCount()
	}
	for _, md := range r.metrics {
		points += md.DataPointCount()
	}
	for _, ld := range r.logs {
		logs += ld.LogRecordCount()
	}
	return spans, points, logs
}

// Discard makes the receiver count what arrives without keeping it (a
// long benchmark).
func (r *Receiver) Discard() {
	r.mu.Lock()
	r.discard = true
	r.mu.Unlock()
}

func (r *Receiver) add(f func()) {
	r.mu.Lock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Wait waits until ok holds of what was received, or ctx ends (false).
func (r *Receiver) Wait(ctx context.Context, ok func(traces []ptrace.Traces, metrics []pmetric.Metrics, logs []plog.Logs) bool) bool {
	for {
		r.mu.Lock()
		done := ok(r.traces, r.metrics, r.logs)
		ch := r.changed
		r.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

type traceServer struct {
	ptraceotlp.UnimplementedGRPCServer
	r *Receiver
}

func (s *traceServer) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	td := ptrace.NewTraces()
	req.Traces().CopyTo(td)
	s.r.add(func() {
		if s.r.discard {
			s.r.counted[0] += td.SpanCount()
			return
		}
		s.r.traces = append(s.r.traces, td)
	})
	return ptraceotlp.NewExportResponse(), nil
}

type metricServer struct {
	pmetricotlp.UnimplementedGRPCServer
	r *Receiver
}

func (s *metricServer) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	md := pmetric.NewMetrics()
	req.Metrics().CopyTo(md)
	s.r.add(func() {
		if s.r.discard {
			s.r.counted[1] += md.DataPointCount()
			return
		}
		s.r.metrics = append(s.r.metrics, md)
	})
	return pmetricotlp.NewExportResponse(), nil
}

type logServer struct {
	plogotlp.UnimplementedGRPCServer
	r *Receiver
}

func (s *logServer) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	ld := plog.NewLogs()
	req.Logs().CopyTo(ld)
	s.r.add(func() {
		if s.r.discard {
			s.r.counted[2] += ld.LogRecordCount()
			return
		}
		s.r.logs = append(s.r.logs, ld)
	})
	return plogotlp.NewExportResponse(), nil
}

// Hanging accepts connections on 127.0.0.1 and never answers: a collector
// that is up but stuck. Its Endpoint is a URL.
func Hanging(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// Refusing is a loopback address where nothing listens: a collector that
// is down.
func Refusing(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// Garbage answers whatever it is sent with an HTTP response whose body is
// not OTLP and runs past its length (garbage to gRPC too): a collector
// port that returns garbage. Its Endpoint is a URL.
func Garbage(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.Read(buf)
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 9\r\n\r\n\xff\xfe garbage\x00\x01\x02garbage garbage"))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String()
}
