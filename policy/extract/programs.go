package extract

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// How an ordinary program's command line is read with its spec
// (spec.go, specs/*.yaml): options and their values, the subcommand,
// operands and their roles. What the spec does not cover makes the
// command's arguments unknown (closed-world allow).

// optVal is an option with its value.
type optVal struct {
	key string // as given (an abbreviation as typed: opt.name is the full name)
	opt *optSpec
	v   arg
	has bool // a value was given
}

// parsedArgs is a command line read with a spec.
type parsedArgs struct {
	spec  *argSpec // the spec in force (the subcommand's)
	label string   // "git commit": the program and its subcommands
	flags flagSet
	vals  []optVal
	ops   []arg
	// argsFrom: the operands from this one on follow an option of role
	// args (go test -args): arguments of the code the program runs.
	argsFrom int
	// dashdash: the operands from this one on followed --; -1 without.
	dashdash int
	unknown  string // why the arguments are not all understood
	// lost: an unknown option may have taken a value, so the operands'
	// positions, and so their roles, are not known.
	lost bool
	// strays: what an unknown option may have taken as its value (after
	// = or the rest of a bundle of letters): read by shape, so a deny rule
	// sees a path there (terraform init -backend-config=FILE) as it does
	// in the next word, which becomes an operand.
	strays []arg
	// cmdItem: the index of the command item in the evidence, -1 when
	// none was added; the paths of arguments read by shape are tied to it
	// (Item.shapeOf), so that a rule vouching for its arguments allows
	// them as reads, as for a program without a spec (vouchedShape).
	cmdItem int
	// subFlags: the index in flags of the first flag given after the
	// last subcommand word. The subcommand's own conditions (content:,
	// recursive:, walk:, if:) read only those: git's global -c (a setting)
	// is not log's -c (combined diffs), nor git -C (a directory) log's -C.
	subFlags int
	// subAt: the indices in args of the subcommand words (git push,
	// docker compose ps) found with every word before them understood
	// (an unknown option may have taken the word as its value).
	subAt []int
	// A wrapper's (spec key wrapper:): the NAME=VALUE words before its
	// payload, and the options its spec does not list.
	assigns     []arg
	unknownOpts []string
}

func (p *parsedArgs) fail(format string, a ...any) {
	if p.unknown == "" {
		p.unknown = fmt.Sprintf(format, a...)
	}
}

