package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/store"
	"github.com/acp-router/acp-router/upstream"
)

// The unstable methods the router routes itself, because passing them to
// one agent would break the router's own view of its sessions
// (notes/acp-currency.md rows 7-10, 12, 14; schema.unstable.json):
// session/set_title, session/status, session/archive and unarchive,
// auth/status (and the flood-safe relay of auth/status_update), MCP over
// ACP (mcp/message, routed by serverId) and session/fork.

// errNoSession answers a request naming a session the router neither runs
// nor keeps: -32002 with the id in data, as the schema asks of
// session/status, set_title, archive and unarchive.
func errNoSession(method, id string) error {
	return acp.NewError(acp.CodeResourceNotFound, fmt.Sprintf("acp-router: %s: unknown session %q", method, id), map[string]string{"sessionId": id})
}

// sessionIDParam reads params.sessionId, or answers -32602 (false).
func (r *Router) sessionIDParam(req *jsonrpc2.Request) (string, bool) {
	var ref acp.SessionRef
	if json.Unmarshal(params(req), &ref) != nil || ref.SessionID == "" {
		r.replyTo(req)(nil, acp.NewError(acp.CodeInvalidParams, "acp-router: "+req.Method+" needs a sessionId", nil))
		return "", false
	}
	return ref.SessionID, true
}

// setTitle handles session/set_title: the title is the router's (it shows
// in session/list and survives a switch), so the router keeps it and its
// store in step, and forwards the request, id translated, to the active
// agent when that agent supports sessionCapabilities.title (the agent's
// normalized title is the one kept). From then on an agent's own title
// does not rename the thread (the schema: the agent SHOULD NOT replace it).
// A session only in the store is retitled there.
func (r *Router) setTitle(ctx context.Context, req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	var p struct {
		SessionID string  `json:"sessionId"`
		Title     *string `json:"title"`
	}
	if json.Unmarshal(params(req), &p) != nil || p.SessionID == "" {
		reply(nil, acp.NewError(acp.CodeInvalidParams, "acp-router: session/set_title needs a sessionId", nil))
		return
	}
	if p.Title == nil || strings.TrimSpace(*p.Title) == "" {
		reply(nil, acp.NewError(acp.CodeInvalidParams, "acp-router: session/set_title needs a title that is not empty", map[string]string{"sessionId": p.SessionID}))
		return
	}
	title := strings.TrimSpace(*p.Title)
	s := r.sessionOf(params(req)) // no revive: the schema, the session need not be active
	r.spawn(func() {
		if s == nil || !s.waitReady(ctx) {
			reply(r.retitleStored(ctx, p.SessionID, title))
			return
		}
		res := mustJSON(map[string]string{"title": title})
		d := s.activeDown()
		if d != nil {
			if inst, err := d.alive(); err == nil && acp.Supported(agentCaps(inst).SessionCapabilities.Title) {
				out, err := callWait(ctx, inst, req.Method, rewriteSessionID(params(req), s.ID, d.id))
				if err != nil {
					reply(nil, inst.Agent.Error(inst, err))
					return
				}
				var got struct {
					Title string `json:"title"`
				}
				if json.Unmarshal(out, &got) == nil && got.Title != "" {
					title, res = got.Title, out
				}
			}
		}
		s.mu.Lock()
		s.title, s.titled = title, true
		r.recordMetaLocked(s)
		s.mu.Unlock()
		reply(res, nil)
	})
}

