package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"unsafe"

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
//
// params are a request's as the stream classified them (valid JSON): they
// are scanned without being validated once more (acp.MembersOfValid; on
// anything else the worst is a traceparent not found).
func Extract(ctx context.Context, params json.RawMessage) context.Context {
	var meta [1]json.RawMessage
	if acp.MembersOfValid(params, metaName, meta[:]) != nil || meta[0] == nil {
		return ctx
	}
	var v [2]json.RawMessage
	if acp.Members(meta[0], traceNames, v[:]) != nil || v[0] == nil {
		return ctx
	}
	var c carrier
	for i, raw := range v {
		if raw == nil || len(raw) > maxTracestate+2 {
			continue
		}
		s, ok := jsonString(raw)
		if !ok {
			continue
		}
		if i == 0 && len(s) > maxTraceparent {
			return ctx
		}
		c.set(traceNames[i], s)
	}
	if c.traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, &c)
}

// jsonString is the string raw encodes; ok false when it is not one. One
// without escapes (a traceparent always) is read without a decoder.
func jsonString(raw json.RawMessage) (string, bool) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && bytes.IndexByte(raw[1:n-1], '\\') < 0 && bytes.IndexByte(raw[1:n-1], '"') < 0 {
		for _, c := range raw[1 : n-1] {
			if c < 0x20 {
				return "", false
			}
		}
		return string(raw[1 : n-1]), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// carrier is the propagator's view of _meta's two W3C members (a map
// would be allocated for each turn).
type carrier struct{ traceparent, tracestate string }

func (c *carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.traceparent
	case "tracestate":
		return c.tracestate
	}
	return ""
}

func (c *carrier) Set(key, value string) { c.set(key, value) }

func (c *carrier) set(key, value string) {
	switch key {
	case "traceparent":
		c.traceparent = value
	case "tracestate":
		c.tracestate = value
	}
}

func (c *carrier) Keys() []string { return traceNames }

// Inject writes ctx's span context into params._meta.traceparent, every
// other byte of params kept: the editor's tracestate and baggage go on as
// they came (the router's span carries the editor's tracestate already).
// params without a valid span in ctx, or that are not an object, are
// returned as they are. The result is one new copy of params: the
// traceparent spliced into _meta, or _meta added at the end.
func Inject(ctx context.Context, params json.RawMessage) json.RawMessage {
	var c carrier
	propagator.Inject(ctx, &c)
	tp := c.traceparent
	if tp == "" || len(params) == 0 {
		return params
	}
	if t := bytes.TrimLeft(params, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return params // null, or not an object
	}
	var meta [1]json.RawMessage
	if acp.Members(params, metaName, meta[:]) != nil {
		return params
	}
	m := meta[0]
	if m == nil {
		// No _meta: add it before the closing brace.
		end := len(bytes.TrimRight(params, " \t\r\n")) - 1 // params' '}'
		body := bytes.TrimRight(params[:end], " \t\r\n")
		out := make([]byte, 0, len(params)+len(tp)+32)
		out = append(out, body...)
		if body[len(body)-1] != '{' {
			out = append(out, ',')
		}
		out = append(append(append(out, `"_meta":{"traceparent":"`...), tp...), `"}`...)
		return append(out, params[end:]...)
	}
	var old [1]json.RawMessage
	if m[0] != '{' || acp.Members(m, traceNames[:1], old[:]) != nil || bytes.Count(m, []byte(`"traceparent"`)) > 1 {
		return injectSlow(params, m, tp) // not an object, or the name twice
	}
	at := offset(params, m) // _meta's value in params
	out := make([]byte, 0, len(params)+len(tp)+32)
	if v := old[0]; v != nil {
		// Replace the editor's traceparent value.
		from := at + offset(m, v)
		out = append(append(append(append(out, params[:from]...), '"'), tp...), '"')
		return append(out, params[from+len(v):]...)
	}
	// Add it first in _meta.
	out = append(append(append(append(out, params[:at+1]...), `"traceparent":"`...), tp...), '"')
	if rest := bytes.TrimLeft(m[1:], " \t\r\n"); rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, params[at+1:]...)
}

// offset is where sub, a slice of b (acp.Members' values alias their
// object), starts in b.
func offset(b, sub []byte) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// injectSlow is Inject for a _meta that is not an object (replaced by one)
// or names traceparent more than once (each replaced).
func injectSlow(params, m json.RawMessage, tp string) json.RawMessage {
	if m[0] != '{' {
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
