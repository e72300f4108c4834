package extract

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
)

// roleArg records one argument by its role; it reports whether it
// recorded a path.
func (x *extractor) roleArg(prog, opt string, a arg, r role, recursive, hidden bool, cwds []string, cx cmdCtx) bool {
	origin := "argument of " + prog
	if opt != "" {
		origin = prog + " " + opt
	}
	switch r {
	case roleFlag, roleValue:
		// A value that is a whole URL still names a host (git remote add,
		// npm install URL): where a later command connects.
		if a.opaque == "" && strings.Contains(a.s, "://") && schemeURL.MatchString(a.s) {
			x.url(a.s, origin)
		}
		return false
	case roleChdir:
		return false // applied by applyArgs
	}
	if a.opaque != "" {
		x.add(Item{Type: ItemTool, Origin: origin, Opaque: fmt.Sprintf("an argument of %s %s", prog, a.opaque)}, KindExecute)
		return false
	}
	s := a.s
	inner := cx
	inner.depth++
	inner.cwds = cwds
	inner.origin = cx.origin + " (" + origin + ")"
	switch r {
	case roleOpaque:
		x.opaque(origin, fmt.Sprintf("%s %s runs something the router cannot see", prog, opt), KindExecute)
		return false
	case roleCode:
		x.opaque(origin, fmt.Sprintf("%s %s runs code the router does not read", prog, strings.TrimSpace(opt)), KindExecute)
		return false
	case roleCommand:
		// A command line the program runs on the side (git --upload-pack,
		// go -toolexec, rg --pre): its words are a command of their own,
		// which deny and ask rules see, and which is never allowed by the
		// rule that allowed the program.
		x.sideCommand(origin, s, inner)
		return false
	case roleScript:
		x.script(s, inner)
		return false
	case roleSed:
		x.sedScript(prog, s, cwds)
		return false
	case roleAwk:
		x.awkProgram(prog, s, cwds)
		return false
	case roleGitConfig:
		x.gitConfig(prog, opt, a)
		return false
	case roleSSHOption:
		return x.sshOption(prog, opt, s, cwds, inner)
	case rolePythonX:
		return x.pythonX(prog, opt, s, cwds)
	case roleMakeArg:
		return x.makeArg(prog, a, recursive, hidden, cwds, inner)
	case roleDateArg:
		// date +%F prints; date MMDDhhmm[[CC]YY][.ss] sets the system
		// clock (as root, or with CAP_SYS_TIME), which nothing here models.
		if !strings.HasPrefix(s, "+") {
			x.markUnknown(fmt.Sprintf("%s %s sets the system clock", prog, s))
		}
		return false
	case roleTypeDest:
		// pytest --cov-report html:htmlcov, xml:/path/cov.xml: a report
		// of TYPE written to DEST, a file or a directory.
		if _, dest, ok := strings.Cut(s, ":"); ok && dest != "" {
			return x.argPath(prog, arg{s: dest}, KindEdit, true, true, cwds)
		}
		return false
	case roleLdflags:
		if strings.Contains(s, "extld") || strings.Contains(s, "linkmode") || strings.Contains(s, "-plugin") {
			x.opaque(origin, prog+" "+opt+" names a program the linker runs", KindExecute)
		}
		return false
	case roleConfig:
		if s == "-" {
			// curl -K -, wget -i -: the options or URLs are on stdin.
			x.markUnknown(fmt.Sprintf("%s %s reads more options or URLs from stdin, which the router does not read", prog, opt))
			return false
		}
	case roleNameList:
		// The list is read; the files it names are not known.
		x.opaque(origin, fmt.Sprintf("%s reads the files named in %s, which the router does not read", prog, cmpOr(s, "stdin")), KindRead)
		if s != "" && s != "-" {
			return x.argPath(prog, a, KindRead, false, true, cwds)
		}
		return false
	case roleJq:
		if jqLoads(s) {
			x.opaque(origin, prog+"'s filter imports or includes a file (any .jq or .json file, by an absolute path or relative to ~/.jq)", KindRead)
		}
		return false
	case rolePlugin:
		if !strings.HasPrefix(s, "no:") {
			x.opaque(origin, fmt.Sprintf("%s %s loads the plugin %q, code the router does not read", prog, opt, s), KindExecute)
		}
		return false
	case roleProgram:
		switch {
		case s == "-" || s == "/dev/stdin" || strings.HasPrefix(s, "/dev/fd/") || strings.HasPrefix(s, "/proc/self/fd/"):
			x.opaque(origin, prog+" runs code read from stdin or a pipe", KindExecute)
			return false
		case strings.HasPrefix(prog, "deno") && (strings.HasPrefix(s, "npm:") || strings.HasPrefix(s, "jsr:")):
			// deno run npm:PKG, jsr:@SCOPE/PKG: a package from a registry,
			// which deno fetches (and runs in its sandbox).
			host := "jsr.io"
			if strings.HasPrefix(s, "npm:") {
				host = "registry.npmjs.org"
			}
			x.host(host, origin)
			return false
		case strings.Contains(s, "@") && !strings.HasPrefix(s, ".") && !strings.HasPrefix(s, "/"):
			// go run example.com/tool@v1: code fetched from a module.
			x.opaque(origin, fmt.Sprintf("%s runs %s, code it downloads", prog, s), KindExecute)
			return false
		}
		r = roleRead
	}
	if s == "" || s == "-" {
		return false
	}
	switch r {
	case roleRevPath, rolePathspec:
		// REV:PATH names a file of a commit (git show HEAD:.env reads it);
		// :/TEXT searches messages. A pathspec (git log -- f, git diff
		// HEAD f: revisions and paths are told apart only by what exists)
		// is read when it is not REV:PATH.
		if r == rolePathspec && (!strings.Contains(s, ":") || strings.Contains(s, "://")) {
			return x.argPath(prog, a, KindRead, recursive, hidden, cwds)
		}
		if i := strings.IndexByte(s, ':'); i >= 0 && !strings.Contains(s, "://") {
			p := s[i+1:]
			if p == "" || strings.HasPrefix(p, "/") && i == 0 {
				return false
			}
			// PATH is relative to the top of the work tree unless it
			// starts with ./ or ../ (git 2.39): both are read.
			if !strings.HasPrefix(p, "./") && !strings.HasPrefix(p, "../") {
				cwds = appendNew(cwds, x.gitTops(cwds)...)
			}
			p = strings.TrimPrefix(p, "./")
			// git archive HEAD:dir, show --stat-less HEAD:dir: a tree.
			return x.argPath(prog, arg{s: p}, KindRead, recursive, true, cwds)
		}
		return false
	case roleData:
		// curl -w's %output{FILE} (curl 8.3) writes FILE (>>FILE appends).
		for rest := s; opt == "-w" || opt == "--write-out"; {
			i := strings.Index(rest, "%output{")
			if i < 0 {
				break
			}
			rest = rest[i+len("%output{"):]
			name, after, ok := strings.Cut(rest, "}")
			if !ok {
				x.markUnknown(prog + " " + opt + ": an unterminated %output{")
				break
			}
			x.argPath(prog, arg{s: strings.TrimPrefix(name, ">>")}, KindEdit, false, true, cwds)
			rest = after
		}
		if f, ok := strings.CutPrefix(s, "@"); ok {
			return x.argPath(prog, arg{s: f, glob: a.glob}, KindRead, false, true, cwds)
		}
		// --data-urlencode and --url-query NAME@FILE read FILE (NAME=VALUE
		// does not); so does --variable [%]NAME@FILE (curl 8.3).
		if at := strings.IndexByte(s, '@'); at > 0 && (opt == "--data-urlencode" || opt == "--url-query" || opt == "--variable") && !strings.Contains(s[:at], "=") {
			return x.argPath(prog, arg{s: s[at+1:], glob: a.glob}, KindRead, false, true, cwds)
		}
		// -b FILE (no '=') reads cookies from FILE.
		if (opt == "-b" || opt == "--cookie") && !strings.Contains(s, "=") {
			return x.argPath(prog, a, KindRead, false, true, cwds)
		}
		return false
	case roleHosts:
		// HOST:PORT:ADDR, or a list of them (--dns-servers A,B:53).
		for _, h := range strings.FieldsFunc(s, func(r rune) bool { return r == ':' || r == ',' }) {
			h = strings.Trim(h, "[]")
			if h != "" && !isDigits(h) && h != "*" {
				x.host(h, origin)
			}
		}
		return false
	case roleSocket:
		// curl --unix-socket /var/run/docker.sock http://github.com/...
		// sends the request to the daemon, not to the URL's host: what
		// it is asked to do is done there.
		return x.argPath(prog, a, KindEdit, false, true, cwds)
	case roleConfig:
		x.markUnknown(fmt.Sprintf("%s %s reads more options or URLs from %s, which the router does not read", prog, opt, s))
		return x.argPath(prog, a, KindRead, false, true, cwds)
	case roleForm:
		if _, v, ok := strings.Cut(s, "="); ok && (strings.HasPrefix(v, "@") || strings.HasPrefix(v, "<")) {
			f, _, _ := strings.Cut(v[1:], ";")
			return x.argPath(prog, arg{s: f}, KindRead, false, true, cwds)
		}
		return false
	}
	if strings.Contains(s, "://") && schemeURL.MatchString(s) {
		x.url(s, origin)
		return false
	}
	if strings.IndexByte(s, '@') > 0 && strings.IndexByte(s, ':') > 0 {
		if m := scpLike.FindStringSubmatch(s); m != nil {
			x.host(m[1], origin)
			return false
		}
	}
	dest := r == roleRemoteDest
	switch r {
	case roleURL:
		host := s
		if i := strings.IndexAny(host, "/?#"); i >= 0 {
			host = host[:i]
		}
		if at := strings.LastIndexByte(host, '@'); at >= 0 {
			host = host[at+1:]
		}
		if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
			host = h
		}
		x.host(host, origin)
		return false
	case roleHost:
		h := s
		if at := strings.LastIndexByte(h, '@'); at >= 0 {
			h = h[at+1:]
		}
		if hh, _, ok := strings.Cut(h, ":"); ok && !strings.HasPrefix(h, "[") {
			h = hh
		}
		x.host(h, origin)
		return false
	case roleRemote, roleRemoteDest:
		if i := strings.IndexByte(s, ':'); i > 0 && !strings.Contains(s[:i], "/") {
			x.host(s[:i], origin)
			return false
		}
		kind := KindRead
		if dest {
			kind = KindEdit
		}
		return x.argPath(prog, a, kind, recursive, hidden, cwds)
	case roleRead:
		if strings.HasSuffix(prog, "awk") && IsAssignment(s) {
			return false // awk VAR=value between its files
		}
		if (prog == "less" || prog == "more") && strings.HasPrefix(s, "+") {
			// less +CMD runs a less command first: ! and | run shell commands.
			x.opaque(origin, prog+" "+s+" runs a command of "+prog+"'s (! and | run shell commands)", KindExecute)
			return false
		}
		return x.argPath(prog, a, KindRead, recursive, hidden, cwds)
	case roleReadDir:
		return x.argPath(prog, dirOfPattern(a), KindRead, true, hidden, cwds)
	case roleWrite:
		return x.argPath(prog, a, KindEdit, false, hidden, cwds)
	case roleWriteDir:
		// A program that skips dotfiles (go fmt, gofmt -w) writes none.
		return x.argPath(prog, dirOfPattern(a), KindEdit, true, hidden, cwds)
	}
	// roleUnknown: by shape, and it may be read or written. A value after
	// = (--file=x, make VAR=x) is one too, and so is each piece of a list
	// the program may split (docker's --secret id=x,src=PATH, a
	// HOST:CONTAINER volume, an @FILE): a deny rule sees every path an
	// argument may name, whoever vouches for the program (issue 27).
	if opt == "" {
		pieces, sides := shapePieces(s)
		for _, v := range pieces {
			if looksLikePath(v) || x.exists(v, cwds) {
				x.argPath(prog, arg{s: v}, KindRead, false, hidden, cwds, KindEdit)
			}
		}
		// Each side of a : is a file the program may read when it exists
		// (HOST:CONTAINER: the other side is not a path here).
		for _, v := range sides {
			if path.IsAbs(v) && x.fs != nil {
				if ok, _ := x.fs.Stat(v); ok {
					x.argPath(prog, arg{s: v}, KindRead, false, hidden, cwds)
				}
			} else if x.exists(v, cwds) {
				x.argPath(prog, arg{s: v}, KindRead, false, hidden, cwds)
			}
		}
	}
	if looksLikePath(s) || a.glob || a.below || x.exists(s, cwds) {
		return x.argPath(prog, a, KindRead, recursive, hidden, cwds, KindEdit)
	}
	return false
}

