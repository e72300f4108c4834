package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/policy"
)

// policyCmd is `acp-router policy explain|test`.
func policyCmd(g *globals, args []string) (int, error) {
	const use = "usage: acp-router policy explain [--config FILE] [--agent A] [--cwd DIR] [--mode M] [--subagent-cwd DIR] METHOD ARGS... | policy test [--config FILE]"
	if len(args) == 0 {
		return 2, errors.New(use)
	}
	fs := flag.NewFlagSet("policy "+args[0], flag.ContinueOnError)
	g.register(fs, "warn")
	agent := fs.String("agent", "", "the agent making the request (default: routing.default)")
	cwd := fs.String("cwd", "", "the session's working directory (default: the current directory)")
	mode := fs.String("mode", "", "the agent's current mode")
	child := fs.String("subagent-cwd", "", "explain the call as a subagent session's that announced this cwd (it is decided with --cwd, its top-level session's)")
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
		if !policyTestReport(os.Stdout, lp) {
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
		id := policy.AgentID{Name: *agent}
		for _, a := range agentIDs(cfg) {
			if a.Name == *agent {
				id = a
			}
		}
		sess := policy.Session{Agent: *agent, AgentInfo: id.Info, Mode: *mode, Cwd: *cwd, Home: home}
		if *child != "" {
			// A subagent session is decided with its top-level session's
			// context (router/subagent.go): what it announces never widens
			// what the parent may touch.
			fmt.Fprintf(os.Stdout, "subagent: a child that announced cwd %s is decided as its top-level session: cwd %s, that session's roots, %s's mode there and its grants\n", *child, *cwd, *agent)
		}
		if err := explainCall(os.Stdout, lp.Policy, callLine(fs.Args()), sess, guard.NewOwnFiles(lp.Watch, cfg.Audit.File)); err != nil {
			return 2, err
		}
		if lp.Policy != nil {
			var extra []string
			if *mode != "" {
				extra = append(extra, *mode)
			}
			fmt.Fprint(os.Stdout, "modes:    "+lp.Policy.ExplainModes(id, extra...))
		}
		return 0, nil
	}
	return 2, errors.New(use)
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

// policyTestReport writes the outcome of the policy's tests, the rules that
// can never take effect and the rules no test exercises. ok is false when
// a test failed.
func policyTestReport(w io.Writer, lp *guard.LoadedPolicy) (ok bool) {
	pol := lp.Policy
	if pol == nil {
		fmt.Fprintln(w, "no permission policy: nothing to test")
		return true
	}
	failed := lp.Failed()
	for _, r := range failed {
		fmt.Fprintf(w, "FAIL %s: %s\n", r.Case.Pos, r.Problem)
	}
	fmt.Fprintf(w, "%d calls in %d tests: %d passed, %d failed\n", len(lp.Results), countCases(lp.Results), len(lp.Results)-len(failed), len(failed))
	for _, n := range testNotes(lp.Results) {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, sh := range pol.Shadowed() {
		fmt.Fprintf(w, "never takes effect: %s rule %s (%s) is shadowed by %s rule %s (%s) on everything it matches\n",
			sh.Rule.Decision, sh.Rule.ID, sh.Rule.Pos, sh.By.Decision, sh.By.ID, sh.By.Pos)
	}
	for _, r := range pol.Untested(lp.Results) {
		fmt.Fprintf(w, "untested: rule %s (%s) is not exercised by any test\n", r.ID, r.Pos)
	}
	return len(failed) == 0
}

// testNotes are the notes of passing tests ("POS: NOTE"), one per test
// and note, in test order.
func testNotes(results []policy.TestResult) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range results {
		if r.Note == "" {
			continue
		}
		n := r.Case.Pos.String() + ": " + r.Note
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func countCases(results []policy.TestResult) int {
	seen := map[*policy.TestCase]bool{}
	for _, r := range results {
		seen[r.Case] = true
	}
	return len(seen)
}

// explainCall decides one call written as a policy test call ("METHOD
// ARGS...") in the given session context against the real filesystem, and
// writes the explanation: the decision, every piece of evidence with its
// decision and deciding rule, and the answer the agent would get.
func explainCall(w io.Writer, pol *policy.Policy, call string, sess policy.Session, own *guard.OwnFiles) error {
	if pol == nil {
		fmt.Fprintln(w, "no permission policy: every request goes to the editor unchanged")
		return nil
	}
	tc, err := policy.ParseCall(call)
	if err != nil {
		return err
	}
	req, err := tc.Request(sess, guard.OSFS{})
	if err != nil {
		return err
	}
	d := pol.Decide(req)
	fmt.Fprint(w, policy.Explain(&d))
	if od, ok := own.Verdict(d.Evidence); ok && d.Effect == policy.Allow {
		fmt.Fprintf(w, "router:   ASK   by %s: %s\n", od.Rule, od.Message)
	}
	return nil
}
