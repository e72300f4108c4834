package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// stream is one SSE stream of an HTTP connection: the connection's or a
// session's. Guarded by its connection's mu.
type stream struct {
	q        [][]byte
	bytes    int
	receiver bool
	wake     chan struct{} // a message queued: for the receiver
}

func newStream() *stream {
	return &stream{wake: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// httpConn is a connection of the Streamable HTTP profile: POSTs feed
// Read, Write feeds the SSE streams.
type httpConn struct {
	s     *Server
	id    string
	ident Identity
	in    chan []byte
	done  chan struct{}
	once  sync.Once
	// reason is why the connection ended; set before done is closed.
	reason error

	mu       sync.Mutex
	main     *stream
	sessions map[string]*stream
	// pending routes the reply to each client request: its session's
	// stream, "" for the connection's.
	pending map[string]string
	// asked: the session each request to the client came on, which the
	// client's response must name in Acp-Session-Id.
	asked     map[string]string
	initID    string
	initReply chan []byte // the initialize response, taken once
	idle      *time.Timer
	// buffered is what all the streams hold; room is signalled when a
	// receiver takes some (Write's one goroutine waits on it).
	buffered int
	room     chan struct{}
}

// maxPending bounds the request ids a connection remembers each way; the
// hub bounds what is really in flight, this only keeps a broken client
// from growing the maps.
const maxPending = 1 << 16

func (c *httpConn) Read(ctx context.Context) ([]byte, error) {
	select {
	case b := <-c.in:
		return b, nil
	case <-c.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *httpConn) Write(ctx context.Context, msg []byte) error {
	m := parse(msg)
	c.mu.Lock()
	if c.initReply != nil && m.isReply && m.id == c.initID {
		ch := c.initReply
		c.initReply = nil
		c.mu.Unlock()
		ch <- msg
		return nil
	}
	var route string
	switch {
	case m.isReply:
		route = c.pending[m.id]
		delete(c.pending, m.id)
	default:
		route = m.session
		if m.hasID && len(c.asked) < maxPending {
			c.asked[m.id] = route
		}
	}
	c.mu.Unlock()
	return c.put(ctx, route, msg)
}

// streamLocked is the stream of route ("" the connection's), created for
// a session on first use.
func (c *httpConn) streamLocked(route string) (*stream, error) {
	if route == "" {
		return c.main, nil
	}
	if st := c.sessions[route]; st != nil {
		return st, nil
	}
	if len(c.sessions) >= c.s.opts.MaxSessionStreams {
		return nil, fmt.Errorf("remote: more than %d session streams on one connection", c.s.opts.MaxSessionStreams)
	}
	st := newStream()
	c.sessions[route] = st
	return st, nil
}

// put queues msg on route's stream, waiting while that stream holds
// StreamBuffer bytes its client has not taken, or the connection's
// streams together connBuffer. The stream is looked up again each time:
// a session stream whose receiver left empty is gone, and the next
// message for it starts a new one.
func (c *httpConn) put(ctx context.Context, route string, msg []byte) error {
	var timeout <-chan time.Time
	limit := c.s.opts.StreamBuffer
	for {
		c.mu.Lock()
		select {
		case <-c.done:
			c.mu.Unlock()
			return errClosed
		default:
		}
		st, err := c.streamLocked(route)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		if c.buffered == 0 || (st.bytes+len(msg) <= limit && c.buffered+len(msg) <= connBuffer*limit) {
			st.q = append(st.q, msg)
			st.bytes += len(msg)
			c.buffered += len(msg)
			c.mu.Unlock()
			signal(st.wake)
			return nil
		}
		c.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(c.s.opts.WriteTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-c.room:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return errWriteTimeout
		case <-c.done:
			return errClosed
		}
	}
}

// connBuffer: a connection's streams together hold at most this many
// StreamBuffers (a client that opens no stream for sessions it is sent
// cannot make the router keep MaxSessionStreams buffers).
const connBuffer = 4

func (c *httpConn) Close(reason error) error {
	c.once.Do(func() {
		c.reason = reason
		close(c.done)
		c.mu.Lock()
		if c.idle != nil {
			c.idle.Stop()
		}
		c.mu.Unlock()
		c.s.mu.Lock()
		delete(c.s.conns, c.id)
		c.s.mu.Unlock()
	})
	return nil
}

// connection is the connection a request names in Acp-Connection-Id, as
// lookup finds it; nil when there is none, and the client has been
// answered (400 without the header, 404 for an unknown id).
func (s *Server) connection(w http.ResponseWriter, r *http.Request, id Identity) *httpConn {
	if r.Header.Get(HeaderConnectionID) == "" {
		text(w, http.StatusBadRequest, "Missing Acp-Connection-Id")
		return nil
	}
	c := s.lookup(r, id)
	if c == nil {
		text(w, http.StatusNotFound, "Unknown Acp-Connection-Id")
	}
	return c
}

func (s *Server) lookup(r *http.Request, id Identity) *httpConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[r.Header.Get(HeaderConnectionID)]
	// The token's identity, not only its name: a token of the same name
	// created after a revoke is another token, and reaches none of the
	// connections the revoked one opened.
	if c == nil || c.ident.Name != id.Name || c.ident.Token != id.Token {
		return nil
	}
	return c
}

func (s *Server) post(w http.ResponseWriter, r *http.Request, id Identity) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		text(w, http.StatusUnsupportedMediaType, "Unsupported Media Type")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.MaxMessage)))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			text(w, http.StatusRequestEntityTooLarge, "message exceeds the "+strconv.Itoa(s.opts.MaxMessage)+"-byte limit")
			return
		}
		return // the client went away mid-body
	}
	switch classify(body) {
	case kindInvalid:
		text(w, http.StatusBadRequest, "Invalid JSON")
		return
	case kindBatch:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(protocolError(codeInvalidRequest, "JSON-RPC batches are not supported"))
		return
	case kindScalar:
		text(w, http.StatusBadRequest, "Invalid JSON-RPC message")
		return
	}
	m := parse(body)
	if len(m.id) > maxIDLength || len(m.session) > maxIDLength || len(r.Header.Get(HeaderSessionID)) > maxIDLength {
		text(w, http.StatusBadRequest, "id exceeds "+strconv.Itoa(maxIDLength)+" characters")
		return
	}
	if m.method == "initialize" && !m.isReply {
		switch {
		case r.Header.Get(HeaderConnectionID) != "":
			text(w, http.StatusBadRequest, "Initialize not allowed on existing connection")
		case !m.hasID:
			text(w, http.StatusBadRequest, "Initialize request must include an ID")
		default:
			s.initialize(w, r, id, m, body)
		}
		return
	}
	c := s.connection(w, r, id)
	if c == nil {
		return
	}
	header := r.Header.Get(HeaderSessionID)
	c.mu.Lock()
	var problem string
	if m.isReply {
		route, known := c.asked[m.id]
		switch {
		case known && route != "" && header == "":
			problem = "Missing Acp-Session-Id"
		case known && route != "" && header != route:
			problem = "Mismatched Acp-Session-Id"
		default:
			delete(c.asked, m.id)
		}
	} else {
		switch {
		case (sessionScoped[m.method] || m.session != "") && header == "":
			problem = "Missing Acp-Session-Id"
		case header != "" && m.session != "" && header != m.session:
			problem = "Mismatched Acp-Session-Id"
		case m.hasID && len(c.pending) >= maxPending:
			problem = "too many requests in flight"
		case m.hasID:
			route := header
			if m.method == "session/load" {
				route = "" // the SDK's server answers load on the connection's stream
			}
			c.pending[m.id] = route
		}
	}
	c.mu.Unlock()
	if problem != "" {
		text(w, http.StatusBadRequest, problem)
		return
	}
	select {
	case c.in <- body:
		w.WriteHeader(http.StatusAccepted)
	case <-c.done:
		text(w, http.StatusNotFound, "Unknown Acp-Connection-Id")
	case <-r.Context().Done():
	}
}

