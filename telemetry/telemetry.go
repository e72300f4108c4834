// Package telemetry owns the router's OpenTelemetry (issue 17): traces,
// metrics and logs exported over OTLP (gRPC or HTTP), and the W3C trace
// context that the editor and the agents carry in `_meta`.
//
// It is off by default. Off, Setup returns a nil *Telemetry: every method
// is a no-op on it, no provider, queue or exporter goroutine exists, and
// the hot path pays one nil check.
//
// On, the collector being down or slow never holds the router up: spans
// wait in a bounded queue (dropped and counted when it is full), every
// export is bounded by a timeout, failures are logged when they start and
// when exporting works again (not at every batch), and Shutdown flushes
// within the time its context allows.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/acp-router/acp-router/config"
)

// Scope is the instrumentation scope of everything the router emits.
const Scope = "github.com/acp-router/acp-router"

// Options configure Setup; zero values take the defaults in brackets.
type Options struct {
	Logger  hclog.Logger
	Version string
	// Getenv reads the OTEL_* variables [os.Getenv].
	Getenv func(string) string
	// ExportTimeout bounds one export, retries included
	// [OTEL_EXPORTER_OTLP_TIMEOUT, else 10s].
	ExportTimeout time.Duration
	// QueueSize bounds the spans and log records waiting for export [2048].
	QueueSize int
	// BatchInterval: how long a span may wait for its batch [1s].
	BatchInterval time.Duration
	// MetricInterval: how often metrics are exported
	// [OTEL_METRIC_EXPORT_INTERVAL, else 60s].
	MetricInterval time.Duration

	// Tests replace the OTLP exporters with these (in-memory ones).
	SpanExporter sdktrace.SpanExporter
	MetricReader sdkmetric.Reader
	LogExporter  sdklog.Exporter
}

// Telemetry is the running OpenTelemetry setup; nil when it is off.
type Telemetry struct {
	Tracer trace.Tracer
	Meter  metric.Meter
	Logger otellog.Logger

	log           hclog.Logger
	exportPrompts bool
	tp            *sdktrace.TracerProvider
	mp            *sdkmetric.MeterProvider
	lp            *sdklog.LoggerProvider
	spans         *spanQueue
	drops         *drops
	m             instruments
	labels        labels

	shutdownOnce sync.Once
	shutdownErr  error
}

// Settings are what the config and the environment resolve to.
type Settings struct {
	Protocol    map[string]string // by signal: "grpc" or "http/protobuf"
	Endpoint    string            // from the config; "" leaves the exporters' env and defaults
	Headers     map[string]string
	Sampler     sdktrace.Sampler
	SamplerName string
	ServiceName string // "" leaves OTEL_SERVICE_NAME, else "acp-router"
	getenv      func(string) string
}

// endpoint is the URL signal sig is exported to when the exporter must be
// told: the config's endpoint, or, when neither it nor an
// OTEL_EXPORTER_OTLP_(SIG_)ENDPOINT variable says, the spec's default
// (http://localhost:4317 for gRPC, :4318 for HTTP) — plaintext, as a local
// collector listens; the Go exporters would try TLS on localhost:4317.
// "" leaves the variables to the exporter.
func (s *Settings) endpoint(sig string) string {
	if s.Endpoint != "" {
		return s.Endpoint
	}
	if s.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || s.getenv("OTEL_EXPORTER_OTLP_"+strings.ToUpper(sig)+"_ENDPOINT") != "" {
		return ""
	}
	if s.Protocol[sig] == "grpc" {
		return "http://localhost:4317"
	}
	return "http://localhost:4318"
}

// Signals, as OTEL_EXPORTER_OTLP_<SIGNAL>_* names them.
var signals = []string{"traces", "metrics", "logs"}

// LockedEnv are the OTEL_* variables an org's locked telemetry: block
// overrides (config.Telemetry.Lock): those that say whether, where, how
// and how often the router exports, and what it samples. The TLS
// variables, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are still read.
var LockedEnv = func() []string {
	out := []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_METRIC_EXPORT_INTERVAL"}
	for _, sig := range []string{"", "TRACES_", "METRICS_", "LOGS_"} {
		for _, k := range []string{"ENDPOINT", "HEADERS", "PROTOCOL", "TIMEOUT"} {
			out = append(out, "OTEL_EXPORTER_OTLP_"+sig+k)
		}
	}
	return out
}()

