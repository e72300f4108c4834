package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

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
	// ready is closed once conn is set: nothing is read before, so no
	// handler or hook can see the Peer half built.
	ready chan struct{}

	mu      sync.Mutex
	pending map[string]func(*Message) // our requests in flight, by IDKey
	// raw: the requests of pending sent by CallRaw. The Conn never saw
	// them: their responses are consumed in the read path.
	raw map[string]bool
	// answered: ids whose response is on its way to the Conn. They stay in
	// pending until the Conn has resolved the call (its next read): a Call
	// reusing one earlier would replace jsonrpc2's pending entry and be
	// given this response.
	answered []string
	next     uint64
	// inbound: the peer's requests not answered yet, by IDKey (a count,
	// for a peer that reuses an id).
	inbound map[string]int

	// messages counts what was read from the peer and sent to it through
	// the Conn (Activity).
	messages atomic.Uint64

	// observe (ObserveCalls) sees each request sent; ends are the ends of
	// those in flight, by IDKey (nil when nobody observes).
	observe CallObserver
	ends    map[string]func(*Message, error)
}

// CallObserver sees each request a Peer sends (Call, CallRaw) and returns
// what is told how it ended, or nil: the response (m.Error set for an
// error answer), or err when it got none (not sent, or the connection
// closed first). The telemetry's span per agent call (issue 17) is one.
type CallObserver func(ctx context.Context, method string) (end func(m *Message, err error))

// ObserveCalls makes o see every request sent from now on; call it before
// the first Call.
func (p *Peer) ObserveCalls(o CallObserver) {
	p.mu.Lock()
	p.observe, p.ends = o, map[string]func(*Message, error){}
	p.mu.Unlock()
	go func() {
		<-p.Done()
		p.mu.Lock()
		ends := p.ends
		p.ends = map[string]func(*Message, error){}
		p.mu.Unlock()
		for _, end := range ends {
			end(nil, jsonrpc2.ErrClosed)
		}
	}()
}

// observeLocked registers o's end of request key, sent as method.
func (p *Peer) observeLocked(ctx context.Context, key, method string) {
	if p.observe == nil {
		return
	}
	if end := p.observe(ctx, method); end != nil {
		p.ends[key] = end
	}
}

// unobserve ends request key's observation with err (it was not sent).
func (p *Peer) unobserve(key string, err error) {
	p.mu.Lock()
	end := p.ends[key]
	delete(p.ends, key)
	p.mu.Unlock()
	if end != nil {
		end(nil, err)
	}
}

// NewPeer connects to a peer over r/w. h handles the peer's requests and
// notifications (in the read loop: it must not wait for responses inline).
// opts.Intercept, when set, sees messages before the Conn.
func NewPeer(ctx context.Context, r io.ReadCloser, w io.WriteCloser, opts StreamOptions, h jsonrpc2.Handler) *Peer {
	p := &Peer{pending: map[string]func(*Message){}, raw: map[string]bool{}, inbound: map[string]int{}, user: opts.Intercept, ready: make(chan struct{})}
	if p.user == nil {
		if i, ok := h.(Interceptor); ok {
			p.user = i.Intercept
		}
	}
	opts.Intercept = p.intercept
	p.stream = NewStream(r, w, opts)
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p.conn = jsonrpc2.NewConn(ctx, connStream{p.stream, p}, h,
		jsonrpc2.SetLogger(log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})),
		jsonrpc2.OnRecv(p.onRecv), jsonrpc2.OnSend(p.onSend))
	close(p.ready)
	return p
}

// Interceptor is a jsonrpc2.Handler that also takes messages in the read
// path, before the Conn decodes them (the fast path, issue 16): NewPeer
// uses its Intercept when opts.Intercept is not set. A request it consumes
// is the Peer's to answer (Reply, ReplyRaw).
type Interceptor interface {
	Intercept(*Message) bool
}

