package router

import (
	"fmt"
	"io"
	"strings"

	"github.com/acp-router/acp-router/policy"
)

// What `acp-router check`, `policy explain` and `policy test` print about
// the permission policy (DESIGN §3, §6).

// DescribePolicy writes each layer of the policy with its hash and files,
// the effective default, deny_modes and the file and line of every rule in
// force (and of those lower_layers_may dropped). It returns the policy's
// warnings for check.
func DescribePolicy(w io.Writer, lp *LoadedPolicy, orgDir string, agents []string) []string {
	pol := lp.Policy
	if pol == nil {
		fmt.Fprintf(w, "permission policy: none (no org layer in %s, no permissions: in the config)\n", orgDir)
		return nil
	}
	def, layer := pol.Default()
	fmt.Fprintf(w, "permission policy: %s (default %s, from the %s layer)\n", pol.Hash(), def, layer)
	for _, l := range pol.Layers() {
		files := strings.Join(l.Files, ", ")
		fmt.Fprintf(w, "  %s layer %s  %s\n", l.Name, l.Hash(), files)
		if l.Default != policy.None {
			fmt.Fprintf(w, "    default: %s   (%s)\n", l.Default, l.DefaultPos)
		}
		for _, m := range l.DenyModes {
			fmt.Fprintf(w, "    deny mode %s   (%s)\n", m, m.Pos)
		}
		if l.LowerLayersMay != nil {
			var may []string
			for _, e := range l.LowerLayersMay {
				may = append(may, e.String())
			}
			fmt.Fprintf(w, "    lower layers may: %s\n", strings.Join(may, ", "))
		}
		for _, r := range pol.Rules() {
			if r.Layer == l.Name {
				fmt.Fprintf(w, "    %-5s %s   (%s)\n", r.Decision, r.ID, r.Pos)
			}
		}
		for _, r := range pol.Dropped() {
			if r.Layer == l.Name {
				fmt.Fprintf(w, "    dropped %s %s: the org layer's lower_layers_may does not allow it   (%s)\n", r.Decision, r.ID, r.Pos)
			}
		}
	}
	passed := len(lp.Results) - len(lp.Failed())
	fmt.Fprintf(w, "  tests: %d of %d passed (acp-router policy test shows them)\n", passed, len(lp.Results))
	warnings := pol.Warnings(agents...)
	if len(lp.Failed()) > 0 {
		warnings = append(warnings, fmt.Sprintf("%d policy tests fail: the router refuses to start with this policy", len(lp.Failed())))
	}
	return warnings
}

// PolicyTestReport writes the outcome of the policy's tests, the rules that
// can never take effect and the rules no test exercises. ok is false when
// a test failed.
func PolicyTestReport(w io.Writer, lp *LoadedPolicy) (ok bool) {
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
	for _, sh := range pol.Shadowed() {
		fmt.Fprintf(w, "never takes effect: %s rule %s (%s) is shadowed by %s rule %s (%s) on everything it matches\n",
			sh.Rule.Decision, sh.Rule.ID, sh.Rule.Pos, sh.By.Decision, sh.By.ID, sh.By.Pos)
	}
	for _, r := range pol.Untested(lp.Results) {
		fmt.Fprintf(w, "untested: rule %s (%s) is not exercised by any test\n", r.ID, r.Pos)
	}
	return len(failed) == 0
}

func countCases(results []policy.TestResult) int {
	seen := map[*policy.TestCase]bool{}
	for _, r := range results {
		seen[r.Case] = true
	}
	return len(seen)
}

// ExplainCall decides one call written as a policy test call ("METHOD
// ARGS...") in the given session context against the real filesystem, and
// writes the explanation: the decision, every piece of evidence with its
// decision and deciding rule, and the answer the agent would get.
func ExplainCall(w io.Writer, pol *policy.Policy, call string, sess policy.Session) error {
	if pol == nil {
		fmt.Fprintln(w, "no permission policy: every request goes to the editor unchanged")
		return nil
	}
	tc, err := policy.ParseCall(call)
	if err != nil {
		return err
	}
	req, err := tc.Request(sess, OSFS{})
	if err != nil {
		return err
	}
	d := pol.Decide(req)
	fmt.Fprint(w, policy.Explain(&d))
	return nil
}