// maxShapePieces bounds the pieces one argument is split into.
const maxShapePieces = 32

// shapePieces returns the parts of an argument a program may read or
// write as a path of its own, other than the whole: the value after its
// first =, what follows a one-letter option (-fFILE), each item of a
// comma-separated list and its value after =, without a leading @; and
// sides, each side of a : in them (not in a URL).
func shapePieces(s string) (pieces, sides []string) {
	add := func(out []string, v string) []string {
		if v != "" && v != s && len(out) < maxShapePieces && !slices.Contains(out, v) {
			out = append(out, v)
		}
		return out
	}
	var cands []string
	if _, v, ok := strings.Cut(s, "="); ok {
		cands = append(cands, v)
	}
	// -fFILE, -I/dir, -o~/x: a one-letter option with its value attached,
	// as getopt, Go's flag package and most scripts' parsers take it.
	if len(s) > 2 && s[0] == '-' && s[1] != '-' {
		cands = append(cands, s[2:])
	}
	for part := range strings.SplitSeq(s, ",") {
		cands = append(cands, part)
		if _, v, ok := strings.Cut(part, "="); ok {
			cands = append(cands, v)
		}
		if len(cands) > maxShapePieces {
			break
		}
	}
	for _, c := range cands {
		c = strings.TrimPrefix(c, "@")
		pieces = add(pieces, c)
		if strings.Contains(c, ":") && !strings.Contains(c, "://") {
			for side := range strings.SplitSeq(c, ":") {
				sides = add(sides, strings.TrimPrefix(side, "@"))
			}
		}
	}
	return pieces, sides
}

// dirOfPattern turns a Go package pattern with ... (./..., ./cmd/...,
// ./pkg...) into the directory whose tree it may name: the part before
// the ..., up to its last slash when the ... does not start a name.
func dirOfPattern(a arg) arg {
	i := strings.Index(a.s, "...")
	if i < 0 || a.opaque != "" {
		return a
	}
	d := a.s[:i]
	if !strings.HasSuffix(d, "/") {
		if j := strings.LastIndexByte(d, '/'); j >= 0 {
			d = d[:j+1]
		} else {
			d = ""
		}
	}
	if d != "/" {
		d = strings.TrimSuffix(d, "/")
	}
	if d == "" {
		d = "."
	}
	a.s = d
	return a
}

// exists reports whether a word names an existing file relative to one of
// the directories.
func (x *extractor) exists(s string, cwds []string) bool {
	if x.fs == nil || s == "" {
		return false
	}
	for _, d := range cwds {
		if ok, _ := x.fs.Stat(path.Join(d, s)); ok {
			return true
		}
	}
	return false
}

// argPath records a path argument of a program.
func (x *extractor) argPath(prog string, a arg, kind Kind, recursive, hidden bool, cwds []string, more ...Kind) bool {
	recursive = recursive || a.below
	if recursive && x.fs != nil && !a.below {
		// A recursive read of a file is a read of the file.
		dir := true
		for _, d := range cwds {
			p := a.s
			if !path.IsAbs(p) {
				p = path.Join(d, p)
			}
			if ok, isDir := x.fs.Stat(p); ok && !isDir {
				dir = false
			}
		}
		recursive = dir
	}
	before := len(x.ev.Items)
	x.path(a.s, a.glob, kind, recursive, "argument of "+prog, cwds, more...)
	// What the program's walk reaches is what it reads (issue 27); a
	// write below the directory goes through whatever is there, and a
	// path find hands to -exec is read by that command as it reads it.
	walk := x.walk
	if a.below || kind != KindRead || len(more) > 0 {
		walk = nil
	}
	for i := before; recursive && i < len(x.ev.Items); i++ {
		if !hidden {
			x.ev.Items[i].SkipsHidden = true
		}
		if x.ev.Items[i].Recursive {
			x.ev.Items[i].Walk = walk
		}
	}
	return true
}

// findPredicates are find's options, tests and actions with the number of
// values each takes; the role of a value is value unless findValueRoles
// says otherwise.
var findPredicates = map[string]int{
	"-depth": 0, "-d": 0, "-ignore_readdir_race": 0, "-noignore_readdir_race": 0, "-mount": 0, "-xdev": 0,
	"-noleaf": 0, "-daystart": 0, "-follow": 0, "-nowarn": 0, "-warn": 0, "-maxdepth": 1, "-mindepth": 1,
	"-regextype": 1, "-amin": 1, "-anewer": 1, "-atime": 1, "-cmin": 1, "-cnewer": 1, "-ctime": 1, "-empty": 0,
	"-executable": 0, "-false": 0, "-fstype": 1, "-gid": 1, "-group": 1, "-ilname": 1, "-iname": 1, "-inum": 1,
	"-ipath": 1, "-iregex": 1, "-iwholename": 1, "-links": 1, "-lname": 1, "-mmin": 1, "-mtime": 1, "-name": 1,
	"-newer": 1, "-nogroup": 0, "-nouser": 0, "-path": 1, "-perm": 1, "-readable": 0, "-regex": 1,
	"-samefile": 1, "-size": 1, "-true": 0, "-type": 1, "-uid": 1, "-used": 1, "-user": 1, "-wholename": 1,
	"-writable": 0, "-xtype": 1, "-context": 1, "-ls": 0, "-print": 0, "-print0": 0, "-printf": 1, "-prune": 0,
	"-quit": 0, "-delete": 0, "-fls": 1, "-fprint": 1, "-fprint0": 1, "-fprintf": 2, "-not": 0, "-a": 0,
	"-and": 0, "-o": 0, "-or": 0, "(": 0, ")": 0, "!": 0, ",": 0,
	"-newermm": 1, "-newerma": 1, "-newermc": 1, "-newerat": 1, "-newerct": 1, "-newermt": 1, "-neweraa": 1,
	"-newerac": 1, "-newercm": 1, "-newerca": 1, "-newercc": 1, "-neweram": 1, "-newerBt": 1, "-newermB": 1,
}

