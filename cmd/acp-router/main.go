// Command acp-router is an ACP agent that routes each editor session to one
// of several real ACP agents (see README.md). This file only parses flags,
// sets up logging and signals, and maps errors to exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/console"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/router"
	"github.com/acp-router/acp-router/store"
	"github.com/acp-router/acp-router/upstream"
)

const usage = `acp-router routes an editor's ACP sessions to several coding agents.

usage:
  acp-router [--config FILE] [--log-level L] [--log-file FILE] [--log-format text|json]
      run as an ACP agent on stdin/stdout (what the editor launches)
  acp-router try [--config FILE] [--agent NAME] [--yes|--no] "PROMPT"
      run one prompt through the router and print the stream
  acp-router check [--config FILE]
      validate the config and policy; print agents, routes, commands and policy layers
  acp-router policy explain [--config FILE] [--agent A] [--cwd DIR] [--mode M] METHOD ARGS...
      show the decision for one request and every rule that matched
  acp-router policy test [--config FILE]
      run the tests: of every policy layer; exit 1 on any failure
  acp-router login AGENT
      run an agent's own login in this terminal
  acp-router version
`

// orgPolicyDir is the org layer of the permission policy (DESIGN §6). It
// can be changed only at build time:
//
//	go build -ldflags "-X main.orgPolicyDir=/opt/acme/acp-router/policy.d" ./cmd/acp-router
var orgPolicyDir = "/etc/acp-router/policy.d"

// globals are the flags every subcommand accepts.
type globals struct {
	config, logLevel, logFile, logFormat string
}

func (g *globals) register(fs *flag.FlagSet, defaultLevel string) {
	fs.StringVar(&g.config, "config", g.config, "config file (default: $ACP_ROUTER_CONFIG, then ~/.config/acp-router/config.yaml)")
	fs.StringVar(&g.logLevel, "log-level", orDefault(g.logLevel, defaultLevel), "trace, debug, info, warn or error")
	fs.StringVar(&g.logFile, "log-file", g.logFile, "write logs to this file instead of stderr")
	fs.StringVar(&g.logFormat, "log-format", orDefault(g.logFormat, "text"), "text or json")
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func main() {
	// Re-run as an agent's watchdog, before anything else (upstream).
	upstream.RunWatchdogIfRequested()
	// A write to a closed stdout must be an error we handle, not SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	code, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "acp-router:", err)
	}
	os.Exit(code)
}

