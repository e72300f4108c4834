package telemetry

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/propagation"

	"github.com/acp-router/acp-router/acp"
)

// W3C bounds on what is read from _meta: a traceparent is 55 characters
// (version 00; later versions may append fields), a tracestate at most 32
// members of 256 characters. Anything longer is ignored, not parsed: the
// span it would have parented becomes a new root, and the editor gets no
// error (issue 17, bad input).
const (
	maxTraceparent = 256
	maxTracestate  = 32 * 257
)

var metaName = []string{"_meta"}
var traceNames = []string{"traceparent", "tracestate"}

// Extract returns ctx with the remote span context in params._meta
// (traceparent, tracestate), or ctx itself when there is none or it is
// malformed. baggage is not read.
func Extract(ctx context.Context, params json.RawMessage) context.Context {
	var meta [1]json.RawMessage
	if acp.Members(params, metaName, meta[:]) != nil || meta[0] == nil {
		return ctx
	}
	var v [2]json.RawMessage
	if acp.Members(meta[0], traceNames, v[:]) != nil || v[0] == nil {
		return ctx
	}
	c := propagation.MapCarrier{}
	for i, raw := range v {
		var s string
		if raw == nil || len(raw) > maxTracestate+2 || json.Unmarshal(raw, &s) != nil {
			continue
		}
		if i == 0 && len(s) > maxTraceparent {
			return ctx
		}
		c[traceNames[i]] = s
	}
	if c["traceparent"] == "" {
		return ctx
	}
	return propagator.Extract(ctx, c)
}

// Inject writes ctx's span context into params._meta.traceparent, every
// other byte of params kept: the editor's tracestate and baggage go on as
// they came (the router's span carries the editor's tracestate already).
// params without a valid span in ctx, or that are not an object, are
// returned as they are.
func Inject(ctx context.Context, params json.RawMessage) json.RawMessage {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	tp := c["traceparent"]
	if tp == "" || len(params) == 0 {
		return params
	}
	var meta [1]json.RawMessage
	if acp.Members(params, metaName, meta[:]) != nil {
		return params
	}
	m := meta[0]
	if m == nil || m[0] != '{' {
		m = json.RawMessage(`{}`)
	}
	m, err := acp.SetField(m, "traceparent", tp)
	if err != nil {
		return params
	}
	out, err := acp.SetField(params, "_meta", m)
	if err != nil {
		return params
	}
	return out
}
