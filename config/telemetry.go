package config

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
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
	// Lock (org layer only): the org's block is the whole setting; the
	// user's telemetry: block and the OTEL_* variables that choose whether,
	// where and what is exported are ignored, each with a warning
	// (MergeTelemetry, telemetry.Setup).
	Lock bool
	// Set are the keys the block writes, with the position of each value:
	// a key left out is taken from a lower source (MergeTelemetry).
	Set map[string]Pos
	Pos Pos
}

// TelemetryKeys are the keys of a telemetry: block, in the order check
// shows them; the org's may also have "lock".
var TelemetryKeys = []string{"enabled", "endpoint", "protocol", "headers", "sampler", "sampler_arg", "service_name", "export_prompts"}

var orgTelemetryKeys = append(slices.Clone(TelemetryKeys), "lock")

// ParseOrgTelemetry parses the telemetry: block n of an org policy file
// (DESIGN §6): the user's keys, parsed by the same code, plus lock. ${NAME}
// is not expanded there (the user's environment would set the org's
// values) and is an error. Errors carry file:line:col.
func ParseOrgTelemetry(file string, n *yaml.Node) (Telemetry, error) {
	p := &parser{file: file, org: true}
	t := p.telemetry(n)
	return t, p.err()
}

// Samplers are the OTEL_TRACES_SAMPLER values the router understands.
var Samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func (p *parser) telemetry(n *yaml.Node) Telemetry {
	t := Telemetry{Pos: p.pos(n)}
	f := p.fields("telemetry", n, orgTelemetryKeys)
	if v := f["lock"]; v != nil && !p.org {
		p.errorf(v, "telemetry.lock", "only the org layer (a policy directory file) can lock telemetry")
		delete(f, "lock")
	}
	if len(f) > 0 {
		t.Set = make(map[string]Pos, len(f))
		for k, v := range f {
			t.Set[k] = p.pos(v)
		}
	}
	if v := f["lock"]; v != nil {
		t.Lock = p.boolean("telemetry.lock", v)
	}
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

// err joins the errors found, in file order.
func (p *parser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(p.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
	})
	errs := make([]error, len(p.errs))
	for i, e := range p.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Source is where a telemetry key's value comes from.
type Source struct {
	Pos Pos
	Org bool // an org policy file; else the user's config
}

// EffectiveTelemetry is the telemetry setting in force: the org's blocks
// and the user's, merged (MergeTelemetry). A key in neither is left to the
// OTEL_* variables, then the defaults (telemetry.Resolve), unless Lock.
type EffectiveTelemetry struct {
	// Telemetry holds the merged values; Lock says the org locked them.
	Telemetry
	// LockPos is where the org set lock: true.
	LockPos Pos
	// From says where each key set came from.
	From map[string]Source
	// Ignored are warnings, one for each key of the user's block a lock
	// overrides, naming its file:line:col.
	Ignored []string
}

// EffectiveTelemetry merges the org's telemetry blocks and the user's.
func (c *Config) EffectiveTelemetry() EffectiveTelemetry {
	return MergeTelemetry(c.OrgTelemetry, c.Telemetry)
}

// MergeTelemetry: the org's keys are defaults the user's block overrides
// key by key (headers as a whole), unless an org block sets lock: true;
// then the user's block is ignored, each of its keys with a warning.
// Between org files, a later file (name order) overrides an earlier one's
// key, and any file's lock: true locks.
func MergeTelemetry(org []Telemetry, user Telemetry) EffectiveTelemetry {
	e := EffectiveTelemetry{From: map[string]Source{}}
	e.Pos = user.Pos
	for _, o := range org {
		if o.Lock && !e.Lock {
			e.Lock, e.LockPos = true, o.Set["lock"]
		}
		for _, k := range TelemetryKeys {
			if pos, ok := o.Set[k]; ok {
				e.set(k, o)
				e.From[k] = Source{Pos: pos, Org: true}
			}
		}
	}
	for _, k := range TelemetryKeys {
		pos, ok := user.Set[k]
		switch {
		case !ok:
		case e.Lock:
			e.Ignored = append(e.Ignored, fmt.Sprintf("%s: telemetry.%s is ignored: the org locks telemetry (%s)", pos, k, e.LockPos))
		default:
			e.set(k, user)
			e.From[k] = Source{Pos: pos}
		}
	}
	e.Set = make(map[string]Pos, len(e.From))
	for k, src := range e.From {
		e.Set[k] = src.Pos
	}
	return e
}

// set copies key k's value from o.
func (e *EffectiveTelemetry) set(k string, o Telemetry) {
	switch k {
	case "enabled":
		e.Enabled = o.Enabled
	case "endpoint":
		e.Endpoint = o.Endpoint
	case "protocol":
		e.Protocol = o.Protocol
	case "headers":
		e.Headers = o.Headers
	case "sampler":
		e.Sampler = o.Sampler
	case "sampler_arg":
		e.SamplerArg = o.SamplerArg
	case "service_name":
		e.ServiceName = o.ServiceName
	case "export_prompts":
		e.ExportPrompts = o.ExportPrompts
	}
}

// fingerprint is what Keys hashes: the values in force, which keys set
// them and from which layer (a key set takes precedence over the OTEL_*
// variables), and the lock; not where they are written.
func (e EffectiveTelemetry) fingerprint() any {
	t := e.Telemetry
	t.Pos, t.Set = Pos{}, nil
	from := map[string]bool{}
	for k, src := range e.From {
		from[k] = src.Org
	}
	return []any{t, from}
}
