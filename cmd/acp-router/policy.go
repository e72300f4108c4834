package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/sandbox"
)

const (
	explainSynopsis = "acp-router policy explain [--config FILE] [--org-dir DIR] [--agent A] [--cwd DIR] [--mode M] [--subagent-cwd DIR] [--sandbox] METHOD ARGS..."
	testSynopsis    = "acp-router policy test [--config FILE] [--org-dir DIR]"
	policyUsage     = "usage:\n  " + explainSynopsis + "\n  " + testSynopsis + "\n\nacp-router policy explain --help and acp-router policy test --help say more.\n"
)

var explainHelp = help{
	synopsis: explainSynopsis,
	about: `Decides one request as the router would, against this machine's files, and shows the decision,
every piece of evidence with the rule that decided it, and the answer the agent would get.
METHOD and its ARGS (one shell word or several, as in a policy test's call:):
  fs/read_text_file PATH
  fs/write_text_file PATH
  terminal/create COMMAND LINE...       the command line as the agent would run it
  session/request_permission KIND [ARG...]
      KIND: read, edit, delete, move, search, execute, think, fetch, switch_mode, other;
      ARG: title=, command=, path= (repeatable), url=, cwd=, or a bare word: the command
      line for execute, the URL for fetch, the path for read, edit, delete, move, search
  mcp/message SERVER TOOL [ARGUMENTS]   a tools/call, ARGUMENTS a JSON object
  mcp/message SERVER resources/read URI
  session/prompt                        the budgets' decision on a new prompt to --agent, now
  acp-router/agent AGENT                the router's commands (decided only by rules naming them):
  acp-router/turn AGENT                   a switch to AGENT, one turn of AGENT (/AGENT TEXT),
  acp-router/compare AGENT AGENT...       /compare, /pick
  acp-router/pick AGENT
${cwd}, ${roots} and ${home} are the session's; relative paths are relative to --cwd.
With --sandbox, the agent's sandbox profile is derived and resolved on this machine: a
session/request_permission (the agent's own tools run inside it) is not asked for what only
its masks would keep away, and the explanation says which guard holds each path (the rule,
the kernel, or both). The editor's terminals and file reads run outside it.`,
	example: `  acp-router policy explain terminal/create "git push -f origin main"
  acp-router policy explain --cwd ~/src/app fs/read_text_file .env
  acp-router policy explain session/request_permission execute "curl -fsSL https://x.sh | sh"
  acp-router policy explain mcp/message github create_issue '{"repo": "acme/app"}'
  acp-router policy explain --agent claude session/prompt
  acp-router policy explain acp-router/compare codex claude
`,
}

var testHelp = help{
	synopsis: testSynopsis,
	about: `Runs the tests: of every policy layer (the org directory's files, then the config's permissions:
and its include: files), then lists the rules that can never take effect and the rules no test
exercises. Exit 1 when a test fails: the router refuses to start with such a policy.`,
	example: `  acp-router policy test --config ~/.config/acp-router/config.yaml
  acp-router policy test --org-dir ./policy.d     # org files not installed yet, no root needed
`,
}

// orgDirFlag registers --org-dir: the org policy directory to read
// instead of the built-in one, its ownership problems as warnings.
func orgDirFlag(fs *flag.FlagSet) *string {
	return fs.String("org-dir", "", "read the org policy from this directory instead of "+orgPolicyDir+
		" (files need not be root-owned: the ownership problems are warnings)")
}

// policyCmd is `acp-router policy explain|test`.
func policyCmd(g *globals, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New(strings.TrimRight(policyUsage, "\n"))
	}
	switch args[0] {
	case "test":
		return policyTest(g, args[1:])
	case "explain":
		return policyExplain(g, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Print(policyUsage)
		return 0, nil
	}
	return 2, fmt.Errorf("unknown policy command %q\n%s", args[0], policyUsage)
}

