package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/egress"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/ledger"
	"github.com/acp-router/acp-router/remote"
	"github.com/acp-router/acp-router/router"
	"github.com/acp-router/acp-router/sandbox"
	"github.com/acp-router/acp-router/store"
	"github.com/acp-router/acp-router/telemetry"
)

// loadPolicy loads the permission policy of every layer, and the org's
// telemetry: into cfg. Fail closed: a policy that does not load, or fails
// its own tests, is an error and the router does not start.
func loadPolicy(cfg *config.Config) (*guard.LoadedPolicy, error) {
	lp, err := guard.LoadPolicy(orgPolicyDir, cfg)
	if err == nil {
		err = lp.TestsError()
	}
	if err != nil {
		return nil, fmt.Errorf("permission policy: %w\nthe router does not start without a valid policy; `acp-router check` shows it", err)
	}
	return lp, nil
}

// startPolicy opens the audit log of the policy lp (loadPolicy) and
// reloads it on SIGHUP and file changes until ctx ends or stop. record:
// the running router's applied config is recorded for `check`
// (config.WriteRunning). stop ends the reloads, waits for them and closes
// the guard.
func startPolicy(ctx context.Context, cfg *config.Config, lp *guard.LoadedPolicy, log hclog.Logger, record bool, tel *telemetry.Telemetry) (g *guard.Guard, stop func(), err error) {
	home, _ := os.UserHomeDir()
	g, err = guard.New(lp.Policy, guard.Options{AuditFile: cfg.Audit.File, AuditMaxBytes: cfg.Audit.MaxBytes,
		Home: home, Logger: log.Named("policy"), Telemetry: tel})
	if err != nil {
		return nil, nil, fmt.Errorf("permission policy: %w", err)
	}
	g.Protect(lp.Watch)
	if cfg.StateDir != "" {
		// The budgets' ledger: per OS user (the state directory), shared
		// by every router of the user and every client of a served one.
		l, err := ledger.Open(cfg.StateDir)
		if err != nil {
			g.Close()
			return nil, nil, fmt.Errorf("budgets: %w", err)
		}
		g.SetLedger(l)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	opts := guard.WatchOptions{
		Load: func() (*config.Config, *guard.LoadedPolicy, error) {
			next, err := config.Load(cfg.File)
			if err != nil {
				return nil, nil, err
			}
			lp, err := guard.LoadPolicy(orgPolicyDir, next)
			return next, lp, err
		},
		Running: cfg,
		Watch:   lp.Watch,
		Hup:     hup,
		Logger:  log.Named("policy"),
	}
	if record && cfg.File != "" {
		opts.Applied = func(keys map[string]string) {
			if err := config.WriteRunning(cfg.StateDir, cfg.File, keys); err != nil {
				log.Warn("cannot record the running config for check", "error", err)
			}
		}
	}
	// The watcher is the guard's: Close stops it and waits for it, so
	// that no reload runs once the router has returned.
	g.StartWatch(ctx, opts)
	return g, func() {
		g.Close()
		signal.Stop(hup)
	}, nil
}

// serve runs the router for an editor on stdin/stdout (and, with
// listen: in the config, for remote clients too).
func serve(ctx context.Context, g *globals) (int, error) {
	return runRouter(ctx, g, listening{stdio: true})
}

// runRouter runs the router for the stdio editor, remote clients, or
// both (l).
func runRouter(ctx context.Context, g *globals, l listening) (int, error) {
	log, closer, cfg, code, err := start(g)
	if err != nil {
		return code, err
	}
	defer closer.Close()
	// The listener first: an address that must be refused (no TLS off
	// loopback) stops the router before any agent starts.
	if l.addr == "" {
		l.addr = cfg.Listen.Address
	}
	var ln *remote.Listener
	switch {
	case l.addr != "":
		if ln, err = openListener(cfg, l, log); err != nil {
			return 1, err
		}
		defer ln.Close()
	case !l.stdio:
		return 2, errors.New("serve: no address to listen on: give --listen ADDR or set listen: in the config")
	}
	// The policy first: the org's files may set and lock telemetry:.
	lp, err := loadPolicy(cfg)
	if err != nil {
		return 1, err
	}
	eff := cfg.EffectiveTelemetry()
	for _, w := range append(eff.Ignored, telemetry.IgnoredEnv(eff.Telemetry, eff.LockPos, nil)...) {
		log.Warn("telemetry locked by the org", "ignored", w)
	}
	tel, err := telemetry.Setup(ctx, eff.Telemetry, telemetry.Options{Logger: log.Named("telemetry"), Version: router.Version()})
	if err != nil {
		return 1, err
	}
	defer shutdownTelemetry(tel, log)
	pg, stopPolicy, err := startPolicy(ctx, cfg, lp, log, true, tel)
	if err != nil {
		return 1, err
	}
	// Stopped first: a reload after would record the running config again.
	defer config.RemoveRunning(cfg.StateDir)
	defer stopPolicy()
	policyHash := "none"
	if lp.Policy != nil {
		policyHash = lp.Policy.Hash()
	}
	log.Info("starting", "version", router.Version(), "config", cfg.File, "agents", len(cfg.Agents), "policyHash", policyHash)
	st, err := store.Open(filepath.Join(cfg.StateDir, "sessions"), store.Options{MaxTotalBytes: cfg.History.MaxTotalBytes,
		MaxAge: cfg.History.MaxAge, MetadataOnly: cfg.History.MetadataOnly, Logger: log.Named("store")})
	if err != nil {
		// The editor still gets a router, without session history.
		log.Error("cannot open the session store; sessions cannot be listed or reopened", "error", err)
		st = nil
	} else {
		defer st.Close()
	}
	conf := confiner(cfg, lp, pg, log)
	defer conf.Close() // the agents' egress proxies
	pg.SetKernel(conf.Kernel)
	r := router.New(cfg, router.Options{Logger: log, Version: router.Version(), Guard: pg, Store: st, HistoryMetadataOnly: cfg.History.MetadataOnly, Telemetry: tel,
		Confine: conf.Func(), Sandbox: conf,
		// With a hub in front, who answered an ask is read from the
		// answer's _meta (the hub strips what clients write there).
		ClientMeta: ln != nil})
	if ln == nil {
		// Plain stdio: exactly as before, no hub, no extra hop.
		in, out, restore := editorStdio()
		defer restore()
		if err := r.Serve(ctx, in, out); err != nil {
			return 1, err
		}
		return 0, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	side, routerDone, err := startRemote(ctx, cfg, r, pg, ln, l.stdio, log)
	if err != nil {
		return 1, err
	}
	defer config.RemoveListening(cfg.StateDir)
	if l.stdio {
		// The editor is one client among the others. When it goes, the
		// router ends as it always has (DESIGN §7), unless remote clients
		// are connected: it then lives until the last of them goes too,
		// their sessions with it.
		in, out, restore := editorStdio()
		defer restore()
		editor := remote.NewLineConn(in, out, 0, -1, nil)
		go func() {
			if err := side.hub.Serve(ctx, editor, editorIdentity); err != nil {
				log.Debug("the editor's connection ended", "error", err)
			}
			log.Info("the editor closed: the router stops once no remote client is connected")
			side.hub.WaitIdle(ctx)
			cancel()
		}()
	}
	if err := <-routerDone; err != nil && ctx.Err() == nil {
		return 1, err
	}
	return 0, nil
}

// confiner is the sandbox of the agents (issue 29) in the mode in force.
func confiner(cfg *config.Config, lp *guard.LoadedPolicy, pg *guard.Guard, log hclog.Logger) *sandbox.Confiner {
	eff := cfg.EffectiveSandbox(lp.Policy != nil)
	if eff.Ignored != "" {
		log.Warn("sandbox mode locked by the org", "ignored", eff.Ignored)
	}
	log.Info("sandbox", "mode", eff.Mode, "from", eff.From)
	return &sandbox.Confiner{Mode: eff.Mode, Policy: pg.Policy, Logger: log.Named("sandbox"), Agents: cfg.Agents,
		Record: func(s sandbox.Start) {
			rec := guard.AgentStart{Agent: s.Agent, Mode: string(s.Mode), Confined: s.Confined, Reason: s.Reason,
				Refused: !s.Confined && s.Mode == config.SandboxEnforce}
			if s.Profile != nil {
				rec.Hash, rec.Summary = s.Profile.Hash(), s.Profile.Summary()
			}
			pg.RecordAgentStart(rec)
		},
		NetRefused: func(agent string, r egress.Refusal) {
			pg.RecordNetRefused(guard.NetRefused{Agent: agent, Host: r.Host, Port: r.Port, Rule: r.ID, Reason: r.Rule})
		}}
}

// telemetryFlush bounds the flush at exit: a collector that is down or
// hangs delays the router's exit by at most this long.
const telemetryFlush = 5 * time.Second

func shutdownTelemetry(tel *telemetry.Telemetry, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), telemetryFlush)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		log.Warn("telemetry: not everything was flushed at exit", "error", err)
	}
}
