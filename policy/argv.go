package policy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// argv analyses one simple command given as its arguments: opaque
// builtins, known wrappers (unwrapped, wrapper and payload both checked),
// shells running a script, and ordinary programs with the paths and
// domains in their arguments.
func (x *extractor) argv(args []arg, cx cmdCtx) {
	if x.full || x.tooDeep(cx) {
		return
	}
	prog := args[0]
	if prog.opaque != "" || prog.glob {
		why := "the program " + prog.opaque
		if prog.opaque == "" {
			why = "the program is a glob, expanded at run time"
		}
		it := x.commandItem(args, cx)
		it.Program, it.Opaque = "", why
		x.add(it, KindExecute)
		x.byShape("a computed program", args[1:], x.cwdsFor(cx))
		return
	}
	name := programName(prog.s)
	if why, ok := opaqueBuiltins[name]; ok {
		it := x.commandItem(args, cx)
		it.Opaque = why
		x.add(it, KindExecute)
		x.byShape(name, args[1:], x.cwdsFor(cx))
		return
	}
	if spec, ok := wrappers[name]; ok && x.wrapper(name, spec, args, cx) {
		return
	}
	if shells[name] && x.shell(args, cx) {
		return
	}
	if foreignShells[name] && slices.ContainsFunc(args[1:], func(a arg) bool { return a.s == "-c" || a.s == "--command" }) {
		it := x.commandItem(args, cx)
		it.Opaque = name + " -c runs a script the router cannot parse"
		x.add(it, KindExecute)
		return
	}
	x.program(name, args, cx)
}

// programName is the basename a program is matched by.
func programName(s string) string {
	s = strings.TrimRight(s, "/")
	if s == "" {
		return "/"
	}
	return path.Base(s)
}

// commandItem builds the command item of args.
func (x *extractor) commandItem(args []arg, cx cmdCtx) Item {
	it := Item{Type: ItemCommand, Origin: cx.origin, Env: slices.Clone(cx.env)}
	it.Argv = make([]string, len(args))
	var known []string
	for i, a := range args {
		it.Argv[i] = a.s
		if strings.IndexByte(a.s, 0) >= 0 {
			it.Opaque = "an argument contains a NUL byte"
		}
		if a.opaque == "" && i > 0 {
			known = append(known, a.s)
		}
	}
	it.ProgramPath = args[0].s
	if strings.Contains(it.ProgramPath, "/") {
		// Cleaned, but ./git stays a path: it is not the git of PATH.
		if it.ProgramPath = path.Clean(it.ProgramPath); !strings.Contains(it.ProgramPath, "/") {
			it.ProgramPath = "./" + it.ProgramPath
		}
	}
	it.Program = programName(args[0].s)
	it.Flags = flagsOf(known)
	return it
}

// opaqueBuiltins run code the router cannot see at the time it decides.
var opaqueBuiltins = map[string]string{
	"eval":     "eval runs a string as shell code",
	"source":   "source runs the commands of a file",
	".":        ". runs the commands of a file",
	"alias":    "an alias changes what a later command runs",
	"trap":     "trap runs a string as shell code later",
	"bind":     "bind -x runs a string as shell code",
	"complete": "complete -C runs a command",
	"compgen":  "compgen -C runs a command",
	"enable":   "enable loads builtins from a file",
	"fc":       "fc re-runs commands from the history",
}

// shells are POSIX-like shells whose -c script and here-document are
// parsed like the command line itself.
var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"ash": true, "yash": true, "posh": true, "rbash": true}

// foreignShells take -c scripts in a language the router does not parse.
var foreignShells = map[string]bool{"fish": true, "csh": true, "tcsh": true, "nu": true, "elvish": true,
	"xonsh": true, "pwsh": true, "powershell": true, "rc": true}

// shell handles sh/bash/zsh/... : -c SCRIPT and a script on stdin are
// parsed (the shell itself is a transparent wrapper); a script file is an
// ordinary program run. It returns false for an ordinary run.
func (x *extractor) shell(args []arg, cx cmdCtx) bool {
	hasC, stdinFlag := false, false
	i := 1
	for i < len(args) {
		a := args[i]
		if a.opaque != "" {
			break
		}
		s := a.s
		if s == "--" || s == "-" {
			i++
			break
		}
		if strings.HasPrefix(s, "--") {
			if s == "--rcfile" || s == "--init-file" {
				i++
			}
			i++
			continue
		}
		if len(s) > 1 && (s[0] == '-' || s[0] == '+') {
			for _, c := range s[1:] {
				switch c {
				case 'c':
					hasC = true
				case 's':
					stdinFlag = true
				case 'o', 'O':
					i++ // -o OPTION
				}
			}
			i++
			continue
		}
		break
	}
	operands := args[min(i, len(args)):]
	wrapperItem := func() {
		it := x.commandItem(args, cx)
		it.Aux = true
		x.add(it, KindExecute)
	}
	inner := cx
	inner.depth++
	inner.stdin, inner.piped = nil, false
	inner.origin = cx.origin + " (" + programName(args[0].s) + " script)"
	switch {
	case hasC:
		if len(operands) == 0 || operands[0].opaque != "" {
			it := x.commandItem(args, cx)
			it.Opaque = "the shell script is computed at run time"
			x.add(it, KindExecute)
			return true
		}
		wrapperItem()
		x.script(operands[0].s, inner)
		return true
	case len(operands) > 0 && !stdinFlag:
		return false // sh FILE: an ordinary program with a path argument
	case cx.stdin != nil:
		wrapperItem()
		x.script(*cx.stdin, inner)
		return true
	default:
		it := x.commandItem(args, cx)
		it.Opaque = "the shell reads its script from stdin"
		if cx.piped {
			it.Opaque = "the shell runs whatever is piped into it"
		}
		x.add(it, KindExecute)
		return true
	}
}