// parseArgs reads args (without the program) with spec sp.
//
// A wrapper's options are read as getopt reads them: one the spec does
// not list is skipped, taking no value (the payload is still read, and the
// wrapper's item is unknown), and the first operand of role exec ends
// them: the payload's options are its own.
func parseArgs(sp *argSpec, name string, args []arg) *parsedArgs {
	p := &parsedArgs{spec: sp, label: name, argsFrom: -1, dashdash: -1, cmdItem: -1}
	subDone := sp.subs == nil
	optsDone := false
	wrap := sp.wrap != nil
	unknownOpt := func(key string) {
		if wrap {
			p.unknownOpts = append(p.unknownOpts, key)
			return
		}
		p.fail("%s: unknown option %s", p.label, key)
		p.lost = true
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		s := a.s
		isOpt := !optsDone && a.opaque == "" && len(s) > 1 && s[0] == '-'
		if !optsDone && a.opaque == "" && s == "-" && p.spec.opts["-"] != nil {
			p.flags = append(p.flags, "-") // env -, su -
			continue
		}
		if wrap && !optsDone && sp.wrap.assigns && a.opaque == "" && len(p.ops) == 0 && IsAssignment(s) {
			p.assigns = append(p.assigns, a)
			continue
		}
		if isOpt && s == "--" {
			optsDone = true
			if p.dashdash < 0 {
				p.dashdash = len(p.ops)
			}
			if !subDone {
				// git -- is not a subcommand: nothing follows as one.
				subDone = true
				if !sp.subOptional {
					p.fail("%s: no subcommand before --", p.label)
					p.lost = true
				}
			}
			continue
		}
		if i == 0 && sp.toolchain && a.opaque == "" && len(s) > 1 && s[0] == '+' {
			p.vals = append(p.vals, optVal{key: "+", opt: toolchainOpt, v: arg{s: s[1:]}, has: true})
			continue
		}
		if isOpt && p.spec.digits && isDigits(s[1:]) {
			p.flags = append(p.flags, "-NUM")
			continue
		}
		if !isOpt {
			if wrap && !optsDone {
				roles, _ := sp.operandRoles(len(p.ops)+1, p.flags)
				optsDone = roles[len(p.ops)] == roleExec
			}
			// $X may be an option: what follows is not known. A wrapper's
			// $X is the program of its payload, read there as a computed
			// one, or a value before it (su $U -c CMD).
			if a.opaque != "" && !optsDone && !wrap {
				p.fail("%s: an argument %s", p.label, a.opaque)
				p.lost = true
			}
			if !subDone {
				subDone = true
				if a.opaque == "" {
					if sub := p.spec.subs[s]; sub != nil {
						if p.unknown == "" && !p.lost {
							p.subAt = append(p.subAt, i)
						}
						p.spec = sub
						p.label += " " + s
						p.subFlags = len(p.flags)
						subDone = sub.subs == nil
						optsDone = optsDone || sub.passthrough
						continue
					}
				}
				if !p.spec.subOptional || len(p.spec.operands) == 0 {
					// (git alone runs, but takes no operand: a word is a
					// subcommand it does not know.)
					p.fail("%s: unknown subcommand %q", p.label, s)
					p.lost = true
				}
			}
			if p.spec.argfiles && strings.HasPrefix(s, "@") {
				p.fail("%s: %s: options read from a file", p.label, s)
			}
			p.ops = append(p.ops, a)
			if p.spec.posix {
				optsDone = true
			}
			continue
		}
		// A whole word the spec lists (zip -TT, wget -nv, find-like
		// programs) is that option, not a bundle of letters.
		whole, _, _ := strings.Cut(s, "=")
		if strings.HasPrefix(s, "--") || p.spec.single || len(whole) > 2 && p.spec.opts[whole] != nil {
			key, val, has := strings.Cut(s, "=")
			o := p.spec.lookup(key)
			if o == nil && p.spec.gcc {
				if ao, n := p.spec.attached(s); ao != nil {
					o, key, val, has = ao, s[:n], s[n:], true
				}
			}
			if o == nil {
				unknownOpt(key)
				if has {
					p.strays = append(p.strays, arg{s: val, glob: a.glob})
				}
				continue
			}
			if o.role == roleFlag && has && p.spec.single && !p.spec.gcc {
				// Go's flag package: -race=false, -v=true.
				if b, err := strconv.ParseBool(val); err == nil {
					if b {
						p.flags = append(p.flags, o.name)
					}
					continue
				}
			}
			p.flags = append(p.flags, o.name)
			if o.role == roleArgs {
				// go test -args: everything after it is the test binary's.
				if has {
					p.fail("%s: option %s takes no value", p.label, key)
				}
				optsDone = true
				if p.argsFrom < 0 {
					p.argsFrom = len(p.ops)
				}
				continue
			}
			if o.role == roleFlag {
				if has {
					p.fail("%s: option %s takes no value", p.label, key)
				}
				continue
			}
			var attached *arg
			if has {
				attached = &arg{s: val, glob: a.glob}
			}
			p.value(key, o, attached, args, &i)
			optsDone = slices.Contains(p.spec.endsOpts, o.name)
			continue
		}
		// -abc: letters, the first that takes a value takes the rest.
		for j := 1; j < len(s); j++ {
			key := "-" + s[j:j+1]
			o := p.spec.opts[key]
			if o == nil && wrap {
				unknownOpt(key) // getopt goes on with the next letter
				continue
			}
			if o == nil {
				unknownOpt(key)
				if j+1 < len(s) {
					p.strays = append(p.strays, arg{s: s[j+1:], glob: a.glob})
				}
				break
			}
			p.flags = append(p.flags, o.name)
			if o.role == roleArgs {
				optsDone = true
				if p.argsFrom < 0 {
					p.argsFrom = len(p.ops)
				}
				break
			}
			if o.role == roleFlag {
				continue
			}
			var attached *arg
			if j+1 < len(s) {
				attached = &arg{s: s[j+1:], glob: a.glob}
			}
			p.value(key, o, attached, args, &i)
			optsDone = slices.Contains(p.spec.endsOpts, o.name)
			break
		}
	}
	if !subDone && !p.spec.subOptional {
		p.fail("%s: no subcommand", p.label)
	}
	if len(p.unknownOpts) > 0 {
		p.fail("%s options the router does not know: %s", name, strings.Join(p.unknownOpts, " "))
	}
	return p
}

// toolchainOpt is rustup's +TOOLCHAIN: the name of an installed
// toolchain (a path is a toolchain only when linked with rustup
// toolchain link, which asks).
var toolchainOpt = &optSpec{name: "+toolchain", role: roleValue}

// value records the value of option o: the attached one, else (unless
// the value is optional) the next argument, which it consumes.
func (p *parsedArgs) value(key string, o *optSpec, attached *arg, args []arg, i *int) {
	ov := optVal{key: key, opt: o, has: true}
	switch {
	case attached != nil:
		ov.v = *attached
	case o.optional:
		ov.has = false
	case *i+1 < len(args):
		*i++
		ov.v = args[*i]
	default:
		ov.has = false
	}
	p.vals = append(p.vals, ov)
}

