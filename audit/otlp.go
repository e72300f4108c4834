package audit

import (
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
)

// OTLPEventName is the event name of an audit record exported as an OTLP
// log record.
const OTLPEventName = "acp_router.audit.decision"

// OTLPRecord is r as an OTLP log record (issue 17): the JSONL line's
// fields under the same names, evidence as its JSON text, and the line
// itself as the body, so that a log backend shows what the file holds.
func OTLPRecord(r *Record) otellog.Record {
	var rec otellog.Record
	rec.SetTimestamp(r.Time)
	rec.SetEventName(OTLPEventName)
	rec.SetSeverity(otellog.SeverityInfo)
	rec.SetSeverityText("INFO")
	if r.Decision == "deny" {
		rec.SetSeverity(otellog.SeverityWarn)
		rec.SetSeverityText("WARN")
	}
	line, _ := json.Marshal(r)
	rec.SetBody(attribute.StringValue(string(line)))
	evidence, _ := json.Marshal(r.Evidence)
	kv := []attribute.KeyValue{
		attribute.String("decisionId", r.DecisionID),
		attribute.String("method", r.Method),
		attribute.String("decision", r.Decision),
		attribute.String("source", r.Source),
		attribute.String("policyHash", r.PolicyHash),
		attribute.Int64("latencyUs", r.LatencyUs),
		attribute.String("evidence", string(evidence)),
	}
	opt := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	opt("session", r.Session)
	opt("parentSession", r.ParentSession)
	opt("agent", r.Agent)
	opt("toolCallId", r.ToolCallID)
	opt("layer", r.Layer)
	opt("userChoice", r.UserChoice)
	opt("answeredBy", r.AnsweredBy)
	opt("answerRefused", r.AnswerRefused)
	if r.Answerers != nil {
		kv = append(kv, attribute.StringSlice("answerers", r.Answerers))
	}
	if r.Rule != nil {
		kv = append(kv, attribute.String("rule", *r.Rule))
	}
	rec.AddAttributes(kv...)
	return rec
}