// IgnoredEnv are the warnings for the LockedEnv variables that are set
// while the org locks telemetry: they are ignored. None when not locked.
func IgnoredEnv(cfg config.Telemetry, lockPos config.Pos, getenv func(string) string) []string {
	if !cfg.Lock {
		return nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []string
	for _, name := range LockedEnv {
		if getenv(name) != "" {
			out = append(out, fmt.Sprintf("%s is ignored: the org locks telemetry (%s)", name, lockPos))
		}
	}
	return out
}

// envFor is the environment as cfg lets it count: without the LockedEnv
// variables when the org locks telemetry.
func envFor(cfg config.Telemetry, getenv func(string) string) func(string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if !cfg.Lock {
		return getenv
	}
	return func(name string) string {
		if slices.Contains(LockedEnv, name) {
			return ""
		}
		return getenv(name)
	}
}

// Resolve applies the precedence the README documents: a key set in the
// telemetry: block, then the OTEL_* variable, then the default. An invalid
// OTEL_* value is an error naming the variable. A locked block (the org's)
// ignores the LockedEnv variables, and the endpoint and headers are then
// always given to the exporters, which would read the variables themselves.
func Resolve(cfg config.Telemetry, getenv func(string) string) (*Settings, error) {
	getenv = envFor(cfg, getenv)
	s := &Settings{Protocol: map[string]string{}, Endpoint: cfg.Endpoint, Headers: cfg.Headers, ServiceName: cfg.ServiceName, getenv: getenv}
	if cfg.Lock && s.Headers == nil {
		s.Headers = map[string]string{} // replaces OTEL_EXPORTER_OTLP_HEADERS
	}
	general := cfg.Protocol
	if general == "" {
		p, err := protocolEnv("OTEL_EXPORTER_OTLP_PROTOCOL", getenv)
		if err != nil {
			return nil, err
		}
		general = p
	}
	for _, sig := range signals {
		p := cfg.Protocol
		if p == "" {
			v, err := protocolEnv("OTEL_EXPORTER_OTLP_"+strings.ToUpper(sig)+"_PROTOCOL", getenv)
			if err != nil {
				return nil, err
			}
			p = v
		}
		if p == "" {
			p = general
		}
		if p == "" {
			p = "grpc"
		}
		s.Protocol[sig] = p
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"} {
		if v := getenv(name); v != "" {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("telemetry: %s: expected an http:// or https:// URL, got %q", name, v)
			}
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
		"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "OTEL_METRIC_EXPORT_INTERVAL"} {
		if v := getenv(name); v != "" {
			if n, err := strconv.Atoi(v); err != nil || n <= 0 {
				return nil, fmt.Errorf("telemetry: %s: expected a positive number of milliseconds, got %q", name, v)
			}
		}
	}
	name, arg := cfg.Sampler, cfg.SamplerArg
	if name == "" {
		name, arg = getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG")
		if name == "" {
			name = "parentbased_always_on"
		}
		if !validSampler(name) {
			return nil, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER: must be one of %s, got %q", strings.Join(config.Samplers, ", "), name)
		}
	}
	ratio := 1.0
	if arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER_ARG: expected a ratio between 0 and 1, got %q", arg)
		}
		ratio = r
	}
	s.SamplerName = name
	switch name {
	case "always_on":
		s.Sampler = sdktrace.AlwaysSample()
	case "always_off":
		s.Sampler = sdktrace.NeverSample()
	case "traceidratio":
		s.Sampler = sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		s.Sampler = sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		s.Sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	default:
		s.Sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	return s, nil
}

func validSampler(name string) bool {
	for _, s := range config.Samplers {
		if s == name {
			return true
		}
	}
	return false
}

func protocolEnv(name string, getenv func(string) string) (string, error) {
	switch v := getenv(name); v {
	case "", "grpc", "http/protobuf":
		return v, nil
	case "http/json":
		return "", fmt.Errorf("telemetry: %s: http/json is not supported; use grpc or http/protobuf", name)
	default:
		return "", fmt.Errorf("telemetry: %s: must be grpc or http/protobuf, got %q", name, v)
	}
}

