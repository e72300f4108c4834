package extract

import (
	"fmt"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Shell state set earlier on a line (issue 27): bash has many ways to set a
// variable for the commands after it in the same shell besides VAR=x cmd
// (export, declare -x, readonly, local, a bare VAR=x, read, mapfile,
// printf -v, getopts, wait -p, ${VAR:=x}, arithmetic assignments, for
// loops), and builtins that change how later commands are found or read
// (hash -p, set, shopt, declare -n, declare -i). Every variable set this
// way is a variable set for each later command of the same shell, as its
// VAR=x prefix would be: an env rule sees export VAR=x; cmd as it sees
// VAR=x cmd, and a value the router does not understand makes the later
// commands' arguments not understood. A variable inherited from the
// environment is exported, so a bare VAR=x is counted as exported too. A
// subshell, a command substitution, a part of a pipeline and a background
// command run in a copy of the shell: what they set stays there. What
// cannot be followed (a nameref, a name known only at run time, an option
// that changes globbing, aliases or parsing) makes the line opaque.

// stateEffect is one variable set on the line, for the commands in
// [lo, hi) at or after offset from.
type stateEffect struct {
	name    string
	unknown string
	lo, hi  uint
	from    uint
}

// lineState is what the line sets for its later commands.
type lineState []stateEffect

// at returns the variables set for a command at offset c and why the
// value of one of them is not understood ("" if all are).
func (s lineState) at(c uint) (names []string, unknown string) {
	for _, e := range s {
		if c < e.lo || c >= e.hi || c < e.from {
			continue
		}
		if !slices.Contains(names, e.name) {
			names = append(names, e.name)
		}
		if unknown == "" {
			unknown = e.unknown
		}
	}
	return names, unknown
}

// specialBuiltins are POSIX's special builtins: in posix mode (bash run
// as sh, set -o posix) the assignments before them stay set after them.
var specialBuiltins = map[string]bool{":": true, ".": true, "source": true, "eval": true, "exec": true, "exit": true,
	"export": true, "readonly": true, "return": true, "set": true, "shift": true, "trap": true, "unset": true,
	"break": true, "continue": true, "times": true}

// assignOnce analyses an assignment once (the state pass and the command
// it prefixes both see it) and returns why its value is not understood.
func (x *extractor) assignOnce(a *syntax.Assign, cx cmdCtx) string {
	if why, ok := x.assigned[a]; ok {
		return why
	}
	why := x.assign(a, cx)
	if x.assigned == nil {
		x.assigned = map[*syntax.Assign]string{}
	}
	x.assigned[a] = why
	return why
}

// shellState reads what the commands of f set for the commands after them
// in the same shell; what it cannot follow is recorded as opaque.
func (x *extractor) shellState(f *syntax.File, vars *arithVars, cx cmdCtx) lineState {
	type scope struct {
		node   syntax.Node
		lo, hi uint
		depth  int // index in stack of the scope's node
	}
	var st lineState
	var stack []syntax.Node
	scopes := []scope{{node: f, lo: 0, hi: ^uint(0), depth: 0}}
	parts := map[*syntax.Stmt]bool{}
	set := func(name, unknown string, at uint) {
		sc := scopes[len(scopes)-1]
		from := at
		// In a loop or a function the assignment may run before any
		// command of it runs (again): from the start of the outermost one.
		for _, n := range stack[sc.depth:] {
			switch n.(type) {
			case *syntax.ForClause, *syntax.WhileClause, *syntax.FuncDecl:
				from = min(from, n.Pos().Offset())
			}
		}
		st = append(st, stateEffect{name: name, unknown: unknown, lo: sc.lo, hi: sc.hi, from: from})
	}
	named := func(name, by string, at uint) {
		switch {
		case !isName(name):
			// read 'a[$(cmd)]' evaluates the subscript; a computed name
			// is any variable.
			x.opaque(cx.origin, fmt.Sprintf("%s assigns a variable %q the router cannot follow", by, name), KindExecute)
		case dangerousEnv(name) != "":
			x.opaque(cx.origin, by+": "+dangerousEnv(name), KindExecute)
		case cwdVars[name]:
			// cd .. and cd - follow PWD and OLDPWD (cdClosure sees only
			// their assignments).
			x.opaque(cx.origin, by+" assigns "+name+": where a later cd goes is known only at run time", KindExecute)
		}
		if isName(name) {
			set(name, "", at)
		}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		if n == nil {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if len(scopes) > 1 && scopes[len(scopes)-1].node == top {
				scopes = scopes[:len(scopes)-1]
			}
			return true
		}
		stack = append(stack, n)
		push := func() {
			scopes = append(scopes, scope{node: n, lo: n.Pos().Offset(), hi: n.End().Offset(), depth: len(stack) - 1})
		}
		switch n := n.(type) {
		case *syntax.Subshell, *syntax.CmdSubst, *syntax.ProcSubst, *syntax.CoprocClause:
			push()
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				// Each part of a pipeline runs in a subshell (lastpipe,
				// which runs the last in this one, is a shopt the line
				// would have to set: opaque below).
				parts[n.X], parts[n.Y] = true, true
			}
		case *syntax.Stmt:
			if parts[n] || n.Background || n.Coprocess {
				push()
			}
		case *syntax.CallExpr:
			x.stateCall(n, vars, cx, set, named)
		case *syntax.DeclClause:
			x.declaration(n.Variant.Value, declArgs(n.Args), vars, cx, set)
		case *syntax.ParamExp:
			// ${VAR=x} and ${VAR:=x} assign VAR.
			if n.Param != nil && n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) {
				a := &syntax.Assign{Name: n.Param, Value: n.Exp.Word}
				if n.Exp.Word == nil {
					a.Value = &syntax.Word{}
				}
				set(n.Param.Value, x.assignOnce(a, cx), n.Pos().Offset())
			}
		case *syntax.ForClause:
			if it, ok := n.Loop.(*syntax.WordIter); ok && it.Name != nil {
				set(it.Name.Value, "", n.Pos().Offset())
			}
		case *syntax.BinaryArithm:
			switch n.Op {
			case syntax.Assgn, syntax.AddAssgn, syntax.SubAssgn, syntax.MulAssgn, syntax.QuoAssgn, syntax.RemAssgn,
				syntax.AndAssgn, syntax.OrAssgn, syntax.XorAssgn, syntax.ShlAssgn, syntax.ShrAssgn:
				if name := arithName(n.X); name != "" {
					named(name, "an arithmetic assignment", n.Pos().Offset())
				}
			}
		case *syntax.UnaryArithm:
			if n.Op == syntax.Inc || n.Op == syntax.Dec {
				if name := arithName(n.X); name != "" {
					named(name, "an arithmetic assignment", n.Pos().Offset())
				}
			}
		}
		return true
	})
	return st
}

