package router

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// Subagent sessions (ACP, stable since 2026-11-20; shapes as
// schema.unstable.json's SubagentUpdate, SessionMessage): an agent
// announces a child of a session with a subagent_update on that session,
// then sends the child's updates and requests under the child's own
// sessionId. The router learns the child only from an announcement on a
// session it routes, from the agent instance that owns that session; from
// then on the child is a router session bound to its parent:
//
//   - its id is translated like a top-level id (children of two agents
//     never collide), in every message and inside them (the announcement's
//     sessionId, session_message's sender and recipient);
//   - its traffic shares the top-level session's order (one sequencer) and
//     its lane to the editor (an alias on the editor's stream: also the
//     router's requests naming the child), so that it interleaves with the
//     parent's exactly as the agent sent it, and is recorded in the
//     top-level session's history;
//   - its requests are decided with the top-level session's policy state
//     (cwd, roots, grants, the agent's mode there): what a child announces
//     as its cwd never widens what the parent may touch;
//   - the editor may only cancel it (session/cancel, routed to the agent);
//   - a child that was never announced on a session of that agent instance
//     does not exist: its requests fail closed (error, audit, log), its
//     updates are parked as for any unknown session (bounded).

// maxChildren bounds the subagent sessions of one top-level session (all
// depths); past it, announcements are dropped (counted, logged) and the
// children's traffic fails closed as unknown.
const maxChildren = 1024

// root is the top-level session s belongs to (s itself for one).
func (s *Session) root() *Session {
	for s.parent != nil {
		s = s.parent
	}
	return s
}

// order is the sequencer of s's traffic: its top-level session's, shared
// by all its children (order.go).
func (s *Session) order() *sequencer { return &s.root().seq }

// childAnnouncement is what the router reads of a subagent_update.
type childAnnouncement struct {
	SessionID    string           `json:"sessionId"`
	Capabilities *json.RawMessage `json:"capabilities"`
}

// learnChild registers the child a subagent_update on parent announces
// (or finds it, for a later update of the same child) and returns it; nil
// when the announcement is refused (logged). It runs in the agent's read
// path, before the update is relayed, holding no lock.
func (r *Router) learnChild(inst *upstream.Instance, parent *Session, d *downstream, update json.RawMessage) *Session {
	var a childAnnouncement
	if json.Unmarshal(update, &a) != nil || a.SessionID == "" {
		r.log.Warn("subagent_update without a child sessionId dropped", "session", parent.ID, "agent", inst.Agent.Name())
		return nil
	}
	agent := inst.Agent.Name()
	key := downKey(inst, a.SessionID)
	root := parent.root()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.downs[key]; s != nil {
		if s.parent == nil {
			r.log.Warn("subagent_update names a top-level session; dropped", "session", parent.ID, "agent", agent, "child", a.SessionID)
			return nil
		}
		if s.parent != parent {
			r.log.Warn("subagent_update names another session's child; dropped", "session", parent.ID, "agent", agent, "child", a.SessionID)
			return nil
		}
		s.mu.Lock()
		if a.Capabilities != nil {
			s.childCancel = childCanCancel(*a.Capabilities)
		}
		s.mu.Unlock()
		return s
	}
	if root.children >= maxChildren {
		r.childDrops.add(1, "session", root.ID, "agent", agent)
		return nil
	}
	id := a.SessionID
	for n := 1; r.sessions[id] != nil || r.children[id] != nil || (r.opts.Store != nil && r.opts.Store.Exists(id)); n++ {
		id = fmt.Sprintf("%s~%s", a.SessionID, agent)
		if n > 1 {
			id += fmt.Sprintf("~%d", n)
		}
	}
	child := &Session{ID: id, Cwd: root.Cwd, r: r, parent: parent, active: agent, roots: root.roots, policy: root.policy,
		down: map[string]*downstream{agent: {agent: d.agent, inst: inst, id: a.SessionID}}, opening: map[string]chan struct{}{},
		toolIDs: merge.NewIDTable(), msgIDs: merge.NewIDTable(), open: true, lastUse: time.Now()}
	if a.Capabilities != nil {
		child.childCancel = childCanCancel(*a.Capabilities)
	}
	r.tombs.remove(key)
	r.downs[key] = child
	r.children[id] = child
	root.children++
	parent.kids = append(parent.kids, child)
	if r.editor != nil {
		r.editor.Stream().AliasLane(id, root.ID)
	}
	r.log.Info("subagent session announced", "session", id, "parent", parent.ID, "agent", agent)
	return child
}

// childCanCancel reads SubagentSessionCapabilities.cancel: an object (even
// {}) permits session/cancel.
func childCanCancel(caps json.RawMessage) bool {
	var c struct {
		Cancel json.RawMessage `json:"cancel"`
	}
	return json.Unmarshal(caps, &c) == nil && len(c.Cancel) > 0 && string(c.Cancel) != "null"
}

// forgetChildren removes s's children (all depths) from the router's
// tables; their late traffic is dropped (tombstones) or fails closed.
func (r *Router) forgetChildren(s *Session) {
	r.mu.Lock()
	kids := s.kids
	s.kids = nil
	r.mu.Unlock()
	for _, c := range kids {
		r.forgetChildren(c)
		c.mu.Lock()
		c.closed = true
		keys := c.downKeysLocked()
		c.mu.Unlock()
		r.unregister(c, keys)
		r.mu.Lock()
		delete(r.children, c.ID)
		r.mu.Unlock()
		if r.editor != nil {
			r.editor.Stream().AliasLane(c.ID, "")
		}
	}
}