// Disabled: the configuration leaves telemetry off (not enabled, or
// OTEL_SDK_DISABLED=true, which wins over the config file unless the org
// locks telemetry).
func Disabled(cfg config.Telemetry, getenv func(string) string) (bool, error) {
	getenv = envFor(cfg, getenv)
	switch v := strings.ToLower(getenv("OTEL_SDK_DISABLED")); v {
	case "true":
		return true, nil
	case "", "false":
	default:
		return false, fmt.Errorf("telemetry: OTEL_SDK_DISABLED: expected true or false, got %q", v)
	}
	return !cfg.Enabled, nil
}

// Setup starts telemetry as cfg and the environment say; nil (and no
// error) when it is off. Shutdown flushes and stops it.
func Setup(ctx context.Context, cfg config.Telemetry, opts Options) (*Telemetry, error) {
	opts.Getenv = envFor(cfg, opts.Getenv)
	off, err := Disabled(cfg, opts.Getenv)
	if err != nil || off {
		return nil, err
	}
	set, err := Resolve(cfg, opts.Getenv)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.ExportTimeout <= 0 {
		opts.ExportTimeout = 10 * time.Second
		if ms, err := strconv.Atoi(opts.Getenv("OTEL_EXPORTER_OTLP_TIMEOUT")); err == nil && ms > 0 {
			opts.ExportTimeout = time.Duration(ms) * time.Millisecond
		}
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 2048
	}
	if opts.BatchInterval <= 0 {
		opts.BatchInterval = time.Second
	}
	if opts.MetricInterval <= 0 {
		opts.MetricInterval = 60 * time.Second
		if ms, err := strconv.Atoi(opts.Getenv("OTEL_METRIC_EXPORT_INTERVAL")); err == nil && ms > 0 {
			opts.MetricInterval = time.Duration(ms) * time.Millisecond
		}
	}
	log := opts.Logger
	res, err := newResource(ctx, set, opts)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{log: log, exportPrompts: cfg.ExportPrompts, drops: &drops{log: log}}

	se := opts.SpanExporter
	if se == nil {
		if se, err = spanExporter(ctx, set, opts.ExportTimeout); err != nil {
			return nil, err
		}
	}
	t.spans = newSpanQueue(countingSpans{se, t.drops}, opts.QueueSize, opts.BatchInterval, opts.ExportTimeout, t.drops)
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(set.Sampler), sdktrace.WithSpanProcessor(t.spans))

	reader := opts.MetricReader
	if reader == nil {
		me, err := metricExporter(ctx, set, opts.ExportTimeout)
		if err != nil {
			t.shutdownProviders(ctx)
			return nil, err
		}
		reader = sdkmetric.NewPeriodicReader(countingMetrics{me, t.drops}, sdkmetric.WithInterval(opts.MetricInterval), sdkmetric.WithTimeout(opts.ExportTimeout))
	}
	t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))

	le := opts.LogExporter
	if le == nil {
		if le, err = logExporter(ctx, set, opts.ExportTimeout); err != nil {
			t.shutdownProviders(ctx)
			return nil, err
		}
	}
	t.lp = sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(countingLogs{le, t.drops},
		sdklog.WithMaxQueueSize(opts.QueueSize), sdklog.WithExportTimeout(opts.ExportTimeout), sdklog.WithExportInterval(opts.BatchInterval))))

	t.Tracer = t.tp.Tracer(Scope, trace.WithInstrumentationVersion(opts.Version))
	t.Meter = t.mp.Meter(Scope, metric.WithInstrumentationVersion(opts.Version))
	t.Logger = t.lp.Logger(Scope, otellog.WithInstrumentationVersion(opts.Version))
	if err := t.m.init(t.Meter, t.drops); err != nil {
		t.shutdownProviders(ctx)
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	// The SDK reports export errors through the global handler; ours are
	// counted and logged by the exporters' wrappers already.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Debug("opentelemetry", "error", err) }))
	log.Info("telemetry on", "traces", set.Protocol["traces"], "metrics", set.Protocol["metrics"], "logs", set.Protocol["logs"],
		"endpoint", endpointForLog(set, opts.Getenv), "sampler", set.SamplerName)
	return t, nil
}