// program records an ordinary program: its command item and the files,
// hosts and commands of its arguments.
func (x *extractor) program(name string, args []arg, cx cmdCtx) {
	sp := specs()[name]
	it := x.commandItem(args, cx)
	switch {
	case sp == nil:
		x.unknownArgs(it, "no argument spec for "+name+": its arguments are not understood", args, cx)
		return
	case sp.values:
		// Shell options that change nothing a later command runs or how
		// the router reads it (set -euo pipefail, shopt -u nullglob,
		// hash -r, unset NAME) need no rule of their own: the state pass
		// (state.go) made every other use of them opaque.
		it.Aux = stateOnly(name, args[1:])
		x.add(it, KindExecute)
		if why := builtinVarArgs(name, args[1:]); why != "" {
			x.opaque(cx.origin, why, KindExecute)
		}
		return
	case sp.handler == "find":
		x.findArgs(it, args[1:], cx)
		return
	case sp.handler == "tar":
		x.tarArgs(it, args[1:], cx)
		return
	case sp.handler == "dd":
		x.ddArgs(it, args[1:], cx)
		return
	}
	p := parseArgs(sp, name, args[1:])
	it.Unknown = p.unknown
	it.subArgv = subcommandArgv(it.Argv, p.subAt)
	if p.label == "git push" {
		it.Flags = appendNew(it.Flags, gitPushRefspecFlags(p.ops)...)
		it.Flags = appendNew(it.Flags, gitPushLongFlags(it.Flags)...)
	}
	x.add(it, KindExecute)
	if x.lastAdded >= 0 && x.ev.Items[x.lastAdded].Type == ItemCommand {
		p.cmdItem = x.lastAdded
	}
	x.applyArgs(p, cx)
	if p.label == "yarn workspace" && !p.lost && len(p.ops) >= 2 {
		// yarn workspace NAME COMMAND...: yarn runs COMMAND in that
		// workspace, read as yarn's own (add evil-org/x is a package
		// from a repository), not only as a script's arguments.
		inner := cx
		inner.depth++
		inner.origin = cx.origin + " (yarn workspace runs)"
		x.argv(append([]arg{{s: "yarn"}}, p.ops[1:]...), inner)
	}
}

// unknownArgs records the command item it of a program whose arguments
// are not understood, and its arguments by shape.
func (x *extractor) unknownArgs(it Item, why string, args []arg, cx cmdCtx) {
	it.Unknown = why
	x.add(it, KindExecute)
	if x.lastAdded >= 0 {
		// A rule that vouches for its arguments may allow these paths as
		// reads (vouchedShape).
		c := &x.ev.Items[x.lastAdded]
		oldOf, oldKey := x.shapeOf, x.shapeKey
		x.shapeOf, x.shapeKey = int32(x.lastAdded+1), shapeKey(c)
		defer func() { x.shapeOf, x.shapeKey = oldOf, oldKey }()
	}
	x.byShape(ProgramName(args[0].s), args[1:], x.cwdsFor(cx))
}

// byShapeOf ties the paths recorded until the returned function is called
// to p's command item: arguments read by shape (vouchedShape).
func (x *extractor) byShapeOf(p *parsedArgs) func() {
	if p.cmdItem < 0 || p.cmdItem >= len(x.ev.Items) {
		return func() {}
	}
	oldOf, oldKey := x.shapeOf, x.shapeKey
	x.shapeOf, x.shapeKey = int32(p.cmdItem+1), shapeKey(&x.ev.Items[p.cmdItem])
	return func() { x.shapeOf, x.shapeKey = oldOf, oldKey }
}

// gitPushRefspecFlags returns the flags git push's refspecs stand for: a
// + before one forces that ref's update as --force does, and an empty
// source (:main) deletes the ref as --delete does. A rule's flags_any
// written for the flags sees them (git push origin +main is a force
// push).
func gitPushRefspecFlags(ops []arg) []string {
	var out []string
	for _, a := range ops {
		switch {
		case a.opaque != "":
		case strings.HasPrefix(a.s, "+"):
			out = append(out, "--force")
		case strings.HasPrefix(a.s, ":") && len(a.s) > 1:
			out = append(out, "--delete")
		}
	}
	return out
}

// gitPushLong are the long spellings of git push's one-letter options
// (git push -h): a rule's flags_any that names one (--delete) is written
// for the option, not for one spelling of it, so git push -d origin main
// is a --delete.
var gitPushLong = [][2]string{
	{"-f", "--force"}, {"-d", "--delete"}, {"-u", "--set-upstream"}, {"-n", "--dry-run"},
	{"-q", "--quiet"}, {"-v", "--verbose"}, {"-o", "--push-option"}, {"-4", "--ipv4"}, {"-6", "--ipv6"},
}

