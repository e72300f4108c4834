package extract

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Bash evaluates the values of the variables an arithmetic expression
// names as expressions in turn, and an array subscript in such a value
// expands its command substitutions: x='a[$(cmd)]'; echo $((x)) runs cmd.
// So does a command's output or a variable's value expanded into one
// ($(( $(cat f) )), $((1+$1))). Arithmetic is evaluated in $((...)) and
// $[...], ((...)), let, for ((...)), array subscripts (${a[i]}, a[i]=v),
// ${s:offset:length}, the -eq -ne -lt -le -gt -ge operands of [[ ]], and
// the subscript of a variable name given to test -v, [[ -v ]] or
// printf -v. The router knows a variable holds a number only when every
// assignment of the command line to it is a number (an integer, an
// arithmetic expansion, a for loop over integers, an arithmetic
// assignment); any other variable, command output or quoted text evaluated
// as arithmetic is opaque.

// arithVars are what the command line assigns to its variables.
type arithVars struct {
	good, bad map[string]bool
	// all: a builtin assigns a variable whose name is known only at run
	// time (read "$name").
	all bool
	env []string // variables set for the commands (VAR=x cmd, terminal/create env)
}

// numericSpecial are bash's variables that hold a number unless the
// command line assigns or unsets them.
var numericSpecial = map[string]bool{
	"?": true, "#": true, "$": true, "!": true, "RANDOM": true, "SRANDOM": true, "SECONDS": true,
	"LINENO": true, "BASHPID": true, "PPID": true, "UID": true, "EUID": true, "EPOCHSECONDS": true,
	"OPTIND": true,
}

// assigners are the builtins whose operands name variables they assign.
var assigners = map[string]bool{
	"read": true, "mapfile": true, "readarray": true, "getopts": true, "unset": true, "wait": true,
	"printf": true,
}

// arithVarsOf collects the assignments of f, and records the variables it
// assigns anything but a number in x.arithBad, for the scripts it runs
// (bash -c '...' sees what the outer line exported).
func (x *extractor) arithVarsOf(f *syntax.File, cx cmdCtx) *arithVars {
	v := &arithVars{good: map[string]bool{}, bad: map[string]bool{}, env: cx.env}
	mark := func(name string, numeric bool) {
		if numeric {
			v.good[name] = true
		} else {
			v.bad[name] = true
		}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Assign:
			if n.Name != nil && !n.Naked {
				mark(n.Name.Value, n.Index == nil && n.Array == nil && numericWord(n.Value, false))
			}
		case *syntax.ForClause:
			if it, ok := n.Loop.(*syntax.WordIter); ok && it.Name != nil {
				numeric := it.InPos.IsValid() // for x; do: the positional parameters
				for _, w := range it.Items {
					numeric = numeric && numericWord(w, true)
				}
				mark(it.Name.Value, numeric)
			}
		case *syntax.BinaryArithm:
			// An arithmetic assignment stores a number.
			switch n.Op {
			case syntax.Assgn, syntax.AddAssgn, syntax.SubAssgn, syntax.MulAssgn, syntax.QuoAssgn, syntax.RemAssgn,
				syntax.AndAssgn, syntax.OrAssgn, syntax.XorAssgn, syntax.ShlAssgn, syntax.ShrAssgn:
				if name := arithName(n.X); name != "" {
					v.good[name] = true
				}
			}
		case *syntax.UnaryArithm:
			if n.Op == syntax.Inc || n.Op == syntax.Dec {
				if name := arithName(n.X); name != "" {
					v.good[name] = true
				}
			}
		case *syntax.ParamExp:
			// ${x=VALUE}, ${x:=VALUE} assign x.
			if n.Param != nil && n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) {
				v.bad[n.Param.Value] = true
			}
		case *syntax.CallExpr:
			if len(n.Args) == 0 {
				return true
			}
			prog, ok := PlainText(n.Args[0])
			if !ok {
				return true
			}
			prog = prog[strings.LastIndexByte(prog, '/')+1:]
			if prog == "builtin" || prog == "command" {
				if len(n.Args) < 2 {
					return true
				}
				if prog, ok = PlainText(n.Args[1]); !ok {
					return true
				}
			}
			if !assigners[prog] {
				return true
			}
			for _, w := range n.Args[1:] {
				s, ok := PlainText(w)
				if !ok {
					if prog != "printf" {
						v.all = true
					}
					continue
				}
				// read NAME, read -a NAME, printf -vNAME, mapfile NAME[...]
				s = strings.TrimPrefix(s, "-v")
				if i := strings.IndexAny(s, "[="); i >= 0 {
					s = s[:i]
				}
				if isName(s) {
					v.bad[s] = true
				}
			}
		}
		return true
	})
	for name := range v.bad {
		if x.arithBad == nil {
			x.arithBad = map[string]bool{}
		}
		x.arithBad[name] = true
	}
	return v
}