// wrapSpec describes a wrapper command and its options.
type wrapSpec struct {
	short   string   // short options that take a value
	long    []string // long options that take a value
	skip    int      // operands before the payload (timeout DURATION)
	assigns bool     // NAME=VALUE operands before the payload (env, sudo)
	primary bool     // the wrapper changes who or where the payload runs: it needs an allow of its own
	digits  bool     // numeric options (nice -5)
	note    string   // the payload gets an opaque item saying this
}

// wrappers are the commands that run another command given as their
// arguments (DESIGN §6 plus a few more). Transparent wrappers only make a
// decision stricter; sudo, doas, su and chroot need an allow themselves.
var wrappers = map[string]wrapSpec{
	"env":     {short: "uCS", long: []string{"--unset", "--chdir", "--split-string"}, assigns: true},
	"timeout": {short: "sk", long: []string{"--signal", "--kill-after"}, skip: 1},
	"nice":    {short: "n", long: []string{"--adjustment"}, digits: true},
	"nohup":   {},
	"time":    {short: "fo", long: []string{"--format", "--output"}},
	"xargs": {short: "aEdILnPs", long: []string{"--arg-file", "--delimiter", "--max-args", "--max-procs",
		"--max-chars", "--process-slot-var"}, note: "xargs adds arguments read from stdin"},
	"sudo": {short: "ugCDhpRrtTU", long: []string{"--user", "--group", "--close-from", "--chdir", "--host",
		"--prompt", "--chroot", "--role", "--type", "--command-timeout", "--other-user"}, assigns: true, primary: true},
	"doas":      {short: "uC", primary: true},
	"command":   {},
	"builtin":   {},
	"exec":      {short: "a"},
	"stdbuf":    {short: "ioe", long: []string{"--input", "--output", "--error"}},
	"ionice":    {short: "cnpPu", long: []string{"--class", "--classdata", "--pid", "--pgid", "--uid"}},
	"setsid":    {},
	"nocorrect": {},
	"noglob":    {},
	"watch":     {short: "nq", long: []string{"--interval", "--equexit"}},
	"flock":     {short: "wEc", long: []string{"--timeout", "--conflict-exit-code", "--command"}, skip: 1},
	"chroot":    {long: []string{"--userspec", "--groups"}, skip: 1, primary: true, note: "paths inside a chroot are relative to its new root"},
	"busybox":   {},
	"toybox":    {},
	"su":        {short: "cgGsw", long: []string{"--command", "--group", "--supp-group", "--shell", "--whitelist-environment"}, primary: true},
}