// gitPushLongFlags returns the long spellings of the one-letter flags in
// flags, and the one-letter spelling of the long ones.
func gitPushLongFlags(flags []string) []string {
	var out []string
	for _, f := range flags {
		for _, sl := range gitPushLong {
			switch f {
			case sl[0]:
				out = append(out, sl[1])
			case sl[1]:
				out = append(out, sl[0])
			}
		}
	}
	return out
}

// subcommandArgv returns argv without the options that come before its
// subcommands (git --no-pager push -f is git push -f; docker --context x
// compose -f a.yml ps is docker compose ps), for command patterns that
// name a subcommand: every option of a program may come before the
// subcommand it modifies, and the rule's author names the subcommand.
// subAt indexes argv[1:]; nil when no option precedes a subcommand.
func subcommandArgv(argv []string, subAt []int) []string {
	if len(subAt) == 0 || subAt[len(subAt)-1] == len(subAt)-1 {
		return nil // nothing before the subcommands
	}
	out := []string{argv[0]}
	for _, i := range subAt {
		out = append(out, argv[i+1])
	}
	return append(out, argv[subAt[len(subAt)-1]+2:]...)
}

// byShape records the arguments of a program the router does not
// understand: a path-like argument may be read or written.
func (x *extractor) byShape(prog string, args []arg, cwds []string) {
	for _, a := range args {
		x.roleArg(prog, "", a, roleUnknown, false, true, cwds, cmdCtx{})
	}
}