func endpointForLog(set *Settings, getenv func(string) string) string {
	if set.Endpoint != "" {
		return set.Endpoint
	}
	if v := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		return v
	}
	return set.endpoint("traces") + " (or OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT)"
}

func newResource(ctx context.Context, set *Settings, opts Options) (*resource.Resource, error) {
	// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME are read through
	// opts.Getenv, as the SDK reads them, so that a malformed value is an
	// error at start-up that names the variable.
	base := resource.NewSchemaless(semconv.ServiceName("acp-router"), semconv.ServiceVersion(opts.Version))
	var kvs []attribute.KeyValue
	if v := opts.Getenv("OTEL_RESOURCE_ATTRIBUTES"); v != "" {
		for _, pair := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("telemetry: OTEL_RESOURCE_ATTRIBUTES: expected key=value pairs separated by commas, got %q", pair)
			}
			uv, err := url.PathUnescape(strings.TrimSpace(val))
			if err != nil {
				return nil, fmt.Errorf("telemetry: OTEL_RESOURCE_ATTRIBUTES: %q: %w", pair, err)
			}
			kvs = append(kvs, attribute.String(k, uv))
		}
	}
	if v := strings.TrimSpace(opts.Getenv("OTEL_SERVICE_NAME")); v != "" {
		kvs = append(kvs, semconv.ServiceName(v))
	}
	if set.ServiceName != "" {
		kvs = append(kvs, semconv.ServiceName(set.ServiceName))
	}
	extra, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(kvs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return resource.Merge(base, extra)
}

// urlFor is the config's endpoint with the signal's OTLP/HTTP path, as
// the OTLP spec builds it from OTEL_EXPORTER_OTLP_ENDPOINT.
func urlFor(endpoint, sig string) string {
	return strings.TrimRight(endpoint, "/") + "/v1/" + sig
}

// refusedNotRetried makes a gRPC export to a collector that refuses
// connections fail at once, as it does over HTTP (a refused dial is not a
// temporary error there), instead of being retried until its timeout: the
// exporters retry every Unavailable, and the last flush at exit then held
// the router's exit for the whole flush (5s; issue 27). A call that failed
// because the channel cannot connect leaves it not READY (in
// TRANSIENT_FAILURE, or already CONNECTING again after its backoff: the
// state moves on by itself, so READY is the only state that says a
// connection exists); an Unavailable the collector itself answers (it is
// overloaded) comes over a READY channel and is still retried. What a
// failed export loses is counted and logged like any other failure, and
// the next export dials again.
var refusedNotRetried = grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if status.Code(err) == codes.Unavailable && cc.GetState() != connectivity.Ready {
		// A plain error: its gRPC code is Unknown, which no exporter retries.
		return fmt.Errorf("telemetry: the collector does not accept connections: %s", status.Convert(err).Message())
	}
	return err
})

func spanExporter(ctx context.Context, set *Settings, timeout time.Duration) (sdktrace.SpanExporter, error) {
	if set.Protocol["traces"] == "grpc" {
		o := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(timeout), otlptracegrpc.WithDialOption(refusedNotRetried)}
		if u := set.endpoint("traces"); u != "" {
			o = append(o, otlptracegrpc.WithEndpointURL(u))
		}
		if set.Headers != nil {
			o = append(o, otlptracegrpc.WithHeaders(set.Headers))
		}
		return otlptracegrpc.New(ctx, o...)
	}
	o := []otlptracehttp.Option{otlptracehttp.WithTimeout(timeout)}
	if u := set.endpoint("traces"); u != "" {
		o = append(o, otlptracehttp.WithEndpointURL(urlFor(u, "traces")))
	}
	if set.Headers != nil {
		o = append(o, otlptracehttp.WithHeaders(set.Headers))
	}
	return otlptracehttp.New(ctx, o...)
}