// numeric says whether name holds a number wherever the command line
// evaluates it.
func (x *extractor) numeric(v *arithVars, name string) bool {
	if v.all || v.bad[name] || x.arithBad[name] {
		return false
	}
	for _, e := range v.env {
		if e == name {
			return false
		}
	}
	return v.good[name] || numericSpecial[name]
}

// numericWord says whether w is a number as an assignment's value (or a
// for loop's word, with braces: {1..10}).
func numericWord(w *syntax.Word, braces bool) bool {
	if w == nil {
		return true // x= is empty: 0
	}
	if len(w.Parts) != 1 {
		return false
	}
	switch p := w.Parts[0].(type) {
	case *syntax.Lit:
		s := strings.TrimLeft(p.Value, "+-")
		if braces {
			s = strings.Trim(s, "{}")
		}
		if s == "" {
			return false
		}
		for _, c := range s {
			if !(c >= '0' && c <= '9' || braces && strings.ContainsRune(".,+-", c)) {
				return false
			}
		}
		return true
	case *syntax.ArithmExp:
		return true
	case *syntax.ParamExp:
		return p.Param != nil && p.Length && p.Exp == nil && p.Repl == nil && p.Slice == nil
	}
	return false
}

// arithName is the variable an arithmetic assignment assigns.
func arithName(e syntax.ArithmExpr) string {
	if w, ok := e.(*syntax.Word); ok && len(w.Parts) == 1 {
		if l, ok := w.Parts[0].(*syntax.Lit); ok && isName(l.Value) {
			return l.Value
		}
	}
	return ""
}

// isName says whether s is a shell variable name.
func isName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// arithm records an arithmetic expression of the command line that may run
// a command through a value it evaluates: opaque.
func (x *extractor) arithm(e syntax.ArithmExpr, v *arithVars, cx cmdCtx) {
	if e == nil {
		return
	}
	if why := x.arithmRisk(e, v); why != "" {
		x.opaque(cx.origin, why, KindExecute)
	}
}

// arithmRisk says why evaluating e may run a command ("" if it cannot).
// Nested arithmetic expansions and subscripts are checked where the walk
// reaches them.
func (x *extractor) arithmRisk(e syntax.ArithmExpr, v *arithVars) string {
	switch e := e.(type) {
	case *syntax.BinaryArithm:
		if why := x.arithmRisk(e.X, v); why != "" {
			return why
		}
		return x.arithmRisk(e.Y, v)
	case *syntax.UnaryArithm:
		return x.arithmRisk(e.X, v)
	case *syntax.ParenArithm:
		return x.arithmRisk(e.X, v)
	case *syntax.Word:
		return x.arithmWordRisk(e.Parts, v)
	}
	return "an arithmetic expression the router does not analyse"
}

// arithmWordRisk says why a word evaluated as arithmetic may run a command.
func (x *extractor) arithmWordRisk(parts []syntax.WordPart, v *arithVars) string {
	for _, part := range parts {
		switch p := part.(type) {
		case *syntax.Lit:
			for _, name := range arithmNames(p.Value) {
				if !x.numeric(v, name) {
					return fmt.Sprintf("arithmetic evaluates the value of %s as an expression (an array subscript in it runs commands)", name)
				}
			}
		case *syntax.ParamExp:
			if p.Param == nil {
				return "a parameter expansion evaluated as arithmetic"
			}
			plain := !p.Excl && !p.Width && !p.IsSet && p.Slice == nil && p.Repl == nil && p.Names == 0 &&
				p.Exp == nil && p.NestedParam == nil && p.Flags == nil
			if plain && (p.Length || x.numeric(v, p.Param.Value)) {
				continue
			}
			return fmt.Sprintf("the value of $%s is evaluated as arithmetic (an array subscript in it runs commands)", p.Param.Value)
		case *syntax.ArithmExp:
			// A number.
		case *syntax.DblQuoted:
			if why := x.arithmWordRisk(p.Parts, v); why != "" {
				return why
			}
		case *syntax.CmdSubst:
			return "the output of a command substitution is evaluated as arithmetic (an array subscript in it runs commands)"
		default:
			return "a word evaluated as arithmetic that the router does not analyse"
		}
	}
	return ""
}