// wrapper unwraps a wrapper command; false means it runs no payload (the
// caller treats it as an ordinary program).
func (x *extractor) wrapper(name string, spec wrapSpec, args []arg, cx cmdCtx) bool {
	opts := map[string]arg{}
	env := slices.Clone(cx.env)
	i := 1
	for i < len(args) {
		a := args[i]
		if a.opaque != "" {
			break
		}
		s := a.s
		if s == "--" {
			i++
			break
		}
		if strings.HasPrefix(s, "--") && len(s) > 2 {
			key, val, has := strings.Cut(s, "=")
			if !has && slices.Contains(spec.long, key) && i+1 < len(args) {
				i++
				opts[key] = args[i]
			} else {
				opts[key] = arg{s: val}
			}
			i++
			continue
		}
		if len(s) > 1 && s[0] == '-' && !(name == "su" && s == "-") {
			if spec.digits && isDigits(s[1:]) {
				i++
				continue
			}
			for j := 1; j < len(s); j++ {
				c := s[j]
				key := "-" + string(c)
				if strings.IndexByte(spec.short, c) >= 0 {
					switch {
					case j+1 < len(s):
						opts[key] = arg{s: s[j+1:]}
					case i+1 < len(args):
						i++
						opts[key] = args[i]
					default:
						opts[key] = arg{}
					}
					break
				}
				opts[key] = arg{}
			}
			i++
			continue
		}
		if spec.assigns && isAssignment(s) {
			n, _, _ := strings.Cut(s, "=")
			env = append(env, n)
			if why := dangerousEnv(n); why != "" {
				x.opaque(cx.origin, why, KindExecute)
			}
			i++
			continue
		}
		break
	}
	wcwds := x.cwdsFor(cx)
	// Files the wrapper itself reads or writes.
	for key, role := range map[string]Kind{"-o": KindEdit, "--output": KindEdit, "-a": KindRead, "--arg-file": KindRead} {
		if v, ok := opts[key]; ok && (name == "time" && role == KindEdit || name == "xargs" && role == KindRead) {
			x.optionPath(name, key, v, role, wcwds)
		}
	}
	if name == "flock" && i < len(args) && !isDigits(args[i].s) {
		x.optionPath(name, "lock file", args[i], KindEdit, wcwds)
	}
	payload := args[min(i+spec.skip, len(args)):]
	inner := cx
	inner.depth++
	inner.env = env
	inner.origin = cx.origin + " (" + name + " payload)"
	for _, key := range []string{"-C", "--chdir", "-D"} {
		if v, ok := opts[key]; ok && (name == "env" && key != "-D" || name == "sudo" && key != "-C") {
			if v.opaque != "" || v.s == "" {
				inner.cwdUnknown = true
				continue
			}
			var dirs []string
			for _, d := range wcwds {
				dirs = append(dirs, path.Join(d, v.s))
			}
			if path.IsAbs(v.s) {
				dirs = []string{path.Clean(v.s)}
			}
			inner.cwds = dirs
		}
	}
	wrapItem := func(aux bool) {
		it := x.commandItem(args, cx)
		it.Aux = aux && !spec.primary
		x.add(it, KindExecute)
	}
	// Wrappers whose payload is a string of shell code.
	script := func(v arg) bool {
		wrapItem(true)
		if v.opaque != "" {
			x.opaque(inner.origin, "the script is computed at run time", KindExecute)
			return true
		}
		x.script(v.s, inner)
		return true
	}
	switch name {
	case "su":
		// su [-] [USER] -c CMD: the options may follow the user.
		for k := 1; k < len(args); k++ {
			if s := args[k].s; (s == "-c" || s == "--command") && k+1 < len(args) {
				return script(args[k+1])
			} else if v, ok := strings.CutPrefix(s, "--command="); ok {
				return script(arg{s: v, opaque: args[k].opaque})
			}
		}
		for _, key := range []string{"-c", "--command"} {
			if v, ok := opts[key]; ok {
				return script(v)
			}
		}
		it := x.commandItem(args, cx)
		it.Opaque = "su starts an interactive shell"
		x.add(it, KindExecute)
		return true
	case "flock":
		for _, key := range []string{"-c", "--command"} {
			if v, ok := opts[key]; ok {
				return script(v)
			}
		}
	case "watch":
		if len(payload) == 0 {
			break
		}
		var words []string
		for _, a := range payload {
			if a.opaque != "" {
				return script(a)
			}
			words = append(words, a.s)
		}
		return script(arg{s: strings.Join(words, " ")})
	case "env":
		for _, key := range []string{"-S", "--split-string"} {
			if v, ok := opts[key]; ok {
				if v.opaque != "" || strings.ContainsAny(v.s, `'"\$`) {
					wrapItem(false)
					x.opaque(inner.origin, "env -S with quoting or variables", KindExecute)
					return true
				}
				var split []arg
				for _, w := range strings.Fields(v.s) {
					split = append(split, arg{s: w})
				}
				payload = append(split, payload...)
			}
		}
	case "command":
		if _, ok := opts["-v"]; ok {
			return false // command -v NAME only prints
		}
		if _, ok := opts["-V"]; ok {
			return false
		}
	case "sudo":
		if _, ok := opts["-e"]; ok {
			wrapItem(false)
			for _, a := range payload {
				x.argPath("sudoedit", a, KindEdit, false, false, wcwds)
			}
			return true
		}
	}
	if len(payload) == 0 {
		return false
	}
	wrapItem(true)
	if spec.note != "" {
		x.add(Item{Type: ItemCommand, Origin: inner.origin, Argv: argStrings(payload), Program: programName(payload[0].s),
			ProgramPath: payload[0].s, Opaque: spec.note, Env: slices.Clone(env)}, KindExecute)
	}
	x.argv(payload, inner)
	return true
}

func argStrings(args []arg) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a.s
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func isAssignment(s string) bool { return assignment.MatchString(s) }

// optionPath records the file an option names.
func (x *extractor) optionPath(prog, opt string, v arg, kind Kind, cwds []string) {
	if v.opaque != "" {
		x.opaque(prog+" "+opt, fmt.Sprintf("the file of %s %s %s", prog, opt, v.opaque), kind)
		return
	}
	if v.s != "" && v.s != "-" {
		x.path(v.s, v.glob, kind, false, prog+" "+opt, cwds)
	}
}