// declArg is one operand of a declaration builtin: an assignment as
// parsed, or a word (an option, a name, NAME=VALUE given as a word), held
// as a naked assignment of its value.
type declArg struct {
	assign *syntax.Assign
	isWord bool
}

// declArgs turns a DeclClause's operands into declArgs; a naked word
// (an option, "NAME=VALUE" quoted, $X) is left as a word to read.
func declArgs(as []*syntax.Assign) []declArg {
	out := make([]declArg, 0, len(as))
	for _, a := range as {
		if a.Naked && a.Name == nil && a.Value != nil {
			out = append(out, declArg{assign: a, isWord: true})
			continue
		}
		out = append(out, declArg{assign: a})
	}
	return out
}

// declaration reads export, declare, typeset, local, readonly (and
// nameref): the variables they set, their options.
func (x *extractor) declaration(variant string, args []declArg, vars *arithVars, cx cmdCtx,
	set func(name, unknown string, at uint)) {
	by := variant
	if variant == "nameref" {
		x.opaque(cx.origin, "a nameref makes a later assignment assign another variable", KindExecute)
		return
	}
	funcs, integer, unexport := false, false, false
	options := true
	for _, d := range args {
		var name string
		var at uint
		if d.isWord {
			ws := x.words(d.assign.Value, cx)
			at = d.assign.Pos().Offset()
			if len(ws) != 1 || ws[0].opaque != "" || ws[0].glob {
				x.opaque(cx.origin, by+" with an operand known only at run time: it may set any variable", KindExecute)
				continue
			}
			s := ws[0].s
			if options && s == "--" {
				options = false
				continue
			}
			if options && len(s) > 1 && (s[0] == '-' || s[0] == '+') {
				for _, c := range s[1:] {
					switch c {
					case 'n':
						if s[0] == '-' && variant != "export" {
							x.opaque(cx.origin, by+" -n makes a nameref: a later assignment assigns another variable", KindExecute)
							return
						}
						unexport = unexport || variant == "export"
					case 'f', 'F':
						funcs = true
					case 'i':
						integer = integer || s[0] == '-'
					case 'x':
						unexport = unexport || s[0] == '+'
					}
				}
				continue
			}
			n, v, hasValue := strings.Cut(s, "=")
			name = n
			if funcs || unexport {
				continue
			}
			if !isName(strings.TrimSuffix(name, "+")) {
				x.opaque(cx.origin, fmt.Sprintf("%s %q: a variable the router cannot follow", by, s), KindExecute)
				continue
			}
			name = strings.TrimSuffix(name, "+")
			why := ""
			if hasValue {
				why = x.assignString(name, v, true, cx)
				if integer && !isDigits(strings.TrimLeft(v, "+-")) {
					x.opaque(cx.origin, fmt.Sprintf("%s -i evaluates the value of %s as arithmetic", by, name), KindExecute)
				}
			} else if why := dangerousEnv(name); why != "" {
				x.opaque(cx.origin, by+" "+name+": "+why, KindExecute)
			}
			if integer && vars != nil && (vars.bad[name] || x.arithBad[name]) {
				x.opaque(cx.origin, fmt.Sprintf("%s -i: every later assignment to %s is evaluated as arithmetic", by, name), KindExecute)
			}
			set(name, why, at)
			continue
		}
		a := d.assign
		options = false
		if a.Name == nil || funcs || unexport {
			continue
		}
		name, at = a.Name.Value, a.Pos().Offset()
		why := ""
		if a.Naked {
			// export NAME: a variable set before, or inherited.
			if w := dangerousEnv(name); w != "" {
				x.opaque(cx.origin, by+" "+name+": "+w, KindExecute)
			}
		} else {
			why = x.assignOnce(a, cx)
			if integer && (a.Array != nil || !numericWord(a.Value, false)) {
				x.opaque(cx.origin, fmt.Sprintf("%s -i evaluates the value of %s as arithmetic", by, name), KindExecute)
			}
		}
		if integer && vars != nil && (vars.bad[name] || x.arithBad[name]) {
			x.opaque(cx.origin, fmt.Sprintf("%s -i: every later assignment to %s is evaluated as arithmetic", by, name), KindExecute)
		}
		set(name, why, at)
	}
}