// retitleStored sets the title of a session only the store has.
func (r *Router) retitleStored(ctx context.Context, id, title string) (json.RawMessage, error) {
	st := r.opts.Store
	if st == nil {
		return nil, errNoSession(acp.MethodSessionSetTitle, id)
	}
	err := st.UpdateStored(ctx, id, func(m *store.Meta) {
		var extra storedSession
		json.Unmarshal(m.Extra, &extra)
		extra.Titled = true
		m.Title, m.Extra = title, mustJSON(extra)
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errNoSession(acp.MethodSessionSetTitle, id)
	case err != nil:
		return nil, acp.NewError(acp.CodeInternalError, "acp-router: cannot store the title: "+err.Error(), map[string]string{"sessionId": id})
	}
	return mustJSON(map[string]string{"title": title}), nil
}

// sessionStatus handles session/status, without side effects (the
// schema): a session the router runs is "open" (its active agent's own
// answer, id translated, when it supports sessionCapabilities.status); one
// only the store keeps is "saved"; any other -32002.
func (r *Router) sessionStatus(ctx context.Context, req *jsonrpc2.Request) {
	id, ok := r.sessionIDParam(req)
	if !ok {
		return
	}
	reply := r.replyTo(req)
	open := mustJSON(map[string]string{"status": "open"})
	s := r.sessionOf(params(req))
	r.spawn(func() {
		if s == nil {
			if st := r.opts.Store; st != nil {
				if ok, _ := st.Stored(ctx, id); ok {
					reply(mustJSON(map[string]string{"status": "saved"}), nil)
					return
				}
			}
			reply(nil, errNoSession(req.Method, id))
			return
		}
		s.mu.Lock()
		d := s.down[s.active]
		busy := s.reviving
		s.mu.Unlock()
		if d != nil && !busy {
			if inst, err := d.alive(); err == nil && acp.Supported(agentCaps(inst).SessionCapabilities.Status) {
				res, err := callWait(ctx, inst, req.Method, rewriteSessionID(params(req), s.ID, d.id))
				if err == nil {
					reply(res, nil)
					return
				}
				// The router still runs the session: it is open.
				r.log.Debug("agent did not answer session/status", "session", s.ID, "agent", inst.Agent.Name(), "error", err)
			}
		}
		reply(open, nil)
	})
}

// archiveSession handles session/archive (archive) and session/unarchive.
// Archive does the close work of session/close and marks the session
// archived in the store, so that session/list leaves it out unless asked.
// A turn running in the session is cancelled first, as the schema asks
// ("MUST cancel any ongoing work"): the editor gets its prompt answered
// "cancelled" before the archive answer. Each agent of the session archives
// its own session where it supports archive (else closes it); unarchive
// reaches the agents that support archive with their stored session ids.
// Archiving an archived session, or unarchiving one that is not, succeeds;
// an unknown session is -32002.
func (r *Router) archiveSession(ctx context.Context, req *jsonrpc2.Request, archive bool) {
	id, ok := r.sessionIDParam(req)
	if !ok {
		return
	}
	var s *Session
	if archive {
		r.mu.Lock()
		if s = r.sessions[id]; s != nil {
			r.closedIDs.add(id) // a prompt does not bring it back
		}
		r.mu.Unlock()
	}
	r.spawn(func() {
		var downs map[string]store.Agent
		mark := func(m *store.Meta) {
			m.Archived = archive
			downs = m.Agents
		}
		if s != nil {
			r.endTurnFirst(ctx, s)
		}
		err := r.opts.Store.UpdateStored(ctx, id, mark) // held while s is live: before closeWork releases it
		var closeAgents func(context.Context, bool) error
		if s != nil {
			closeAgents = r.closeWork(s)
		}
		switch {
		case errors.Is(err, store.ErrNotFound) && s == nil:
			r.replyTo(req)(nil, errNoSession(req.Method, id))
			return
		case err != nil && !errors.Is(err, store.ErrNotFound):
			r.replyTo(req)(nil, acp.NewError(acp.CodeInternalError, "acp-router: cannot store the archive state: "+err.Error(), map[string]string{"sessionId": id}))
			return
		}
		r.log.Info("session archive state changed", "session", id, "archived", archive)
		var first error
		if closeAgents != nil {
			first = closeAgents(ctx, true)
		} else {
			first = r.archiveStoredAgents(ctx, req.Method, downs)
		}
		if first != nil {
			r.replyTo(req)(nil, first)
			return
		}
		r.replyTo(req)(json.RawMessage("{}"), nil)
	})
}

// endTurnFirst cancels s's running turn, if any, and waits (within the
// agent's cancel timeout, after which the router answers "cancelled"
// itself) until the editor has its answer.
func (r *Router) endTurnFirst(ctx context.Context, s *Session) {
	s.mu.Lock()
	t := s.turn
	s.mu.Unlock()
	if t == nil {
		return
	}
	r.log.Info("cancelling the running turn before archiving", "session", s.ID)
	r.cancelTurn(ctx, s, mustJSON(acp.SessionRef{SessionID: s.ID}))
	limit := time.Now().Add(cancelTimeoutOf(t) + time.Second)
	for time.Now().Before(limit) {
		s.mu.Lock()
		over := t.done || t.synthetic || (t.d == nil && t.cancelled)
		s.mu.Unlock()
		if over {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// cancelTimeoutOf is how long the agent running t may take to answer
// session/cancel before the router answers for it.
func cancelTimeoutOf(t *turn) time.Duration {
	if t.inst != nil {
		return t.inst.Agent.Config.CancelTimeout
	}
	return 0
}

// archiveStoredAgents sends method (archive or unarchive) to each agent of
// a session the router does not run that supports archive, with its stored
// session id. Agents not running are left alone: their session is not in
// memory either.
func (r *Router) archiveStoredAgents(ctx context.Context, method string, downs map[string]store.Agent) error {
	for name, a := range downs {
		ag := r.byName[name]
		if ag == nil || a.SessionID == "" {
			continue
		}
		inst := ag.Current()
		if inst == nil || !acp.Supported(agentCaps(inst).SessionCapabilities.Archive) {
			continue
		}
		if _, err := callWait(ctx, inst, method, mustJSON(acp.SessionRef{SessionID: a.SessionID})); err != nil {
			var rpcErr *jsonrpc2.Error
			if errors.As(err, &rpcErr) && rpcErr.Code == acp.CodeResourceNotFound {
				continue // the agent forgot it: nothing to archive there
			}
			return inst.Agent.Error(inst, err)
		}
	}
	return nil
}

// authStatus handles auth/status: every agent's state, merged. The
// schema's state is the one the editor acts on: "unauthenticated" if any
// agent that answered needs a sign-in, else "authenticated" if any is,
// else "not_required" if all answered so, else "unknown" (also when no
// agent could answer). accounts are all the agents' accounts, each naming
// its agent in _meta["acp-router"].agent; _meta["acp-router"].agents has
// each configured agent's own answer, or state "unknown" and why. Agents
// that are not running are not started for it.
func (r *Router) authStatus(ctx context.Context, req *jsonrpc2.Request) (json.RawMessage, error) {
	type answer struct {
		State    string            `json:"state"`
		Accounts []json.RawMessage `json:"accounts,omitempty"`
		Reason   string            `json:"reason,omitempty"` // the router's: why it is unknown
	}
	answers := make([]answer, len(r.agents))
	var wg sync.WaitGroup
	wait, cancel := context.WithTimeout(ctx, r.opts.InitBudget)
	defer cancel()
	for i, a := range r.agents {
		inst := a.Current()
		switch {
		case inst == nil || inst.Init() == nil:
			answers[i] = answer{State: "unknown", Reason: "not running"}
			continue
		case !acp.Supported(agentCaps(inst).Auth.Status):
			answers[i] = answer{State: "unknown", Reason: "does not support auth/status"}
			continue
		}
		wg.Go(func() {
			res, err := callWait(wait, inst, acp.MethodAuthStatus, params(req))
			if err == nil && json.Unmarshal(res, &answers[i]) == nil && answers[i].State != "" {
				return
			}
			if err == nil {
				err = errors.New("malformed answer")
			}
			answers[i] = answer{State: "unknown", Reason: "auth/status failed: " + errorText(inst.Agent.Error(inst, err))}
		})
	}
	wg.Wait()
	var states []string
	var accounts []json.RawMessage
	agents := map[string]answer{}
	for i, a := range r.agents {
		ans := answers[i]
		agents[a.Name()] = ans
		if ans.Reason == "" {
			states = append(states, ans.State)
		}
		for _, acc := range ans.Accounts {
			if tagged, err := attribute(acc, a.Name()); err == nil {
				accounts = append(accounts, tagged)
			}
		}
	}
	out := map[string]any{"state": mergeAuthStates(states), "_meta": map[string]any{metaKey: map[string]any{"agents": agents}}}
	if len(accounts) > 0 {
		out["accounts"] = accounts
	}
	return mustJSON(out), nil
}

// mergeAuthStates is the router's auth state from its agents' (see
// authStatus). Values the schema does not know count as unknown.
func mergeAuthStates(states []string) string {
	if len(states) == 0 {
		return "unknown"
	}
	n := map[string]int{}
	for _, s := range states {
		n[s]++
	}
	switch {
	case n["unauthenticated"] > 0:
		return "unauthenticated"
	case n["authenticated"] > 0 && n["authenticated"]+n["not_required"] == len(states):
		return "authenticated"
	case n["not_required"] == len(states):
		return "not_required"
	}
	return "unknown"
}

// statusUpdates relays the agents' auth status notifications
// (auth/status_update, Claude's _auth/status_update) to the editor without
// ever holding up an agent. One is written at once, in order with what the
// agent sent before it; then, until the shared lane of the editor's queue
// has room again, later ones wait: each carries the agent's whole state, so
// only the newest one per agent and method waits, and those it replaces are
// dropped, counted and logged. A flood from one agent costs one pending
// message and one lane's worth of queue, and neither stalls that agent's
// sessions (its read loop never waits for them) nor anyone else's.
type statusUpdates struct {
	r       *Router
	mu      sync.Mutex
	pending map[string]statusUpdate // by agent + method
	order   []string
	running bool
	drops   *drops
}

type statusUpdate struct {
	method string
	params json.RawMessage
}

func newStatusUpdates(r *Router) *statusUpdates {
	return &statusUpdates{r: r, pending: map[string]statusUpdate{},
		drops: newDrops(r.log, hclog.Info, "auth status updates replaced by a newer one before they were written (coalesced)")}
}

// isStatusUpdate: method is a notification statusUpdates coalesces.
func isStatusUpdate(method string) bool {
	return method == acp.MethodAuthStatusUpdate || method == "_auth/status_update"
}

// add queues p (already attributed) from agent, replacing what waits.
func (u *statusUpdates) add(agent, method string, p json.RawMessage) {
	key := agent + "\x00" + method
	u.mu.Lock()
	if !u.running {
		u.running = true
		u.mu.Unlock()
		u.write(statusUpdate{method, p})
		u.r.spawn(u.run)
		return
	}
	_, replaced := u.pending[key]
	if !replaced {
		u.order = append(u.order, key)
	}
	u.pending[key] = statusUpdate{method, p}
	u.mu.Unlock()
	if replaced {
		u.drops.add(1, "agent", agent, "method", method)
	}
}

// write queues m for the editor; it never waits.
func (u *statusUpdates) write(m statusUpdate) {
	if err := u.r.editor.Notify(context.Background(), m.method, paramsAny(m.params)); err != nil {
		u.r.log.Debug("cannot forward notification", "method", m.method, "error", err)
	}
}

// run writes what waits, one at a time, each once the shared lane of the
// editor's queue has room; it ends when nothing waits.
func (u *statusUpdates) run() {
	for {
		u.r.waitEditor("")
		u.mu.Lock()
		if len(u.order) == 0 {
			u.running = false
			u.mu.Unlock()
			return
		}
		key := u.order[0]
		u.order = u.order[1:]
		m := u.pending[key]
		delete(u.pending, key)
		u.mu.Unlock()
		u.write(m)
	}
}

// maxMcpServers bounds the ACP-transport MCP servers the router routes
// (mcp/message); maxMcpCalls the agents' mcp/message requests at the
// editor whose answers route the editor's notifications back.
const (
	maxMcpServers = 4096
	maxMcpCalls   = 4096
)

// declareMcp registers the ACP-transport MCP servers s declares
// (newParams.mcpServers entries of type "acp", by serverId), so that
// mcp/message naming one reaches s's agents. Past maxMcpServers, a server
// is not routed (its messages fail -32602) and a warning says so.
func (r *Router) declareMcp(s *Session) {
	var np struct {
		Servers []struct {
			Type     string `json:"type"`
			ServerID string `json:"serverId"`
		} `json:"mcpServers"`
	}
	if json.Unmarshal(s.newParams, &np) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, srv := range np.Servers {
		if srv.Type != "acp" || srv.ServerID == "" {
			continue
		}
		if prev := r.mcpServers[srv.ServerID]; prev != nil && prev != s && prev.ID != s.ID {
			r.log.Warn("ACP MCP server id declared by two sessions; the newer one gets its messages", "server", srv.ServerID, "session", s.ID, "previous", prev.ID)
		} else if prev == nil && len(r.mcpServers) >= maxMcpServers {
			r.log.Warn("too many ACP MCP servers; this one is not routed", "server", srv.ServerID, "session", s.ID, "limit", maxMcpServers)
			continue
		}
		r.mcpServers[srv.ServerID] = s
	}
}

// forgetMcpLocked removes s's ACP MCP servers. Called with r.mu held.
func (r *Router) forgetMcpLocked(s *Session) {
	for id, owner := range r.mcpServers {
		if owner == s {
			delete(r.mcpServers, id)
		}
	}
	for key, c := range r.mcpCalls {
		if c.session == s {
			delete(r.mcpCalls, key)
		}
	}
}

// mcpCall is an agent's mcp/message request at the editor.
type mcpCall struct {
	inst    *upstream.Instance
	session *Session
}

func mcpKey(serverID string, requestID json.RawMessage) string {
	return serverID + "\x00" + acp.IDKey(requestID)
}

// mcpSession returns the session that declared serverID, if inst's agent
// serves it (an agent reaches only the servers of its own sessions).
func (r *Router) mcpSession(inst *upstream.Instance, serverID string) *Session {
	r.mu.Lock()
	s := r.mcpServers[serverID]
	r.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.down[inst.Agent.Name()]; d != nil && d.inst == inst {
		return s
	}
	return nil
}

// errMcpServer answers an mcp/message naming a server no session declared
// (to that agent).
func errMcpServer(serverID string) error {
	return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: mcp/message: no session declared the ACP MCP server %q", serverID), map[string]string{"serverId": serverID})
}

// mcpParams reads serverId and requestId of mcp/message params.
func mcpParams(p json.RawMessage) (serverID string, requestID json.RawMessage) {
	var mp struct {
		ServerID  string          `json:"serverId"`
		RequestID json.RawMessage `json:"requestId"`
	}
	json.Unmarshal(p, &mp)
	return mp.ServerID, mp.RequestID
}

// agentMcpMessage relays an agent's mcp/message request to the editor, for
// a server one of the agent's sessions declared; the editor's
// notifications about it (same serverId and requestId) go back to that
// agent while it waits (editorMcpMessage). Such a server runs in the
// editor's process: with a policy in force, a tools/call, resources/read
// or other MCP method that may act (or params the router cannot read:
// guard.DecidesMcp) is decided first, like an fs or terminal call
// (enforce.go), on the session's sequencer; a refusal is an inner MCP
// error naming the rule, and nothing reaches the editor.
func (r *Router) agentMcpMessage(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, reply func(json.RawMessage, error)) {
	p := params(req)
	serverID, requestID := mcpParams(p)
	s := r.mcpSession(inst, serverID)
	if s == nil {
		reply(nil, errMcpServer(serverID))
		return
	}
	relay := func() { r.relayMcp(ctx, inst, req, p, s, serverID, requestID, reply) }
	if !r.opts.Guard.DecidesMcp(p) {
		relay()
		return
	}
	server := mcpServerOf(s, serverID)
	r.decideOn(ctx, s, inst, req, p, server, func(v *guard.Verdict) {
		r.carryOut(ctx, s, inst, req, p, v, mcpRefusal(reply), server.name, relay)
	})
}

// mcpRefusal answers the agent's mcp/message with the router's refusal as
// the inner MCP error ({"error": {code, message, data}}): the schema keeps
// outer errors for binding and runtime failures (MessageMcpResponse).
func mcpRefusal(reply func(json.RawMessage, error)) func(json.RawMessage, error) {
	return func(res json.RawMessage, err error) {
		var rpcErr *jsonrpc2.Error
		if err != nil && errors.As(err, &rpcErr) {
			reply(mustJSON(map[string]any{"error": rpcErr}), nil)
			return
		}
		reply(res, err)
	}
}

// mcpTarget is the ACP MCP server an agent's mcp/message is for: the
// name its session declared for it (mcpServers[].name; "": none, the
// policy names it by its serverId), and whether that name is its own
// among the session's servers (guard.McpNameAmbiguous).
type mcpTarget struct {
	name      string
	ambiguous bool
}

// mcpServerOf is session s's ACP MCP server serverID.
func mcpServerOf(s *Session, serverID string) mcpTarget {
	var np struct {
		Servers []struct {
			Type     string `json:"type"`
			Name     string `json:"name"`
			ServerID string `json:"serverId"`
		} `json:"mcpServers"`
	}
	json.Unmarshal(s.newParams, &np)
	var t mcpTarget
	var names []string // as the policy names them: the name, else the serverId
	for _, srv := range np.Servers {
		if srv.Type != "acp" {
			continue
		}
		names = append(names, cmp.Or(srv.Name, srv.ServerID))
		if srv.ServerID == serverID {
			t.name = srv.Name
		}
	}
	t.ambiguous = guard.McpNameAmbiguous(cmp.Or(t.name, serverID), names)
	return t
}

// relayMcp relays an agent's mcp/message request to the editor, tracking
// it so that the editor's notifications about it reach that agent.
func (r *Router) relayMcp(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage, s *Session, serverID string, requestID json.RawMessage, reply func(json.RawMessage, error)) {
	key := mcpKey(serverID, requestID)
	r.mu.Lock()
	tracked := len(r.mcpCalls) < maxMcpCalls && r.mcpCalls[key] == nil
	if tracked {
		r.mcpCalls[key] = &mcpCall{inst: inst, session: s}
	}
	r.mu.Unlock()
	r.relayRequest(ctx, inst, req, p, reply, func(res json.RawMessage, err error) (json.RawMessage, error) {
		if tracked {
			r.mu.Lock()
			delete(r.mcpCalls, key)
			r.mu.Unlock()
		}
		return res, err
	})
}

// editorMcpMessage routes the editor's mcp/message (the provider's
// notifications for an agent's request, or a request) by serverId: to the
// agent whose request it is about, else the active agent of the session
// that declared the server, its sessionId translated if it carries one. A
// server no session declared is -32602 naming it (a notification is
// dropped with a log line).
func (r *Router) editorMcpMessage(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	serverID, requestID := mcpParams(p)
	fail := func(err error) {
		if req.Notif {
			r.log.Warn("mcp/message for an unknown ACP MCP server dropped", "server", serverID)
			return
		}
		r.replyTo(req)(nil, err)
	}
	r.mu.Lock()
	s := r.mcpServers[serverID]
	var inst *upstream.Instance
	if c := r.mcpCalls[mcpKey(serverID, requestID)]; c != nil && c.session == s {
		inst = c.inst
	}
	r.mu.Unlock()
	if s == nil {
		fail(errMcpServer(serverID))
		return
	}
	var d *downstream
	s.mu.Lock()
	if inst != nil {
		d = s.down[inst.Agent.Name()]
	} else {
		d = s.down[s.active]
	}
	s.mu.Unlock()
	if d == nil {
		fail(errMcpServer(serverID))
		return
	}
	live, err := d.alive()
	if err != nil {
		fail(err)
		return
	}
	if acp.SessionID(p) == s.ID {
		p = rewriteSessionID(p, s.ID, d.id)
	}
	r.forwardOrNotify(ctx, req, live, p, s.ID)
}

// forkSession handles session/fork. A fork needs one agent session to
// fork: it is forwarded, id translated, when the session has been served
// by one agent only and that agent supports sessionCapabilities.fork. The
// fork is a new router session bound to that agent, with the parent's
// turns for the handoff brief should it be switched later. Otherwise the
// router refuses, saying why.
func (r *Router) forkSession(ctx context.Context, req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	p := params(req)
	var fp struct {
		Cwd  string   `json:"cwd"`
		Dirs []string `json:"additionalDirectories"`
	}
	json.Unmarshal(p, &fp)
	if !filepath.IsAbs(fp.Cwd) {
		reply(nil, acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: cwd must be an absolute path, got %q", fp.Cwd), nil))
		return
	}
	if e := errRelativeDir(req.Method, fp.Dirs); e != nil {
		reply(nil, e)
		return
	}
	if s := r.sessionOf(p); s == nil {
		if id := acp.SessionID(p); r.opts.Store == nil || !r.opts.Store.Exists(id) {
			reply(nil, errNoSession(req.Method, id))
			return
		}
	}
	s, id := r.sessionFor(ctx, p) // an evicted one comes back
	if s == nil {
		reply(nil, errNoSession(req.Method, id))
		return
	}
	s.whenReady(func(err error) {
		if err != nil {
			reply(nil, err)
			return
		}
		s.mu.Lock()
		var names []string
		for name := range s.down {
			names = append(names, name)
		}
		for name := range s.stored {
			if s.down[name] == nil {
				names = append(names, name)
			}
		}
		d := s.down[s.active]
		s.mu.Unlock()
		sort.Strings(names)
		if len(names) != 1 || d == nil {
			reply(nil, acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: session/fork: session %q was served by agents %s; a fork needs one agent's session to fork", s.ID, strings.Join(names, ", ")),
				map[string]any{"sessionId": s.ID, "agents": names}))
			return
		}
		inst, err := d.alive()
		if err != nil {
			reply(nil, err)
			return
		}
		if !acp.Supported(agentCaps(inst).SessionCapabilities.Fork) {
			reply(nil, acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: session/fork: agent %q, which serves session %q, does not support session/fork", inst.Agent.Name(), s.ID),
				map[string]string{"sessionId": s.ID, "agent": inst.Agent.Name()}))
			return
		}
		r.spawn(func() { r.fork(ctx, req, s, d, inst, filepath.Clean(fp.Cwd)) })
	})
}

// fork forwards session/fork of s to d's agent and registers the new
// session, bound in the agent's read path like session/new's.
func (r *Router) fork(ctx context.Context, req *jsonrpc2.Request, s *Session, d *downstream, inst *upstream.Instance, cwd string) {
	reply := r.replyTo(req)
	if err := r.admit(inst); err != nil {
		reply(nil, err)
		return
	}
	s.mu.Lock()
	newParams := rewriteNewParams(s.newParams, params(req), cwd)
	history := append([]merge.TurnRecord(nil), s.history...)
	histBytes, nextSeq, enforce := s.histBytes, s.nextSeq, s.Enforce
	s.mu.Unlock()
	var np struct {
		Dirs []string `json:"additionalDirectories"`
	}
	json.Unmarshal(newParams, &np)
	var roots []string
	for _, dir := range np.Dirs {
		if filepath.IsAbs(dir) {
			roots = append(roots, filepath.Clean(dir))
		}
	}
	ns := &Session{Cwd: cwd, Enforce: enforce, r: r, newParams: newParams, active: inst.Agent.Name(), down: map[string]*downstream{}, opening: map[string]chan struct{}{},
		toolIDs: merge.NewIDTable(), msgIDs: merge.NewIDTable(), roots: roots, policy: guard.NewSession(cwd, roots), lastUse: time.Now(),
		history: history, histBytes: histBytes, nextSeq: nextSeq}
	out := adaptNewSession(params(req), agentCaps(inst), inst.Agent.Name(), r.log)
	out = rewriteSessionID(out, s.ID, d.id)
	bound := false
	c, err := inst.Peer().Call(ctx, req.Method, paramsAny(out), acp.RawID(req.ID), func(m *acp.Message) { bound = r.bind(ns, inst, m) })
	if err != nil {
		reply(nil, inst.Agent.Error(inst, err))
		return
	}
	res, err := c.Wait(ctx)
	if err != nil {
		reply(nil, inst.Agent.Error(inst, err))
		return
	}
	if !bound {
		reply(nil, acp.NewError(acp.CodeInternalError, fmt.Sprintf("acp-router: agent %q answered session/fork without a sessionId", inst.Agent.Name()), map[string]string{"agent": inst.Agent.Name()}))
		return
	}
	ns.mu.Lock()
	if nd := ns.down[inst.Agent.Name()]; nd != nil {
		nd.seen = nextSeq // the fork has the parent's context
	}
	ns.mu.Unlock()
	r.declareMcp(ns)
	r.log.Info("session forked", "session", ns.ID, "from", s.ID, "agent", inst.Agent.Name())
	reply(ns.newSessionResult(res), nil)
	ns.write(ns.commandsLine())
	ns.openAfter(r.opts.OpenDelay)
}
