package router

import (
	"encoding/json"
	"slices"

	"github.com/acp-router/acp-router/merge"
)

// Agent-chosen ids of the objects an update creates or patches, besides
// tool calls and messages: compactions (compaction_update,
// compaction_summary_chunk: acp-currency row 3) and plans (plan_update,
// plan_removed: row 4). Two agents of one session choose them
// independently ("compaction-1", "plan-1"), so each is translated like a
// messageId (merge.IDTable): it passes unchanged unless another agent of
// the session uses it. Unlike messages, a plan lives across turns (an agent
// patches it later, or removes it) and a compaction may be patched after
// its turn, so their ids are not retired at a turn's end, only past their
// bound or when the agent removes the plan.
//
// A plan_update of type file names the plan's file by URI, and a markdown
// plan is often a file the agent writes: the router forwards the URI as it
// is, and when the agent writes that file through ACP (fs/write_text_file)
// the write is decided by the policy like any other path. A plan file is a
// location like any other, never an exemption.

const (
	// maxPlanIDs, maxCompactionIDs: plans and compactions a session keeps
	// ids for; past that the oldest are retired (never handed out again).
	maxPlanIDs       = 256
	maxCompactionIDs = 256
)

// objectIDs are a session's tables of compaction and plan ids; plans maps
// the editor's id of each plan on screen to its agent, for a switch to
// remove the old agent's (switchTo).
type objectIDs struct {
	compactions *merge.IDTable
	planIDs     *merge.IDTable
	plans       map[string]string
}

// objectEdits lists the ids of an update from agent that another agent of
// the session uses too, rewritten for the editor (idEdit paths are inside
// params): update.compactionId, update.plan.planId, update.planId. A
// plan_removed retires its id (called as the update is forwarded). ok is
// false for an update that must not reach the editor: a plan_removed
// naming, as the agent's own, the editor's id of another agent's plan.
func (s *Session) objectEdits(agent string, up *updateFields) (edits []idEdit, ok bool) {
	o := &s.objects
	if o.compactions == nil {
		o.compactions, o.planIDs, o.plans = merge.NewIDTable(), merge.NewIDTable(), map[string]string{}
	}
	switch up.Kind {
	case "compaction_update", "compaction_summary_chunk":
		if up.CompactionID == "" {
			return nil, true
		}
		id := o.compactions.Out(agent, up.CompactionID)
		o.compactions.Trim(maxCompactionIDs)
		if id != up.CompactionID {
			return []idEdit{{[]string{"update", "compactionId"}, id}}, true
		}
	case "plan_update":
		var plan struct {
			PlanID string `json:"planId"`
		}
		if json.Unmarshal(up.Plan, &plan) != nil || plan.PlanID == "" {
			return nil, true
		}
		id := o.planIDs.Out(agent, plan.PlanID)
		o.plans[id] = agent
		if o.planIDs.Trim(maxPlanIDs) > 0 {
			for p := range o.plans {
				if _, _, ok := o.planIDs.In(p); !ok {
					delete(o.plans, p)
				}
			}
		}
		if id != plan.PlanID {
			return []idEdit{{[]string{"update", "plan", "planId"}, id}}, true
		}
	case "plan_removed":
		id, known := o.planIDs.Lookup(agent, up.PlanID)
		if !known {
			// A plan the editor never saw, or long gone: the agent's
			// id as it is, unless the editor shows another agent's
			// plan under it (one agent removing another's: /NAME runs
			// a turn of another agent in the session).
			_, _, other := o.planIDs.In(up.PlanID)
			return nil, !other
		}
		o.planIDs.Retire(id)
		delete(o.plans, id)
		if id != up.PlanID {
			return []idEdit{{[]string{"update", "planId"}, id}}, true
		}
	}
	return nil, true
}

// removePlansLocked returns plan_removed updates for the plans on screen
// that agents other than keep sent, and retires their ids: after a switch
// the old agent's plans must not stay on the editor's screen (DESIGN §5;
// the legacy plan is cleared with an empty plan update).
func (s *Session) removePlansLocked(keep string) [][]byte {
	var ids []string
	for id, agent := range s.objects.plans {
		if agent != keep {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var lines [][]byte
	for _, id := range ids {
		lines = append(lines, s.updateLine(map[string]any{"sessionUpdate": "plan_removed", "planId": id}))
		s.objects.planIDs.Retire(id)
		delete(s.objects.plans, id)
	}
	return lines
}