func (p *Peer) intercept(m *Message) bool {
	p.messages.Add(1)
	if m.Kind == KindResponse {
		key := IDKey(m.ID)
		p.mu.Lock()
		hook, ok := p.pending[key]
		raw := ok && p.raw[key]
		end := p.ends[key] // nil map when nobody observes
		if end != nil {
			delete(p.ends, key)
		}
		switch {
		case raw: // the Conn has no call to resolve: the id is free now
			delete(p.pending, key)
			delete(p.raw, key)
		case ok:
			p.pending[key] = nil // run the hook once
			p.answered = append(p.answered, key)
		}
		p.mu.Unlock()
		if end != nil {
			end(m, nil)
		}
		if ok && hook != nil {
			hook(m)
		}
		return raw
	}
	if p.user == nil || !p.user(m) {
		return false
	}
	if m.Kind == KindRequest { // answered later, as onRecv counts the Conn's
		key := IDKey(m.ID)
		p.mu.Lock()
		p.inbound[key]++
		p.mu.Unlock()
	}
	return true
}

// onRecv registers a request of the peer before its handler runs, so that
// the answer cannot be sent first.
func (p *Peer) onRecv(req *jsonrpc2.Request, resp *jsonrpc2.Response) {
	if req == nil || resp != nil || req.Notif {
		return
	}
	key := IDKey(RawID(req.ID))
	p.mu.Lock()
	p.inbound[key]++
	p.mu.Unlock()
}

// onSend counts what the Conn sends and retires the peer's requests as
// they are answered. It runs before the message is written.
func (p *Peer) onSend(_ *jsonrpc2.Request, resp *jsonrpc2.Response) {
	p.messages.Add(1)
	if resp == nil {
		return
	}
	key := IDKey(RawID(resp.ID))
	p.mu.Lock()
	if n := p.inbound[key]; n > 1 {
		p.inbound[key] = n - 1
	} else {
		delete(p.inbound, key)
	}
	p.mu.Unlock()
}

// Activity is a snapshot of the traffic on a connection (Peer.Activity),
// for telling an idle agent from a busy one (issue 5 req. 7).
type Activity struct {
	// Messages counts the messages read from the peer and those sent to it
	// through the Conn so far. Lines written with Stream().WriteRaw are
	// not counted (Stream.Written counts their bytes).
	Messages uint64
	// Calls: our requests the peer has not answered yet.
	Calls int
	// Requests: the peer's requests we have not answered yet.
	Requests int
}

// Busy reports whether a request is outstanding in either direction.
func (a Activity) Busy() bool { return a.Calls > 0 || a.Requests > 0 }

// Activity returns the connection's traffic so far.
func (p *Peer) Activity() Activity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.activityLocked()
}

func (p *Peer) activityLocked() Activity {
	// Answered calls stay in pending until the Conn's next read.
	calls := len(p.pending)
	for i, key := range p.answered {
		if _, ok := p.pending[key]; ok && !slices.Contains(p.answered[:i], key) {
			calls--
		}
	}
	requests := 0
	for _, n := range p.inbound {
		requests += n
	}
	return Activity{Messages: p.messages.Load(), Calls: calls, Requests: requests}
}

// CloseIfIdle closes the connection, as Close does, if nothing happened on
// it since since was taken (Activity unchanged) and nothing is outstanding.
// It reports whether it closed it. The check and the close are one step for
// Call: a Call that has not registered its request by then fails with
// jsonrpc2.ErrClosed instead of reaching a peer that is going away.
func (p *Peer) CloseIfIdle(since Activity) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.activityLocked(); now != since || now.Busy() {
		return false
	}
	p.conn.Close()
	return true
}

// connStream is the Conn's view of the stream. The Conn reads again only
// once it has handled the previous message, so the ids answered before are
// free from then on.
type connStream struct {
	*Stream
	p *Peer
}

