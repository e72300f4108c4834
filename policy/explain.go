package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy/extract"
)

// Explain writes what `acp-router policy explain` prints for a decision:
// the decision and who made it, every piece of evidence with its own
// decision and deciding rule (and the other rules that fired or were
// spared by unless), and the answer the agent would get.
func Explain(d *Decision) string {
	var b strings.Builder
	explainRequest(&b, d)
	b.WriteString("evidence:\n")
	for _, f := range d.Findings {
		explainFinding(&b, d, f)
	}
	fmt.Fprintf(&b, "answer:   %s\n", outcome(d))
	return b.String()
}

// explainRequest writes the decision, who decided and may answer, and
// what the request was.
func explainRequest(b *strings.Builder, d *Decision) {
	fmt.Fprintf(b, "decision: %s   by %s\n", strings.ToUpper(d.Effect.String()), decider(d.Rule, d.Layer, d.Source))
	if d.Message != "" {
		fmt.Fprintf(b, "message:  %s\n", d.Message)
	}
	if a := d.Answerers; a != nil {
		if len(a.Names) == 0 {
			fmt.Fprintf(b, "answered: by no one: the %s name no one in common, so the ask is refused\n", a.Why())
		} else {
			fmt.Fprintf(b, "answered: only by %s   (%s)\n", a, a.Why())
		}
	}
	fmt.Fprintf(b, "policy:   %s\n", d.PolicyHash)
	if ev := d.Evidence; ev != nil {
		ctx := []string{d.Method}
		if ev.Agent != "" {
			ctx = append(ctx, "agent "+ev.Agent)
		}
		if ev.Mode != "" {
			ctx = append(ctx, "mode "+ev.Mode)
		}
		if len(ev.Cwds) > 0 {
			ctx = append(ctx, "cwd "+strings.Join(ev.Cwds, " = "))
		}
		fmt.Fprintf(b, "request:  %s\n", strings.Join(ctx, "   "))
		for _, t := range ev.Titles {
			fmt.Fprintf(b, "title:    %q\n", t)
		}
		for _, t := range ev.Tools {
			fmt.Fprintf(b, "tool:     %q\n", t)
		}
	}
}

// explainFinding writes one piece of evidence: what it is, the rule that
// decided it, and why (the walk below it, the kernel, other matches).
func explainFinding(b *strings.Builder, d *Decision, f Finding) {
	it := f.Item
	notes := itemNotes(it)
	eff := f.Effect.String()
	if f.Effect == None {
		eff = "-"
	}
	fmt.Fprintf(b, "  %-8s %-40s %-6s %s\n", it.Type, it.String(), eff, decider(f.Rule, f.Layer, f.Source))
	fmt.Fprintf(b, "           (%s)\n", strings.Join(notes, "; "))
	if it.Type == extract.ItemPath && (len(it.Forms) > 1 || len(it.Forms) == 1 && it.Forms[0] != it.Path) {
		fmt.Fprintf(b, "           forms: %s\n", strings.Join(it.Forms, ", "))
	}
	if it.Unresolved {
		b.WriteString("           symlinks could not be resolved: no allow covers it\n")
	}
	if it.Opaque != "" {
		fmt.Fprintf(b, "           opaque: %s\n", it.Opaque)
	}
	if it.Unknown != "" {
		fmt.Fprintf(b, "           not understood: %s (an allow rule needs arguments: any)\n", it.Unknown)
	}
	if it.Refused != "" {
		fmt.Fprintf(b, "           refused: %s\n", it.Refused)
	}
	if len(it.Env) > 0 {
		fmt.Fprintf(b, "           sets: %s\n", strings.Join(it.Env, ", "))
	}
	if f.Walked > 0 {
		noun := "entries"
		if f.Walked == 1 {
			noun = "entry"
		}
		if !slices.ContainsFunc(f.Matches, func(m Match) bool { return m.Below != "" || m.Cut != "" }) {
			fmt.Fprintf(b, "           walked %d %s below it: no deny or ask rule matches any\n", f.Walked, noun)
		} else {
			fmt.Fprintf(b, "           walked %d %s below it\n", f.Walked, noun)
		}
	}
	for _, k := range f.Kernel {
		if k.Decides {
			fmt.Fprintf(b, "           held by the rule and the kernel: %s is hidden from the agent too\n", k.Path)
		} else {
			fmt.Fprintf(b, "           held by the kernel: %s matches %s below this directory and is hidden from the agent, so it does not ask\n", k.Path, k.Rule)
		}
	}
	if d.Kernel && f.Effect == Deny && f.Source == SourceRule && it.Type == extract.ItemPath && !it.Recursive && !slices.ContainsFunc(f.Kernel, func(k KernelHold) bool { return k.Decides }) {
		b.WriteString("           held by the rule only: the kernel does not hide it\n")
	}
	var also []string
	for _, m := range f.Matches {
		if m.Rule == f.Rule {
			switch {
			case m.Below != "":
				fmt.Fprintf(b, "           the rule matches %s below this directory, so it asks\n", m.Below)
			case m.Cut != "":
				fmt.Fprintf(b, "           the walk below this directory was cut short (%s): the rule may match something there, so it asks\n", m.Cut)
			case m.Possible:
				b.WriteString("           the rule matches something below this directory, so it asks\n")
			}
			continue
		}
		s := fmt.Sprintf("%s (%s, %s)", m.Rule, m.Layer, m.Effect)
		switch {
		case m.Below != "":
			s += " on " + m.Below + " below it"
		case m.Cut != "":
			s += " below it (walk cut short: " + m.Cut + ")"
		case m.Possible:
			s += " below it"
		}
		also = append(also, s)
	}
	if len(also) > 0 {
		fmt.Fprintf(b, "           also matched: %s\n", strings.Join(also, ", "))
	}
	if len(f.Excepted) > 0 {
		fmt.Fprintf(b, "           spared by unless: %s\n", strings.Join(f.Excepted, ", "))
	}
}

