package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/acp-router/acp-router/console"
)

const trySynopsis = `acp-router try [--config FILE] [--agent NAME] [--yes|--no] "PROMPT"`

var tryHelp = help{
	synopsis: trySynopsis,
	about: `Runs one prompt through the router, as an editor would send it, and prints the agent's answer,
its tool calls and the permission requests the policy leaves to you (asked on the terminal unless
--yes or --no answers them all). Flags go before the prompt. Exit 0 when the turn ends with end_turn.`,
	example: `  acp-router try --config config.example.yaml --yes "Hello"
  acp-router try --agent claude "explain main.go"
`,
}

func try(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("try", g, "warn", tryHelp)
	agent := fs.String("agent", "", "run the prompt on this agent instead of the routed one")
	yes := fs.Bool("yes", false, "allow every permission request")
	no := fs.Bool("no", false, "reject every permission request")
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	if fs.NArg() == 0 || (*yes && *no) {
		return 2, errors.New("usage: " + trySynopsis)
	}
	if err := flagAfterPrompt(args, fs.Args()); err != nil {
		return 2, err
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
	conf := confiner(cfg, lp, guard, log)
	defer conf.Close()
	return console.Try(ctx, cfg, console.Options{
		Prompt:  strings.Join(fs.Args(), " "),
		Agent:   *agent,
		Guard:   guard,
		Confine: conf.Func(),
		Answer:  answer,
		Logger:  log,
		Out:     os.Stdout,
		In:      os.Stdin,
	})
}

// flagAfterPrompt refuses a word that looks like a flag after the prompt
// (`try "Hello" --no`): the flag package stops at the prompt, so it would
// silently become part of the prompt, and the permission requests it was
// meant to answer would be asked. After "--" every word is the prompt's.
func flagAfterPrompt(args, prompt []string) error {
	if n := len(args) - len(prompt); n > 0 && args[n-1] == "--" {
		return nil
	}
	for _, w := range prompt[1:] {
		if len(w) > 1 && strings.HasPrefix(w, "-") {
			return fmt.Errorf("%q after the prompt: flags go before it (usage: %s); to send it as part of the prompt, quote the whole prompt or put -- before it", w, trySynopsis)
		}
	}
	return nil
}