func run(args []string) (int, error) {
	var g globals
	fs := flag.NewFlagSet("acp-router", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	g.register(fs, "")
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if fs.NArg() == 0 {
		g.logLevel = orDefault(g.logLevel, "info")
		return serve(ctx, &g)
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	switch sub {
	case "try":
		return try(ctx, &g, rest)
	case "check":
		return check(&g, rest)
	case "policy":
		return policyCmd(&g, rest)
	case "login":
		return login(ctx, &g, rest)
	case "version":
		fmt.Println("acp-router", router.Version())
		return 0, nil
	case "help":
		fmt.Print(usage)
		return 0, nil
	}
	fmt.Fprint(os.Stderr, usage)
	return 2, fmt.Errorf("unknown command %q", sub)
}

func newLogger(g *globals) (hclog.Logger, io.Closer, error) {
	level := hclog.LevelFromString(g.logLevel)
	if level == hclog.NoLevel {
		return nil, nil, fmt.Errorf("unknown log level %q (trace, debug, info, warn, error)", g.logLevel)
	}
	if g.logFormat != "text" && g.logFormat != "json" {
		return nil, nil, fmt.Errorf("unknown log format %q (text, json)", g.logFormat)
	}
	var out io.Writer = os.Stderr
	var closer io.Closer = io.NopCloser(nil)
	if g.logFile != "" {
		f, err := os.OpenFile(g.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("log file: %w", err)
		}
		out, closer = f, f
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "acp-router",
		Level:      level,
		Output:     out,
		JSONFormat: g.logFormat == "json",
	}), closer, nil
}

func loadConfig(g *globals) (*config.Config, error) {
	path, err := config.Lookup(g.config, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return config.Load(path)
}

// startPolicy loads the permission policy, opens its audit log and
// reloads it on SIGHUP and file changes until ctx ends. Fail closed: a
// policy that does not load, or fails its own tests, is an error and the
// router does not start.
func startPolicy(ctx context.Context, cfg *config.Config, log hclog.Logger) (*router.Guard, *router.LoadedPolicy, error) {
	lp, err := router.LoadPolicy(orgPolicyDir, cfg)
	if err == nil {
		err = lp.TestsError()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("permission policy: %w\nthe router does not start without a valid policy; `acp-router check` shows it", err)
	}
	home, _ := os.UserHomeDir()
	guard, err := router.NewGuard(lp.Policy, cfg.Audit.File, cfg.Audit.MaxBytes, router.OSFS{}, home)
	if err != nil {
		return nil, nil, fmt.Errorf("permission policy: %w", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := func() (*router.LoadedPolicy, error) {
		cfg, err := config.Load(cfg.File)
		if err != nil {
			return nil, err
		}
		return router.LoadPolicy(orgPolicyDir, cfg)
	}
	go func() {
		defer signal.Stop(hup)
		router.WatchPolicy(ctx, guard, reload, lp.Watch, hup, log.Named("policy"))
	}()
	return guard, lp, nil
}

// serve runs the router for an editor on stdin/stdout.
func serve(ctx context.Context, g *globals) (int, error) {
	log, closer, err := newLogger(g)
	if err != nil {
		return 2, err
	}
	defer closer.Close()
	cfg, err := loadConfig(g)
	if err != nil {
		return 1, err
	}
	guard, lp, err := startPolicy(ctx, cfg, log)
	if err != nil {
		return 1, err
	}
	defer guard.Close()
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
	r := router.New(cfg, router.Options{Logger: log, Version: router.Version(), Guard: guard, Store: st, HistoryMetadataOnly: cfg.History.MetadataOnly})
	in, out, restore := editorStdio()
	defer restore()
	if err := r.Serve(ctx, in, out); err != nil {
		return 1, err
	}
	return 0, nil
}

func try(ctx context.Context, g *globals, args []string) (int, error) {
	fs := flag.NewFlagSet("try", flag.ContinueOnError)
	g.register(fs, "warn")
	agent := fs.String("agent", "", "run the prompt on this agent instead of the routed one")
	yes := fs.Bool("yes", false, "allow every permission request")
	no := fs.Bool("no", false, "reject every permission request")
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	if fs.NArg() == 0 || (*yes && *no) {
		return 2, errors.New(`usage: acp-router try [--config FILE] [--agent NAME] [--yes|--no] "PROMPT"`)
	}
	log, closer, err := newLogger(g)
	if err != nil {
		return 2, err
	}
	defer closer.Close()
	cfg, err := loadConfig(g)
	if err != nil {
		return 1, err
	}
	if *agent != "" {
		if _, ok := cfg.Agent(*agent); !ok {
			return 2, fmt.Errorf("no agent %q in %s", *agent, cfg.File)
		}
	}
	guard, _, err := startPolicy(ctx, cfg, log)
	if err != nil {
		return 1, err
	}
	defer guard.Close()
	answer := console.Ask
	switch {
	case *yes:
		answer = console.Allow
	case *no:
		answer = console.Reject
	}
	return console.Try(ctx, cfg, console.Options{
		Prompt: strings.Join(fs.Args(), " "),
		Agent:  *agent,
		Guard:  guard,
		Answer: answer,
		Logger: log,
		Out:    os.Stdout,
		In:     os.Stdin,
	})
}

// loadWithPolicy loads the config and the permission policy of every
// layer (its tests run, their failures in the result, not an error).
func loadWithPolicy(g *globals) (*config.Config, *router.LoadedPolicy, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, nil, err
	}
	lp, err := router.LoadPolicy(orgPolicyDir, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("permission policy: %w", err)
	}
	return cfg, lp, nil
}

func check(g *globals, args []string) (int, error) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	g.register(fs, "warn")
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	cfg, lp, err := loadWithPolicy(g)
	if err != nil {
		return 1, err
	}
	var agents []string
	for _, a := range cfg.Agents {
		agents = append(agents, a.Name)
	}
	warnings := config.Describe(os.Stdout, cfg, router.Warnings(cfg)...)
	warnings = append(warnings, router.DescribePolicy(os.Stdout, lp, orgPolicyDir, agents)...)
	config.Warn(os.Stdout, warnings)
	if lp.TestsError() != nil {
		return 1, errors.New("the permission policy's tests fail (acp-router policy test)")
	}
	return 0, nil
}

// policyCmd is `acp-router policy explain|test`.
func policyCmd(g *globals, args []string) (int, error) {
	const use = "usage: acp-router policy explain [--config FILE] [--agent A] [--cwd DIR] [--mode M] METHOD ARGS... | policy test [--config FILE]"
	if len(args) == 0 {
		return 2, errors.New(use)
	}
	fs := flag.NewFlagSet("policy "+args[0], flag.ContinueOnError)
	g.register(fs, "warn")
	agent := fs.String("agent", "", "the agent making the request (default: routing.default)")
	cwd := fs.String("cwd", "", "the session's working directory (default: the current directory)")
	mode := fs.String("mode", "", "the agent's current mode")
	if err := fs.Parse(args[1:]); err != nil {
		return 2, nil
	}
	cfg, lp, err := loadWithPolicy(g)
	if err != nil {
		return 1, err
	}
	switch args[0] {
	case "test":
		if fs.NArg() > 0 {
			return 2, errors.New(use)
		}
		if !router.PolicyTestReport(os.Stdout, lp) {
			return 1, nil
		}
		return 0, nil
	case "explain":
		if fs.NArg() == 0 {
			return 2, errors.New(use)
		}
		if *agent == "" {
			*agent = cfg.Routing.Default
		}
		if *cwd == "" {
			if *cwd, err = os.Getwd(); err != nil {
				return 1, err
			}
		}
		if *cwd, err = filepath.Abs(*cwd); err != nil {
			return 1, err
		}
		home, _ := os.UserHomeDir()
		sess := policy.Session{Agent: *agent, Mode: *mode, Cwd: *cwd, Home: home}
		if err := router.ExplainCall(os.Stdout, lp.Policy, callLine(fs.Args()), sess); err != nil {
			return 2, err
		}
		return 0, nil
	}
	return 2, errors.New(use)
}

// login runs an agent's login. The editor's terminal auth re-launches the
// router as `acp-router [flags] login AGENT -- ARGS...` (see
// upstream.TerminalAuthArgs); a user types `acp-router login AGENT`.
func login(ctx context.Context, g *globals, args []string) (int, error) {
	fs := flag.NewFlagSet("login", flag.ContinueOnError)
	g.register(fs, "warn")
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	if fs.NArg() == 0 {
		return 2, errors.New("usage: acp-router login AGENT")
	}
	name := fs.Arg(0)
	var loginArgs []string
	if rest := fs.Args()[1:]; len(rest) > 0 {
		if rest[0] != "--" {
			return 2, fmt.Errorf("unexpected arguments %q (usage: acp-router login AGENT)", rest)
		}
		loginArgs = append([]string{}, rest[1:]...)
	}
	cfg, err := loadConfig(g)
	if err != nil {
		return 1, err
	}
	agent, ok := cfg.Agent(name)
	if !ok {
		return 2, fmt.Errorf("no agent %q in %s", name, cfg.File)
	}
	code, err := upstream.Login(ctx, *agent, cfg.StateDir, loginArgs)
	if err == nil && code == 0 {
		fmt.Fprintf(os.Stderr, "acp-router: %s is logged in; the router restarts it on its next use\n", agent.Title)
	}
	return code, err
}

// callLine writes the arguments of `policy explain` as a test call: a
// terminal/create command line as typed, other arguments shell-quoted when
// the shell split them out of quotes.
func callLine(args []string) string {
	if args[0] == "terminal/create" {
		return strings.Join(args, " ")
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\;&|<>()`*?[]#") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