func metricExporter(ctx context.Context, set *Settings, timeout time.Duration) (sdkmetric.Exporter, error) {
	if set.Protocol["metrics"] == "grpc" {
		o := []otlpmetricgrpc.Option{otlpmetricgrpc.WithTimeout(timeout), otlpmetricgrpc.WithDialOption(refusedNotRetried)}
		if u := set.endpoint("metrics"); u != "" {
			o = append(o, otlpmetricgrpc.WithEndpointURL(u))
		}
		if set.Headers != nil {
			o = append(o, otlpmetricgrpc.WithHeaders(set.Headers))
		}
		return otlpmetricgrpc.New(ctx, o...)
	}
	o := []otlpmetrichttp.Option{otlpmetrichttp.WithTimeout(timeout)}
	if u := set.endpoint("metrics"); u != "" {
		o = append(o, otlpmetrichttp.WithEndpointURL(urlFor(u, "metrics")))
	}
	if set.Headers != nil {
		o = append(o, otlpmetrichttp.WithHeaders(set.Headers))
	}
	return otlpmetrichttp.New(ctx, o...)
}

func logExporter(ctx context.Context, set *Settings, timeout time.Duration) (sdklog.Exporter, error) {
	if set.Protocol["logs"] == "grpc" {
		o := []otlploggrpc.Option{otlploggrpc.WithTimeout(timeout), otlploggrpc.WithDialOption(refusedNotRetried)}
		if u := set.endpoint("logs"); u != "" {
			o = append(o, otlploggrpc.WithEndpointURL(u))
		}
		if set.Headers != nil {
			o = append(o, otlploggrpc.WithHeaders(set.Headers))
		}
		return otlploggrpc.New(ctx, o...)
	}
	o := []otlploghttp.Option{otlploghttp.WithTimeout(timeout)}
	if u := set.endpoint("logs"); u != "" {
		o = append(o, otlploghttp.WithEndpointURL(urlFor(u, "logs")))
	}
	if set.Headers != nil {
		o = append(o, otlploghttp.WithHeaders(set.Headers))
	}
	return otlploghttp.New(ctx, o...)
}

// Enabled: telemetry is on.
func (t *Telemetry) Enabled() bool { return t != nil }

// Shutdown flushes what is queued and stops the exporters, within ctx's
// deadline: a collector that does not answer costs at most that long.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.shutdownOnce.Do(func() {
		t.shutdownErr = t.shutdownProviders(ctx)
		if n := t.drops.total(); n > 0 {
			t.log.Warn("telemetry dropped data the collector did not take", "spans", t.drops.n[sigTraces].Load(),
				"metricExports", t.drops.n[sigMetrics].Load(), "logRecords", t.drops.n[sigLogs].Load())
		}
	})
	return t.shutdownErr
}

func (t *Telemetry) shutdownProviders(ctx context.Context) error {
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	if t.lp != nil {
		errs = append(errs, t.lp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// propagator reads and writes traceparent and tracestate (W3C Trace
// Context); baggage is never read: the router forwards it as it came.
var propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Dropped is how many spans, metric exports and log records were lost
// (queue full, or the collector refused, failed or timed out).
func (t *Telemetry) Dropped() (spans, metricExports, logRecords int64) {
	if t == nil {
		return 0, 0, 0
	}
	return t.drops.n[sigTraces].Load(), t.drops.n[sigMetrics].Load(), t.drops.n[sigLogs].Load()
}

// drops counts what was lost per signal and logs a failure when it starts
// and when exporting works again.
type drops struct {
	log     hclog.Logger
	n       [3]atomic.Int64
	failing [3]atomic.Bool
}

const (
	sigTraces = iota
	sigMetrics
	sigLogs
)

func (d *drops) lost(sig int, n int, err error) {
	d.n[sig].Add(int64(n))
	if d.failing[sig].CompareAndSwap(false, true) {
		d.log.Warn("telemetry export failing; dropping until it works again", "signal", signals[sig], "error", err)
	}
}

func (d *drops) ok(sig int) {
	if d.failing[sig].Load() && d.failing[sig].CompareAndSwap(true, false) {
		d.log.Info("telemetry export works again", "signal", signals[sig], "droppedSoFar", d.n[sig].Load())
	}
}

func (d *drops) total() int64 { return d.n[0].Load() + d.n[1].Load() + d.n[2].Load() }
