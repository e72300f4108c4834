// Command acp-router-bench measures what acp-router costs (issue 6, part 2):
// the same client and agent connected directly, through a byte-for-byte line
// relay (the limit any proxy can reach here) and through acp-router built
// from this working tree, interleaved over several rounds, printing medians,
// router/direct and router/relay ratios and the targets.
//
// Run it from the repository (see BENCHMARKS.md):
//
//	go run ./cmd/acp-router-bench [-rounds 5] [-trial 1s] [-only REGEXP] [-variants example,bare]
//
// The binary also plays the benchmark's Go agent (`acp-router-bench agent`)
// and the byte relay (`acp-router-bench relay CMD ARGS...`); the router runs
// it as an agent like any other.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// options are the command-line flags.
type options struct {
	rounds      int
	trial       time.Duration
	warmup      time.Duration
	floodScale  float64
	paced       int
	rate        int
	memSessions int
	replay      int
	variants    []string
	only        *regexp.Regexp
	router      string
	experiment  string
	sdkDir      string
	install     bool
	keep        bool
	jsonOut     string
	verbose     bool
	perf        bool
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "agent":
			exit(agentMain())
		case "relay":
			exit(relayMain(os.Args[2:]))
		}
	}
	var o options
	var variants, only string
	fs := flag.NewFlagSet("acp-router-bench", flag.ExitOnError)
	fs.IntVar(&o.rounds, "rounds", 5, "A/B rounds per scenario (medians are over rounds)")
	fs.DurationVar(&o.trial, "trial", time.Second, "duration of one prompts/s trial")
	fs.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "warm-up per connection before the rounds")
	fs.Float64Var(&o.floodScale, "flood-scale", 1, "multiplies the updates per flood trial (200 B: 100k, 4 KiB: 16k, 1 MiB: 128)")
	fs.IntVar(&o.paced, "paced", 1000, "updates per latency trial")
	fs.IntVar(&o.rate, "rate", 1000, "updates per second in the latency trial")
	fs.IntVar(&o.memSessions, "sessions", 1000, "open sessions for the memory figure")
	fs.IntVar(&o.replay, "replay", 100000, "updates replayed by session/load")
	fs.StringVar(&variants, "variants", "example", "router configs, comma-separated: "+variantNames())
	fs.StringVar(&only, "only", "", "run only the scenarios matching this regexp (prompt/go/1, prompt/ts/16, flood/200B, latency, memory, replay, ...)")
	fs.StringVar(&o.router, "router", "", "use this acp-router binary instead of building the working tree")
	fs.StringVar(&o.experiment, "goexperiment", "", "GOEXPERIMENT for building the router (e.g. jsonv2)")
	fs.StringVar(&o.sdkDir, "sdk", "", "directory of @agentclientprotocol/sdk@1.9.0 (default: .peers/sdk19 in the repository)")
	fs.BoolVar(&o.install, "install", true, "npm-install @agentclientprotocol/sdk@1.9.0 into .peers/sdk19 when missing")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs, logs)")
	fs.StringVar(&o.jsonOut, "json", "", "also write every trial's figures to this JSON file")
	fs.BoolVar(&o.verbose, "v", false, "print every trial")
	fs.BoolVar(&o.perf, "perf", false, "record `perf` CPU profiles of the router processes during the rounds (implies -keep; slows the router)")
	fs.Parse(os.Args[1:])
	o.variants = strings.Split(variants, ",")
	for _, v := range o.variants {
		if _, ok := variantsByName[v]; !ok {
			exit(fmt.Errorf("unknown variant %q (known: %s)", v, variantNames()))
		}
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			exit(err)
		}
		o.only = re
	}
	if o.perf {
		o.keep = true
	}
	if o.rounds < 1 {
		o.rounds = 1
	}
	exit(run(o))
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "acp-router-bench:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