// findArgs reads find's start points and expression: tests read file
// names below the start points; -exec and friends run a payload on every
// file found (analysed with {} standing for any file below the start
// points); -delete deletes them; -fprint and -fls write a file. A
// predicate find does not have makes the arguments unknown.
func (x *extractor) findArgs(it Item, args []arg, cx cmdCtx) {
	cwds := x.cwdsFor(cx)
	var starts []arg
	i := 0
	// -H -L -P -D debugopts -Olevel come first.
	for i < len(args) && args[i].opaque == "" {
		s := args[i].s
		if s == "-H" || s == "-L" || s == "-P" || strings.HasPrefix(s, "-O") {
			i++
			continue
		}
		if s == "-D" && i+1 < len(args) {
			i += 2
			continue
		}
		break
	}
	for i < len(args) && (args[i].opaque != "" || !isFindExpr(args[i].s)) {
		starts = append(starts, args[i])
		i++
	}
	if len(starts) == 0 {
		starts = []arg{{s: "."}}
	}
	type payload struct {
		at   string
		args []arg
	}
	var payloads []payload
	kind := KindRead
	for j := i; j < len(args); j++ {
		a := args[j]
		if a.opaque != "" {
			it.Unknown = "find: an expression word " + a.opaque
			continue
		}
		switch s := a.s; s {
		case "-delete":
			kind = KindEdit
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			if j+1 < len(args) {
				x.optionPath("find", s, args[j+1], KindEdit, cwds)
			}
			j += findPredicates[s]
		case "-anewer", "-cnewer", "-newer", "-samefile":
			if j+1 < len(args) {
				x.optionPath("find", s, args[j+1], KindRead, cwds)
			}
			j++
		case "-exec", "-execdir", "-ok", "-okdir":
			k := j + 1
			for k < len(args) && args[k].s != ";" && args[k].s != "+" {
				k++
			}
			if k > j+1 {
				payloads = append(payloads, payload{s, args[j+1 : k]})
			} else {
				it.Unknown = "find " + s + " without a command"
			}
			j = k
		default:
			n, ok := findPredicates[s]
			if !ok {
				if it.Unknown == "" {
					it.Unknown = "find: unknown predicate " + s
				}
				continue
			}
			if strings.HasPrefix(s, "-newer") && j+1 < len(args) && len(s) > len("-newer") && s[len(s)-1] != 't' {
				x.optionPath("find", s, args[j+1], KindRead, cwds)
			}
			j += n
		}
	}
	x.add(it, KindExecute)
	for _, s := range starts {
		r := roleRead
		if kind == KindEdit {
			r = roleWriteDir
		}
		x.roleArg("find", "", s, r, false, true, cwds, cx)
	}
	for _, p := range payloads {
		for _, s := range starts {
			inner := cx
			inner.depth++
			inner.cwds = cwds
			inner.origin = cx.origin + " (find " + p.at + ")"
			run := slices.Clone(p.args)
			for n := range run {
				switch {
				case run[n].s == "{}" && run[n].opaque == "":
					run[n] = arg{s: s.s, opaque: s.opaque, below: true, glob: s.glob}
				case strings.Contains(run[n].s, "{}"):
					// A file name pasted into a word (sh -c 'cat {}') is
					// code, not an argument.
					run[n] = arg{s: run[n].s, opaque: "has each file find finds pasted into it"}
				}
			}
			if p.at == "-execdir" || p.at == "-okdir" {
				inner.cwdUnknown = true // runs in each file's directory
				if !path.IsAbs(s.s) && s.opaque == "" {
					inner.cwds = nil
					for _, d := range cwds {
						inner.cwds = append(inner.cwds, path.Join(d, s.s))
					}
				}
			}
			x.argv(run, inner)
		}
	}
}

func isFindExpr(s string) bool {
	return strings.HasPrefix(s, "-") || s == "(" || s == "!" || s == ")" || s == ","
}

// tarOptions are GNU tar's options: "" takes no value, else the role of
// its value.
var tarOptions = map[string]role{
	"c": roleFlag, "x": roleFlag, "t": roleFlag, "r": roleFlag, "u": roleFlag, "A": roleFlag, "d": roleFlag,
	"--create": roleFlag, "--extract": roleFlag, "--get": roleFlag, "--list": roleFlag, "--append": roleFlag,
	"--update": roleFlag, "--catenate": roleFlag, "--concatenate": roleFlag, "--diff": roleFlag, "--compare": roleFlag,
	"--delete": roleFlag, "f": roleValue, "--file": roleValue, "C": roleChdir, "--directory": roleChdir,
	"v": roleFlag, "--verbose": roleFlag, "z": roleFlag, "--gzip": roleFlag, "--gunzip": roleFlag,
	"--ungzip": roleFlag, "j": roleFlag, "--bzip2": roleFlag, "J": roleFlag, "--xz": roleFlag, "--zstd": roleFlag,
	"--lzma": roleFlag, "--lzip": roleFlag, "--lzop": roleFlag, "a": roleFlag, "--auto-compress": roleFlag,
	"p": roleFlag, "--preserve-permissions": roleFlag, "--same-permissions": roleFlag, "k": roleFlag,
	"--keep-old-files": roleFlag, "--skip-old-files": roleFlag, "--keep-newer-files": roleFlag, "--overwrite": roleFlag,
	"O": roleFlag, "--to-stdout": roleFlag, "--exclude": roleValue, "--exclude-vcs": roleFlag,
	"--exclude-vcs-ignores": roleFlag, "--exclude-caches": roleFlag, "--exclude-backups": roleFlag, "X": roleRead,
	"--exclude-from": roleRead, "T": roleNameList, "--files-from": roleNameList, "--strip-components": roleValue,
	"h": roleFlag, "--dereference": roleFlag, "--no-same-owner": roleFlag, "--same-owner": roleFlag,
	"m": roleFlag, "--touch": roleFlag, "--wildcards": roleFlag, "--no-wildcards": roleFlag, "--anchored": roleFlag,
	"--transform": roleValue, "--xform": roleValue, "--owner": roleValue, "--group": roleValue, "--mode": roleValue,
	"--mtime": roleValue, "--sort": roleValue, "--numeric-owner": roleFlag, "W": roleFlag, "--verify": roleFlag,
	"S": roleFlag, "--sparse": roleFlag, "--totals": roleFlag, "--warning": roleValue, "--no-recursion": roleFlag,
	"--recursion": roleFlag, "--null": roleFlag, "--xattrs": roleFlag, "--no-xattrs": roleFlag, "--acls": roleFlag,
	"--selinux": roleFlag, "b": roleValue, "--blocking-factor": roleValue, "--format": roleValue, "H": roleValue,
	"--posix": roleFlag, "N": roleValue, "--newer": roleValue, "--after-date": roleValue, "--newer-mtime": roleValue,
	"--one-file-system": roleFlag, "--force-local": roleFlag, "--no-same-permissions": roleFlag,
	"--show-transformed-names": roleFlag, "--index-file": roleWrite, "--checkpoint": roleValue, "--record-size": roleValue,
	"--label": roleValue, "V": roleValue, "--ignore-failed-read": roleFlag, "--ignore-zeros": roleFlag, "i": roleFlag,
	"--full-time": roleFlag, "--utc": roleFlag, "--quoting-style": roleValue, "--no-anchored": roleFlag,
	"--ignore-case": roleFlag, "--no-ignore-case": roleFlag, "--atime-preserve": roleFlag, "--occurrence": roleValue,
	"--one-top-level": roleFlag, "--keep-directory-symlink": roleFlag, "--no-overwrite-dir": roleFlag,
	"--unlink-first": roleFlag, "U": roleFlag, "--remove-files": roleFlag, "--checkpoint-action": roleCommand,
	"I": roleCommand, "--use-compress-program": roleCommand, "--to-command": roleCommand,
	"F": roleCommand, "--info-script": roleCommand, "--new-volume-script": roleCommand, "--rsh-command": roleCommand,
	"P": roleFlag, "--absolute-names": roleFlag, "g": roleWrite, "--listed-incremental": roleWrite, "G": roleFlag,
	"--incremental": roleFlag, "--help": roleFlag, "--version": roleFlag, "--usage": roleFlag,
}