// itemNotes are what explain says of an item in parentheses: its kinds,
// where it comes from, and how a recursive one is walked.
func itemNotes(it *extract.Item) []string {
	var notes []string
	if len(it.Kinds) > 0 {
		notes = append(notes, joinKinds(it.Kinds))
	}
	if it.Origin != "" {
		notes = append(notes, it.Origin)
	}
	if it.Aux {
		notes = append(notes, "wrapper: only makes the decision stricter")
	}
	if it.Recursive {
		notes = append(notes, "recursive")
		switch {
		case it.Walk == nil:
		case it.Walk.Links == "none":
			notes = append(notes, "opens no symlink below it")
		case it.Walk.Links == "files":
			notes = append(notes, "opens a symlink below it only to a file named "+strings.Join(it.Walk.Open, " "))
		}
	}
	return notes
}

func decider(rule, layer string, src Source) string {
	switch {
	case src == SourceDefault:
		return fmt.Sprintf("default (%s layer)", layer)
	case rule == "":
		return "no rule"
	}
	return fmt.Sprintf("%s (%s layer)", rule, layer)
}

// outcome describes what the agent gets for a decision (DESIGN §6).
func outcome(d *Decision) string {
	if a := d.Answerers; a != nil && d.Effect == Ask {
		if len(a.Names) == 0 {
			return "refused at once as if rejected (no one may answer); the editor is told why"
		}
		return answer(d) + "; only " + a.String() + " may answer (an answer from another client is taken as a reject)"
	}
	return answer(d)
}

func answer(d *Decision) string {
	if extract.IsCommand(d.Method) {
		switch d.Effect {
		case Allow:
			return "the router carries the command out"
		case Deny:
			return fmt.Sprintf("the command is not carried out; the editor is shown %q and the turn ends (a config option is answered with that error)", d.ErrorMessage())
		}
		return "the router asks the editor first (session/request_permission with allow_once and reject_once), then carries the command out or not"
	}
	if d.Method == acp.MethodRequestPermission {
		switch d.Effect {
		case Allow:
			return "the agent gets its first allow_once option (if it offers only allow_always, the editor is asked instead)"
		case Deny:
			return fmt.Sprintf("the agent gets its first reject_once option (else reject_always, else outcome cancelled); the editor sees the tool call failed with %q",
				d.ErrorMessage())
		}
		return "forwarded to the editor, which asks the user"
	}
	switch d.Effect {
	case Allow:
		return "forwarded to the editor"
	case Deny:
		if d.Method == acp.MethodMcpMessage {
			return fmt.Sprintf("the inner MCP error %d %q (data: rule and decision) as the result; the editor never sees the request", acp.CodeInternalError, d.ErrorMessage())
		}
		return fmt.Sprintf("JSON-RPC error %d %q (data: rule and decision); the editor never sees the request", acp.CodeInternalError, d.ErrorMessage())
	}
	return "the router asks the editor first (session/request_permission with allow_once, allow_always, reject_once, reject_always), then forwards or refuses the request"
}
