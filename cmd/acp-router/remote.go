package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/hub"
	"github.com/acp-router/acp-router/page"
	"github.com/acp-router/acp-router/remote"
	"github.com/acp-router/acp-router/router"
	"github.com/acp-router/acp-router/token"
)

// listening says how a router serves clients: the stdio editor, the
// network (ACP's remote transport, issue 30), or both.
type listening struct {
	stdio bool
	addr  string // "" = do not listen
}

// serveCmd is `acp-router serve --listen ADDR`: a long-running router
// with no stdio editor.
func serveCmd(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("serve", g, "info", help{
		synopsis: "acp-router serve [--config FILE] [--listen ADDR]",
		about: "Run the router for remote clients: ACP's Streamable HTTP and WebSocket transport on /acp, until\n" +
			"interrupted. ADDR (host:port; default listen.address of the config) must be loopback unless the\n" +
			"config sets listen.tls; clients authenticate with tokens (acp-router token create NAME).",
		example: "  acp-router serve --listen 127.0.0.1:7420\n  acp-router connect http://127.0.0.1:7420/acp --token ...   # from an editor\n",
	})
	addr := fs.String("listen", "", "host:port to listen on (port 0: a free port); default listen.address of the config")
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	return runRouter(ctx, g, listening{addr: *addr})
}

// connectCmd is `acp-router connect URL`: an editor's stdio bridged to a
// remote router over WebSocket.
func connectCmd(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("connect", g, "warn", help{
		synopsis: "acp-router connect [--token TOKEN] URL",
		about: "Bridge stdin/stdout (an editor's ACP agent connection) to a remote router over WebSocket, so that\n" +
			"any editor can use it as a command-line agent. The token comes from --token or ACP_ROUTER_TOKEN\n" +
			"(prefer the variable: a flag is visible in the process list); it is never printed.",
		example: "  ACP_ROUTER_TOKEN=acpr_... acp-router connect https://build-box:7420/acp\n",
	})
	tok := fs.String("token", "", "bearer token (default $ACP_ROUTER_TOKEN)")
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2, errors.New("connect: one URL expected")
	}
	if *tok == "" {
		*tok = os.Getenv("ACP_ROUTER_TOKEN")
	}
	in, out, restore := editorStdio()
	defer restore()
	if err := remote.Bridge(ctx, fs.Arg(0), in, out, remote.BridgeOptions{Token: *tok}); err != nil {
		return 1, err
	}
	return 0, nil
}

// remoteSide is what a listening router runs besides the Router: the hub
// in front of it and the /acp server.
type remoteSide struct {
	hub      *hub.Hub
	listener *remote.Listener
	server   *remote.Server
}

// openListener opens where the router listens, refusing at start-up
// what must be refused (remote.Check: no TLS or no tokens off loopback).
// A router an editor started (stdio) whose port is taken by another takes
// a free port on the same host instead: several editor windows on one
// config never collide, each records its own address.
func openListener(cfg *config.Config, l listening, log hclog.Logger) (*remote.Listener, error) {
	lc := remote.ListenConfig{Addr: l.addr, CertFile: cfg.Listen.TLSCert, KeyFile: cfg.Listen.TLSKey, Authenticated: true}
	ln, err := remote.Listen(lc)
	if err != nil && l.stdio && errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(l.addr)
		lc.Addr = net.JoinHostPort(host, "0")
		log.Warn("listen address in use (another router?): listening on a free port", "address", l.addr)
		ln, err = remote.Listen(lc)
	}
	return ln, err
}

// startRemote puts a hub in front of r and serves /acp on ln until ctx
// ends. The Router is served on in-process pipes; done is closed once
// the Router has returned (its agents shut down).
func startRemote(ctx context.Context, cfg *config.Config, r *router.Router, pg *guard.Guard, ln *remote.Listener, stdio bool, log hclog.Logger) (side *remoteSide, done <-chan error, err error) {
	tokens, err := token.Open(cfg.StateDir, token.Options{Logger: log.Named("token")})
	if err != nil {
		return nil, nil, err
	}
	h := hub.New(hub.Options{Logger: log, History: r, OwnersFile: filepath.Join(cfg.StateDir, "hub", "owners.json"),
		CancelOnLastDetach: cfg.Sessions.CancelOnLastDetach})
	routerIn, hubOut := io.Pipe()
	hubIn, routerOut := io.Pipe()
	routerDone := make(chan error, 1)
	go func() {
		err := r.Serve(ctx, routerIn, routerOut)
		routerOut.Close()
		routerDone <- err
	}()
	go h.Run(ctx, hubOut, hubIn)
	srv := remote.NewServer(remote.Options{
		Serve: func(ctx context.Context, c remote.Conn, id remote.Identity) error {
			return h.Serve(ctx, c, hub.Identity{Name: id.Name, Role: id.Role, AllSessions: id.AllSessions, Editor: id.Editor})
		},
		Auth: func(req *http.Request) (remote.Identity, error) {
			id, err := tokens.Authenticate(req)
			return remote.Identity{Name: id.Name, Role: id.Role, AllSessions: id.AllSessions, Token: id.ID}, err
		},
		// A revoke ends the connections the token opened (the hub then
		// detaches them), the stdio editor's never: it holds no token.
		Watch:         func(id remote.Identity, gone func()) func() { return tokens.Watch(id.Token, gone) },
		SecureCookies: ln.TLS,
		Logger:        log.Named("remote"),
		Page:          page.New(page.Options{AuditFile: cfg.Audit.File, RuleAt: ruleAt(pg)}),
		SignIn:        page.SignIn,
	})
	go func() {
		if err := srv.Serve(ctx, ln); err != nil {
			log.Error("listening stopped", "error", err)
		}
	}()
	if err := config.WriteListening(cfg.StateDir, config.Listening{URL: ln.URL(), File: cfg.File, Stdio: stdio}); err != nil {
		log.Warn("cannot record the listening address for check", "error", err)
	}
	log.Info("listening", "url", ln.URL())
	if !stdio {
		// A terminal: the first use prints a URL with a fresh token (never
		// logged: on stderr only, and never under an editor, whose log
		// keeps stderr).
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		if remote.IsLoopback(host) {
			secret, created, err := tokens.EnsureFirst("owner")
			switch {
			case err != nil:
				log.Warn("cannot create the first token", "error", err)
			case created:
				fmt.Fprintf(os.Stderr, "acp-router: first use: a token named \"owner\" was created; connect with\n  %s?token=%s\nor open in a browser\n  %s?token=%s\n(it is shown once; acp-router token list|create|revoke)\n", ln.URL(), secret, ln.PageURL(), secret)
			}
		}
	}
	return &remoteSide{hub: h, listener: ln, server: srv}, routerDone, nil
}

// ruleAt says where a rule of the policy in force is, for the page's
// decisions view.
func ruleAt(pg *guard.Guard) func(string) string {
	return func(id string) string {
		p := pg.Policy()
		if p == nil {
			return ""
		}
		for _, r := range p.Rules() {
			if r.ID == id {
				return r.Pos.String()
			}
		}
		return ""
	}
}

// editorIdentity is the stdio editor among the hub's clients.
var editorIdentity = hub.Identity{Name: "editor", Role: hub.RoleController, AllSessions: true, Editor: true}
