package config

import (
	"net/url"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// Telemetry is the `telemetry:` block (issue 17): OpenTelemetry traces,
// metrics and logs over OTLP. Off by default. A key left out here is
// taken from the standard OTEL_* environment variables, then from the
// defaults (telemetry.Setup; README "Telemetry").
type Telemetry struct {
	Enabled bool
	// Endpoint is the collector's base URL (http://host:4317 for gRPC,
	// http://host:4318 for HTTP); "" leaves OTEL_EXPORTER_OTLP_ENDPOINT
	// or the exporter's default.
	Endpoint string
	// Protocol is "grpc" or "http/protobuf" ("http" is accepted for it);
	// "" leaves OTEL_EXPORTER_OTLP_PROTOCOL, else grpc.
	Protocol string
	// Headers are sent with every export (${ENV} expanded: tokens).
	Headers map[string]string
	// Sampler is an OTEL_TRACES_SAMPLER value; SamplerArg its argument
	// ("" for none).
	Sampler    string
	SamplerArg string
	// ServiceName overrides OTEL_SERVICE_NAME; default "acp-router".
	ServiceName string
	// ExportPrompts adds the prompt text to the turn span (off: never).
	ExportPrompts bool
	Pos           Pos
}

var telemetryKeys = []string{"enabled", "endpoint", "protocol", "headers", "sampler", "sampler_arg", "service_name", "export_prompts"}

// Samplers are the OTEL_TRACES_SAMPLER values the router understands.
var Samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func (p *parser) telemetry(n *yaml.Node) Telemetry {
	t := Telemetry{Pos: p.pos(n)}
	f := p.fields("telemetry", n, telemetryKeys)
	if v := f["enabled"]; v != nil {
		t.Enabled = p.boolean("telemetry.enabled", v)
	}
	if v := f["endpoint"]; v != nil {
		if s, ok := p.expanded("telemetry.endpoint", v); ok {
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.errorf(v, "telemetry.endpoint", "expected an http:// or https:// URL such as http://localhost:4317, got %q", s)
			}
			t.Endpoint = s
		}
	}
	if v := f["protocol"]; v != nil {
		t.Protocol = p.enum("telemetry.protocol", v, "grpc", "http", "http/protobuf")
		if t.Protocol == "http" {
			t.Protocol = "http/protobuf"
		}
	}
	if v := f["headers"]; v != nil {
		if pairs, ok := yamlpos.Mapping("telemetry.headers", v, p.errorf); ok {
			t.Headers = make(map[string]string, len(pairs))
			for _, kv := range pairs {
				t.Headers[kv.Key.Value], _ = p.expanded("telemetry.headers."+kv.Key.Value, kv.Val)
			}
		}
	}
	if v := f["sampler"]; v != nil {
		t.Sampler = p.enum("telemetry.sampler", v, Samplers...)
	}
	if v := f["sampler_arg"]; v != nil {
		s, _ := p.str("telemetry.sampler_arg", v)
		if r, err := strconv.ParseFloat(s, 64); err != nil || r < 0 || r > 1 {
			p.errorf(v, "telemetry.sampler_arg", "expected a ratio between 0 and 1, got %q", s)
		}
		t.SamplerArg = s
	}
	if v := f["service_name"]; v != nil {
		t.ServiceName, _ = p.str("telemetry.service_name", v)
	}
	if v := f["export_prompts"]; v != nil {
		t.ExportPrompts = p.boolean("telemetry.export_prompts", v)
	}
	return t
}
