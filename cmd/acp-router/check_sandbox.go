package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/sandbox"
)

// describeSandbox writes the sandbox mode in force, whether this kernel
// can enforce it, and each agent's profile: what is hidden (by which
// rule), what is writable, and the deny rules the kernel cannot hold
// (issue 29 req. 6). It returns the warnings and the errors: a profile an
// agent cannot run under (a deny rule on its own state) is an error unless
// the sandbox is off.
func describeSandbox(w io.Writer, cfg *config.Config, lp *guard.LoadedPolicy) (warnings, errs []string) {
	eff := cfg.EffectiveSandbox(lp.Policy != nil)
	if eff.Ignored != "" {
		warnings = append(warnings, eff.Ignored)
	}
	kernel := "this kernel can enforce it"
	if err := sandbox.Available(); err != nil {
		kernel = "this kernel cannot enforce it: " + err.Error()
		switch eff.Mode {
		case config.SandboxEnforce:
			errs = append(errs, "sandbox.mode is enforce but "+kernel+": no agent would start")
		case config.SandboxBestEffort:
			warnings = append(warnings, "sandbox.mode is best-effort but "+kernel+": agents start unconfined")
		}
	}
	fmt.Fprintf(w, "sandbox: %s   (%s); %s\n", eff.Mode, eff.From, kernel)
	c := &sandbox.Confiner{Mode: eff.Mode, Policy: func() *policy.Policy { return lp.Policy }}
	for _, a := range cfg.Agents {
		if a.Command == "" {
			continue
		}
		prof, probs := c.Profile(a)
		fmt.Fprintf(w, "  agent %s: profile %s\n", a.Name, prof.Hash())
		if len(prof.Hidden) == 0 {
			fmt.Fprintln(w, "    hidden: nothing")
		}
		for _, h := range prof.Hidden {
			except := ""
			if len(h.Except) > 0 {
				except = " except " + strings.Join(h.Except, ", ")
			}
			fmt.Fprintf(w, "    hidden: %s%s   (rule %s, %s layer)\n", strings.Join(h.Paths, ", "), except, h.Rule, h.Layer)
		}
		fmt.Fprintf(w, "    writable: %s\n", strings.Join(prof.Writable, ", "))
		fmt.Fprintln(w, "    everything else: read-only")
		for _, s := range prof.WireOnly {
			fmt.Fprintf(w, "    wire only: rule %s: %s   (%s)\n", s.Rule, s.Reason, s.Pos)
		}
		if n := prof.Network; n != nil {
			fmt.Fprintf(w, "    reachable: %s\n", n.Reachable())
			for _, s := range n.WireOnly {
				fmt.Fprintf(w, "    wire only: rule %s: %s   (%s)\n", s.Rule, s.Reason, s.Pos)
			}
		}
		if eff.Mode != config.SandboxOff && sandbox.Available() == nil {
			if plan, err := sandbox.Resolve(prof, sandbox.ResolveOptions{}); err != nil && eff.Mode == config.SandboxEnforce {
				errs = append(errs, fmt.Sprintf("agent %s: %v: it would not start", a.Name, err))
			} else if err != nil {
				warnings = append(warnings, fmt.Sprintf("agent %s: %v: it would start unconfined (best-effort)", a.Name, err))
			} else {
				fmt.Fprintf(w, "    on this machine: %d files and %d directories masked, %d entries searched\n",
					len(plan.HideFiles), len(plan.HideDirs), plan.Visited)
				warnings = append(warnings, plan.Warnings...)
			}
		}
		for _, p := range probs {
			if p.Error && eff.Mode != config.SandboxOff {
				errs = append(errs, p.Msg)
			} else {
				warnings = append(warnings, p.Msg)
			}
		}
	}
	return warnings, errs
}
