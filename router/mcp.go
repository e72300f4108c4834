package router

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/upstream"
)

// MCP over ACP (notes/acp-currency.md row 12): the ACP-transport MCP
// servers a session declares are hosted by the editor; mcp/message is
// routed by serverId both ways, and an agent reaches only the servers its
// own sessions declared.

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

// mcpParams reads serverId and requestId of mcp/message params.
func mcpParams(p json.RawMessage) (serverID string, requestID json.RawMessage) {
	var mp struct {
		ServerID  string          `json:"serverId"`
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(p, &mp) != nil {
		// Params that do not decode name no server: both callers answer
		// "" with errMcpServer (-32602), or drop it if a notification.
		return "", nil
	}
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
	r.decideOn(ctx, s, inst, req, p, server, "", func(v *guard.Verdict) {
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
	if err := json.Unmarshal(s.newParams, &np); err != nil {
		// The router wrote them: the policy names the server by its
		// serverId, as one declared without a name.
		s.r.log.Warn("the session's mcpServers do not decode", "session", s.ID, "error", err)
	}
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
