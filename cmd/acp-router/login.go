package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/acp-router/acp-router/upstream"
)

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
