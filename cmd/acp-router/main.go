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
	"slices"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/router"
	"github.com/acp-router/acp-router/sandbox"
	"github.com/acp-router/acp-router/upstream"
)

const usage = `acp-router routes an editor's ACP sessions to several coding agents.

usage:
  acp-router [--config FILE] [--log-level L] [--log-file FILE] [--log-format text|json]
      run as an ACP agent on stdin/stdout (what the editor launches)
  acp-router serve [--config FILE] [--listen ADDR]
      run for remote clients (ACP over HTTP/WebSocket on /acp) until interrupted
  acp-router connect [--token TOKEN] URL
      bridge stdin/stdout to a remote router (an editor's command-line agent)
  acp-router try [--config FILE] [--agent NAME] [--yes|--no] "PROMPT"
      run one prompt through the router and print the stream
  acp-router check [--config FILE] [--org-dir DIR]
      validate the config and policy; print agents, routes, commands and policy layers
  acp-router policy explain [--config FILE] [--org-dir DIR] [--agent A] [--cwd DIR] [--mode M] [--subagent-cwd DIR] METHOD ARGS...
      show the decision for one request and every rule that matched
  acp-router policy test [--config FILE] [--org-dir DIR]
      run the tests: of every policy layer; exit 1 on any failure
  acp-router budget [--config FILE] [--org-dir DIR] [--json]
      print the policy's budgets and what has been spent per budget, agent and period
  acp-router login AGENT [-- ARGS...]
      run an agent's own login in this terminal (ARGS: its terminal sign-in method's)
  acp-router token create [--role controller|observer] [--own] NAME | token list | token revoke NAME
      the named bearer tokens of clients of a listening router; create prints the secret once
  acp-router version, acp-router --version
  acp-router help [COMMAND], acp-router COMMAND --help
      this text, or one command's flags and an example

example:
  acp-router check --config ~/.config/acp-router/config.yaml
`

// help is one command's --help: its synopsis, what it does, and an
// example; the flags are listed between them.
type help struct {
	synopsis, about, example string
}

// newFlags is the flag set of command name, with the globals registered
// (logging at defaultLevel) and help as its usage.
func newFlags(name string, g *globals, defaultLevel string, h help) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	g.register(fs, defaultLevel)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\n%s\n\nflags:\n", h.synopsis, h.about)
		fs.PrintDefaults()
		fmt.Fprintf(w, "\nexample:\n%s", h.example)
	}
	return fs
}

// parseFlags parses args with fs. done says the command stops there with
// code: the help was asked for (-h, --help: on stdout, 0), or a flag is
// wrong (the problem and the help on stderr, 2).
func parseFlags(fs *flag.FlagSet, args []string) (done bool, code int) {
	var out strings.Builder
	fs.SetOutput(&out)
	err := fs.Parse(args)
	fs.SetOutput(os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(os.Stdout, out.String())
		return true, 0
	case err != nil:
		fmt.Fprint(os.Stderr, out.String())
		return true, 2
	}
	return false, 0
}

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
	// Or as the sandbox helper that confines an agent and execs it.
	sandbox.RunIfRequested()
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
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	g.register(fs, "")
	version := fs.Bool("version", false, "print the version and exit")
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	if *version {
		fmt.Println("acp-router", router.Version())
		return 0, nil
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
	case "budget":
		return budgetCmd(&g, rest)
	case "serve":
		g.logLevel = orDefault(g.logLevel, "info")
		return serveCmd(ctx, &g, rest)
	case "connect":
		return connectCmd(ctx, &g, rest)
	case "token":
		return tokenCmd(&g, rest)
	case "version":
		fmt.Println("acp-router", router.Version())
		return 0, nil
	case "help":
		if len(rest) > 0 {
			return run(append(slices.Clone(rest), "--help"))
		}
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

// start builds the logger and loads the config, for the subcommands that
// run the router; code is the exit code when err is set. The caller closes
// closer.
func start(g *globals) (log hclog.Logger, closer io.Closer, cfg *config.Config, code int, err error) {
	if log, closer, err = newLogger(g); err != nil {
		return nil, nil, nil, 2, err
	}
	if cfg, err = loadConfig(g); err != nil {
		closer.Close()
		return nil, nil, nil, 1, err
	}
	return log, closer, cfg, 0, nil
}

func loadConfig(g *globals) (*config.Config, error) {
	path, err := config.Lookup(g.config, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return config.Load(path)
}