// tarArgs reads tar's mode, archive (-f), directory (-C) and operands:
// creating reads the operands recursively and writes the archive;
// extracting reads the archive and writes anything below the directory
// (the archive names the files), anywhere with -P. Options tar does not
// have, and -I, --to-command and the like with a program that is not
// understood, make the arguments unknown.
// tarWalk is tar c's walk: every name, no symlink opened.
var tarWalk = &Walk{Links: "none"}

func (x *extractor) tarArgs(it Item, args []arg, cx cmdCtx) {
	cwds := x.cwdsFor(cx)
	mode := byte(0)
	var vals []optVal
	var ops []arg
	flags := flagSet{}
	var topLevel []arg
	opt := func(key string, v arg, has bool) {
		r, ok := tarOptions[key]
		name := key
		if len(key) == 1 {
			name = "-" + key
		}
		if !ok {
			if it.Unknown == "" {
				it.Unknown = "tar: unknown option " + name
			}
			return
		}
		flags = append(flags, name)
		switch key {
		case "c", "r", "u", "--create", "--append", "--update":
			mode = 'c'
		case "x", "--extract", "--get":
			mode = 'x'
		case "t", "--list":
			mode = 't'
		}
		switch {
		case r != roleFlag:
			vals = append(vals, optVal{key: name, opt: &optSpec{name: name, role: r}, v: v, has: has})
		case has && key == "--one-top-level":
			// --one-top-level=DIR extracts into DIR (absolute, or below -C).
			topLevel = append(topLevel, v)
		case has && key != "--atime-preserve":
			if it.Unknown == "" {
				it.Unknown = "tar: option " + name + " takes no value"
			}
		}
	}
	takes := func(key string) bool { r, ok := tarOptions[key]; return ok && r != roleFlag }
	for i := 0; i < len(args); i++ {
		a := args[i]
		s := a.s
		bundled := i == 0 && a.opaque == "" && s != "" && s[0] != '-'
		switch {
		case a.opaque != "":
			ops = append(ops, a)
		case s == "--":
			ops = append(ops, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(s, "--"):
			key, val, has := strings.Cut(s, "=")
			v := arg{s: val}
			if !has && takes(key) && i+1 < len(args) {
				i++
				v, has = args[i], true
			}
			opt(key, v, has)
		case bundled || (len(s) > 1 && s[0] == '-'):
			letters := s
			if !bundled {
				letters = s[1:]
			}
			for j := 0; j < len(letters); j++ {
				c := letters[j : j+1]
				if !takes(c) {
					opt(c, arg{}, false)
					continue
				}
				var v arg
				has := false
				if j+1 < len(letters) && !bundled {
					v, has = arg{s: letters[j+1:]}, true
					j = len(letters)
				} else if i+1 < len(args) {
					i++
					v, has = args[i], true
				}
				opt(c, v, has)
			}
		default:
			ops = append(ops, a)
		}
	}
	x.add(it, KindExecute)
	label := "tar"
	base := cwds
	var archive *arg
	for _, v := range vals {
		switch v.opt.role {
		case roleChdir:
			if !v.has {
				continue
			}
			if v.v.opaque != "" {
				x.opaque("tar -C", "tar -C "+v.v.opaque, KindExecute)
				continue
			}
			var next []string
			for _, d := range base {
				next = append(next, path.Join(d, v.v.s))
			}
			if path.IsAbs(v.v.s) {
				next = []string{path.Clean(v.v.s)}
			}
			base = next
		case roleValue:
			if v.key == "-f" || v.key == "--file" {
				a := v.v
				archive = &a
			}
		default:
			x.roleArg(label, v.key, v.v, v.opt.role, false, true, cwds, cx)
		}
	}
	remote := func(a *arg) bool {
		if a == nil || a.opaque != "" || flags.any("--force-local") {
			return false
		}
		if i := strings.IndexByte(a.s, ':'); i > 0 && !strings.Contains(a.s[:i], "/") {
			x.host(strings.TrimPrefix(a.s[strings.LastIndexByte(a.s[:i], '@')+1:i], "@"), "tar -f")
			return true
		}
		return false
	}
	switch mode {
	case 'c':
		if archive != nil && !remote(archive) {
			x.roleArg(label, "-f", *archive, roleWrite, false, true, cwds, cx)
		}
		r := roleReadDir
		if flags.any("--remove-files") {
			r = roleWriteDir
		}
		// tar stores a symlink below its operands as a link (its target
		// is a name in the archive, not read) unless -h dereferences it.
		w := tarWalk
		if flags.any("-h", "--dereference") {
			w = nil
		}
		restore := x.withWalk(w)
		for _, a := range ops {
			x.roleArg(label, "", a, r, false, true, base, cx)
		}
		restore()
	case 'x':
		if !flags.any("-O", "--to-stdout") {
			// What the archive holds, symlinks included, is not known.
			dirs := slices.Clone(base)
			if flags.any("-P", "--absolute-names") {
				dirs = []string{"/"}
			}
			for _, t := range topLevel {
				if t.opaque == "" && !t.glob {
					for _, d := range base {
						if path.IsAbs(t.s) {
							d = ""
						}
						dirs = append(dirs, path.Join("/", d, t.s))
					}
				}
			}
			for _, d := range dirs {
				defer x.extractedTree(d)()
			}
		}
		if archive != nil && !remote(archive) {
			x.roleArg(label, "-f", *archive, roleRead, false, true, cwds, cx)
		}
		if flags.any("-P", "--absolute-names") {
			x.path("/", false, KindEdit, true, "tar -P extracts anywhere", nil)
		} else if !flags.any("-O", "--to-stdout") {
			for _, d := range base {
				x.path(d, false, KindEdit, true, "tar extracts into", nil)
			}
			for _, t := range topLevel {
				x.roleArg(label, "--one-top-level", t, roleWriteDir, false, true, base, cx)
			}
		}
	default:
		if archive != nil && !remote(archive) {
			x.roleArg(label, "-f", *archive, roleRead, false, true, cwds, cx)
		}
	}
}

// ddArgs reads dd's KEY=VALUE operands: if= is read, of= written.
func (x *extractor) ddArgs(it Item, args []arg, cx cmdCtx) {
	cwds := x.cwdsFor(cx)
	type op struct {
		v string
		r role
	}
	var files []op
	for _, a := range args {
		k, v, ok := strings.Cut(a.s, "=")
		switch {
		case a.opaque != "":
			it.Unknown = "dd: an operand " + a.opaque
		case a.s == "--help" || a.s == "--version":
		case !ok:
			it.Unknown = "dd: unknown operand " + a.s
		case k == "if":
			files = append(files, op{v, roleRead})
		case k == "of":
			files = append(files, op{v, roleWrite})
		case slices.Contains([]string{"bs", "ibs", "obs", "cbs", "count", "skip", "seek", "iseek", "oseek", "conv",
			"iflag", "oflag", "status"}, k):
		default:
			it.Unknown = "dd: unknown operand " + k + "="
		}
	}
	x.add(it, KindExecute)
	for _, f := range files {
		x.roleArg("dd", "", arg{s: f.v}, f.r, false, true, cwds, cx)
	}
}

// harmlessSideCommands are commands a program may be told to run on the
// side that do nothing but pass data through (GIT_PAGER=cat).
var harmlessSideCommands = map[string]bool{"cat": true, "less": true, "more": true, "true": true, "": true,
	"less -R": true, "less -FRX": true, "less -FRSX": true}

// sideCommand analyses a command line a program runs besides its own work:
// a pager, an editor, git's ssh or upload-pack, go's -toolexec.
func (x *extractor) sideCommand(origin, s string, inner cmdCtx) {
	x.script(s, inner)
	if !harmlessSideCommands[strings.TrimSpace(s)] {
		x.markUnknown(fmt.Sprintf("%s runs the command %q", origin, s))
	}
}

// makeVars are the variables make itself reads: the shell that runs
// every recipe and its flags, more options, more makefiles.
var makeVars = map[string]bool{
	"SHELL": true, ".SHELLFLAGS": true, "MAKESHELL": true, "MAKEFLAGS": true, "MFLAGS": true,
	"GNUMAKEFLAGS": true, "MAKEFILES": true, "MAKE": true, "MAKEOVERRIDES": true,
}

// makeArg reads an operand of make: a target, or a variable definition
// (a word with =, after any of make's operators =, :=, ::=, :::=, ?=,
// +=, !=). The value is make text: NAME!=COMMAND runs COMMAND with the
// shell at once, and a $ in it is expanded ($(shell ...) runs a command,
// $(file >F,...) writes F, even in a variable no recipe uses once it is
// defined with :=); a variable of makeVars is not understood. Any other
// value is read by shape, as the recipes that use it may read or write
// it (DESTDIR, PREFIX).
func (x *extractor) makeArg(prog string, a arg, recursive, hidden bool, cwds []string, inner cmdCtx) bool {
	i := strings.IndexByte(a.s, '=')
	if i <= 0 {
		return x.roleArg(prog, "", a, roleArgs, recursive, hidden, cwds, inner)
	}
	name, val, op := a.s[:i], a.s[i+1:], "="
	for _, o := range []string{":::", "::", ":", "!", "?", "+"} {
		if n, ok := strings.CutSuffix(name, o); ok {
			name, op = n, o+"="
			break
		}
	}
	name = strings.TrimSpace(name)
	origin := prog + " " + name + op
	switch {
	case op == "!=":
		x.sideCommand(origin, val, inner)
		return false
	case strings.Contains(val, "$"):
		x.opaque(origin, origin+": make expands the value ($(shell ...) runs a command, $(file ...) writes a file)", KindExecute)
		return false
	case makeVars[name]:
		x.markUnknown(fmt.Sprintf("%s sets %s, which make itself reads", prog, name))
	}
	return x.roleArg(prog, "", a, roleArgs, recursive, hidden, cwds, inner)
}

// compressor is what one of the gzip family's names does with a FILE
// operand: compressed, FILE+suffix is written; decompressed, FILE less a
// suffix of its format (decompressed); to stdout, nothing.
type compressor struct {
	suffix       string
	decompress   bool
	stdout       bool
	decompressed [][2]string // suffix -> what replaces it
}

var (
	gzipSuffixes  = [][2]string{{".tgz", ".tar"}, {".taz", ".tar"}, {".gz", ""}, {"-gz", ""}, {".z", ""}, {"-z", ""}, {"_z", ""}, {".Z", ""}}
	bzip2Suffixes = [][2]string{{".tbz2", ".tar"}, {".tbz", ".tar"}, {".bz2", ""}, {".bz", ""}}
	xzSuffixes    = [][2]string{{".txz", ".tar"}, {".tlz", ".tar"}, {".xz", ""}, {".lzma", ""}}
	zstdSuffixes  = [][2]string{{".tzst", ".tar"}, {".zst", ""}}
	lz4Suffixes   = [][2]string{{".lz4", ""}}
	compressors   = map[string]compressor{
		"gzip": {".gz", false, false, gzipSuffixes}, "gunzip": {".gz", true, false, gzipSuffixes}, "zcat": {".gz", true, true, gzipSuffixes},
		"bzip2": {".bz2", false, false, bzip2Suffixes}, "bunzip2": {".bz2", true, false, bzip2Suffixes}, "bzcat": {".bz2", true, true, bzip2Suffixes},
		"xz": {".xz", false, false, xzSuffixes}, "unxz": {".xz", true, false, xzSuffixes}, "xzcat": {".xz", true, true, xzSuffixes},
		"zstd": {".zst", false, false, zstdSuffixes}, "unzstd": {".zst", true, false, zstdSuffixes}, "zstdcat": {".zst", true, true, zstdSuffixes},
		"lz4": {".lz4", false, false, lz4Suffixes},
	}
)

// compressedOutputs returns the files a gzip-family command writes besides
// its operands (which it deletes, so they are written already): gzip FILE
// writes FILE.gz, gunzip FILE.gz (gzip -d, xz -d, ...) writes FILE, -S
// names the suffix. A name it would refuse (no known suffix) writes
// nothing; so do -c, -t, -l and the *cat names. A glob operand's output is
// the same pattern with the suffix changed. Decompressing with -N (--name),
// gzip names the file after the name stored in it (in FILE's directory):
// ok is false, the name is not known.
func compressedOutputs(p *parsedArgs) (out []arg, ok bool) {
	c, known := compressors[path.Base(p.label)]
	if !known || c.stdout || p.flags.any("-c", "--stdout", "--to-stdout", "-t", "--test", "-l", "--list", "-h", "--help", "-V", "--version", "-L", "--license") {
		return nil, true
	}
	decompress := c.decompress || p.flags.any("-d", "--decompress", "--uncompress")
	if decompress && p.flags.any("-N", "--name") {
		return nil, false
	}
	suffixes := c.decompressed
	for _, v := range p.vals {
		if (v.opt.name == "-S" || v.opt.name == "--suffix") && v.has && v.v.opaque == "" {
			c.suffix = v.v.s
			suffixes = [][2]string{{v.v.s, ""}}
		}
	}
	for _, a := range p.ops {
		if a.opaque != "" || a.s == "-" || a.s == "" {
			continue
		}
		o := a
		if !decompress {
			o.s += c.suffix
			out = append(out, o)
			continue
		}
		for _, s := range suffixes {
			if base, ok := strings.CutSuffix(a.s, s[0]); ok && s[0] != "" && base != "" && !strings.HasSuffix(base, "/") {
				o.s = base + s[1]
				out = append(out, o)
				break
			}
		}
	}
	return out, true
}

// sedBackups returns the backup files sed -iSUFFIX writes besides the files
// it edits in place (roles: the operands', written): FILE+SUFFIX, or, when
// SUFFIX has a '*', SUFFIX with each '*' replaced by FILE as given (GNU sed
// 4.9: -i'out/*' on src/a.c writes out/src/a.c, -i'/abs/*' an absolute
// path), relative to the working directory. A suffix known only at run
// time makes the command opaque (ok false).
func sedBackups(p *parsedArgs, roles []role) (out []arg, ok bool) {
	if path.Base(p.label) != "sed" {
		return nil, true
	}
	suffix := ""
	for _, v := range p.vals {
		if (v.opt.name == "-i" || v.opt.name == "--in-place") && v.has {
			if v.v.opaque != "" {
				return nil, false
			}
			suffix = v.v.s
		}
	}
	if suffix == "" {
		return nil, true
	}
	for i, a := range p.ops {
		if i >= len(roles) || roles[i] != roleWrite || a.opaque != "" || a.s == "-" {
			continue
		}
		o := a
		if strings.Contains(suffix, "*") {
			o.s = strings.ReplaceAll(suffix, "*", a.s)
		} else {
			o.s = a.s + suffix
		}
		out = append(out, o)
	}
	return out, true
}

// dataNamedWrites returns the directory a command writes files below whose
// names come from its input, not its arguments, when no option names that
// directory: unzip ARCHIVE without -d extracts into the working directory;
// patch without a FILE operand writes the files its patch names (below the
// working directory: patch ignores absolute and .. names). Like tar's
// extraction, the directory is written recursively. ok is false when the
// command writes no such files.
func dataNamedWrites(p *parsedArgs) (what string, ok bool) {
	switch path.Base(p.label) {
	case "unzip":
		if p.flags.any("-l", "-t", "-v", "-z", "-p", "-Z") {
			return "", false // lists, tests or writes to stdout
		}
		for _, v := range p.vals {
			if v.key == "-d" && v.has {
				return "", false // the -d directory is written already
			}
		}
		return "unzip extracts into", true
	case "patch":
		if len(p.ops) > 0 || p.flags.any("--dry-run") {
			return "", false // patch FILE writes FILE
		}
		for _, v := range p.vals {
			if (v.opt.name == "-o" || v.opt.name == "--output") && v.has {
				return "", false // the patched files go to the output
			}
		}
		return "patch writes the files its patch names, below", true
	}
	return "", false
}

// intoDirectory returns the files cp, mv, ln and install write when their
// last operand is a directory: DEST/NAME for each source, NAME its last
// element ('cp config .git' writes .git/config), and for ln with a single
// operand ./NAME. Whether DEST is a directory when the command runs is not
// known (an earlier command may make it one), so the names are evidence
// unless -T says DEST is the file itself; -t DIR and cp -r write DIR's tree
// already, but a backup of DIR/NAME is not. A glob source names the files it matches (as the shell expands
// it), or itself when it matches none; an opaque one is evidence already;
// find -exec's {} (any file below a start point) writes anything in DIR.
// mv moves a directory with its tree (recursive), and cp -r copies one.
func (x *extractor) intoDirectory(p *parsedArgs, roles []role, cwds []string) (out []arg, recursive bool) {
	prog := path.Base(p.label)
	switch prog {
	case "cp", "mv", "ln", "install":
	default:
		return nil, false
	}
	if p.lost || p.flags.any("-T", "--no-target-directory") || prog == "install" && p.flags.any("-d", "--directory") {
		return nil, false
	}
	n := len(p.ops)
	if p.argsFrom >= 0 {
		n = p.argsFrom
	}
	dest, ok := p.optValue("-t", "--target-directory")
	sources := p.ops[:n]
	if !ok {
		if n == 1 && prog == "ln" && len(roles) > 0 && roles[0] == roleWrite {
			// ln -s TARGET: the link is ./NAME.
			dest = arg{s: "."}
		} else if n < 2 || len(roles) < n || roles[n-1] != roleWrite && roles[n-1] != roleWriteDir {
			return nil, false
		} else {
			dest, sources = p.ops[n-1], p.ops[:n-1]
		}
	}
	if dest.opaque != "" {
		return nil, false // the operand is opaque already
	}
	names := func(a arg) []string {
		if a.opaque != "" {
			return nil
		}
		var ns []string
		if a.glob && x.fs != nil {
			for _, d := range cwds {
				full := a.s
				if !path.IsAbs(full) {
					full = path.Join(d, full)
				}
				if m, err := x.fs.Glob(path.Clean(full)); err == nil {
					for _, f := range m {
						ns = append(ns, path.Base(f))
					}
				}
			}
		}
		if len(ns) == 0 {
			ns = []string{path.Base(a.s)}
		}
		return slices.DeleteFunc(ns, func(n string) bool { return n == "." || n == ".." || n == "/" })
	}
	// cp -r's DIR/NAME is a tree too (DIR's item holds it already, but a
	// tool's configuration directory written whole is configs.go's).
	recursive = prog == "mv" || prog == "cp" && p.flags.any("-r", "-R", "--recursive", "-a", "--archive")
	for _, a := range sources {
		if a.below {
			// find -exec cp {} DIR: any file below the start point, by
			// its own name: anything in DIR.
			out, recursive = append(out, dest), true
			continue
		}
		for _, name := range names(a) {
			out = append(out, arg{s: path.Join(dest.s, name), glob: dest.glob})
		}
	}
	return out, recursive
}

// optValue returns the value of the last of the named options given (by
// their full names: an abbreviation counts), and whether one was.
func (p *parsedArgs) optValue(names ...string) (a arg, ok bool) {
	for _, v := range p.vals {
		if v.has && slices.Contains(names, v.opt.name) {
			a, ok = v.v, true
		}
	}
	return a, ok
}

// backupOutputs returns the backup files a command writes besides the files
// it replaces (targets): cp, mv, ln and install with -b, --backup or -S
// rename a file they replace to FILE+SUFFIX (-S, else ~; a SUFFIX with a /
// is ~) or FILE.~N~ (--backup=numbered, existing); patch FILE backs FILE up
// (with -b, else when the patch does not match exactly) to FILE.orig or
// FILE+SUFFIX (-z), or PREFIX+DIR/BPREFIX+NAME (-B PREFIX, -Y BPREFIX), and
// writes the hunks it rejects to FILE.rej unless -r names that file (coreutils
// 9.1, GNU patch 2.7.6). patch without FILE writes below the working
// directory, which is written already, and below -B's directory (dirs). The
// environment's SIMPLE_BACKUP_SUFFIX and VERSION_CONTROL are not ordinary
// variables (dangerousNames). ok is false when a name is known only at run
// time.
func backupOutputs(p *parsedArgs, targets []arg) (out, dirs []arg, ok bool) {
	if p.lost {
		return nil, nil, true
	}
	known := func(a arg) bool { return a.opaque == "" }
	numbered := func(v arg, has bool) bool {
		return has && v.s != "simple" && v.s != "never" && v.s != "none" && v.s != "off"
	}
	switch path.Base(p.label) {
	case "cp", "mv", "ln", "install":
		mode, hasMode := p.optValue("--backup")
		suffix, hasSuffix := p.optValue("-S", "--suffix")
		if !p.flags.any("-b", "--backup", "-S", "--suffix") || hasMode && (mode.s == "none" || mode.s == "off") {
			return nil, nil, true
		}
		if hasMode && !known(mode) || hasSuffix && !known(suffix) {
			return nil, nil, false
		}
		s := "~"
		if hasSuffix && suffix.s != "" && !strings.Contains(suffix.s, "/") {
			s = suffix.s
		}
		for _, t := range targets {
			if !known(t) || t.s == "" {
				continue
			}
			out = append(out, arg{s: t.s + s, glob: t.glob})
			if numbered(mode, hasMode) {
				out = append(out, arg{s: t.s + ".~1~", glob: t.glob})
			}
		}
		return out, nil, true
	case "patch":
		if p.flags.any("--dry-run") {
			return nil, nil, true
		}
		prefix, hasPrefix := p.optValue("-B", "--prefix")
		base, hasBase := p.optValue("-Y", "--basename-prefix")
		suffix, hasSuffix := p.optValue("-z", "--suffix")
		mode, hasMode := p.optValue("-V", "--version-control")
		_, hasReject := p.optValue("-r", "--reject-file")
		for _, a := range []arg{prefix, base, suffix, mode} {
			if !known(a) {
				return nil, nil, false
			}
		}
		if len(targets) == 0 {
			// The patch names the files, below the working directory.
			if hasBase && strings.Contains(base.s, "..") {
				return nil, nil, false
			}
			if hasPrefix {
				dirs = append(dirs, arg{s: path.Dir(prefix.s + "x")})
			}
			return nil, dirs, true
		}
		for _, t := range targets {
			if !known(t) || t.s == "" || t.s == "-" {
				continue
			}
			dir, name := "", t.s
			if i := strings.LastIndexByte(t.s, '/'); i >= 0 {
				dir, name = t.s[:i+1], t.s[i+1:]
			}
			switch {
			case hasPrefix || hasBase:
				out = append(out, arg{s: prefix.s + dir + base.s + name, glob: t.glob})
			case hasSuffix && suffix.s != "":
				out = append(out, arg{s: t.s + suffix.s, glob: t.glob})
			default:
				out = append(out, arg{s: t.s + ".orig", glob: t.glob})
			}
			if numbered(mode, hasMode) {
				out = append(out, arg{s: t.s + ".~1~", glob: t.glob})
			}
			if !hasReject {
				out = append(out, arg{s: t.s + ".rej", glob: t.glob})
			}
		}
		return out, nil, true
	}
	return nil, nil, true
}

// gitRepository checks the repository a git command uses. Its config runs
// commands (core.fsmonitor, core.hooksPath, diff.external, core.pager...),
// which is why a policy protects **/.git/config; a repository whose config
// is elsewhere escapes that rule, so git runs what the router cannot see
// (opaque) when it would use one: a --git-dir whose last element is not .git; a .git
// file (gitdir: names any directory) in the working directory or above it,
// below the session's directory; a .git directory other than the one of
// the session's directory or a root (or of a directory above them: a .git
// moved, copied or extracted into place whole brings a config no rule saw
// written); a .git/commondir (config from the
// directory it names); a bare repository (HEAD and config in the directory
// itself); or a .git, a config below the session's directory, a
// .git/commondir or a .git/config.worktree that the same command line
// writes first.
func (x *extractor) gitRepository(p *parsedArgs, cwds []string) {
	if v, ok := p.optValue("--git-dir"); ok {
		if v.opaque != "" || path.Base(path.Clean(v.s)) != ".git" {
			x.opaque(p.label+" --git-dir", fmt.Sprintf("git --git-dir %s: a repository whose config (commands git runs) is not a .git/config", v.s), KindExecute)
		}
		return
	}
	for _, d := range cwds {
		if why := x.gitDiscover(d); why != "" {
			x.opaque(p.label, why, KindExecute)
			return
		}
	}
}

// gitContent records what a git command that prints the content of the
// files it shows (spec key content: log -p, show, diff, archive, cat-file
// -p, grep) reads beyond its operands. A revision (HEAD, a hash, a range,
// main) or none shows every file of a commit, the index or the work tree
// that no pathspec excludes: below the top of the work tree (log, show,
// diff: git 2.39 shows the whole tree from a subdirectory), or below the
// working directory (implicit_cwd: grep, archive). Which files git's
// objects hold the router cannot see; the work tree is what it has, so
// that directory is read recursively: a deny or ask rule applies when a
// file below it matches (a tracked .env), as for git grep and git add -A.
// An operand that follows --, or that names an existing file, is a
// pathspec (git tells them apart by what exists): it limits what is shown
// and was read as an operand. REV:PATH reads PATH only.
func (x *extractor) gitContent(p *parsedArgs, roles []role, cwds []string) {
	rev, named, limited := x.gitOperands(p, roles, cwds, rolePathspec, roleRevPath)
	if limited || named && !rev {
		return
	}
	dirs := cwds
	if !p.spec.implicitCwd {
		dirs = x.gitWorkTrees(p, cwds)
	}
	for _, d := range dirs {
		x.path(d, false, KindRead, true, p.label+" shows the files of", nil)
	}
}

// gitOperands sorts the operands of a git command that may be revisions
// or paths, those with one of the roles given:
// limited when one follows -- or names an existing file (a pathspec,
// as git tells them apart), named when one is REV:PATH, rev when one is
// anything else (HEAD, a hash, a range, a branch).
func (x *extractor) gitOperands(p *parsedArgs, roles []role, cwds []string, these ...role) (rev, named, limited bool) {
	for i, a := range p.ops {
		if i >= len(roles) || a.opaque != "" || !slices.Contains(these, roles[i]) {
			continue
		}
		switch {
		case p.dashdash >= 0 && i >= p.dashdash:
			limited = true
		case strings.Contains(a.s, ":") && !strings.Contains(a.s, "://"):
			named = true
		case !a.glob && x.exists(a.s, cwds):
			limited = true
		default:
			rev = true
		}
	}
	return rev, named, limited
}

// gitWorkTrees returns the top of the work tree the git command works
// on from each of cwds: --work-tree's, else the one git finds.
func (x *extractor) gitWorkTrees(p *parsedArgs, cwds []string) []string {
	v, ok := p.optValue("--work-tree")
	if !ok || v.opaque != "" || v.glob {
		return x.gitTops(cwds)
	}
	var dirs []string
	for _, d := range cwds {
		if path.IsAbs(v.s) {
			d = ""
		}
		dirs = appendNew(dirs, path.Join("/", d, v.s))
	}
	return dirs
}

// gitWorktree records the files a git command writes in the work tree
// without naming them (spec key worktree): checkout or switch to a
// revision, pull, merge, stash pop, cherry-pick, reset --hard replace
// and create any file the other revision has. The top of the work tree
// is written (a file created in it), and every entry below it but .git
// (which git writes itself: its hooks are not among what a checkout
// writes) recursively, so that a deny or ask rule on a file a later
// command runs (a hooks directory core.hooksPath names, such as .husky)
// or on a secret applies when the work tree has one. checkout and
// restore's operands that name a directory (git checkout REV -- .) write
// what is below it too.
func (x *extractor) gitWorktree(p *parsedArgs, roles []role, cwds []string) {
	sp := p.spec
	if !sp.wtAlways && !sp.wtRevision && len(sp.wtFlags) == 0 {
		return
	}
	rev, _, limited := x.gitOperands(p, roles, cwds, roleWrite, roleValue, rolePathspec)
	if sp.wtRevision && limited {
		// checkout REV -- PATHS: the paths only.
		for i, a := range p.ops {
			if i < len(roles) && roles[i] == roleWrite && a.opaque == "" && !a.glob {
				for _, d := range cwds {
					f := a.s
					if !path.IsAbs(f) {
						f = path.Join(d, f)
					}
					if ok, dir := x.statFS(f); ok && dir {
						x.treeWrites(p.label, f)
					}
				}
			}
		}
		return
	}
	if !sp.wtAlways && !(sp.wtRevision && rev) && !p.flags.any(sp.wtFlags...) {
		return
	}
	for _, top := range x.gitWorkTrees(p, cwds) {
		x.path(top, false, KindEdit, false, p.label+" writes a file in", nil)
		x.treeWrites(p.label, top)
	}
}

// treeWrites records a write of everything below dir but its .git.
func (x *extractor) treeWrites(label, dir string) {
	if x.fs == nil {
		x.opaque(label, label+" writes files of "+dir+" the router cannot list", KindEdit)
		return
	}
	entries, err := x.fs.Glob(path.Join(dir, "*"))
	if err != nil {
		x.opaque(label, label+" writes files of "+dir+" the router cannot list", KindEdit)
		return
	}
	for _, e := range entries {
		if path.Base(e) == ".git" {
			continue
		}
		rec := false
		if ok, isDir := x.fs.Stat(e); ok && isDir {
			rec = true
		}
		x.path(e, false, KindEdit, rec, label+" writes what the revision has in", nil)
	}
}

// statFS is x.fs.Stat, false without an FS.
func (x *extractor) statFS(p string) (exists, dir bool) {
	if x.fs == nil {
		return false, false
	}
	return x.fs.Stat(p)
}

// gitTops returns the top of the work tree git finds from each of dirs:
// the nearest directory up with a .git, else the directory itself.
func (x *extractor) gitTops(dirs []string) []string {
	var out []string
	for _, dir := range dirs {
		top := path.Clean(dir)
		for d := top; x.fs != nil && path.IsAbs(d); d = path.Dir(d) {
			if ok, _ := x.fs.Stat(path.Join(d, ".git")); ok {
				top = d
				break
			}
			if d == "/" {
				break
			}
		}
		out = appendNew(out, top)
	}
	return out
}

// gitDiscover walks up from dir as git looks for its repository and says
// why the one it finds is not understood ("" when it is an ordinary .git
// directory, or none is found).
func (x *extractor) gitDiscover(dir string) string {
	trusted := func(d string) bool {
		return d == x.cwd || slices.Contains(x.ev.vars.Roots, d)
	}
	// own: the repository the session's directory or a root is in. A .git
	// directory anywhere else may have been moved, copied, linked or
	// extracted there whole (mv dotgit .git, tar -x), its config never
	// written as a .git/config that deny rules see.
	own := func(d string) bool {
		below := func(r string) bool { return r != "" && (d == "/" || strings.HasPrefix(r+"/", d+"/")) }
		return below(x.cwd) || slices.ContainsFunc(x.ev.vars.Roots, below)
	}
	for d := path.Clean(dir); ; d = path.Dir(d) {
		if x.writesPath(path.Join(d, ".git")) || !trusted(d) && x.writesPath(path.Join(d, "config")) ||
			x.writesPath(path.Join(d, ".git", "commondir")) || x.writesPath(path.Join(d, ".git", "config.worktree")) {
			return fmt.Sprintf("git uses the repository in %s, whose .git, config, .git/commondir or .git/config.worktree this command line writes", d)
		}
		if x.fs != nil {
			if ok, isDir := x.fs.Stat(path.Join(d, ".git")); ok {
				if isDir {
					// .git/commondir names the directory git reads the
					// config from (git 2.39, checked): a main repository
					// has none.
					if c, _ := x.fs.Stat(path.Join(d, ".git", "commondir")); c {
						return fmt.Sprintf("%s/.git/commondir points git at another repository, whose config may run commands", d)
					}
					if !own(d) {
						return fmt.Sprintf("git uses the repository in %s, not the one of the session's directory or roots: its .git may have been moved, copied or extracted there whole, and its config may run commands", d)
					}
					return ""
				}
				if trusted(d) {
					return ""
				}
				return fmt.Sprintf("%s/.git is a file: git uses the repository it names, whose config may run commands", d)
			}
			if path.Base(d) == ".git" {
				return ""
			}
			head, headDir := x.fs.Stat(path.Join(d, "HEAD"))
			conf, confDir := x.fs.Stat(path.Join(d, "config"))
			if head && !headDir && conf && !confDir {
				return fmt.Sprintf("%s is a bare repository: its config may run commands", d)
			}
		}
		if d == "/" || d == "." || !path.IsAbs(d) {
			return ""
		}
	}
}

// writesPath reports whether the evidence so far writes the file p
// (absolute, clean) itself.
func (x *extractor) writesPath(p string) bool {
	for i := range x.ev.Items {
		it := &x.ev.Items[i]
		if it.Type == ItemPath && slices.Contains(it.Kinds, KindEdit) && slices.Contains(it.Forms, p) {
			return true
		}
	}
	return false
}

var (
	jqString    = regexp.MustCompile(`"(\\.|[^"\\])*"`)
	jqComment   = regexp.MustCompile(`#[^\n]*`)
	jqDirective = regexp.MustCompile(`(^|[^A-Za-z0-9_$.])(import|include)([^A-Za-z0-9_]|$)`)
)

// jqLoads reports whether a jq filter has an import or include directive,
// outside its strings and comments: 'import "/home/u/.docker/config" as
// $c' reads that .json file, 'include "x"' runs x.jq (jq 1.6, checked).
func jqLoads(filter string) bool {
	f := jqString.ReplaceAllString(filter, `""`)
	f = jqComment.ReplaceAllString(f, "")
	return jqDirective.MatchString(f)
}

// netrcReads records the credentials file curl -n, --netrc and
// --netrc-optional read without naming it: $HOME/.netrc (curl 7.88,
// checked: the login and password go into an Authorization header that
// -v prints), unless --netrc-file names another, which is read as an
// option's value.
func (x *extractor) netrcReads(p *parsedArgs) {
	if path.Base(p.label) != "curl" || !p.flags.any("-n", "--netrc", "--netrc-optional") {
		return
	}
	if _, ok := p.optValue("--netrc-file"); ok {
		return
	}
	if x.home == "" {
		x.opaque(p.label+" --netrc", "curl --netrc reads $HOME/.netrc, and $HOME is not known", KindRead)
		return
	}
	x.path(x.home+"/.netrc", false, KindRead, false, p.label+" --netrc", nil)
}

// downloadOutputs returns the files curl -O (--remote-name, --remote-name-all)
// and wget without -O write: each named after its URL, the last element of
// the URL's path (curl 7.88: query off, %XX kept; wget 1.21: query kept,
// %XX decoded; every form is evidence), index.html for wget when there is
// none, in --output-dir or -P's directory. ok is false when the server or the run picks the
// name: curl -J, wget --content-disposition, --trust-server-names,
// recursive retrieval (-r, -m, -p), -x's directories, a curl URL glob.
func downloadOutputs(p *parsedArgs) (out []arg, ok bool) {
	var dir arg
	var urls []arg
	var wget bool
	switch path.Base(p.label) {
	case "curl":
		if !p.flags.any("-O", "--remote-name", "--remote-name-all") {
			return nil, true
		}
		if p.flags.any("-J", "--remote-header-name") {
			return nil, false
		}
		dir, _ = p.optValue("--output-dir")
		urls = append(urls, p.ops...)
		for _, v := range p.vals {
			if v.opt.name == "--url" && v.has {
				urls = append(urls, v.v)
			}
		}
	case "wget":
		if _, o := p.optValue("-O", "--output-document"); o || p.flags.any("--spider") {
			return nil, true
		}
		if p.flags.any("-r", "--recursive", "-m", "--mirror", "-p", "--page-requisites", "--content-disposition",
			"--trust-server-names", "-x", "--force-directories") {
			return nil, false
		}
		dir, _ = p.optValue("-P", "--directory-prefix")
		urls, wget = p.ops, true
	default:
		return nil, true
	}
	if dir.opaque != "" {
		return nil, false
	}
	for _, u := range urls {
		if u.opaque != "" {
			return nil, false
		}
		if !wget && !p.flags.any("-g", "--globoff") && strings.ContainsAny(u.s, "[{") {
			return nil, false
		}
		s := u.s
		if i := strings.Index(s, "://"); i >= 0 {
			s = s[i+3:]
		}
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		query := ""
		if i := strings.IndexByte(s, '?'); i >= 0 {
			s, query = s[:i], s[i:]
		}
		name := ""
		if i := strings.IndexByte(s, '/'); i >= 0 {
			name = s[i+1:]
			name = name[strings.LastIndexByte(name, '/')+1:]
		}
		names := []string{name}
		if wget && query != "" {
			names = append(names, name+query) // wget keeps the query: config?x=1
		}
		for _, n := range names {
			if d, err := url.PathUnescape(n); err == nil && d != n {
				names = append(names, d) // wget decodes %XX
			}
		}
		for _, n := range names {
			switch {
			case n == "" && wget:
				n = "index.html"
			case n == "" || n == "." || n == "..":
				continue
			}
			if dir.s != "" {
				n = path.Join(dir.s, n)
			}
			out = append(out, arg{s: n})
		}
	}
	return out, true
}

// recordLinks remembers the links ln (and cp -s, cp -l) makes, and the
// copies of links mv and cp make, so that a
// later command of the same command line that reads or writes through one
// is seen to reach its target: 'ln -s .git/hooks h && cp x h/pre-commit'
// writes .git/hooks/pre-commit, 'ln .git/config c && echo >> c' .git/config.
// The link is LINK, DIR/NAME (into a directory, -t DIR) or ./NAME (one
// operand); relative paths are below each working directory (a symbolic
// link's target was made relative to the working directory already).
func (x *extractor) recordLinks(p *parsedArgs, cwds []string) {
	// moved: mv, and cp copying a symbolic link as a link (-P, -d, -a,
	// -R without -L), make LINK a copy of a source that is a link: LINK
	// leads where the source does.
	moved := false
	switch path.Base(p.label) {
	case "ln":
	case "cp":
		if !p.flags.any("-s", "--symbolic-link", "-l", "--link") {
			if p.flags.any("-L", "--dereference") || !p.flags.any("-P", "--no-dereference", "-d", "-a", "--archive", "-r", "-R", "--recursive") {
				return
			}
			moved = true
		}
	case "mv":
		moved = true
	default:
		return
	}
	if moved && x.fs == nil {
		return
	}
	if p.lost {
		return
	}
	n := len(p.ops)
	if p.argsFrom >= 0 {
		n = p.argsFrom
	}
	type pair struct{ at, to arg }
	var pairs []pair
	if dir, ok := p.optValue("-t", "--target-directory"); ok {
		for _, t := range p.ops[:n] {
			pairs = append(pairs, pair{arg{s: path.Join(dir.s, path.Base(t.s)), opaque: dir.opaque}, t})
		}
	} else if n == 1 {
		pairs = append(pairs, pair{arg{s: path.Base(p.ops[0].s)}, p.ops[0]})
	} else if n > 1 {
		dest := p.ops[n-1]
		for _, t := range p.ops[:n-1] {
			pairs = append(pairs, pair{arg{s: path.Join(dest.s, path.Base(t.s)), opaque: dest.opaque}, t})
			if n == 2 {
				pairs = append(pairs, pair{dest, t})
			}
		}
	}
	abs := func(s, d string) string {
		switch {
		case strings.HasPrefix(s, "~/") && x.home != "":
			return path.Join(x.home, s[2:])
		case path.IsAbs(s):
			return path.Clean(s)
		}
		return path.Join(d, s)
	}
	for _, pr := range pairs {
		if pr.at.opaque != "" || pr.to.opaque != "" || pr.at.glob || pr.to.glob || pr.at.s == "" || pr.to.s == "" {
			continue
		}
		for _, d := range cwds {
			l := link{abs(pr.at.s, d), abs(pr.to.s, d)}
			if moved {
				// Only a source that is itself a link: where it leads.
				r, err := x.fs.Resolve(l.to)
				dir, err2 := x.fs.Resolve(path.Dir(l.to))
				if err != nil || err2 != nil || path.Clean(r) == path.Join(dir, path.Base(l.to)) {
					continue
				}
				l.to = path.Clean(r)
			}
			if l.at != l.to && len(x.links) < 64 {
				x.links = append(x.links, l)
			}
		}
	}
}

// cwdOutputs returns what a command writes in its working directory under
// a name no argument gives: git clone URL without a directory clones into
// the URL's last element (less .git; NAME.git with --bare or --mirror), a
// tree; go build and go test -c without -o, cc/gcc without -o (a.out, or
// FILE.o, .s, .i) and npm pack (NAME-VERSION.tgz) write a file whose name
// comes from the package: the directory itself is the evidence (dir), so
// that a rule on it (.git/hooks/**, .husky/**) sees it.
func cwdOutputs(p *parsedArgs) (tree []arg, dir bool) {
	if p.lost {
		return nil, false
	}
	_, hasO := p.optValue("-o")
	switch p.label {
	case "git clone":
		if len(p.ops) != 1 || p.ops[0].opaque != "" {
			return nil, false
		}
		s := strings.TrimRight(p.ops[0].s, "/")
		s = strings.TrimSuffix(s, "/.git")
		s = strings.TrimRight(s, "/")
		if i := strings.LastIndexAny(s, "/:"); i >= 0 {
			s = s[i+1:]
		}
		s = strings.TrimSuffix(s, ".git")
		if s == "" || s == "." || s == ".." {
			return nil, true
		}
		if p.flags.any("--bare", "--mirror") {
			s += ".git"
		}
		return []arg{{s: s}}, false
	case "go build":
		return nil, !hasO
	case "go test":
		return nil, !hasO && p.flags.any("-c")
	case "npm pack":
		_, dest := p.optValue("--pack-destination")
		return nil, !dest && !p.flags.any("--dry-run")
	}
	if c, ok := compilers[path.Base(p.label)]; ok && c {
		return nil, !hasO && !p.flags.any("-E", "-M", "-MM", "-fsyntax-only", "--help", "--version", "-v", "-dumpversion", "-dumpmachine")
	}
	return nil, false
}

// homeOutputs returns what a command installs in the user's home, as
// paths relative to it, whose first is a directory of programs written
// with its tree: go install writes its programs in GOBIN, by default
// ~/go/bin (go 1.26, checked), cargo install without --root in
// ~/.cargo/bin with its ledger ~/.cargo/.crates.toml and .crates2.json
// (cargo 1.95, checked). Both directories are on the user's PATH: a
// program installed there is one the user runs later, so it is a write
// outside the project, not the project's build. GOBIN, GOPATH and
// CARGO_HOME set on the command line are opaque already; a GOBIN from
// go env -w (the user's go env file) is not seen, and the default is the
// evidence.
func homeOutputs(p *parsedArgs) []string {
	if p.lost {
		return nil
	}
	switch p.label {
	case "go install":
		if !p.flags.any("-n") {
			return []string{"go/bin"}
		}
	case "cargo install":
		if _, root := p.optValue("--root"); !root && !p.flags.any("--list", "-n", "--dry-run", "-h", "--help") {
			return []string{".cargo/bin", ".cargo/.crates.toml", ".cargo/.crates2.json"}
		}
	}
	return nil
}

// compilers are the names of the C compilers' spec (gcc).
var compilers = map[string]bool{"gcc": true, "cc": true, "g++": true, "c++": true, "clang": true, "clang++": true,
	"gcc-12": true, "gcc-13": true, "gcc-14": true, "g++-12": true, "g++-13": true, "g++-14": true}

// recursesByValue reports whether an option's value makes a command
// recursive: grep -d recurse (--directories=recurse, or an abbreviation of
// recurse: GNU grep 3.8, checked) is grep -r. A value known only at run
// time may be recurse.
func recursesByValue(p *parsedArgs) bool {
	switch path.Base(strings.Fields(p.label)[0]) {
	case "grep", "egrep", "fgrep", "zgrep":
		v, ok := p.optValue("-d", "--directories")
		return ok && (v.opaque != "" || v.glob || len(v.s) >= 3 && strings.HasPrefix("recurse", v.s))
	}
	return false
}

// appendNew appends to list each of more it does not hold yet.
func appendNew(list []string, more ...string) []string {
	for _, s := range more {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}
