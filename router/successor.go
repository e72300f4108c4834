package router

// The router as a proxy in an ACP proxy chain (rfds/proxy-chains; schema
// InitializeProxyRequest, ProxySuccessorRequest/Notification; issue 15
// point 4). A conductor that starts the router with proxy/initialize gives
// it a successor: the next component of the chain, reached only through
// proxy/successor messages on the router's own stdio.
//
// The successor is an agent like any other, named config.SuccessorName:
// what differs is its transport. Its upstream.Agent is connected through an
// upstream.Link (SetConnect) whose two pipes end here, in a successorLink:
// what the router writes to the successor is read from one pipe and sent to
// the conductor wrapped in proxy/successor; what the conductor delivers in
// proxy/successor is unwrapped and written into the other, as if the
// successor had written it on a stdout. Routing, switching, the policy, the
// audit log, restarts and errors naming the agent are the ones of every
// agent: the wrapping happens here and nowhere else.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/upstream"
)

// Roles of the router on its stdio, chosen by the first initialize.
const (
	roleNone  int32 = iota
	roleAgent       // initialize: the router is the editor's agent
	roleProxy       // proxy/initialize: a proxy with a successor
)

// successorEnvelope is the params of proxy/successor, a request or a
// notification: the wrapped message's method and params, unchanged. The
// envelope's own _meta is hop-local (schema ProxySuccessorRequest): it is
// neither sent nor copied into the unwrapped message.
type successorEnvelope struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// beginProxy makes the router a proxy with a successor (proxy/initialize):
// the agent named config.SuccessorName (implicit when the config does not
// list it) is reached through the conductor from now on. It runs in the
// editor's read loop, before anything that reads r.agents can run for the
// editor's later messages. It reports false when the router was
// initialized as an agent already.
func (r *Router) beginProxy() bool {
	if !r.role.CompareAndSwap(roleNone, roleProxy) {
		return r.role.Load() == roleProxy
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.byName[config.SuccessorName]
	if a == nil {
		a = upstream.New(config.Agent{
			Name:           config.SuccessorName,
			Title:          config.SuccessorName,
			EnvInherit:     config.EnvInheritAll,
			StartupTimeout: config.DefaultStartupTimeout,
			StallTimeout:   config.DefaultStallTimeout,
			CancelTimeout:  config.DefaultCancelTimeout,
			Auth:           config.AuthAdvertise,
		}, r.uopts)
		r.agents = append(r.agents, a)
		r.byName[config.SuccessorName] = a
	}
	r.chain = &chain{r: r, log: r.log.Named("successor-link")}
	a.SetConnect(r.chain.connect)
	r.log.Info("running as a proxy in an ACP proxy chain", "successor", config.SuccessorName, "default", r.defaultAgent())
	return true
}

// isProxy: the router was started with proxy/initialize.
func (r *Router) isProxy() bool { return r.role.Load() == roleProxy }

// chain is the router's side of the conductor connection for the
// successor: the live link, if any.
type chain struct {
	r   *Router
	log hclog.Logger

	mu  sync.Mutex
	cur *successorLink
}

// successorLink is one connection to the successor: one instance of the
// successor agent.
type successorLink struct {
	c *chain
	// toAgent carries the successor's messages to the agent's Peer;
	// fromAgent what the Peer sends to the successor.
	toAgent   *io.PipeWriter
	fromAgent *io.PipeReader
	done      chan struct{}
	close     func()

	mu sync.Mutex
	// inbound: the conductor's proxy/successor requests delivered to the
	// router, by IDKey (the id is passed through unchanged).
	inbound map[string]jsonrpc2.ID
	// outbound: the router's requests to the successor, by IDKey of their
	// id on the link, → the id of the proxy/successor request carrying
	// them on the conductor connection (for $/cancel_request).
	outbound map[string]json.RawMessage
}

// connect opens a link to the successor (upstream.Connect).
func (c *chain) connect() (*upstream.Link, error) {
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	l := &successorLink{c: c, toAgent: outW, fromAgent: inR, done: make(chan struct{}),
		inbound: map[string]jsonrpc2.ID{}, outbound: map[string]json.RawMessage{}}
	l.close = sync.OnceFunc(l.shut)
	c.mu.Lock()
	old := c.cur
	c.cur = l
	c.mu.Unlock()
	if old != nil {
		old.close()
	}
	c.r.spawn(l.pump)
	return &upstream.Link{
		Out:   outR,
		In:    inW,
		Done:  l.done,
		Err:   func() error { return errors.New("the link to the successor through the conductor ended") },
		Close: l.close,
	}, nil
}

// live returns the link that is up, or nil.
func (c *chain) live() *successorLink {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// shut ends the link: the agent's Peer reads EOF, what it still sends is
// discarded, and the conductor's requests it had not answered fail.
func (l *successorLink) shut() {
	l.toAgent.CloseWithError(io.EOF)
	l.fromAgent.CloseWithError(io.ErrClosedPipe)
	l.c.mu.Lock()
	if l.c.cur == l {
		l.c.cur = nil
	}
	l.c.mu.Unlock()
	l.mu.Lock()
	ids := make([]jsonrpc2.ID, 0, len(l.inbound))
	for _, id := range l.inbound {
		ids = append(ids, id)
	}
	clear(l.inbound)
	l.mu.Unlock()
	for _, id := range ids {
		l.c.r.editor.Reply(context.Background(), id, nil, errNoSuccessor)
	}
	close(l.done)
}

// write hands one line to the agent's Peer, as the successor's output. It
// waits until the Peer has read it (the agent's read path: it applies the
// same backpressure as a process's stdout).
func (l *successorLink) write(msg map[string]any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	_, err = l.toAgent.Write(append(b, '\n'))
	return err
}

// pump reads what the router sends to the successor and sends it to the
// conductor wrapped in proxy/successor, until the link ends.
func (l *successorLink) pump() {
	defer l.close()
	editor := l.c.r.editor
	br := bufio.NewReaderSize(l.fromAgent, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		m, err := acp.Classify(line[:len(line)-1])
		if err != nil {
			l.c.log.Warn("unreadable message to the successor dropped", "error", err)
			continue
		}
		ctx := context.Background()
		switch m.Kind {
		case acp.KindRequest:
			l.call(ctx, m)
		case acp.KindNotification:
			if m.Method == acp.MethodCancelRequest {
				l.cancelOutbound(ctx, m)
				continue
			}
			if err := editor.Notify(ctx, acp.MethodProxySuccessor, successorEnvelope{Method: m.Method, Params: m.Params}); err != nil {
				l.c.log.Debug("cannot send to the conductor", "method", m.Method, "error", err)
			}
		case acp.KindResponse:
			l.answer(ctx, m)
		}
	}
}

// call sends the router's request m to the successor as a proxy/successor
// request and relays its result or error, unchanged, as the answer.
func (l *successorLink) call(ctx context.Context, m *acp.Message) {
	id := m.ID
	c, err := l.c.r.editor.Call(ctx, acp.MethodProxySuccessor, successorEnvelope{Method: m.Method, Params: m.Params}, nil, nil)
	if err != nil {
		l.reply(id, nil, fail(errInternal, "acp-router: cannot reach the conductor: "+err.Error(), nil))
		return
	}
	key := acp.IDKey(id)
	l.mu.Lock()
	l.outbound[key] = c.ID
	l.mu.Unlock()
	l.c.r.spawn(func() {
		res, err := c.Wait(context.Background())
		l.mu.Lock()
		delete(l.outbound, key)
		l.mu.Unlock()
		var rpcErr *jsonrpc2.Error
		if err != nil && !errors.As(err, &rpcErr) {
			rpcErr = fail(errInternal, "acp-router: the conductor connection ended: "+err.Error(), nil)
		}
		l.reply(id, res, rpcErr)
	})
}

// reply writes the successor's answer to the router's request id.
func (l *successorLink) reply(id json.RawMessage, res json.RawMessage, rpcErr *jsonrpc2.Error) {
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if rpcErr != nil {
		msg["error"] = rpcErr
	} else {
		if res == nil {
			res = json.RawMessage("null")
		}
		msg["result"] = res
	}
	if err := l.write(msg); err != nil {
		l.c.log.Debug("answer from the successor dropped: the link ended", "id", string(id))
	}
}

// cancelOutbound: the router withdraws a request to the successor.
// Cancellation is never forwarded to another hop (schema
// ProxySuccessorRequest): the conductor gets $/cancel_request for the
// proxy/successor request carrying it.
func (l *successorLink) cancelOutbound(ctx context.Context, m *acp.Message) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if err := decodeParams(m.Params, &p); err != nil || p.RequestID == nil {
		l.c.r.dropMalformed("successor", acp.MethodCancelRequest, cmp.Or(err, errNoRequestID))
		return
	}
	l.mu.Lock()
	outer, ok := l.outbound[acp.IDKey(p.RequestID)]
	l.mu.Unlock()
	if !ok {
		return
	}
	if err := l.c.r.editor.Notify(ctx, acp.MethodCancelRequest, map[string]json.RawMessage{"requestId": outer}); err != nil {
		l.c.log.Debug("cannot send $/cancel_request to the conductor", "error", err)
	}
}

// answer relays the router's answer to a request of the successor as the
// answer to the conductor's proxy/successor request.
func (l *successorLink) answer(ctx context.Context, m *acp.Message) {
	key := acp.IDKey(m.ID)
	l.mu.Lock()
	id, ok := l.inbound[key]
	delete(l.inbound, key)
	l.mu.Unlock()
	if !ok {
		l.c.log.Debug("answer for no pending proxy/successor request dropped", "id", string(m.ID))
		return
	}
	var err error
	if m.Error != nil {
		e := new(jsonrpc2.Error)
		if json.Unmarshal(m.Error, e) != nil {
			e = fail(errInternal, "acp-router: malformed error", nil)
		}
		err = e
	}
	if rerr := l.c.r.editor.Reply(ctx, id, m.Result, err); rerr != nil {
		l.c.log.Debug("cannot answer the conductor", "error", rerr)
	}
}

// fromSuccessor handles proxy/successor from the conductor: a message of
// the successor for the router, unwrapped and handed to the successor
// agent's connection. It runs in the editor's read loop, so that the
// successor's messages keep their order.
func (r *Router) fromSuccessor(req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	if !r.isProxy() {
		if req.Notif {
			r.log.Warn("proxy/successor notification before proxy/initialize dropped")
			return
		}
		reply(nil, fail(errNoMethod,
			"acp-router: proxy/successor is valid only when a conductor started the router with proxy/initialize (ACP proxy chains)",
			map[string]string{"method": req.Method}))
		return
	}
	var env successorEnvelope
	if req.Params == nil || json.Unmarshal(*req.Params, &env) != nil || env.Method == "" {
		if req.Notif {
			r.log.Warn("malformed proxy/successor notification dropped")
			return
		}
		reply(nil, fail(errParams, "acp-router: proxy/successor needs params with the wrapped message's method", nil))
		return
	}
	if string(env.Params) == "null" {
		env.Params = nil
	}
	l := r.chain.live()
	if l == nil {
		if req.Notif {
			// The successor was stopped (idle, hung, restarted): its late
			// notification has no connection to go to. Other sessions are
			// not concerned.
			r.log.Warn("proxy/successor notification dropped: the successor is not connected", "method", env.Method)
			return
		}
		reply(nil, errNoSuccessor)
		return
	}
	msg := map[string]any{"jsonrpc": "2.0", "method": env.Method}
	if env.Params != nil {
		msg["params"] = env.Params
	}
	var key string
	if !req.Notif {
		raw := acp.RawID(req.ID)
		key = acp.IDKey(raw)
		l.mu.Lock()
		_, dup := l.inbound[key]
		if !dup {
			l.inbound[key] = req.ID
		}
		l.mu.Unlock()
		if dup {
			reply(nil, fail(errNotNow, "acp-router: a proxy/successor request with this id is already pending", nil))
			return
		}
		msg["id"] = raw
	}
	if err := l.write(msg); err != nil {
		if req.Notif {
			r.log.Warn("proxy/successor notification dropped: the successor is not connected", "method", env.Method)
			return
		}
		l.mu.Lock()
		_, still := l.inbound[key]
		delete(l.inbound, key)
		l.mu.Unlock()
		if still { // else shut answered it
			reply(nil, errNoSuccessor)
		}
	}
}

// cancelSuccessorRequest: the conductor withdraws a proxy/successor
// request it delivered; the router's handling of it is cancelled as the
// successor's own $/cancel_request would. It reports whether id was one.
func (r *Router) cancelSuccessorRequest(id json.RawMessage) bool {
	if !r.isProxy() {
		return false
	}
	l := r.chain.live()
	if l == nil {
		return false
	}
	l.mu.Lock()
	_, ok := l.inbound[acp.IDKey(id)]
	l.mu.Unlock()
	if !ok {
		return false
	}
	if err := l.write(map[string]any{"jsonrpc": "2.0", "method": acp.MethodCancelRequest, "params": map[string]json.RawMessage{"requestId": id}}); err != nil {
		r.log.Debug("cannot cancel a request of the successor", "error", err)
	}
	return true
}

// proxyInitialize answers proxy/initialize: the router becomes a proxy and
// answers as initialize does, once it has initialized its successor
// through the conductor (the schema: a proxy MUST forward initialize to its
// successor before answering). The request is never passed to an agent.
func (r *Router) proxyInitialize(ctx context.Context, req *jsonrpc2.Request) {
	if !r.beginProxy() {
		r.replyTo(req)(nil, fail(errNotNow,
			"acp-router: already initialized as an agent (initialize); proxy/initialize must be the first message from a conductor", nil))
		return
	}
	r.spawn(func() { r.replyTo(req)(r.initialize(ctx, req)) })
}