// initialize opens a connection and answers with the hub's initialize
// response and the new connection's id.
func (s *Server) initialize(w http.ResponseWriter, r *http.Request, id Identity, m message, body []byte) {
	if !s.reserve() {
		text(w, http.StatusServiceUnavailable, "too many connections")
		return
	}
	initReply := make(chan []byte, 1)
	c := &httpConn{s: s, id: newID(), ident: id, in: make(chan []byte), done: make(chan struct{}),
		main: newStream(), sessions: map[string]*stream{}, pending: map[string]string{}, asked: map[string]string{},
		initID: m.id, initReply: initReply, room: make(chan struct{}, 1)}
	s.mu.Lock()
	s.conns[c.id] = c
	s.mu.Unlock()
	go func() {
		defer s.release()
		defer s.watch(id, c.id, func(why error) { c.Close(why) })()
		err := s.opts.Serve(s.ctx, c, id)
		if err == nil {
			err = io.EOF
		}
		c.Close(err)
	}()
	fail := func() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write(errorReply(m.id, -32603, "Initialize failed"))
	}
	select {
	case c.in <- body:
	case <-c.done:
		fail()
		return
	case <-r.Context().Done():
		c.Close(errors.New("the client gave up on initialize"))
		return
	}
	select {
	case reply := <-initReply:
		c.mu.Lock()
		c.idle = time.AfterFunc(s.opts.IdleTimeout, func() { c.Close(errIdle) })
		c.mu.Unlock()
		w.Header().Set(HeaderConnectionID, c.id)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(reply)
	case <-c.done:
		fail()
	case <-r.Context().Done():
		c.Close(errors.New("the client gave up on initialize"))
	}
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, id Identity) {
	c := s.connection(w, r, id)
	if c == nil {
		return
	}
	c.Close(errDeleted)
	w.WriteHeader(http.StatusAccepted)
}

