package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/acp"
)

// Conn is one client's message stream, whatever the transport (the hub's
// Conn, structurally).
type Conn interface {
	// Read returns the next JSON-RPC message the client sent (one JSON
	// value, no trailing newline); io.EOF when the client is gone.
	Read(ctx context.Context) ([]byte, error)
	// Write sends one message to the client. It blocks while the client
	// does not read, until ctx ends or Options.WriteTimeout passes.
	Write(ctx context.Context, msg []byte) error
	// Close ends the connection, telling the client why if the transport
	// can (the WebSocket close reason, a last SSE comment).
	Close(reason error) error
}

// Identity is who a connection's requests authenticated as (the hub's
// Identity, field for field, so that one converts to the other).
type Identity struct {
	Name        string // token name
	Role        string // "controller" | "observer": the most this client may be
	AllSessions bool   // may see sessions other clients started
	Editor      bool   // the stdio editor (never set by remote/)
	// Token is the identity in its store of the token the connection
	// authenticated with (token.Identity.ID; not the secret): Watch
	// takes it, and an HTTP connection takes requests only from it.
	Token string
}

// AuthFunc authenticates one HTTP request (a bearer header, a cookie or
// ?token=). Any error is answered 401 with an empty body; the error is
// not logged either, in case it quotes what the client sent.
type AuthFunc func(*http.Request) (Identity, error)

// WatchFunc watches the token a connection authenticated with: it calls
// gone (once, without blocking on it) when that token is revoked, or at
// once when it already is; stop ends the watch.
type WatchFunc func(id Identity, gone func()) (stop func())

// ServeFunc serves one connection until the client goes; remote/ closes
// the Conn when it returns.
type ServeFunc func(ctx context.Context, c Conn, id Identity) error

// The RFD's headers and the cookie that carries a token given once in
// the URL.
const (
	HeaderConnectionID = "Acp-Connection-Id"
	HeaderSessionID    = "Acp-Session-Id"
	// TokenCookie holds the token of a request authenticated by ?token=;
	// the token store's Authenticate reads it on later requests.
	TokenCookie = "acp_router_token"
	// Path is the one endpoint.
	Path = "/acp"
)

// Defaults of Options.
const (
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultStreamBuffer      = 1 << 20
	DefaultMaxSessionStreams = 1024
	DefaultMaxConnections    = 16384
	keepAliveInterval        = 15 * time.Second
	// maxIDLength bounds connection, session and request ids we keep as
	// map keys (the SDK's maxIdLength).
	maxIDLength = 1024
)

// Options configure a Server. Serve is required.
type Options struct {
	Serve ServeFunc
	// Auth authenticates every request; nil accepts every request as
	// Anonymous (Listen refuses that off loopback).
	Auth      AuthFunc
	Anonymous Identity
	// Watch, when set, ends every connection whose token is revoked,
	// with errRevoked: a WebSocket closed 1008 "token revoked", the SSE
	// streams of an HTTP connection ended with that comment, Serve's
	// Conn at io.EOF. A revoke must not leave open what the token opened.
	Watch WatchFunc
	// MaxMessage bounds one incoming message (POST body, WebSocket
	// frame); default acp.DefaultMaxLine, the router's own line bound.
	MaxMessage int
	// WriteTimeout bounds one Write to a client that does not read.
	WriteTimeout time.Duration
	// IdleTimeout ends an HTTP connection whose connection stream has
	// had no receiver that long.
	IdleTimeout time.Duration
	// StreamBuffer is how many bytes an SSE stream holds that its client
	// has not taken before Write blocks.
	StreamBuffer      int
	MaxSessionStreams int
	// MaxConnections bounds the open connections; more are 503.
	MaxConnections int
	// SecureCookies marks the token cookie Secure (set under TLS).
	SecureCookies bool
	Logger        hclog.Logger
	// Page, when set, serves the paths it Owns (the web page of issue 31)
	// behind the same authentication as /acp, with the Identity in the
	// request's context (IdentityOf); a request for them that does not
	// authenticate gets SignIn's answer instead of a bare 401.
	Page   PageHandler
	SignIn http.HandlerFunc
}

// PageHandler is the page's handler (package page).
type PageHandler interface {
	http.Handler
	Owns(path string) bool
}

type identityKey struct{}