// applyArgs records the evidence of a parsed command line.
func (x *extractor) applyArgs(p *parsedArgs, cx cmdCtx) {
	sp := p.spec
	if !p.lost {
		defer x.withWalk(sp.walkFor(p.flags[p.subFlags:]))()
	}
	cwds := x.cwdsFor(cx)
	// Options that change the directory apply to every later path
	// (git -C a -C b is a/b).
	for _, v := range p.vals {
		if v.opt.role != roleChdir || !v.has {
			continue
		}
		if v.v.opaque != "" || v.v.glob {
			x.opaque(p.label+" "+v.key, fmt.Sprintf("%s %s changes to a directory known only at run time", p.label, v.key), KindExecute)
			continue
		}
		// The directory itself is read (listed) by the program.
		x.path(v.v.s, false, KindRead, false, p.label+" "+v.key, cwds)
		var next []string
		for _, d := range cwds {
			if path.IsAbs(v.v.s) {
				next = append(next, path.Clean(v.v.s))
			} else {
				next = append(next, path.Join(d, v.v.s))
			}
		}
		if len(cwds) == 0 && path.IsAbs(v.v.s) {
			next = []string{path.Clean(v.v.s)}
		}
		cwds = next
	}
	// git log -p, show, diff: every pathspec is read with what is below
	// it, and without one, the tree the revisions show (gitContent).
	own := p.flags[p.subFlags:]
	content := sp.showsContent(own)
	recursive := sp.isRecursive(own) || recursesByValue(p) || content
	hidden := sp.readsHidden(own)
	for _, v := range p.vals {
		if !v.has || v.opt.role == roleChdir {
			continue
		}
		// A directory an option names is read or written like the
		// operands: without dotfiles when the program skips them.
		h := true
		if v.opt.role == roleReadDir || v.opt.role == roleWriteDir {
			h = hidden
		}
		if isPackageRole(v.opt.role) {
			x.packageArg(p, v.opt.name, v.v, v.opt.role, cwds)
			continue
		}
		x.roleArg(p.label, v.opt.name, v.v, v.opt.role, false, h, cwds, cx) // the full name: an abbreviation counts
	}
	for _, a := range p.strays {
		done := x.byShapeOf(p)
		x.roleArg(p.label, "", a, roleUnknown, false, true, cwds, cx)
		done()
	}
	if strings.HasPrefix(p.label, "git") && path.Base(strings.Fields(p.label)[0]) == "git" {
		x.gitRepository(p, cwds)
	}
	if prog := p.module(); prog == moduleUnknown && !p.lost {
		// python -m timeit CODE, http.server: a program of its own whose
		// command line the router does not read; its operands by shape.
		x.markUnknown(p.label + " -m " + p.moduleName() + ": a module of the standard library whose command line is not understood")
	} else if prog != "" && !p.lost {
		// python -m pytest ARGS is pytest ARGS.
		inner := cx
		inner.depth++
		inner.cwds = cwds
		inner.origin = cx.origin + " (" + p.label + " -m runs)"
		x.argv(append([]arg{{s: prog}}, p.ops...), inner)
		return
	}
	if len(p.ops) == 0 && sp.defaultOperand != "" && !p.lost {
		p.ops = []arg{{s: sp.defaultOperand}}
	}
	var roles []role
	if p.lost {
		roles = make([]role, len(p.ops)) // roleUnknown
	} else {
		n := len(p.ops)
		if p.argsFrom >= 0 {
			n = p.argsFrom
		}
		var extra bool
		roles, extra = sp.operandRoles(n, p.flags[p.subFlags:])
		if extra {
			p.fail("%s: more operands than it takes", p.label)
			x.markUnknown(p.unknown)
		}
		for range p.ops[n:] {
			roles = append(roles, roleArgs)
		}
	}
	if p.label == "ln" && p.flags.any("-s", "--symbolic") && len(p.ops) > 0 && !p.lost {
		x.lnTargets(p, cwds)
	}
	if !p.lost {
		defer x.movedLinks(p, cwds)() // mv, cp: links.go
	}
	if p.label == "unzip" && !p.lost && !p.flags.any("-l", "-t", "-p", "-v", "-Z", "-z") {
		// unzip extracts into -d DIR or the working directory.
		dirs := cwds
		if d, ok := p.optValue("-d"); ok && d.opaque == "" && !d.glob {
			dirs = nil
			for _, c := range cwds {
				if path.IsAbs(d.s) {
					c = ""
				}
				dirs = append(dirs, path.Join("/", c, d.s))
			}
		}
		for _, d := range dirs {
			defer x.extractedTree(d)() // links.go
		}
	}
	paths := 0
	for i, a := range p.ops {
		if roles[i] == roleExec {
			inner := cx
			inner.depth++
			inner.cwds = cwds
			inner.origin = cx.origin + " (" + p.label + " runs)"
			x.argv(p.ops[i:], inner)
			break
		}
		if roles[i] == roleReadDir && p.label == "docker build" && a.opaque == "" && x.dockerRemoteContext(p, a, cwds) {
			continue
		}
		if isPackageRole(roles[i]) {
			if x.packageArg(p, "", a, roles[i], cwds) {
				paths++
			}
			continue
		}
		done := func() {}
		if roles[i] == roleUnknown {
			done = x.byShapeOf(p)
		}
		if x.roleArg(p.label, "", a, roles[i], recursive, hidden, cwds, cx) {
			paths++
		}
		done()
	}
	if !p.lost {
		outs, ok := compressedOutputs(p)
		if !ok {
			x.opaque(p.label+" -N", p.label+" -N names the file it writes after the name stored in its input", KindEdit)
		}
		for _, o := range outs {
			if !recursive { // -r: the directories' files are written already
				x.roleArg(p.label, "", o, roleWrite, false, true, cwds, cx)
			}
		}
	}
	defer x.recordLinks(p, cwds) // for the commands after this one
	into, rec := x.intoDirectory(p, roles, cwds)
	for _, o := range into {
		x.argPath(p.label, o, KindEdit, rec, true, cwds)
	}
	var replaced []arg // the files the command replaces, which it may back up
	for i, a := range p.ops {
		// patch FILE; cp, mv, ln, install's last operand.
		if !p.lost && i < len(roles) && (roles[i] == roleWrite || roles[i] == roleWriteDir) &&
			(path.Base(p.label) == "patch" || i == len(p.ops)-1) {
			replaced = append(replaced, a)
		}
	}
	backups, dirs, ok := backupOutputs(p, append(replaced, into...))
	if !ok {
		x.opaque(p.label, p.label+" writes a backup under a name known only at run time", KindEdit)
	}
	for _, o := range backups {
		x.roleArg(p.label, "", o, roleWrite, false, true, cwds, cx)
	}
	for _, d := range dirs {
		x.roleArg(p.label, "", d, roleWriteDir, false, true, cwds, cx)
	}
	if !p.lost {
		files, ok := downloadOutputs(p)
		if !ok {
			x.opaque(p.label, p.label+" names the file it writes after what the server sends (or a URL pattern)", KindEdit)
		}
		for _, o := range files {
			x.roleArg(p.label, "", o, roleWrite, false, true, cwds, cx)
		}
		x.curlGlobOutputs(p, cwds) // downloads.go
		x.netrcReads(p)
	}
	if tree, dir := cwdOutputs(p); dir || len(tree) > 0 {
		for _, t := range tree {
			x.roleArg(p.label, "", t, roleWriteDir, false, true, cwds, cx)
		}
		if dir {
			for _, d := range cwds {
				x.path(d, false, KindEdit, false, p.label+" writes a file in", nil)
			}
		}
	}
	for i, h := range homeOutputs(p) {
		what := p.label + " installs in the user's home"
		if x.home == "" {
			x.opaque(p.label, what+", which is not known", KindEdit)
			break
		}
		x.path(path.Join(x.home, h), false, KindEdit, i == 0, what, nil)
	}
	if what, ok := dataNamedWrites(p); ok && !p.lost {
		for _, d := range cwds {
			x.path(d, false, KindEdit, true, what, nil)
		}
	}
	if !p.lost {
		backups, ok := sedBackups(p, roles)
		if !ok {
			x.opaque(p.label+" -i", p.label+" -i writes its backups under a name known only at run time", KindEdit)
		}
		for _, o := range backups {
			x.roleArg(p.label, "-i", o, roleWrite, false, true, cwds, cx)
		}
	}
	x.gitWorktree(p, roles, cwds)
	if content {
		x.gitContent(p, roles, cwds)
	} else if sp.implicitCwd && recursive && paths == 0 && len(cwds) > 0 {
		if p.flags.any(sp.inPlace...) {
			// git clean -f: the files below the directory are written.
			x.argPath(p.label, arg{s: "."}, KindEdit, true, true, cwds)
		} else {
			x.argPath(p.label, arg{s: "."}, KindRead, true, hidden, cwds)
		}
	}
}