// childOf is the subagent session the editor names by id, nil if none.
func (r *Router) childOf(p json.RawMessage) *Session {
	var ref acp.SessionRef
	if p == nil || json.Unmarshal(p, &ref) != nil || ref.SessionID == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.children[ref.SessionID]
}

// sessionIDEdits are the session ids carried inside an update of agent
// instance inst that the editor knows under other ids: a subagent_update's
// child, a session_message's sender and recipient. ok is false when one
// names a session the router does not know for that instance: the update
// must not reach the editor (it would name someone else's session, or one
// that does not exist).
func (r *Router) sessionIDEdits(inst *upstream.Instance, child *Session, up *updateFields) (edits []idEdit, ok bool) {
	if child != nil && child.down[inst.Agent.Name()].id != child.ID {
		edits = append(edits, idEdit{[]string{"update", "sessionId"}, child.ID})
	}
	for _, m := range []struct {
		id   *string
		path string
	}{{up.Sender, "senderSessionId"}, {up.Recipient, "recipientSessionId"}} {
		if m.id == nil || *m.id == "" {
			continue
		}
		r.mu.Lock()
		s := r.downLocked(inst, *m.id)
		r.mu.Unlock()
		if s == nil {
			return nil, false
		}
		if s.ID != *m.id {
			edits = append(edits, idEdit{[]string{"update", m.path}, s.ID})
		}
	}
	return edits, true
}

// relayChildLocked forwards an update of subagent session s (called with
// s.mu held): tool calls are tracked for the policy (in the top-level
// session's state) and their ids translated like the parent's; the rest
// goes as the agent sent it, with the ids the editor knows. A child has
// no turns of its own, no modes or options the router merges: it is the
// agent's, shown as it is.
func (r *Router) relayChildLocked(s *Session, d *downstream, m *acp.Message, u *updateParams, edits []idEdit) {
	up := &u.Update
	name := d.agent.Name()
	if d.replaying && replayed(up.Kind) {
		d.replayAt = time.Now()
		return
	}
	heldAs := "" // the tool call's editor id, for holdAskedLocked
	switch up.Kind {
	case "tool_call", "tool_call_update":
		id, seen := s.toolIDs.Lookup(name, up.ToolCallID)
		heldAs = id
		if up.Kind == "tool_call" {
			id, seen = s.toolIDs.Out(name, up.ToolCallID), true
			s.toolIDs.Trim(maxToolIDs)
			heldAs = id
		}
		r.trackTool(s, name, up, seen)
		if !seen {
			return // an update for a tool call the editor never saw
		}
		edits = append(edits, s.idEdits(name, up.ToolCallID, id, up.MessageID, up.Meta)...)
		if up.Status == "completed" || up.Status == "failed" {
			s.toolIDs.Done(id)
			s.toolIDs.RetireDone(maxDoneTools)
		}
	case "notice": // live only (relayUpdate)
		s.writeLiveLocked(s.agentLine(d, m, edits))
		return
	case "current_mode_update", "config_option_update":
		// The child's own mode: the router cannot set a child's mode
		// (ACP permits only cancel on one), but its requests are decided
		// in it (enforce) when the policy denies it.
		if up.Kind == "config_option_update" {
			d.view.Options = up.ConfigOptions
		} else if _, _, id, _ := merge.CurrentMode(d.view); id != "" {
			d.view.Options = merge.SetCurrentValue(d.view.Options, id, up.CurrentModeID)
		} else {
			d.view.Modes = &merge.ModeState{CurrentModeID: up.CurrentModeID}
		}
		r.enforceChildModeLocked(s, d)
		edits = append(edits, s.idEdits(name, "", "", up.MessageID, up.Meta)...)
	default:
		edits = append(edits, s.idEdits(name, "", "", up.MessageID, up.Meta)...)
	}
	line := s.agentLine(d, m, edits)
	if heldAs != "" && s.holdAskedLocked(heldAs, line) {
		return
	}
	s.writeLocked(line)
}

// cancelChild sends session/cancel for subagent session c to its agent.
func (r *Router) cancelChild(ctx context.Context, c *Session) {
	d := c.down[c.active] // a child's downstream never changes
	p, _ := json.Marshal(acp.SessionRef{SessionID: d.id})
	if err := d.inst.Peer().Notify(ctx, acp.MethodSessionCancel, json.RawMessage(p)); err != nil {
		r.log.Debug("cannot forward session/cancel to a subagent session", "session", c.ID, "error", err)
	}
}

// cancelChildren cancels the children of s that permit it (all depths):
// cancelling a session cancels the work it delegated.
func (r *Router) cancelChildren(ctx context.Context, s *Session) {
	r.mu.Lock()
	kids := slices.Clone(s.kids)
	r.mu.Unlock()
	for _, c := range kids {
		c.mu.Lock()
		can := c.childCancel
		c.mu.Unlock()
		if can {
			r.cancelChild(ctx, c)
		}
		r.cancelChildren(ctx, c)
	}
}
