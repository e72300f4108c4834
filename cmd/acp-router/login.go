package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/acp-router/acp-router/upstream"
)

// login runs an agent's login. The editor's terminal auth re-launches the
// router as `acp-router [flags] login AGENT -- ARGS...` (see
// upstream.TerminalAuthArgs); a user types `acp-router login AGENT`.
var loginHelp = help{
	synopsis: "acp-router login AGENT [-- ARGS...]",
	about: `Runs the login of the config's agent AGENT in this terminal, as the agent's own terminal sign-in
method would (ARGS: what that method passes; editors add them). The router restarts the agent on
its next use. Exit: the login's own exit code.`,
	example: `  acp-router login claude
`,
}

func login(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("login", g, "warn", loginHelp)
	if done, code := parseFlags(fs, args); done {
		return code, nil
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