// moduleUnknown, as the program of a module in a spec's modules:, is a
// module whose command line the router does not read.
const moduleUnknown = "unknown"

// module returns the program a -m MODULE option runs, if the spec maps
// the module to one (or moduleUnknown).
func (p *parsedArgs) module() string {
	if p.spec.modules == nil {
		return ""
	}
	return p.spec.modules[p.moduleName()]
}

// moduleName is the MODULE of a -m MODULE option, "" if none is given as
// a plain word.
func (p *parsedArgs) moduleName() string {
	for _, v := range p.vals {
		if v.opt.name == "-m" && v.has && v.v.opaque == "" && !v.v.glob {
			return v.v.s
		}
	}
	return ""
}

// markUnknown records that part of the arguments of the command being
// read is not understood: an item no allow rule covers (the program's own
// command item may already have been followed by the items of commands it
// runs).
func (x *extractor) markUnknown(why string) {
	x.add(Item{Type: ItemTool, Origin: "arguments", Unknown: why}, KindExecute)
}

// pythonXOptions are the python -X options (CPython 3.14) that change
// only how the interpreter runs the code it was given: their values are
// numbers or switches.
var pythonXOptions = map[string]bool{
	"faulthandler": true, "showrefcount": true, "tracemalloc": true, "int_max_str_digits": true,
	"importtime": true, "dev": true, "utf8": true, "warn_default_encoding": true, "no_debug_ranges": true,
	"frozen_modules": true, "perf": true, "perf_jit": true, "cpu_count": true, "gil": true,
	"thread_inherit_context": true, "context_aware_warnings": true, "disable_remote_debug": true,
	"tlbc": true, "pathconfig_warnings": true,
}

// pythonX checks a python -X NAME[=VALUE] option: pycache_prefix=DIR
// writes the bytecode of every module imported below DIR, presite=MODULE
// (debug builds) imports a module first; any other name is kept in
// sys._xoptions for the code to read, so one not in pythonXOptions is not
// understood.
func (x *extractor) pythonX(prog, opt, s string, cwds []string) bool {
	name, val, _ := strings.Cut(s, "=")
	switch {
	case name == "pycache_prefix":
		return x.argPath(prog, dirOfPattern(arg{s: val}), KindEdit, true, true, cwds)
	case name == "presite":
		x.opaque(prog+" "+opt, fmt.Sprintf("%s %s imports the module %q first, code the router does not read", prog, opt, val), KindExecute)
	case !pythonXOptions[name]:
		x.markUnknown(fmt.Sprintf("%s %s %q: an implementation option the router does not know", prog, opt, s))
	}
	return false
}

// gitSafeConfig are the git -c settings that change only how git shows
// or records things: any other one may run a command (core.pager,
// alias.*, diff.*.textconv, ...), send data elsewhere (url.*.insteadOf,
// http.proxy) or change which files git touches, so it is not understood.
var gitSafeConfig = map[string]bool{
	"user.name": true, "user.email": true, "color.ui": true, "color.diff": true, "color.status": true,
	"color.branch": true, "core.quotepath": true, "core.autocrlf": true, "core.safecrlf": true,
	"core.filemode": true, "core.abbrev": true, "log.showsignature": true, "log.decorate": true,
	"commit.gpgsign": true, "tag.gpgsign": true, "init.defaultbranch": true, "advice.detachedhead": true,
	"pull.rebase": true, "pull.ff": true, "merge.ff": true, "push.default": true, "diff.noprefix": true,
	"diff.renames": true, "diff.mnemonicprefix": true, "status.showuntrackedfiles": true,
	"safe.directory": true, "column.ui": true, "gc.auto": true,
	"maintenance.auto": true, "fetch.prune": true, "rebase.autosquash": true, "rebase.autostash": true,
	"protocol.version": true, "feature.manyfiles": true, "index.version": true,
}