// IdentityOf is the Identity remote/ authenticated a page request as.
func IdentityOf(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Server is the /acp handler.
type Server struct {
	opts Options
	log  hclog.Logger
	ctx  context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	conns   map[string]*httpConn
	sockets map[*wsConn]struct{}
	count   int // HTTP and WebSocket connections open
	wg      sync.WaitGroup
}

// NewServer returns the handler of /acp.
func NewServer(opts Options) *Server {
	if opts.MaxMessage <= 0 {
		opts.MaxMessage = acp.DefaultMaxLine
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.StreamBuffer <= 0 {
		opts.StreamBuffer = DefaultStreamBuffer
	}
	if opts.MaxSessionStreams <= 0 {
		opts.MaxSessionStreams = DefaultMaxSessionStreams
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Server{opts: opts, log: opts.Logger, ctx: ctx, stop: stop, conns: map[string]*httpConn{}, sockets: map[*wsConn]struct{}{}}
}

// Close ends every connection and waits for their Serve calls to return.
func (s *Server) Close() error {
	s.stop()
	s.mu.Lock()
	conns := make([]*httpConn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	sockets := make([]*wsConn, 0, len(s.sockets))
	for c := range s.sockets {
		sockets = append(sockets, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close(errServerClosing)
	}
	// Each close waits for the client's close frame (bounded by the
	// library): in parallel.
	for _, c := range sockets {
		go c.Close(errServerClosing)
	}
	s.wg.Wait()
	return nil
}

// Connections is the number of open connections, both profiles.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

var (
	// errServerClosing ends the connections of a server shutting down.
	errServerClosing = errors.New("the router is shutting down")
	// errIdle ends an HTTP connection nobody reads.
	errIdle = errors.New("no event stream open on the connection")
	// errDeleted: the client sent DELETE.
	errDeleted = errors.New("the client ended the connection")
	// errWriteTimeout: the client read nothing for Options.WriteTimeout.
	errWriteTimeout = errors.New("remote: the client read nothing for the write timeout")
	// errRevoked ends the connections of a token revoked (Options.Watch).
	errRevoked = errors.New("token revoked")
	// errClosed: a Write on a connection that has ended.
	errClosed = errors.New("remote: connection closed")
)

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		s.page(w, r)
		return
	}
	id, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	switch r.Method {
	case http.MethodPost:
		s.post(w, r, id)
	case http.MethodGet:
		if headerHas(r.Header, "Upgrade", "websocket") {
			s.websocket(w, r, id)
			return
		}
		s.get(w, r, id)
	case http.MethodDelete:
		s.delete(w, r, id)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		text(w, http.StatusMethodNotAllowed, "Method Not Allowed")
	}
}

// page serves the page's paths, authenticated as /acp is; 404 for the rest.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	if s.opts.Page == nil || !s.opts.Page.Owns(r.URL.Path) {
		http.NotFound(w, r)
		return
	}
	if s.opts.Auth == nil {
		s.opts.Page.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, s.opts.Anonymous)))
		return
	}
	id, err := s.opts.Auth(r)
	if err != nil {
		s.log.Debug("page request refused: not authenticated", "method", r.Method, "remote", r.RemoteAddr)
		// A cookie that no longer authenticates (a revoked token) is
		// dropped, so the browser stops sending it.
		http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
			Secure: s.opts.SecureCookies, SameSite: http.SameSiteStrictMode})
		if s.opts.SignIn != nil {
			s.opts.SignIn(w, r)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	s.setCookie(w, r)
	s.opts.Page.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
}

// setCookie: a request authenticated by ?token= gets the token back as a
// cookie on / (the page, its API and /acp), so that it need not stay in
// URLs.
func (s *Server) setCookie(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: tok, Path: "/", HttpOnly: true,
			Secure: s.opts.SecureCookies, SameSite: http.SameSiteStrictMode})
	}
}

// authenticate answers 401 with an empty body (nothing else: no reason,
// no realm a scanner could fingerprint beyond the scheme) on failure.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (Identity, bool) {
	if s.opts.Auth == nil {
		return s.opts.Anonymous, true
	}
	id, err := s.opts.Auth(r)
	if err != nil {
		s.log.Debug("request refused: not authenticated", "method", r.Method, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", "Bearer")
		w.WriteHeader(http.StatusUnauthorized)
		return Identity{}, false
	}
	// The token came in the URL once; the SDK clients (and a browser)
	// send the cookie back.
	s.setCookie(w, r)
	return id, true
}

// watch ends the connection (close) when its token is revoked; the
// returned stop is called when the connection has ended.
func (s *Server) watch(id Identity, conn string, close func(error)) (stop func()) {
	if s.opts.Watch == nil {
		return func() {}
	}
	return s.opts.Watch(id, func() {
		s.log.Info("connection ended: its token was revoked", "token", id.Name, "connection", conn)
		close(errRevoked)
	})
}

// reserve counts one more connection, false past MaxConnections.
func (s *Server) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count >= s.opts.MaxConnections || s.ctx.Err() != nil {
		return false
	}
	s.count++
	s.wg.Add(1)
	return true
}

func (s *Server) release() {
	s.mu.Lock()
	s.count--
	s.mu.Unlock()
	s.wg.Done()
}

// newID is a connection id: 128 random bits, so that one cannot be
// guessed (it is not a credential: requests are authenticated too).
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, body)
}

// headerHas: one of the comma-separated values of header name is v
// (case-insensitive), as Connection: keep-alive, Upgrade.
func headerHas(h http.Header, name, v string) bool {
	for _, line := range h.Values(name) {
		for item := range strings.SplitSeq(line, ",") {
			if strings.EqualFold(strings.TrimSpace(item), v) {
				return true
			}
		}
	}
	return false
}