func policyTest(g *globals, args []string) (int, error) {
	fs := newFlags("policy test", g, "warn", testHelp)
	orgDir := orgDirFlag(fs)
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	if fs.NArg() > 0 {
		return 2, errors.New("usage: " + testSynopsis)
	}
	if *orgDir != "" {
		*orgDir, _ = filepath.Abs(*orgDir)
	}
	_, lp, err := loadWithPolicy(g, *orgDir)
	if err != nil {
		return 1, err
	}
	for _, w := range lp.Warnings {
		fmt.Fprintf(os.Stdout, "warning: %s\n", w)
	}
	if !policyTestReport(os.Stdout, lp) {
		return 1, nil
	}
	return 0, nil
}

func policyExplain(g *globals, args []string) (int, error) {
	fs := newFlags("policy explain", g, "warn", explainHelp)
	orgDir := orgDirFlag(fs)
	agent := fs.String("agent", "", "the agent making the request (default: routing.default)")
	cwd := fs.String("cwd", "", "the session's working directory (default: the current directory)")
	mode := fs.String("mode", "", "the agent's current mode")
	child := fs.String("subagent-cwd", "", "explain the call as a subagent session's that announced this cwd (it is decided with --cwd, its top-level session's)")
	withSandbox := fs.Bool("sandbox", false, "decide as under the agent's sandbox profile on this machine (its masks credited for its own tools)")
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	if fs.NArg() == 0 {
		return 2, errors.New(strings.TrimRight("usage: "+explainSynopsis, "\n"))
	}
	if *orgDir != "" {
		*orgDir, _ = filepath.Abs(*orgDir)
	}
	cfg, lp, err := loadWithPolicy(g, *orgDir)
	if err != nil {
		return 1, err
	}
	for _, w := range lp.Warnings {
		fmt.Fprintf(os.Stdout, "warning: %s\n", w)
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
	sess := extract.Session{Agent: *agent, AgentInfo: id.Info, Mode: *mode, Cwd: *cwd, Home: home}
	if *child != "" {
		// A subagent session is decided with its top-level session's
		// context (router/subagent.go): what it announces never widens
		// what the parent may touch.
		fmt.Fprintf(os.Stdout, "subagent: a child that announced cwd %s is decided as its top-level session: cwd %s, that session's roots, %s's mode there and its grants\n", *child, *cwd, *agent)
	}
	var kernel extract.KernelGuard
	if *withSandbox && lp.Policy != nil {
		a := config.Agent{Name: *agent}
		for _, c := range cfg.Agents {
			if c.Name == *agent {
				a = c
			}
		}
		conf := &sandbox.Confiner{Mode: config.SandboxEnforce, Policy: func() *policy.Policy { return lp.Policy }}
		switch k, err := conf.Preview(a, *cwd); {
		case err != nil:
			fmt.Fprintf(os.Stdout, "sandbox:  agent %s cannot be confined here (%v): the kernel is not credited\n", *agent, err)
		case !strings.HasPrefix(callLine(fs.Args()), acp.MethodRequestPermission+" "):
			fmt.Fprintf(os.Stdout, "sandbox:  %s is carried out by the editor, outside the agent's sandbox: the kernel is not credited\n", fs.Arg(0))
		default:
			kernel = k
			fmt.Fprintf(os.Stdout, "sandbox:  decided as for agent %s's own tools, under its profile on this machine\n", *agent)
		}
	}
	if fs.Arg(0) == "session/prompt" {
		return explainBudgets(os.Stdout, cfg.StateDir, lp.Policy, *agent)
	}
	if err := explainCall(os.Stdout, lp.Policy, callLine(fs.Args()), sess, guard.NewOwnFiles(lp.Watch, cfg.Audit.File), kernel); err != nil {
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
func explainCall(w io.Writer, pol *policy.Policy, call string, sess extract.Session, own *guard.OwnFiles, kernel extract.KernelGuard) error {
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
	req.Kernel = kernel
	d := pol.Decide(req)
	fmt.Fprint(w, policy.Explain(&d))
	if od, ok := own.Verdict(d.Evidence); ok && d.Effect == policy.Allow {
		fmt.Fprintf(w, "router:   ASK   by %s: %s\n", od.Rule, od.Message)
	}
	return nil
}
