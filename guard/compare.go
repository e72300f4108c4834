package guard

import (
	"context"
	"time"

	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/policy"
)

// RecordCompare audits a comparison (issue 32): in session sid, the prompt
// of turn (its number in the session's history) went to agents at once, or
// (picked != "") the user continued the session with the comparison's
// agent picked. The prompt's text is not recorded, as no record holds
// content. Without a policy in force there is no audit log.
func (g *Guard) RecordCompare(sid string, agents []string, turn int, picked string) {
	pol := g.Policy()
	if pol == nil {
		return
	}
	method, ev := "acp-router/compare", map[string]any{"agents": agents, "turn": turn}
	if picked != "" {
		method, ev = "acp-router/pick", map[string]any{"agents": agents, "turn": turn, "picked": picked}
	}
	rec := audit.Record{Time: time.Now(), Session: sid, Agent: picked, Method: method, Evidence: []any{ev},
		Decision: policy.Allow.String(), Layer: policy.LayerBuiltin, Source: string(policy.SourceBuiltin), PolicyHash: pol.Hash()}
	g.write(context.Background(), rec.Time, rec) // a failure is logged by write
}