func (s connStream) ReadObject(v any) error {
	<-s.p.ready
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

// CloseWrite closes the write side only (Stream.CloseWrite): what is queued
// is flushed, then the peer reads end of file, and what it says meanwhile is
// still read and handled until it closes its side or Close.
func (p *Peer) CloseWrite() { p.stream.CloseWrite() }

// Call is a request in flight.
type Call struct {
	ID json.RawMessage // the id used on the wire
	w  jsonrpc2.Waiter
	p  *Peer
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

// WaitOrCancel is Wait for a caller that gives up when ctx ends: the peer
// is then sent $/cancel_request naming the id it saw, so that the call
// does not stay pending at the peer (issue 27, point 4), and ctx's error
// is returned. The answer the peer still sends (its -32800, or a result
// when the work was done anyway) can be read with Wait.
func (c *Call) WaitOrCancel(ctx context.Context) (json.RawMessage, error) {
	res, err := c.Wait(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The caller's ctx is over: the notice must not depend on it. It
		// fails only on a closed connection, where nothing is pending.
		c.p.Notify(context.WithoutCancel(ctx), MethodCancelRequest, map[string]json.RawMessage{"requestId": c.ID})
	}
	return res, err
}

// reserveLocked picks the id of a new request — prefer when it can be
// reused and is not pending, else a fresh number — and registers
// onResponse for it. Called with p.mu held.
func (p *Peer) reserveLocked(prefer json.RawMessage, onResponse func(*Message)) (json.RawMessage, string) {
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
	return raw, key
}

// Call sends a request without waiting for its response. prefer is the id to
// reuse (the id of the request being forwarded), or nil for a fresh one.
// params nil omits them. onResponse, if set, runs in the read path when the
// response arrives.
func (p *Peer) Call(ctx context.Context, method string, params any, prefer json.RawMessage, onResponse func(*Message)) (*Call, error) {
	p.mu.Lock()
	raw, key := p.reserveLocked(prefer, onResponse)
	p.observeLocked(ctx, key, method)
	p.mu.Unlock()

	id, err := parseID(raw)
	if err == nil {
		var w jsonrpc2.Waiter
		w, err = p.conn.DispatchCall(ctx, method, params, jsonrpc2.PickID(id))
		if err == nil {
			return &Call{ID: raw, w: w, p: p}, nil
		}
	}
	p.mu.Lock()
	delete(p.pending, key)
	p.mu.Unlock()
	p.unobserve(key, err)
	return nil, err
}

// CallRaw is Call for params that are one line of valid JSON, sent as they
// are: the line is built around them, without the Conn (which would decode
// nothing but encode params once more). The response is consumed in the
// read path: onResponse is how it is received (Wait has nothing to wait
// for). It returns the id used on the wire and its IDKey (the caller's
// tables are keyed by it too); jsonrpc2.ErrClosed when the connection is
// closed.
func (p *Peer) CallRaw(method string, params json.RawMessage, prefer json.RawMessage, onResponse func(*Message)) (json.RawMessage, string, error) {
	p.mu.Lock()
	raw, key := p.reserveLocked(prefer, onResponse)
	p.raw[key] = true
	p.observeLocked(context.Background(), key, method)
	p.mu.Unlock()

	line := AppendRequest(make([]byte, 0, len(raw)+len(method)+len(params)+48), raw, method, params)
	p.messages.Add(1)
	err := p.stream.WriteRaw(line)
	if err == nil {
		return raw, key, nil
	}
	p.mu.Lock()
	delete(p.pending, key)
	delete(p.raw, key)
	p.mu.Unlock()
	if errors.Is(err, ErrClosed) {
		err = jsonrpc2.ErrClosed
	}
	p.unobserve(key, err)
	return nil, "", err
}

// Outgoing is what a proxy writes its peer in one call (Peer.Send): a
// message of its own (Note), or a request sent on another peer's behalf
// (Method), or both, the note first. The router's permission path hands
// the editor its outcome this way, whichever it is: the deny notice, or
// the request its user answers, with the ids and options the editor is
// to see put in the agent's bytes in the pass that writes them.
type Outgoing struct {
	// Note is a whole message, one line of valid JSON, written as it is in
	// the lane of session Lane ("": the shared lane). It is not counted
	// (Activity), as Stream().WriteRaw's lines are not.
	Lane string
	Note []byte
	// Method, when set, is a request sent as CallRaw sends it (Prefer,
	// OnResponse) whose params are Params, one line of valid JSON or nil,
	// with Replace written in them (Rewrite).
	Method     string
	Params     json.RawMessage
	Replace    []Replacement
	Prefer     json.RawMessage
	OnResponse func(*Message)
}

// Sent is what Peer.Send sent of a request: its id on the wire and that
// id's IDKey; Unreplaced says which replacements could not be made (the
// request went with the others, as Rewrite leaves them out).
type Sent struct {
	ID         json.RawMessage
	Key        string
	Unreplaced error
}

// Send writes o: its note, then its request. A note that cannot be
// written is not followed by the request.
func (p *Peer) Send(o Outgoing) (Sent, error) {
	var sent Sent
	if o.Note != nil {
		if err := p.stream.WriteRawLane(o.Lane, o.Note); err != nil {
			return sent, err
		}
	}
	if o.Method == "" {
		return sent, nil
	}
	params := o.Params
	if len(o.Replace) > 0 && params != nil {
		params, sent.Unreplaced = Rewrite(params, o.Replace)
	}
	if bytes.IndexByte(params, '\n') >= 0 {
		// Valid JSON over several lines (a peer's own line never is):
		// the request must be one line of the stream.
		var b bytes.Buffer
		if err := json.Compact(&b, params); err != nil {
			return sent, err
		}
		params = b.Bytes()
	}
	var err error
	sent.ID, sent.Key, err = p.CallRaw(o.Method, params, o.Prefer, o.OnResponse)
	return sent, err
}

// ReplyRaw answers the peer's request id (as it was received) with result,
// one line of valid JSON, written as it is (the Conn would compact and
// escape it once more): the answer to a request taken on the fast path, or
// one whose result is another peer's raw bytes. It goes in the lane of the
// session the request named.
func (p *Peer) ReplyRaw(id, result json.RawMessage) error {
	key := IDKey(id)
	p.mu.Lock()
	if n := p.inbound[key]; n > 1 {
		p.inbound[key] = n - 1
	} else {
		delete(p.inbound, key)
	}
	p.mu.Unlock()
	p.messages.Add(1)
	line := AppendResponse(make([]byte, 0, len(id)+len(result)+32), id, result)
	return p.stream.writeAnswer(id, line)
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

// ParseID is the jsonrpc2 id of a raw id (a request read on the fast path).
func ParseID(raw json.RawMessage) (jsonrpc2.ID, error) { return parseID(raw) }

func parseID(raw json.RawMessage) (jsonrpc2.ID, error) {
	// The ids Call sends: plain numbers and strings without escapes.
	if len(raw) > 0 && raw[0] != '"' && plainID(raw) { // digits, at most int64's maximum
		var n uint64
		for _, c := range raw {
			n = n*10 + uint64(c-'0')
		}
		return jsonrpc2.ID{Num: n}, nil
	}
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && verbatim(raw[1:len(raw)-1]) {
		return jsonrpc2.ID{Str: string(raw[1 : len(raw)-1]), IsString: true}, nil
	}
	var id jsonrpc2.ID
	err := json.Unmarshal(raw, &id)
	return id, err
}

// RawID is the wire form of a jsonrpc2 id, as received.
func RawID(id jsonrpc2.ID) json.RawMessage {
	if !id.IsString {
		return strconv.AppendUint(make([]byte, 0, 20), id.Num, 10)
	}
	return AppendString(nil, id.Str)
}