// stateCall reads the state a simple command sets for the later ones: a
// bare assignment, the assignments before a special builtin, and the
// builtins that assign variables or change how later commands are read.
func (x *extractor) stateCall(c *syntax.CallExpr, vars *arithVars, cx cmdCtx,
	set func(name, unknown string, at uint), named func(name, by string, at uint)) {
	at := c.Pos().Offset()
	if len(c.Args) == 0 {
		for _, a := range c.Assigns {
			if a.Name != nil {
				set(a.Name.Value, x.assignOnce(a, cx), a.Pos().Offset())
			}
		}
		return
	}
	var args []arg
	for _, w := range c.Args {
		args = x.appendWords(args, w, cx)
		if len(args) > 64 {
			break
		}
	}
	// builtin NAME and command [-p] NAME run the builtin NAME.
	for len(args) > 0 && args[0].opaque == "" && (args[0].s == "builtin" || args[0].s == "command") {
		cmd := args[0].s == "command"
		args = args[1:]
		for cmd && len(args) > 0 && args[0].opaque == "" && len(args[0].s) > 1 && args[0].s[0] == '-' {
			if args[0].s == "--" {
				args = args[1:]
				break
			}
			if strings.ContainsAny(args[0].s, "vV") {
				return // command -v only prints
			}
			args = args[1:]
		}
	}
	if len(args) == 0 || args[0].opaque != "" {
		return
	}
	name, ops := args[0].s, args[1:]
	if specialBuiltins[name] {
		for _, a := range c.Assigns {
			if a.Name != nil {
				set(a.Name.Value, x.assignOnce(a, cx), a.Pos().Offset())
			}
		}
	}
	switch name {
	case "export", "declare", "typeset", "local", "readonly":
		// "export" X=1, \declare -x X=1: a command, not a DeclClause.
		var ds []declArg
		for _, a := range ops {
			ds = append(ds, declArg{isWord: true, assign: &syntax.Assign{Naked: true, Value: literalWord(a)}})
		}
		x.declaration(name, ds, vars, cx, set)
	case "read", "mapfile", "readarray", "printf", "getopts", "wait":
		names, why := builtinAssigns(name, ops)
		if why != "" {
			x.opaque(cx.origin, why, KindExecute)
		}
		for _, n := range names {
			named(n, name, at)
		}
	case "hash":
		for _, a := range ops {
			if a.opaque != "" || strings.HasPrefix(a.s, "-") && strings.Contains(a.s, "p") {
				x.opaque(cx.origin, "hash -p makes a later command run another file", KindExecute)
				break
			}
		}
	case "set":
		if why := setOptionsWhy(ops); why != "" {
			x.opaque(cx.origin, why, KindExecute)
		}
	case "shopt":
		if why := shoptWhy(ops); why != "" {
			x.opaque(cx.origin, why, KindExecute)
		}
		if shoptSets(ops, "nullglob") {
			x.nullglob = true
		}
	}
}