// gitOpaqueConfig matches git -c settings that make git run a command.
var gitOpaqueConfig = regexp.MustCompile(`(?i)^(alias\.|core\.(pager|sshcommand|editor|fsmonitor|hookspath|askpass|gitproxy)|diff\..*\.(command|textconv)|diff\.external|filter\.|credential\.|sequence\.editor|gpg\.program|merge\..*\.driver|uploadpack\.|receivepack\.|protocol\.ext|.*\.(command|cmd|program|helper|tool)$)`)

// gitConfig checks a git -c NAME=VALUE setting.
func (x *extractor) gitConfig(label, opt string, v arg) {
	origin := label + " " + opt
	if v.opaque != "" {
		x.opaque(origin, "git "+opt+" sets a configuration known only at run time", KindExecute)
		return
	}
	name, _, _ := strings.Cut(v.s, "=")
	name = strings.ToLower(name)
	if opt == "--config-env" || gitOpaqueConfig.MatchString(name) {
		x.opaque(origin, "git "+opt+" sets a command git runs", KindExecute)
		return
	}
	if !gitSafeConfig[name] {
		x.markUnknown(fmt.Sprintf("git %s %s: a setting that may run a command or change where git connects", opt, v.s))
	}
}

// sshOption reads one ssh -o setting (ssh, scp, sftp; ssh_config(5) of
// OpenSSH 9.2: KEY=VALUE or KEY VALUE, the key in any case). The settings
// that run a local command (ProxyCommand, LocalCommand, KnownHostsCommand,
// XAuthLocation) are side commands, those that load code or more settings
// (PKCS11Provider, SecurityKeyProvider, Include) opaque, the files ssh
// reads and writes evidence, the hosts it connects to hosts; any other key
// not in sshSafeOptions makes the arguments unknown (closed world). It
// reports whether it recorded a path.
func (x *extractor) sshOption(prog, opt, s string, cwds []string, inner cmdCtx) bool {
	origin := prog + " " + opt
	s = strings.TrimSpace(s)
	i := strings.IndexAny(s, "= \t")
	if i <= 0 {
		x.markUnknown(fmt.Sprintf("%s %s %q: not a KEY=VALUE setting", prog, opt, s))
		return false
	}
	key := strings.ToLower(s[:i])
	val := strings.TrimSpace(strings.TrimPrefix(strings.TrimLeft(s[i:], " \t"), "="))
	none := strings.EqualFold(val, "none")
	switch key {
	case "proxycommand", "localcommand", "knownhostscommand":
		// Run by the user's shell on this machine (exec SHELL -c).
		if !none {
			x.sideCommand(origin+" "+key, val, inner)
		}
	case "xauthlocation":
		x.sideCommand(origin+" "+key, val, inner)
	case "pkcs11provider", "securitykeyprovider":
		if !none && val != "internal" {
			x.opaque(origin, fmt.Sprintf("%s %s %s loads a library, code the router does not read", prog, opt, key), KindExecute)
		}
	case "include":
		x.markUnknown(fmt.Sprintf("%s %s %s reads more settings from %s, which the router does not read", prog, opt, key, val))
		return x.sshPaths(prog, val, KindRead, cwds)
	case "identityfile", "certificatefile", "globalknownhostsfile", "revokedhostkeys":
		if !none {
			return x.sshPaths(prog, val, KindRead, cwds)
		}
	case "userknownhostsfile", "controlpath", "identityagent":
		// ssh adds new host keys to the first file; it creates the control
		// socket; it sends requests to the agent's socket.
		if !none && val != "SSH_AUTH_SOCK" {
			return x.sshPaths(prog, val, KindEdit, cwds)
		}
	case "hostname", "proxyjump":
		// [user@]host[:port] or ssh://[user@]host[:port], comma-separated:
		// each as ssh's own host operand is read.
		for _, h := range strings.Split(val, ",") {
			if h = strings.TrimSpace(h); h != "" && !strings.EqualFold(h, "none") {
				x.roleArg(prog, opt, arg{s: h}, roleHost, false, true, cwds, inner)
			}
		}
	default:
		if !sshSafeOptions[key] {
			x.markUnknown(fmt.Sprintf("%s %s %s: a setting the router does not know", prog, opt, key))
		}
	}
	return false
}

