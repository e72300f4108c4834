package remote

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// wsConn is a connection of the WebSocket profile: one message a text
// frame, both ways.
type wsConn struct {
	s    *Server
	id   string
	ws   *websocket.Conn
	once sync.Once
	// initialized: the first message (initialize) went through. Read's
	// goroutine only.
	initialized bool
}

func (s *Server) websocket(w http.ResponseWriter, r *http.Request, id Identity) {
	if !s.reserve() {
		text(w, http.StatusServiceUnavailable, "too many connections")
		return
	}
	defer s.release()
	connID := newID()
	// Accept keeps the headers already set: the 101 carries the id, as
	// the SDK's prepareWebSocketUpgrade does.
	w.Header().Set(HeaderConnectionID, connID)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept answered
	}
	ws.SetReadLimit(int64(s.opts.MaxMessage))
	c := &wsConn{s: s, id: connID, ws: ws}
	s.mu.Lock()
	s.sockets[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sockets, c)
		s.mu.Unlock()
	}()
	// The close handshake waits for the client: not on the watcher's
	// goroutine. Serve's Read then sees the close and returns.
	defer s.watch(id, connID, func(why error) { go c.Close(why) })()
	// r.Context() is not usable after a hijack; the server's is.
	err = s.opts.Serve(s.ctx, c, id)
	if err == nil {
		err = io.EOF
	}
	c.Close(err)
}

func (c *wsConn) Read(ctx context.Context) ([]byte, error) {
	for {
		typ, b, err := c.ws.Read(ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				c.s.log.Warn("websocket frame over the message limit; connection closed", "limit", c.s.opts.MaxMessage)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, io.EOF
		}
		if typ != websocket.MessageText {
			continue // the SDK ignores binary frames too
		}
		switch classify(b) {
		case kindInvalid:
			c.send(ctx, protocolError(codeParse, "Parse error"))
			continue
		case kindBatch:
			c.send(ctx, protocolError(codeInvalidRequest, "JSON-RPC batches are not supported"))
			continue
		case kindScalar:
			c.send(ctx, protocolError(codeInvalidRequest, "Invalid Request"))
			continue
		}
		m := parse(b)
		if !c.initialized {
			if m.isReply {
				continue
			}
			if m.method != "initialize" || !m.hasID {
				c.closeWith(websocket.StatusProtocolError, "First message must be initialize")
				return nil, io.EOF
			}
			c.initialized = true
			return b, nil
		}
		if m.method == "initialize" && !m.isReply && m.hasID {
			c.send(ctx, errorReply(m.id, codeInvalidRequest, "Initialize not allowed on existing connection"))
			continue
		}
		return b, nil
	}
}

// send writes a message the transport itself answers.
func (c *wsConn) send(ctx context.Context, msg []byte) {
	if err := c.Write(ctx, msg); err != nil {
		c.Close(err)
	}
}

func (c *wsConn) Write(ctx context.Context, msg []byte) error {
	wctx, cancel := context.WithTimeout(ctx, c.s.opts.WriteTimeout)
	defer cancel()
	err := c.ws.Write(wctx, websocket.MessageText, msg)
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return errWriteTimeout
	}
	return err
}

func (c *wsConn) Close(reason error) error {
	code, text := websocket.StatusNormalClosure, ""
	switch {
	case reason == nil || errors.Is(reason, io.EOF):
	case errors.Is(reason, errServerClosing):
		code, text = websocket.StatusGoingAway, reason.Error()
	default:
		code, text = websocket.StatusPolicyViolation, reason.Error()
	}
	c.closeWith(code, text)
	return nil
}

// closeWith closes once with code and reason, the reason cut to what a
// close frame holds (123 bytes).
func (c *wsConn) closeWith(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		if len(reason) > 123 {
			reason = strings.ToValidUTF8(reason[:120], "") + "..."
		}
		c.s.log.Debug("websocket connection closed", "connection", c.id, "code", strconv.Itoa(int(code)), "reason", reason)
		c.ws.Close(code, reason)
	})
}