// literalWord is a word holding the argument a (its value, single-quoted;
// an opaque one as a parameter expansion, still opaque when read again).
func literalWord(a arg) *syntax.Word {
	if a.opaque != "" {
		return &syntax.Word{Parts: []syntax.WordPart{&syntax.ParamExp{Param: &syntax.Lit{Value: "_"}, Excl: true}}}
	}
	if a.glob {
		return &syntax.Word{Parts: []syntax.WordPart{&syntax.Lit{Value: a.s}}}
	}
	return &syntax.Word{Parts: []syntax.WordPart{&syntax.SglQuoted{Value: a.s}}}
}

// builtinAssigns returns the variables read, mapfile, readarray, printf
// -v, getopts and wait -p assign, or why they cannot be followed.
func builtinAssigns(name string, ops []arg) (names []string, why string) {
	valued := map[string]string{"read": "adinNptu", "mapfile": "dnOsuCc", "readarray": "dnOsuCc", "printf": "v",
		"wait": "p", "getopts": ""}[name]
	var operands []arg
	i := 0
	for ; i < len(ops); i++ {
		a := ops[i]
		if a.opaque != "" {
			return nil, name + "'s operands are known only at run time: it may assign any variable"
		}
		if a.s == "--" {
			i++
			break
		}
		if len(a.s) < 2 || a.s[0] != '-' || name == "getopts" {
			break
		}
		for j := 1; j < len(a.s); j++ {
			c := a.s[j]
			if strings.IndexByte(valued, c) < 0 {
				continue
			}
			var v arg
			if j+1 < len(a.s) {
				v = arg{s: a.s[j+1:]}
			} else if i+1 < len(ops) {
				i++
				v = ops[i]
			}
			switch {
			case (name == "mapfile" || name == "readarray") && c == 'C':
				return nil, name + " -C runs a callback as shell code"
			case name == "read" && c == 'a', name == "printf" && c == 'v', name == "wait" && c == 'p':
				if v.opaque != "" {
					return nil, name + " assigns a variable known only at run time"
				}
				names = append(names, v.s)
			}
			break
		}
	}
	if name == "printf" || name == "wait" {
		return names, ""
	}
	operands = ops[min(i, len(ops)):]
	for k, a := range operands {
		if a.opaque != "" {
			return nil, name + " assigns a variable known only at run time"
		}
		switch name {
		case "getopts":
			if k == 1 {
				names = append(names, a.s)
			}
		case "mapfile", "readarray":
			if k == 0 {
				names = append(names, a.s)
			}
		default:
			names = append(names, a.s)
		}
	}
	if len(operands) == 0 {
		switch name {
		case "read":
			if len(names) == 0 {
				names = append(names, "REPLY")
			}
		case "mapfile", "readarray":
			names = append(names, "MAPFILE")
		}
	}
	return names, ""
}

// harmlessSetOptions are the set -o options that do not change what a
// later command runs or how the router reads it (allexport: every
// variable set on the line already counts as exported; physical: cd's
// logical and physical directories are both candidates).
var harmlessSetOptions = map[string]bool{"errexit": true, "nounset": true, "pipefail": true, "xtrace": true, "verbose": true,
	"noclobber": true, "errtrace": true, "functrace": true, "monitor": true, "notify": true, "ignoreeof": true,
	"emacs": true, "vi": true, "history": true, "histexpand": true, "hashall": true, "allexport": true,
	"physical": true, "privileged": true, "noexec": true, "nolog": true, "onecmd": true, "interactive-comments": true}