// get serves an SSE stream: the connection's, or with Acp-Session-Id a
// session's.
func (s *Server) get(w http.ResponseWriter, r *http.Request, id Identity) {
	if !headerHas(r.Header, "Accept", "text/event-stream") {
		text(w, http.StatusNotAcceptable, "Not Acceptable")
		return
	}
	c := s.connection(w, r, id)
	if c == nil {
		return
	}
	session := r.Header.Get(HeaderSessionID)
	if len(session) > maxIDLength {
		text(w, http.StatusBadRequest, "id exceeds "+strconv.Itoa(maxIDLength)+" characters")
		return
	}
	c.mu.Lock()
	st, err := c.streamLocked(session)
	switch {
	case err != nil:
		c.mu.Unlock()
		text(w, http.StatusBadRequest, "too many session streams")
		return
	case st.receiver:
		c.mu.Unlock()
		text(w, http.StatusConflict, "Outbound stream already has an active receiver")
		return
	}
	st.receiver = true
	if st == c.main && c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		st.receiver = false
		switch {
		case st == c.main:
			if c.idle != nil {
				c.idle.Reset(s.opts.IdleTimeout)
			}
		case len(st.q) == 0 && c.sessions[session] == st:
			delete(c.sessions, session)
		}
		c.mu.Unlock()
	}()
	s.pump(w, r, c, st)
}

// pump writes st's messages as SSE events until the client goes or the
// connection ends.
func (s *Server) pump(w http.ResponseWriter, r *http.Request, c *httpConn, st *stream) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A client that stops reading holds this goroutine at most
	// WriteTimeout a write.
	write := func(parts ...[]byte) bool {
		rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		for _, p := range parts {
			if _, err := w.Write(p); err != nil {
				return false
			}
		}
		return true
	}
	if !write() || rc.Flush() != nil {
		return
	}
	keepAlive := time.NewTicker(keepAliveInterval)
	defer keepAlive.Stop()
	dataPrefix, end := []byte("data: "), []byte("\n\n")
	for {
		c.mu.Lock()
		batch := st.q
		c.buffered -= st.bytes
		st.q, st.bytes = nil, 0
		c.mu.Unlock()
		if len(batch) > 0 {
			signal(c.room)
			for _, msg := range batch {
				if !write(dataPrefix, msg, end) {
					return
				}
			}
			if rc.Flush() != nil {
				return
			}
			continue
		}
		select {
		case <-st.wake:
		case <-keepAlive.C:
			if !write([]byte(":\n\n")) || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-c.done:
			// What was queued before the end still goes out, then why.
			c.mu.Lock()
			batch := st.q
			c.buffered -= st.bytes
			st.q, st.bytes = nil, 0
			c.mu.Unlock()
			for _, msg := range batch {
				if !write(dataPrefix, msg, end) {
					return
				}
			}
			write([]byte(": closed: " + sseComment(c.reason) + "\n\n"))
			rc.Flush()
			return
		}
	}
}

// sseComment is reason on one line.
func sseComment(reason error) string {
	if reason == nil || errors.Is(reason, io.EOF) {
		return "end of connection"
	}
	b := []byte(reason.Error())
	for i, ch := range b {
		if ch == '\n' || ch == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}
