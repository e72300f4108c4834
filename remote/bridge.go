package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/coder/websocket"

	"github.com/acp-router/acp-router/acp"
)

// BridgeOptions configure Bridge.
type BridgeOptions struct {
	// Token is sent as a bearer header ("" sends none: the URL may carry
	// ?token=).
	Token string
	// MaxMessage bounds one message each way; default as the server's.
	MaxMessage int
	// Header is added to the upgrade request.
	Header http.Header
}

// ErrRefused: the router answered the upgrade 401 (no token, a wrong or
// revoked one).
var ErrRefused = errors.New("the router refused the token (401)")

// Bridge carries newline-delimited JSON-RPC between in/out (an editor's
// stdio) and the router at rawURL over WebSocket (acp-router connect), so
// that any editor can use a remote router as a command-line agent. It
// returns nil when in ends (the editor closed stdin) or the router closed
// the connection normally. No error it returns contains the token,
// whether it came in opts or in the URL.
func Bridge(ctx context.Context, rawURL string, in io.Reader, out io.Writer, opts BridgeOptions) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return errors.New("connect: the URL does not parse")
	}
	secrets := []string{opts.Token, u.Query().Get("token")}
	redact := func(err error) error {
		if err == nil {
			return nil
		}
		s := err.Error()
		for _, sec := range secrets {
			if sec != "" {
				s = strings.ReplaceAll(s, sec, "REDACTED")
				s = strings.ReplaceAll(s, url.QueryEscape(sec), "REDACTED")
			}
		}
		return errors.New(s)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
	default:
		return fmt.Errorf("connect: URL scheme %q: want http, https, ws or wss", u.Scheme)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = Path
	}
	max := opts.MaxMessage
	if max <= 0 {
		max = acp.DefaultMaxLine
	}
	h := http.Header{}
	for k, v := range opts.Header {
		h[k] = v
	}
	if opts.Token != "" {
		h.Set("Authorization", "Bearer "+opts.Token)
	}
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: h, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("connect: %w", ErrRefused)
		}
		return redact(fmt.Errorf("connect: %w", err))
	}
	defer ws.CloseNow()
	ws.SetReadLimit(int64(max))
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// stdin → router. End of stdin closes the connection normally; the
	// router's side then ends too. A read of stdin cannot be interrupted:
	// when the router ends first this goroutine is left to the process's
	// exit.
	fromEditor := make(chan error, 1)
	// closing: stdin ended and the bridge closed the connection itself.
	// The close handshake then ends the read below with whatever error
	// the library has at hand (a close frame, or the closed socket), all
	// of which are the normal end.
	var closing atomic.Bool
	go func() {
		fromEditor <- func() error {
			r := bufio.NewReaderSize(in, 64<<10)
			var line []byte
			for {
				chunk, err := r.ReadSlice('\n')
				if len(line)+len(chunk) > max+1 {
					ws.Close(websocket.StatusMessageTooBig, "message exceeds the limit")
					return fmt.Errorf("connect: a message from the editor exceeds %d bytes", max)
				}
				line = append(line, chunk...)
				if errors.Is(err, bufio.ErrBufferFull) {
					continue
				}
				if msg := bytes.TrimSpace(line); len(msg) > 0 {
					if werr := ws.Write(gctx, websocket.MessageText, msg); werr != nil {
						return redact(fmt.Errorf("connect: %w", werr))
					}
				}
				line = line[:0]
				if err == io.EOF {
					closing.Store(true)
					ws.Close(websocket.StatusNormalClosure, "")
					return nil
				}
				if err != nil {
					return fmt.Errorf("connect: reading stdin: %w", err)
				}
			}
		}()
	}()
	// router → stdout, one line a message.
	fromRouter := make(chan error, 1)
	go func() {
		fromRouter <- func() error {
			w := bufio.NewWriter(out)
			for {
				_, msg, err := ws.Read(gctx)
				if err != nil {
					var ce websocket.CloseError
					switch {
					case errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure:
						return io.EOF
					case errors.As(err, &ce):
						return fmt.Errorf("connect: the router closed the connection: %d %s", ce.Code, ce.Reason)
					case gctx.Err() != nil:
						return nil
					case closing.Load():
						return io.EOF
					}
					return redact(fmt.Errorf("connect: %w", err))
				}
				if bytes.ContainsAny(msg, "\n") {
					// One line a message: JSON never needs a raw newline.
					msg = bytes.ReplaceAll(msg, []byte("\n"), []byte(" "))
				}
				w.Write(msg)
				w.WriteByte('\n')
				if err := w.Flush(); err != nil {
					return fmt.Errorf("connect: writing stdout: %w", err)
				}
			}
		}()
	}()
	for {
		select {
		case err := <-fromEditor:
			if err != nil {
				return err
			}
			// stdin ended: wait for the router to close.
		case err := <-fromRouter:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