// setOptionsWhy says why a set command changes how later commands are
// read ("" if it does not): -f (no globbing) and +B (no brace expansion)
// change the words the router expands, -k makes NAME=VALUE operands
// assignments, posix keeps assignments before special builtins, an
// option the router does not know may do anything.
func setOptionsWhy(ops []arg) string {
	for i := 0; i < len(ops); i++ {
		a := ops[i]
		if a.opaque != "" {
			return "set with options known only at run time"
		}
		s := a.s
		if s == "--" || s == "-" || len(s) < 2 || s[0] != '-' && s[0] != '+' {
			return "" // positional parameters
		}
		for _, c := range s[1:] {
			switch c {
			case 'e', 'u', 'x', 'v', 'C', 'E', 'T', 'm', 'b', 'h', 'H', 'a', 'P', 'p', 'n', 't':
			case 'B':
				if s[0] == '+' {
					return "set +B turns brace expansion off: later words are not what the router expands"
				}
			case 'o':
				if i+1 >= len(ops) {
					continue // set -o lists the options
				}
				i++
				o := ops[i]
				if o.opaque != "" || !harmlessSetOptions[o.s] && !(o.s == "braceexpand" && s[0] == '-') {
					return fmt.Sprintf("set %s %s changes how later commands are read", s, o.s)
				}
				if o.s == "interactive-comments" && s[0] == '+' {
					return "set +o interactive-comments makes # an ordinary character"
				}
			default:
				return fmt.Sprintf("set -%c changes how later commands are read", c)
			}
		}
	}
	return ""
}

// harmlessShopt are the shopt options that do not change what a later
// command runs or how the router reads it, either way.
var harmlessShopt = map[string]bool{"checkwinsize": true, "histappend": true, "cmdhist": true, "lithist": true,
	"inherit_errexit": true, "huponexit": true, "checkjobs": true, "progcomp": true, "promptvars": true,
	"shift_verbose": true, "xpg_echo": true, "checkhash": true, "execfail": true, "gnu_errfmt": true,
	"histreedit": true, "histverify": true, "no_empty_cmd_completion": true}

// offByDefault are shopt options that are off in a non-interactive bash:
// turning them off changes nothing.
var offByDefault = map[string]bool{"nullglob": true, "failglob": true, "dotglob": true, "nocaseglob": true,
	"globstar": true, "extglob": true, "nocasematch": true, "lastpipe": true, "expand_aliases": true, "cdspell": true,
	"dirspell": true, "autocd": true, "cdable_vars": true}

// shoptWhy says why a shopt command changes how later commands are read
// ("" if it does not): globbing options change the files a glob names,
// expand_aliases runs aliases, lastpipe keeps what a pipeline's last part
// sets, cdspell and cdable_vars move cd.
func shoptWhy(ops []arg) string {
	mode := byte(0)
	for _, a := range ops {
		if a.opaque != "" {
			return "shopt with options known only at run time"
		}
		s := a.s
		if len(s) > 1 && s[0] == '-' {
			if strings.ContainsAny(s, "pq") && !strings.ContainsAny(s, "su") {
				continue
			}
			if strings.Contains(s, "s") {
				mode = 's'
			} else if strings.Contains(s, "u") {
				mode = 'u'
			}
			if strings.Contains(s, "o") {
				return "shopt -o sets a set -o option"
			}
			continue
		}
		switch {
		case mode == 0:
		case harmlessShopt[s]:
		case mode == 'u' && offByDefault[s]:
		// failglob only stops a command whose glob matches nothing (the
		// router reads it as run); nullglob is followed (glob.go).
		case mode == 's' && (s == "failglob" || s == "nullglob"):
		default:
			return fmt.Sprintf("shopt -%c %s changes how later commands are read", mode, s)
		}
	}
	return ""
}

// shoptSets reports whether the shopt operands ops (-s) turns the option name on.
func shoptSets(ops []arg, name string) bool {
	on := false
	for _, a := range ops {
		switch {
		case a.opaque != "":
			return true
		case strings.HasPrefix(a.s, "-"):
			on = strings.Contains(a.s, "s")
		case on && a.s == name:
			return true
		}
	}
	return false
}

// stateOnly reports whether a builtin only sets shell state the router
// follows or knows to be harmless: set and shopt with harmless options,
// hash without -p, unset.
func stateOnly(name string, ops []arg) bool {
	switch name {
	case "set":
		return len(ops) > 0 && setOptionsWhy(ops) == ""
	case "shopt":
		return len(ops) > 0 && shoptWhy(ops) == "" && slices.ContainsFunc(ops, func(a arg) bool { return a.s == "-s" || a.s == "-u" })
	case "hash":
		return !slices.ContainsFunc(ops, func(a arg) bool { return a.opaque != "" || strings.HasPrefix(a.s, "-") && strings.Contains(a.s, "p") })
	case "unset":
		return !slices.ContainsFunc(ops, func(a arg) bool { return a.opaque != "" || a.glob })
	}
	return false
}
