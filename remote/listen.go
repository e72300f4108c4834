package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"
)

// ListenConfig is where a router listens (config listen:, serve
// --listen).
type ListenConfig struct {
	// Addr is host:port; an empty host is 127.0.0.1 (loopback by
	// default), port 0 picks a free port.
	Addr string
	// CertFile and KeyFile turn TLS on (both or neither).
	CertFile, KeyFile string
	// Authenticated: requests are authenticated (a token store is
	// wired). Required, with TLS, off loopback.
	Authenticated bool
}

// ErrInsecure: an address other than loopback without TLS or without
// authentication; the router refuses to start (issue 30).
var ErrInsecure = errors.New("an address other than loopback requires TLS (listen.tls.cert and listen.tls.key) and authentication (tokens)")

// Listener is an open listening socket.
type Listener struct {
	net.Listener
	TLS bool
}

// URL is the endpoint's URL (http:// or https://, the address the
// socket really has, so port 0 is resolved).
func (l *Listener) URL() string {
	scheme := "http"
	if l.TLS {
		scheme = "https"
	}
	return scheme + "://" + l.Addr().String() + Path
}

// PageURL is the address of the web page (Options.Page).
func (l *Listener) PageURL() string {
	return strings.TrimSuffix(l.URL(), Path) + "/"
}

// Check refuses what Listen would refuse, without opening anything.
func Check(cfg ListenConfig) (addr string, err error) {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return "", fmt.Errorf("remote: listen address %q: %w (expected host:port, e.g. 127.0.0.1:7420)", cfg.Addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	addr = net.JoinHostPort(host, port)
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return "", fmt.Errorf("remote: listen %s: TLS needs both a certificate and a key file", addr)
	}
	if !IsLoopback(host) {
		if cfg.CertFile == "" {
			return "", fmt.Errorf("remote: listen %s: %w; without TLS listen on 127.0.0.1 or ::1", addr, ErrInsecure)
		}
		if !cfg.Authenticated {
			return "", fmt.Errorf("remote: listen %s: %w", addr, ErrInsecure)
		}
	}
	return addr, nil
}

// Listen opens cfg.Addr, with TLS when configured, after Check.
func Listen(cfg ListenConfig) (*Listener, error) {
	addr, err := Check(cfg)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("remote: listen %s: TLS certificate: %w", addr, err)
		}
		// HTTP/1.1 only: the WebSocket upgrade needs it, and SSE over it
		// is what the SDK client speaks.
		tc = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	if tc != nil {
		return &Listener{Listener: tls.NewListener(l, tc), TLS: true}, nil
	}
	return &Listener{Listener: l}, nil
}

// IsLoopback: host names this machine only ("localhost", 127.0.0.0/8,
// ::1). Any other name is not, whatever it resolves to now.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%")
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves /acp on l until ctx ends, then closes every connection.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(logWriter{s}, "", 0),
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		hs.Close()
	}()
	err := hs.Serve(l)
	s.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// logWriter carries net/http's own log lines (TLS handshake errors...)
// at debug level; they name addresses, never URLs or headers.
type logWriter struct{ s *Server }

func (w logWriter) Write(p []byte) (int, error) {
	w.s.log.Debug("http server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
