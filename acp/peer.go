package acp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"
)

// Peer is one JSON-RPC connection (the editor, or one agent): a Stream, the
// jsonrpc2.Conn on top of it, and the ids of the requests the router has in
// flight on it.
//
// Request ids pass through unchanged when they are free on the destination
// connection (DESIGN §5); otherwise a fresh one is chosen. Responses can be
// observed in the read path, before any later message from the peer is
// processed: that is how a session-creating response is bound before the
// agent's first update for the new session (STYLE.md).
type Peer struct {
	conn   *jsonrpc2.Conn
	stream *Stream
	user   func(*Message) bool

	mu      sync.Mutex
	pending map[string]func(*Message) // our requests in flight, by IDKey
	// answered: ids whose response is on its way to the Conn. They stay in
	// pending until the Conn has resolved the call (its next read): a Call
	// reusing one earlier would replace jsonrpc2's pending entry and be
	// given this response.
	answered []string
	next     uint64
}

// NewPeer connects to a peer over r/w. h handles the peer's requests and
// notifications (in the read loop: it must not wait for responses inline).
// opts.Intercept, when set, sees messages before the Conn.
func NewPeer(ctx context.Context, r io.ReadCloser, w io.WriteCloser, opts StreamOptions, h jsonrpc2.Handler) *Peer {
	p := &Peer{pending: map[string]func(*Message){}, user: opts.Intercept}
	opts.Intercept = p.intercept
	p.stream = NewStream(r, w, opts)
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p.conn = jsonrpc2.NewConn(ctx, connStream{p.stream, p}, h, jsonrpc2.SetLogger(log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})))
	return p
}

func (p *Peer) intercept(m *Message) bool {
	if m.Kind == KindResponse {
		key := IDKey(m.ID)
		p.mu.Lock()
		hook, ok := p.pending[key]
		if ok {
			p.pending[key] = nil // run the hook once
			p.answered = append(p.answered, key)
		}
		p.mu.Unlock()
		if ok && hook != nil {
			hook(m)
		}
		return false
	}
	return p.user != nil && p.user(m)
}

// connStream is the Conn's view of the stream. The Conn reads again only
// once it has handled the previous message, so the ids answered before are
// free from then on.
type connStream struct {
	*Stream
	p *Peer
}

func (s connStream) ReadObject(v any) error {
	s.p.mu.Lock()
	for _, key := range s.p.answered {
		delete(s.p.pending, key)
	}
	s.p.answered = s.p.answered[:0]
	s.p.mu.Unlock()
	return s.Stream.ReadObject(v)
}

// Stream is the peer's stream.
func (p *Peer) Stream() *Stream { return p.stream }

// Conn is the peer's jsonrpc2 connection.
func (p *Peer) Conn() *jsonrpc2.Conn { return p.conn }

// Done is closed when the connection is closed.
func (p *Peer) Done() <-chan struct{} { return p.conn.DisconnectNotify() }

// Close closes the connection; queued writes are still flushed.
func (p *Peer) Close() error { return p.conn.Close() }

// Call is a request in flight.
type Call struct {
	ID json.RawMessage // the id used on the wire
	w  jsonrpc2.Waiter
}

// Wait returns the result, the peer's *jsonrpc2.Error, or
// jsonrpc2.ErrClosed when the connection went away first.
func (c *Call) Wait(ctx context.Context) (json.RawMessage, error) {
	var res json.RawMessage
	if err := c.w.Wait(ctx, &res); err != nil {
		return nil, err
	}
	return res, nil
}

// Call sends a request without waiting for its response. prefer is the id to
// reuse (the id of the request being forwarded), or nil for a fresh one.
// params nil omits them. onResponse, if set, runs in the read path when the
// response arrives.
func (p *Peer) Call(ctx context.Context, method string, params any, prefer json.RawMessage, onResponse func(*Message)) (*Call, error) {
	p.mu.Lock()
	raw := prefer
	if len(raw) == 0 || !reusable(raw) || p.pendingLocked(raw) {
		for {
			p.next++
			raw = json.RawMessage(strconv.FormatUint(p.next, 10))
			if !p.pendingLocked(raw) {
				break
			}
		}
	}
	key := IDKey(raw)
	p.pending[key] = onResponse
	p.mu.Unlock()

	id, err := parseID(raw)
	if err == nil {
		var w jsonrpc2.Waiter
		w, err = p.conn.DispatchCall(ctx, method, params, jsonrpc2.PickID(id))
		if err == nil {
			return &Call{ID: raw, w: w}, nil
		}
	}
	p.mu.Lock()
	delete(p.pending, key)
	p.mu.Unlock()
	return nil, err
}

// Notify sends a notification.
func (p *Peer) Notify(ctx context.Context, method string, params any) error {
	return p.conn.Notify(ctx, method, params)
}

// Reply answers a request of this peer with a result or an error. An
// *jsonrpc2.Error is sent as is; any other error becomes -32603.
func (p *Peer) Reply(ctx context.Context, id jsonrpc2.ID, result json.RawMessage, err error) error {
	if err != nil {
		var rpcErr *jsonrpc2.Error
		if !errors.As(err, &rpcErr) {
			rpcErr = &jsonrpc2.Error{Code: CodeInternalError, Message: err.Error()}
		}
		return p.conn.ReplyWithError(ctx, id, rpcErr)
	}
	if result == nil {
		result = json.RawMessage("null")
	}
	return p.conn.Reply(ctx, id, result)
}

func (p *Peer) pendingLocked(raw json.RawMessage) bool {
	_, ok := p.pending[IDKey(raw)]
	return ok
}

// reusable: jsonrpc2 replaces ids 0 and "" with its own counter, and tokens
// stand for ids it cannot carry at all.
func reusable(raw json.RawMessage) bool {
	s := string(raw)
	return plainID(raw) && s != "0" && s != `""` && !IsToken(raw)
}

// IDKey canonicalises a raw id: equal ids written with different string
// escapes get the same key.
func IDKey(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		if len(raw) >= 2 && raw[len(raw)-1] == '"' && verbatim(raw[1:len(raw)-1]) {
			return "s" + string(raw[1:len(raw)-1]) // what decoding it gives
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return "s" + s
		}
	}
	return "n" + string(raw)
}

func parseID(raw json.RawMessage) (jsonrpc2.ID, error) {
	var id jsonrpc2.ID
	err := json.Unmarshal(raw, &id)
	return id, err
}

// RawID is the wire form of a jsonrpc2 id, as received.
func RawID(id jsonrpc2.ID) json.RawMessage {
	b, _ := id.MarshalJSON()
	return b
}
