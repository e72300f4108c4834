package extract

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
	defer x.withWalk(nil)() // a command run by another walks as itself
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
	name := ProgramName(prog.s)
	if why, ok := opaqueBuiltins[name]; ok {
		it := x.commandItem(args, cx)
		it.Opaque = why
		x.add(it, KindExecute)
		x.byShape(name, args[1:], x.cwdsFor(cx))
		return
	}
	if sp := specs()[name]; sp != nil && sp.wrap != nil {
		x.wrapper(name, sp, args, cx)
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

// ProgramName is the basename a program is matched by.
func ProgramName(s string) string {
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
	if strings.Contains(it.ProgramPath, "/") && args[0].opaque == "" && !cx.cwdUnknown {
		var err error
		if it.ProgramForms, err = x.programForms(args[0].s, cx.cwds); err != nil && it.Opaque == "" {
			it.Opaque = "the program's path cannot be resolved: " + err.Error()
		}
	}
	it.Program = ProgramName(args[0].s)
	it.Flags = FlagsOf(known)
	it.Unknown = cx.envUnknown
	return it
}

// programForms returns the files the shell runs for the program word p
// (with a /) in each of cwds: cleaned, and with its symlinks resolved.
func (x *extractor) programForms(p string, cwds []string) ([]string, error) {
	var fulls []string
	if path.IsAbs(p) {
		fulls = []string{path.Clean(p)}
	} else {
		for _, d := range cwds {
			if path.IsAbs(d) {
				fulls = append(fulls, path.Join(d, p))
			}
		}
	}
	// A link an earlier command of the line made (cp -s, ln) leads on.
	fulls = x.throughLinks(fulls)
	out := slices.Clone(fulls)
	for _, f := range fulls {
		if x.fs == nil {
			continue
		}
		r, err := x.fs.Resolve(f)
		if err != nil {
			return out, err
		}
		if r = path.Clean(r); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
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

// quietShellLongOptions are a shell's long options that do not change how
// it reads a -c script or stdin (--posix, --debugger and unknown ones do).
var quietShellLongOptions = map[string]bool{"--norc": true, "--noprofile": true, "--login": true, "--noediting": true,
	"--verbose": true, "--restricted": true}

// shell handles sh/bash/zsh/... : -c SCRIPT and a script on stdin are
// parsed (the shell itself is a transparent wrapper); a script file is an
// ordinary program run. It returns false for an ordinary run.
func (x *extractor) shell(args []arg, cx cmdCtx) bool {
	hasC, stdinFlag, autocd := false, false, false
	why := "" // why the shell's own options change how its script is read
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
			} else if !quietShellLongOptions[s] && why == "" {
				why = fmt.Sprintf("%s %s changes how the shell reads its script", ProgramName(args[0].s), s)
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
				case 'l', 'r', 'D':
				case 'o', 'O':
					i++ // -o OPTION
					if i < len(args) && (args[i].opaque != "" || autocdOption(args[i].s)) {
						autocd = true
						continue
					}
					// The shell starts with these options on, as if its
					// script began with set -o or shopt -s (bash -O dotglob
					// -c 'cat *' reads .env).
					if why != "" {
						continue
					}
					if i >= len(args) {
						why = fmt.Sprintf("%s %c without its option", ProgramName(args[0].s), c)
					} else if c == 'o' {
						why = setOptionsWhy([]arg{{s: string(s[0]) + "o"}, args[i]})
					} else {
						mode := "-s"
						if s[0] == '+' {
							mode = "-u"
						}
						why = shoptWhy([]arg{{s: mode}, args[i]})
						x.nullglob = x.nullglob || shoptSets([]arg{{s: mode}, args[i]}, "nullglob")
					}
				default:
					// -f, -k, +B, -i (aliases from ~/.bashrc) and the
					// rest: read as set reads them, fail closed.
					if why == "" && c != 'i' {
						why = setOptionsWhy([]arg{{s: string(s[0]) + string(c)}})
					} else if why == "" {
						why = fmt.Sprintf("%s -i expands the aliases its startup files define", ProgramName(args[0].s))
					}
				}
			}
			if autocdOption(s) {
				autocd = true // zsh -J
			}
			i++
			continue
		}
		break
	}
	operands := args[min(i, len(args)):]
	if why != "" {
		x.opaque(cx.origin, why, KindExecute)
	}
	wrapperItem := func() {
		it := x.commandItem(args, cx)
		it.Aux = true
		x.add(it, KindExecute)
	}
	inner := cx
	inner.depth++
	inner.stdin, inner.piped = nil, false
	inner.origin = cx.origin + " (" + ProgramName(args[0].s) + " script)"
	// With autocd on, a command that names a directory changes into it.
	inner.cwdUnknown = inner.cwdUnknown || autocd
	switch {
	case hasC:
		if len(operands) == 0 || operands[0].opaque != "" {
			it := x.commandItem(args, cx)
			it.Opaque = "the shell script is computed at run time"
			x.add(it, KindExecute)
			return true
		}
		if operands[0].glob {
			// The script holds file names (sh -c "gofmt -l $f" in a loop
			// over *.go): a name holding ; or $( is shell code there.
			it := x.commandItem(args, cx)
			it.Opaque = "the shell script holds file names a glob expands to at run time"
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

// wrapper unwraps a wrapper (spec key wrapper:): the files its own
// options and operands name, then its payload, the operands from the one
// of role exec on, as a command of its own; what it runs instead (su -c,
// flock -c, env -S); and what it is without a payload (alone:).
func (x *extractor) wrapper(name string, sp *argSpec, args []arg, cx cmdCtx) {
	w := sp.wrap
	p := parseArgs(sp, name, args[1:])
	env := slices.Clone(cx.env)
	envUnknown := ""
	for _, a := range p.assigns {
		n, v, _ := strings.Cut(a.s, "=")
		env = append(env, n)
		if why := x.assignString(n, v, true, cx); why != "" && envUnknown == "" {
			envUnknown = why
		}
	}
	wcwds := x.cwdsFor(cx)
	kind := map[role]Kind{roleRead: KindRead, roleWrite: KindEdit}
	for _, v := range p.vals {
		if k, ok := kind[v.opt.role]; ok {
			x.optionPath(name, v.opt.name, v.v, k, wcwds) // time -o, xargs -a
		}
	}
	roles, _ := sp.operandRoles(len(p.ops), p.flags)
	at := len(p.ops)
	for i, r := range roles {
		if r == roleExec {
			at = i
			break
		}
		if k, ok := kind[r]; ok {
			x.optionPath(name, "operand", p.ops[i], k, wcwds) // flock FILE, sudo -e FILE
		}
	}
	payload := p.ops[at:]
	inner := cx
	inner.depth++
	inner.env = env
	if envUnknown != "" {
		inner.envUnknown = envUnknown
	}
	inner.origin = cx.origin + " (" + name + " payload)"
	// Where the payload runs: env -C, sudo -D, unshare -w move it to a
	// directory; a login (sudo -i, su -), a new root (chroot, sudo -R,
	// nsenter -r), another mount namespace (nsenter -m) or a service
	// (systemd-run without --scope) to one only known at run time, as
	// does an option the router does not know of a wrapper that has such
	// options.
	for _, v := range p.vals {
		switch {
		case v.opt.role == roleOpaque:
			x.opaque(inner.origin, fmt.Sprintf("%s %s can set what its payload runs and where", name, v.opt.name), KindExecute)
		case v.opt.role != roleChdir:
		case v.v.opaque != "" || v.v.s == "":
			inner.cwdUnknown = true
		case path.IsAbs(v.v.s):
			inner.cwds = x.logicalPhysical(v.v.s)
		default:
			var dirs []string
			for _, d := range wcwds {
				dirs = append(dirs, x.logicalPhysical(d+"/"+v.v.s)...)
			}
			inner.cwds = dirs
		}
	}
	if w.cwdAlways || p.flags.any(w.cwdUnknown...) || len(w.cwdUnless) > 0 && !p.flags.any(w.cwdUnless...) ||
		w.chdir && p.unknown != "" {
		inner.cwdUnknown = true
	}
	wrapItem := func(aux bool) {
		it := x.commandItem(args, cx)
		it.Aux = aux && !w.primary
		if p.unknown != "" {
			it.Unknown = p.unknown
		}
		x.add(it, KindExecute)
	}
	script := func(v arg) {
		wrapItem(true)
		if v.opaque != "" {
			x.opaque(inner.origin, "the script is computed at run time", KindExecute)
			return
		}
		x.script(v.s, inner)
	}
	for _, v := range p.vals {
		if v.opt.role == roleScript { // su -c, flock -c
			script(v.v)
			return
		}
	}
	if w.alone == "shell" && len(payload) == 0 {
		// su USER ARGS: the user's shell gets ARGS, and runs the word
		// after a -c among them (su -- USER -c CMD).
		for i := 1; i+1 < len(p.ops); i++ {
			if p.ops[i].s == "-c" && p.ops[i].opaque == "" {
				script(p.ops[i+1])
				return
			}
		}
	}
	if w.script && len(payload) > 0 {
		// watch runs its payload's words, joined by blanks, with sh -c.
		var words []string
		for _, a := range payload {
			if a.opaque != "" {
				script(a)
				return
			}
			words = append(words, a.s)
		}
		script(arg{s: strings.Join(words, " ")})
		return
	}
	for _, v := range p.vals {
		if v.opt.role != roleSplit {
			continue
		}
		if v.v.opaque != "" || strings.ContainsAny(v.v.s, `'"\$`) {
			wrapItem(false)
			x.opaque(inner.origin, name+" "+v.opt.name+" with quoting or variables", KindExecute)
			return
		}
		var split []arg
		for _, f := range strings.Fields(v.v.s) {
			split = append(split, arg{s: f})
		}
		payload = append(split, payload...)
	}
	if len(payload) == 0 {
		it := x.commandItem(args, cx)
		switch w.alone {
		case "values": // env alone prints the environment
			x.add(it, KindExecute)
		case "shell":
			it.Opaque = name + " starts an interactive shell"
			x.add(it, KindExecute)
		default:
			x.unknownArgs(it, name+" runs no command: its arguments are not understood", args, cx)
		}
		return
	}
	wrapItem(true)
	if w.stdinWords && cx.stdinFiles != nil && !p.flags.any("-I", "-i", "--replace") {
		// The producer lists files below these directories: xargs passes
		// any of them.
		if why := x.listedWords(cx.stdinFiles, p.flags, wcwds); why != "" {
			x.opaque(inner.origin, why, KindExecute)
		}
		for _, d := range cx.stdinFiles {
			payload = append(payload, arg{s: d, below: true})
		}
	} else if w.note != "" {
		x.add(Item{Type: ItemCommand, Origin: inner.origin, Argv: argStrings(payload), Program: ProgramName(payload[0].s),
			ProgramPath: payload[0].s, Opaque: w.note, Env: slices.Clone(env)}, KindExecute)
	}
	x.argv(payload, inner)
}

func argStrings(args []arg) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a.s
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func IsAssignment(s string) bool { return assignment.MatchString(s) }

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

// listedWords says why the file names a producer lists (find DIR, git
// ls-files) are not each one argument of xargs' command ("" if they are):
// xargs splits its input at blanks and quotes unless -0 or -d says
// otherwise, so a name holding one is several words, and git ls-files
// prints the names of the top directory as they are, so one starting with
// - is an option of the command (issue 27: words that become options).
func (x *extractor) listedWords(dirs []string, flags flagSet, cwds []string) string {
	null, delim := flags.any("-0", "--null"), flags.any("-d", "--delimiter")
	w, ok := x.fs.(Walker)
	if !ok || x.fs == nil {
		return "" // nothing is known to exist: no names to read
	}
	for _, d := range dirs {
		for _, c := range cwds {
			abs := d
			if !path.IsAbs(d) {
				abs = path.Join(c, d)
			}
			r, err := x.fs.Resolve(abs)
			if err != nil {
				return "xargs reads the names of files below a directory the router cannot resolve"
			}
			res := w.Walk(path.Clean(r), false)
			if res.Cut != "" {
				return "xargs reads the names of more files than the router lists: " + res.Cut
			}
			for _, e := range res.Entries {
				base := path.Base(e.Rel)
				switch {
				case !null && !delim && strings.ContainsAny(e.Rel, " \t\n'\"\\"):
					return fmt.Sprintf("xargs splits the file name %q into several words", e.Rel)
				case !null && strings.Contains(e.Rel, "\n"):
					return fmt.Sprintf("the file name %q holds a newline: xargs reads it as two", e.Rel)
				case d == "." && e.Rel == base && strings.HasPrefix(base, "-"):
					return fmt.Sprintf("the file name %q becomes an option of xargs' command", base)
				}
			}
		}
	}
	return ""
}