// arithmNames returns the variable names in the text of an arithmetic
// expression (not the digits of numbers: 0x1f, 16#ff).
func arithmNames(s string) []string {
	var names []string
	for i := 0; i < len(s); {
		c := s[i]
		word := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !word && !(c >= '0' && c <= '9') {
			i++
			continue
		}
		j := i
		for j < len(s) && (s[j] == '_' || s[j] == '#' || s[j] == '@' || s[j] >= 'a' && s[j] <= 'z' ||
			s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
			if !word && s[j] == '#' {
				j++ // 16#ff: a base
				continue
			}
			if word && (s[j] == '#' || s[j] == '@') {
				break
			}
			j++
		}
		if word {
			names = append(names, s[i:j])
		}
		i = max(j, i+1)
	}
	return names
}

// arithmTest records the operands of [[ ]] that are evaluated as
// arithmetic (-eq ... -gt) or as a variable name with a subscript (-v, -R).
func (x *extractor) arithmTest(e syntax.TestExpr, v *arithVars, cx cmdCtx) {
	switch e := e.(type) {
	case *syntax.BinaryTest:
		switch e.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			for _, o := range []syntax.TestExpr{e.X, e.Y} {
				if w, ok := o.(*syntax.Word); ok {
					if why := x.arithmWordRisk(w.Parts, v); why != "" {
						x.opaque(cx.origin, why, KindExecute)
					}
				}
			}
		default:
			x.arithmTest(e.X, v, cx)
			x.arithmTest(e.Y, v, cx)
		}
	case *syntax.UnaryTest:
		if w, ok := e.X.(*syntax.Word); ok && (e.Op == syntax.TsVarSet || e.Op == syntax.TsRefVar) {
			if s, ok := PlainText(w); !ok || strings.Contains(s, "[") {
				x.opaque(cx.origin, subscriptWhy, KindExecute)
			}
			return
		}
		x.arithmTest(e.X, v, cx)
	case *syntax.ParenTest:
		x.arithmTest(e.X, v, cx)
	}
}

// subscriptWhy: test -v, [[ -v ]] and printf -v evaluate the subscript of
// the name they are given.
const subscriptWhy = "a variable name with a subscript (or known only at run time) is evaluated as arithmetic (an array subscript runs commands)"

// builtinVarArgs says why the operands of a builtin that names variables
// (printf -v NAME, test -v NAME) make it run or change what runs ("" if
// they cannot): a subscript is evaluated as arithmetic, and printf -v
// assigns the variable as an assignment does (PATH, IFS).
func builtinVarArgs(name string, args []arg) string {
	switch name {
	case "printf":
		for i := 0; i < len(args); i++ {
			a := args[i]
			var v arg
			switch {
			case a.opaque != "":
				return "printf's options are known only at run time: -v assigns a variable"
			case a.s == "--" || !strings.HasPrefix(a.s, "-v"):
				return ""
			case a.s == "-v":
				if i+1 >= len(args) {
					return ""
				}
				i++
				v = args[i]
			default:
				v = arg{s: a.s[2:]}
			}
			if v.opaque != "" || strings.Contains(v.s, "[") {
				return subscriptWhy
			}
			if why := dangerousEnv(v.s); why != "" {
				return "printf -v " + why
			}
		}
	case "test", "[":
		for i := 0; i+1 < len(args); i++ {
			if args[i].s == "-v" || args[i].s == "-R" {
				if n := args[i+1]; n.opaque != "" || strings.Contains(n.s, "[") {
					return subscriptWhy
				}
			}
		}
	}
	return ""
}
