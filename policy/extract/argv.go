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

// wrapSpec describes a wrapper command and its options. The options are
// closed-world: one the spec does not list makes the wrapper's command
// item Unknown (it needs an allow rule with arguments: any), and the
// payload's cwd unknown when the wrapper has options that move it.
type wrapSpec struct {
	short     string   // short options that take a value
	flags     string   // short options without a value
	shortOpt  string   // short options whose value, optional, must be attached (-w/dir)
	long      []string // long options that take a value
	longFlags []string // long options without a value
	longOpt   []string // long options with an optional =value
	skip      int      // operands before the payload (timeout DURATION)
	assigns   bool     // NAME=VALUE operands before the payload (env, sudo)
	primary   bool     // the wrapper changes who or where the payload runs: it needs an allow of its own
	digits    bool     // numeric options (nice -5)
	chdir     bool     // some option moves the payload's cwd (or its root)
	note      string   // the payload gets an opaque item saying this
}

// wrappers are the commands that run another command given as their
// arguments: wrappers.yaml (wrappers.go).
var wrappers = mustLoadWrappers("wrappers.yaml", wrapperData)

// longOption returns the long option key names, or the one it uniquely
// abbreviates (getopt_long), and whether it takes a value (1), may take an
// attached one (2) or none (0); ok false: not an option of spec.
func (spec wrapSpec) longOption(key string) (full string, takes int, ok bool) {
	n := 0
	for t, list := range [][]string{spec.longFlags, spec.long, spec.longOpt} {
		for _, o := range list {
			if o == key {
				return o, [3]int{0, 1, 2}[t], true
			}
			if strings.HasPrefix(o, key) {
				full, takes, n = o, [3]int{0, 1, 2}[t], n+1
			}
		}
	}
	return full, takes, n == 1
}

// wrapper unwraps a wrapper command; false means it runs no payload (the
// caller treats it as an ordinary program).
func (x *extractor) wrapper(name string, spec wrapSpec, args []arg, cx cmdCtx) bool {
	opts := map[string]arg{}
	env := slices.Clone(cx.env)
	envUnknown := ""
	var unknown []string
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
		if s == "-" && (name == "env" || name == "su" || name == "runuser") {
			opts["-"] = a // env -: -i; su -: a login shell
			i++
			continue
		}
		if strings.HasPrefix(s, "--") && len(s) > 2 {
			key, val, has := strings.Cut(s, "=")
			full, takes, ok := spec.longOption(key)
			switch {
			case !ok:
				unknown = append(unknown, key)
				opts[key] = arg{s: val}
			case !has && takes == 1 && i+1 < len(args):
				i++
				opts[full] = args[i]
			default:
				opts[full] = arg{s: val}
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
				if strings.IndexByte(spec.shortOpt, c) >= 0 {
					opts[key] = arg{s: s[j+1:]}
					break
				}
				if strings.IndexByte(spec.flags, c) < 0 {
					unknown = append(unknown, key)
				}
				opts[key] = arg{}
			}
			i++
			continue
		}
		if spec.assigns && IsAssignment(s) {
			n, v, _ := strings.Cut(s, "=")
			env = append(env, n)
			if why := x.assignString(n, v, true, cx); why != "" && envUnknown == "" {
				envUnknown = why
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
	if envUnknown != "" {
		inner.envUnknown = envUnknown
	}
	inner.origin = cx.origin + " (" + name + " payload)"
	// Where the payload runs: env -C, sudo -D, unshare -w, systemd-run
	// --working-directory move it to a directory; a login (sudo -i, su
	// -, runuser -l), a new root (chroot, sudo -R, nsenter -r, unshare
	// -R), another mount namespace (nsenter -m) or a service (systemd-run
	// without --scope or --same-dir) to one only known at run time.
	chdir := func(v arg) {
		if v.opaque != "" || v.s == "" {
			inner.cwdUnknown = true
			return
		}
		var dirs []string
		for _, d := range wcwds {
			dirs = append(dirs, x.logicalPhysical(d+"/"+v.s)...)
		}
		if path.IsAbs(v.s) {
			dirs = x.logicalPhysical(v.s)
		}
		inner.cwds = dirs
	}
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := opts[k]; ok {
				return true
			}
		}
		return false
	}
	dirOpt := map[string][]string{"env": {"-C", "--chdir"}, "sudo": {"-D", "--chdir"}, "unshare": {"-w", "--wd"},
		"nsenter": {"-w", "--wd"}, "systemd-run": {"--working-directory"}}
	for _, key := range dirOpt[name] {
		if v, ok := opts[key]; ok {
			chdir(v)
		}
	}
	switch name {
	case "sudo":
		inner.cwdUnknown = inner.cwdUnknown || has("-i", "--login", "-R", "--chroot")
	case "su", "runuser":
		inner.cwdUnknown = inner.cwdUnknown || has("-", "-l", "--login")
	case "chroot":
		inner.cwdUnknown = true
	case "nsenter":
		inner.cwdUnknown = inner.cwdUnknown || has("-r", "--root", "-W", "--wdns", "-m", "--mount", "-a", "--all") ||
			has("-w", "--wd") && (opts["-w"].s == "" && opts["--wd"].s == "")
	case "unshare":
		inner.cwdUnknown = inner.cwdUnknown || has("-R", "--root")
	case "systemd-run":
		if has("-p", "--property") {
			x.opaque(inner.origin, "systemd-run --property can set what the unit runs and where", KindExecute)
		}
		inner.cwdUnknown = inner.cwdUnknown || has("-H", "--host", "-M", "--machine", "-C", "--capsule") ||
			!has("--scope", "-d", "--same-dir", "--working-directory")
	}
	if len(unknown) > 0 && spec.chdir {
		inner.cwdUnknown = true // an option the router does not know may move it
	}
	wrapItem := func(aux bool) {
		it := x.commandItem(args, cx)
		it.Aux = aux && !spec.primary
		if len(unknown) > 0 {
			it.Unknown = fmt.Sprintf("%s options the router does not know: %s", name, strings.Join(unknown, " "))
		}
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
	case "su", "runuser":
		if name == "runuser" && has("-u", "--user") {
			break // runuser -u USER CMD...: the payload is an argv
		}
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
		it.Opaque = name + " starts an interactive shell"
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
	_, replace := opts["-I"]
	if _, ok := opts["-i"]; ok {
		replace = true
	}
	if _, ok := opts["--replace"]; ok {
		replace = true
	}
	if name == "xargs" && cx.stdinFiles != nil && !replace {
		// The producer lists files below these directories: xargs passes
		// any of them.
		if why := x.listedWords(cx.stdinFiles, opts, wcwds); why != "" {
			x.opaque(inner.origin, why, KindExecute)
		}
		for _, d := range cx.stdinFiles {
			payload = append(payload, arg{s: d, below: true})
		}
	} else if spec.note != "" {
		x.add(Item{Type: ItemCommand, Origin: inner.origin, Argv: argStrings(payload), Program: ProgramName(payload[0].s),
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
func (x *extractor) listedWords(dirs []string, opts map[string]arg, cwds []string) string {
	_, null := opts["-0"]
	if _, ok := opts["--null"]; ok {
		null = true
	}
	_, delim := opts["-d"]
	if _, ok := opts["--delimiter"]; ok {
		delim = true
	}
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
