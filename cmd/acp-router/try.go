package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/acp-router/acp-router/console"
)

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
	log, closer, cfg, code, err := start(g)
	if err != nil {
		return code, err
	}
	defer closer.Close()
	if *agent != "" {
		if _, ok := cfg.Agent(*agent); !ok {
			return 2, fmt.Errorf("no agent %q in %s", *agent, cfg.File)
		}
	}
	lp, err := loadPolicy(cfg)
	if err != nil {
		return 1, err
	}
	guard, stopPolicy, err := startPolicy(ctx, cfg, lp, log, false, nil)
	if err != nil {
		return 1, err
	}
	defer stopPolicy()
	answer := console.Ask
	switch {
	case *yes:
		answer = console.Allow
	case *no:
		answer = console.Reject
	}
	return console.Try(ctx, cfg, console.Options{
		Prompt:  strings.Join(fs.Args(), " "),
		Agent:   *agent,
		Guard:   guard,
		Confine: confiner(cfg, lp, guard, log).Confine,
		Answer:  answer,
		Logger:  log,
		Out:     os.Stdout,
		In:      os.Stdin,
	})
}