// sshPaths records the paths of an ssh setting's value (space-separated;
// %-tokens and ${VAR} make a path unknown: ssh expands them).
func (x *extractor) sshPaths(prog, val string, kind Kind, cwds []string) bool {
	recorded := false
	for _, p := range strings.Fields(val) {
		p = strings.Trim(p, `"`)
		if strings.ContainsAny(p, "%$") {
			x.opaque("argument of "+prog, fmt.Sprintf("%s expands %q at run time", prog, p), kind)
			continue
		}
		recorded = x.argPath(prog, arg{s: p}, kind, false, true, cwds) || recorded
	}
	return recorded
}

// sshSafeOptions are the ssh_config keys (lower case) whose values name no
// command, library, file or host on this machine: how ssh authenticates,
// encrypts, forwards and keeps the connection, and what the remote side
// runs (RemoteCommand, SendEnv, SetEnv: on the host the command names).
var sshSafeOptions = map[string]bool{
	"addkeystoagent": true, "addressfamily": true, "batchmode": true, "bindaddress": true, "bindinterface": true,
	"canonicaldomains": true, "canonicalizefallbacklocal": true, "canonicalizehostname": true,
	"canonicalizemaxdots": true, "canonicalizepermittedcnames": true, "casignaturealgorithms": true,
	"channeltimeout": true, "checkhostip": true, "ciphers": true, "clearallforwardings": true, "compression": true,
	"connectionattempts": true, "connecttimeout": true, "controlmaster": true, "controlpersist": true,
	"dynamicforward": true, "enableescapecommandline": true, "enablesshkeysign": true, "escapechar": true,
	"exitonforwardfailure": true, "fingerprinthash": true, "forkafterauthentication": true, "forwardagent": true,
	"forwardx11": true, "forwardx11timeout": true, "forwardx11trusted": true, "gatewayports": true,
	"gssapiauthentication": true, "gssapidelegatecredentials": true, "hashknownhosts": true,
	"hostbasedacceptedalgorithms": true, "hostbasedauthentication": true, "hostkeyalgorithms": true,
	"hostkeyalias": true, "identitiesonly": true, "ipqos": true, "kbdinteractiveauthentication": true,
	"kbdinteractivedevices": true, "kexalgorithms": true, "localforward": true, "loglevel": true, "logverbose": true,
	"macs": true, "nohostauthenticationforlocalhost": true, "numberofpasswordprompts": true,
	"obscurekeystroketiming": true, "passwordauthentication": true, "permitlocalcommand": true,
	"permitremoteopen": true, "port": true, "preferredauthentications": true, "proxyusefdpass": true,
	"pubkeyacceptedalgorithms": true, "pubkeyacceptedkeytypes": true, "pubkeyauthentication": true,
	"rekeylimit": true, "remotecommand": true, "remoteforward": true, "requesttty": true,
	"requiredrsasize": true, "sendenv": true, "serveraliveinterval": true, "serveralivecountmax": true,
	"sessiontype": true, "setenv": true, "stdinnull": true, "streamlocalbindmask": true,
	"streamlocalbindunlink": true, "stricthostkeychecking": true, "tcpkeepalive": true, "tunnel": true,
	"tunneldevice": true, "updatehostkeys": true, "user": true, "verifyhostkeydns": true, "visualhostkey": true,
	"warnweakcrypto": true,
}

// dockerRemoteContext records docker build's context when the docker CLI
// reads it as a remote one rather than a directory (cli/command/image
// build.go: a directory that exists first, then urlutil.IsGitURL:
// git://, git@, github.com/ or a URL ending in .git, then http(s)://): the
// host it is fetched from, and the Dockerfile there, whose RUN steps no
// one here read: opaque, as a package built from a repository is.
func (x *extractor) dockerRemoteContext(p *parsedArgs, a arg, cwds []string) bool {
	s := a.s
	lower := strings.ToLower(s)
	remote := strings.HasPrefix(lower, "git://") || strings.HasPrefix(lower, "git@") ||
		strings.HasPrefix(lower, "github.com/") || strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")
	if !remote || x.exists(s, cwds) {
		return false
	}
	origin := "argument of " + p.label
	switch {
	case strings.HasPrefix(lower, "github.com/"):
		x.host("github.com", origin)
	case strings.HasPrefix(lower, "git@"):
		if m := scpLike.FindStringSubmatch(s); m != nil {
			x.host(m[1], origin)
		} else {
			x.markUnknown(fmt.Sprintf("%s: %q is not a remote the router can read", p.label, s))
		}
	default:
		x.url(s, origin)
	}
	x.opaque(origin, fmt.Sprintf("%s builds the context at %s: its Dockerfile, which the router does not read, says what runs", p.label, s), KindExecute)
	return true
}
