package extract

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// arg is one argument of a command as the program would receive it.
type arg struct {
	s      string // the value, quotes removed (the source text when opaque)
	glob   bool   // unquoted glob characters: the shell expands it to existing paths
	opaque string // why the value cannot be known before the command runs
	// below: the argument is any file below the path s (find -exec's {}).
	below bool
	// pat is s as a glob pattern (path.Match syntax: what was quoted is
	// escaped) when glob is set; split: the word is an unquoted for-loop
	// variable over a glob, whose file names bash splits into words.
	pat   string
	split bool
}

// cmdCtx is the context of a command line being analysed.
type cmdCtx struct {
	cwds       []string // the directories the command may run in
	cwdUnknown bool     // a cd to a directory only known at run time
	origin     string
	env        []string // variables set for the command
	depth      int      // nesting of shell -c scripts and wrappers
	stdin      *string  // a literal here-document or here-string on stdin
	piped      bool     // stdin is a pipe
	// homeUnknown: HOME may be reassigned, so ~ and $HOME are not the
	// user's home directory.
	homeUnknown bool
	// loopVars: variables of the for loops around the command, each bound
	// to the one word it iterates over (for f in src/*.go).
	loopVars map[string]arg
	// stdinFiles: stdin is a list of files below these directories (the
	// command piped into this one is find DIR or git ls-files), so xargs
	// passes files below them.
	stdinFiles []string
	// envUnknown: a variable set for the command that the router does
	// not understand (assign); the command's arguments are not all known.
	envUnknown string
}

// Nested scripts (bash -c "bash -c ...") and wrappers: past MaxDepth
// levels a command is too deep to allow, but is still analysed so that
// deny and ask rules see everything in it; past MaxNesting, the hard
// bound, the request is refused (issue 14 point 3: limits fail closed).
// maxBraces is the same soft bound on the words of one brace expansion.
const (
	MaxDepth   = 12
	MaxNesting = 64
	maxBraces  = 64
)

// tooDeep records a command nested past MaxDepth; true: past MaxNesting,
// do not analyse it.
func (x *extractor) tooDeep(cx cmdCtx) bool {
	if cx.depth > MaxNesting {
		x.refuse(cx.origin, fmt.Sprintf("commands nested more than %d deep: too deep to decide", MaxNesting), KindExecute)
		return true
	}
	if cx.depth > MaxDepth && !x.deep {
		x.deep = true
		x.opaque(cx.origin, fmt.Sprintf("commands nested more than %d deep: too deep to allow (deny and ask rules saw every level)", MaxDepth), KindExecute)
	}
	return false
}

// script analyses a shell command line.
func (x *extractor) script(src string, cx cmdCtx) {
	if x.full || x.tooDeep(cx) {
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		x.unparsable(src, err, cx)
		return
	}
	// HOME set anywhere (HOME=x, read HOME, export HOME, GNUPGHOME=...: any
	// HOME that is not $HOME or ${HOME}) makes ~ and $HOME unknowable.
	if strings.Count(src, "HOME") != strings.Count(src, "$HOME")+strings.Count(src, "${HOME}") ||
		slices.Contains(cx.env, "HOME") {
		cx.homeUnknown = true
	}
	cx.cwds, cx.cwdUnknown = x.cdClosure(f, cx)
	cx.loopVars = nil // a nested script does not see the outer loop's variables
	loops := x.loopBindings(f, cx)
	vars := x.arithVarsOf(f, cx)
	state := x.shellState(f, vars, cx)
	piped := map[*syntax.Stmt]bool{}
	producer := map[*syntax.Stmt]*syntax.Stmt{}
	calls, seen := 0, 0
	repeated := repeatedCalls(f)
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				piped[n.Y] = true
				producer[n.Y] = n.X
			}
		case *syntax.Stmt:
			x.redirects(n.Redirs, cx)
			if c, ok := n.Cmd.(*syntax.CallExpr); ok {
				seen++
				ccx := cx
				ccx.piped = piped[n]
				ccx.loopVars = loops[c]
				ccx.stdinFiles = nil
				if p := producer[n]; p != nil {
					ccx.stdinFiles = x.listedFiles(p, cx)
				}
				ccx.stdin = literalStdin(n.Redirs)
				if names, unknown := state.at(c.Pos().Offset()); len(names) > 0 {
					ccx.env = append(slices.Clone(cx.env), names...)
					if ccx.envUnknown == "" {
						ccx.envUnknown = unknown
					}
				}
				k, start := len(x.globbed), len(x.ev.Items)
				if repeated[c] {
					x.loopDepth++
				}
				x.call(c, ccx)
				if repeated[c] {
					x.loopDepth--
				}
				for j := k; j < len(x.globbed); j++ {
					if g := &x.globbed[j]; g.end == 0 {
						g.start, g.end = start, len(x.ev.Items)
					}
				}
			}
		case *syntax.CallExpr:
			calls++
		case *syntax.ForClause:
			if it, ok := n.Loop.(*syntax.WordIter); ok && it.Name != nil {
				if why := dangerousEnv(it.Name.Value); why != "" {
					x.opaque(cx.origin, why, KindExecute)
				}
			}
		case *syntax.TestClause:
			x.testOperands(n.X, cx)
			x.arithmTest(n.X, vars, cx)
		case *syntax.ArithmExp:
			x.arithm(n.X, vars, cx)
		case *syntax.ArithmCmd:
			x.arithm(n.X, vars, cx)
		case *syntax.LetClause:
			for _, e := range n.Exprs {
				x.arithm(e, vars, cx)
			}
		case *syntax.CStyleLoop:
			x.arithm(n.Init, vars, cx)
			x.arithm(n.Cond, vars, cx)
			x.arithm(n.Post, vars, cx)
		case *syntax.ParamExp:
			x.arithm(n.Index, vars, cx)
			if n.Slice != nil {
				x.arithm(n.Slice.Offset, vars, cx)
				x.arithm(n.Slice.Length, vars, cx)
			}
		case *syntax.Assign:
			x.arithm(n.Index, vars, cx)
		case *syntax.ArrayElem:
			x.arithm(n.Index, vars, cx)
		}
		return true
	})
	if calls != seen {
		// A simple command outside a statement: a construct this code
		// does not know. Never allow what was not analysed.
		x.opaque(cx.origin, "a shell construct the router does not analyse", KindExecute)
	}
}

// unparsable records a command line that does not parse: opaque, plus a
// best-effort split so that deny rules still see its programs and paths.
func (x *extractor) unparsable(src string, err error, cx cmdCtx) {
	why := "the command line does not parse: " + err.Error()
	x.opaque(cx.origin, why, KindExecute)
	for seg := range strings.FieldsFuncSeq(src, func(r rune) bool { return strings.ContainsRune(";&|()`\n{}<>", r) }) {
		var args []arg
		for _, w := range strings.Fields(seg) {
			w = strings.Trim(w, `'"\$`)
			if w != "" {
				args = append(args, arg{s: w})
			}
		}
		if len(args) == 0 {
			continue
		}
		before := len(x.ev.Items)
		ccx := cx
		ccx.depth = MaxDepth // scripts in a line we could not read are too deep to allow
		x.argv(args, ccx)
		for i := before; i < len(x.ev.Items); i++ {
			it := &x.ev.Items[i]
			if it.Opaque == "" && it.Refused == "" {
				it.Opaque = why
				it.Aux = false
			}
		}
	}
}

// call analyses one simple command.
func (x *extractor) call(c *syntax.CallExpr, cx cmdCtx) {
	env := cx.env
	if len(c.Assigns) > 0 {
		env = slices.Clone(cx.env)
	}
	for _, a := range c.Assigns {
		if why := x.assignOnce(a, cx); why != "" && cx.envUnknown == "" {
			cx.envUnknown = why
		}
		if a.Name != nil {
			env = append(env, a.Name.Value)
		}
	}
	if len(c.Args) == 0 {
		return // assignments only
	}
	args := make([]arg, 0, len(c.Args))
	for _, w := range c.Args {
		args = x.appendWords(args, w, cx)
	}
	if len(args) == 0 {
		return
	}
	cx.env = env
	for _, run := range x.expandGlobs(args, cx) {
		rcx := cx
		rcx.cwds = run.cwds
		x.argv(run.args, rcx)
	}
}

// assign records a variable assignment: a variable that changes which code
// runs makes the line opaque; a value that looks like a path is read.
//
// A proxy variable's value is where connections go (a host). A variable
// the router does not know whose value is more than a plain word (a path,
// a URL, options) may change what the command does in ways its arguments
// do not show: the reason is returned, and the command it is set for is
// not understood.
func (x *extractor) assign(a *syntax.Assign, cx cmdCtx) (unknown string) {
	name := ""
	if a.Name != nil {
		name = a.Name.Value
	}
	special := commandEnv(name) || name == "GOFLAGS" || pathListEnv[name]
	if why := dangerousEnv(name); why != "" && !proxyEnv(name) && (!special || a.Value == nil) {
		x.opaque(cx.origin, why, KindExecute)
	}
	if a.Value == nil {
		return ""
	}
	if special {
		vals := x.words(a.Value, cx)
		if len(vals) != 1 || vals[0].opaque != "" {
			x.opaque(cx.origin, fmt.Sprintf("%s is set to a value known only at run time", name), KindExecute)
			return ""
		}
		x.envValue(name, vals[0].s, cx)
		return ""
	}
	for _, v := range x.words(a.Value, cx) {
		switch {
		case v.opaque != "":
			if proxyEnv(name) {
				x.opaque(cx.origin, "the proxy "+name+" is known only at run time", KindExecute)
			}
		case proxyEnv(name):
			if strings.Contains(v.s, "://") {
				x.url(v.s, "assignment "+name)
			} else if v.s != "" {
				h := v.s
				if at := strings.LastIndexByte(h, '@'); at >= 0 {
					h = h[at+1:]
				}
				h, _, _ = strings.Cut(h, ":")
				x.host(h, "assignment "+name)
			}
		case strings.Contains(v.s, "://") && schemeURL.MatchString(v.s):
			x.url(v.s, "assignment "+name)
		case looksLikePath(v.s):
			x.path(v.s, v.glob, KindRead, false, "assignment", x.cwdsFor(cx), KindEdit)
			if !harmlessEnv[name] && unknown == "" {
				unknown = fmt.Sprintf("%s=%s: the router does not know what reads %s", name, v.s, name)
			}
		case strings.ContainsAny(v.s, " =:@;,") || strings.HasPrefix(v.s, "-"):
			if !harmlessEnv[name] && unknown == "" {
				unknown = fmt.Sprintf("%s=%s: the router does not know what reads %s", name, v.s, name)
			}
		}
	}
	return unknown
}

// dangerousEnv says why setting a variable changes which code a command
// runs ("" for an ordinary variable): PATH picks the program, LD_PRELOAD
// and friends inject code into any program, others name commands or
// options that programs run or load (GIT_SSH_COMMAND, PAGER, CC, GOFLAGS,
// RUSTC_WRAPPER, npm_config_*, ...), or move where they read their
// configuration (HOME, XDG_CONFIG_HOME).
func dangerousEnv(name string) string {
	if harmlessEnv[name] || strings.HasPrefix(name, "LC_") {
		return ""
	}
	up := strings.ToUpper(name)
	why := fmt.Sprintf("setting %s changes which code runs", name)
	if dangerousNames[up] {
		return why
	}
	for _, p := range dangerousPrefixes {
		if strings.HasPrefix(up, p) {
			return why
		}
	}
	for _, suf := range []string{"PAGER", "EDITOR", "_COMMAND", "_CMD", "_WRAPPER", "_RUNNER", "_SHELL", "_PROGRAM",
		"_OPTIONS", "_OPTS", "FLAGS", "_LINKER", "_HOOK", "_HOOKS"} {
		if strings.HasSuffix(up, suf) {
			return why
		}
	}
	return ""
}

// harmlessEnv are variables that only change how a program reports or
// behaves within what its arguments say.
var harmlessEnv = map[string]bool{
	"CI": true, "NODE_ENV": true, "NODE_NO_WARNINGS": true, "RUST_BACKTRACE": true, "RUST_LOG": true,
	"GOOS": true, "GOARCH": true, "CGO_ENABLED": true, "GO111MODULE": true, "GOMAXPROCS": true, "GOGC": true,
	"GODEBUG": true, "GOTRACEBACK": true, "GOAMD64": true, "TZ": true, "LANG": true, "LANGUAGE": true, "TERM": true,
	"NO_COLOR": true, "FORCE_COLOR": true, "CLICOLOR": true, "CLICOLOR_FORCE": true, "COLUMNS": true, "LINES": true,
	"DEBUG": true, "VERBOSE": true, "PORT": true, "PYTHONUNBUFFERED": true, "PYTHONDONTWRITEBYTECODE": true,
	"PYTHONHASHSEED": true, "PYTHONIOENCODING": true, "PYTHONUTF8": true, "GIT_TERMINAL_PROMPT": true,
	"GIT_AUTHOR_NAME": true, "GIT_AUTHOR_EMAIL": true, "GIT_AUTHOR_DATE": true, "GIT_COMMITTER_NAME": true,
	"GIT_COMMITTER_EMAIL": true, "GIT_COMMITTER_DATE": true, "GIT_OPTIONAL_LOCKS": true, "LOG_LEVEL": true,
	"RUST_TEST_THREADS": true, "CARGO_TERM_COLOR": true, "CARGO_INCREMENTAL": true, "npm_config_yes": true,
	"DOCKER_BUILDKIT": true, "TF_IN_AUTOMATION": true, "HUSKY": true, "NO_PROXY": true, "no_proxy": true,
	"GIT_FLUSH": true, "PYTEST_CURRENT_TEST": true, "COVERAGE_CORE": true,
}

// dangerousNames and dangerousPrefixes: variables that make programs run
// or load other code, or read configuration from elsewhere.
var dangerousNames = map[string]bool{
	"PATH": true, "CDPATH": true, "IFS": true, "BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true,
	"PS4": true, "PS0": true, "PS1": true, "PS2": true, "PROMPT_COMMAND": true, "GLOBIGNORE": true, "EXECIGNORE": true,
	"POSIXLY_CORRECT": true, "PERL5OPT": true, "PERL5LIB": true, "PERLLIB": true, "RUBYOPT": true,
	"RUBYLIB": true, "GIT_SSH": true, "SSH_ASKPASS": true, "VISUAL": true, "BROWSER": true, "MANOPT": true,
	"LESSOPEN": true, "LESSCLOSE": true, "LESS": true, "LESSKEY": true, "LESSKEYIN": true, "HOME": true,
	"TMPDIR": true, "CC": true, "CXX": true, "CPP": true, "LD": true, "AR": true, "AS": true, "FC": true, "NM": true,
	"RANLIB": true, "STRIP": true, "OBJCOPY": true, "RUSTC": true, "RUSTDOC": true, "MAKEFILES": true,
	"GOTOOLCHAIN": true, "GOPROXY": true, "GONOSUMDB": true, "GONOSUMCHECK": true, "GOINSECURE": true,
	"GOPRIVATE": true, "GONOPROXY": true, "GOSUMDB": true, "GOROOT": true, "GOPATH": true, "GOBIN": true,
	"GOCACHE": true, "GOMODCACHE": true, "GOENV": true, "GOTMPDIR": true, "GCCGO": true, "GOEXPERIMENT": true,
	"GOWORK": true, "PYTHONPATH": true, "PYTHONHOME": true, "PYTHONSTARTUP": true, "PYTHONUSERBASE": true,
	"PYTHONBREAKPOINT": true, "PYTEST_PLUGINS": true, "CLASSPATH": true, "KUBECONFIG": true, "SSL_CERT_FILE": true,
	"SSL_CERT_DIR": true, "CURL_CA_BUNDLE": true, "CURL_HOME": true, "WGETRC": true, "GCONV_PATH": true,
	"LOCPATH": true, "NLSPATH": true, "HOSTALIASES": true, "LOCALDOMAIN": true, "RES_OPTIONS": true,
	"TERMINFO": true, "TERMINFO_DIRS": true, "INPUTRC": true, "ZDOTDIR": true, "HISTFILE": true, "SHELL": true,
	"NODE_PATH": true, "NODE_EXTRA_CA_CERTS": true, "EDITOR": true, "PAGER": true, "MANPAGER": true,
	"MANPATH": true, "DOCKER_HOST": true, "DOCKER_CONFIG": true, "GNUPGHOME": true, "PKG_CONFIG_PATH": true,
	// The names of the backups cp, mv, ln, install and patch write; patch -g.
	"SIMPLE_BACKUP_SUFFIX": true, "VERSION_CONTROL": true, "PATCH_VERSION_CONTROL": true, "PATCH_GET": true,
}

var dangerousPrefixes = []string{"BASH_", "LD_", "DYLD_", "GIT_", "XDG_", "CGO_", "NODE_", "NPM_CONFIG_", "YARN_", "PNPM_",
	"PIP_", "CARGO_", "RUSTUP_", "GEM_", "BUNDLE_", "PYTHON", "PYTEST_", "JAVA_", "_JAVA_", "JDK_", "MAVEN_",
	"GRADLE_", "BUN_", "DENO_", "UV_", "POETRY_", "VIRTUAL_ENV", "CONDA", "AWS_", "GOOGLE_", "AZURE_", "ELECTRON_"}

// assignString is assign for NAME=VALUE given as one argument (env,
// sudo) or by terminal/create's env: the value is literal.
func (x *extractor) assignString(name, value string, hasValue bool, cx cmdCtx) (unknown string) {
	w := &syntax.Word{Parts: []syntax.WordPart{&syntax.SglQuoted{Value: value}}}
	a := &syntax.Assign{Name: &syntax.Lit{Value: name}}
	if hasValue {
		a.Value = w
	}
	return x.assign(a, cx)
}

// commandEnv: variables whose value is a command line a program runs
// (a pager, an editor, a compiler, ssh for git): the value is analysed as
// a command.
func commandEnv(name string) bool {
	up := strings.ToUpper(name)
	switch up {
	case "VISUAL", "BROWSER", "CC", "CXX", "CPP", "LD", "AR", "AS", "FC", "GIT_SSH", "SSH_ASKPASS", "GIT_ASKPASS",
		"RUSTC", "RUSTDOC":
		return true
	}
	for _, suf := range []string{"PAGER", "EDITOR", "_COMMAND", "_WRAPPER", "_RUNNER"} {
		if strings.HasSuffix(up, suf) {
			return true
		}
	}
	return false
}

// pathListEnv: variables naming directories a program loads code from.
var pathListEnv = map[string]bool{"PYTHONPATH": true, "NODE_PATH": true, "PERL5LIB": true, "PERLLIB": true,
	"RUBYLIB": true, "CLASSPATH": true}

// envValue analyses the value of a command, flags or path-list variable.
func (x *extractor) envValue(name, v string, cx cmdCtx) {
	inner := cx
	inner.depth++
	inner.origin = cx.origin + " (" + name + ")"
	inner.envUnknown = ""
	switch {
	case name == "GOFLAGS":
		// Flags every go command takes: read as go test would.
		args := []arg{{s: "go"}, {s: "test"}}
		for _, f := range strings.Fields(v) {
			args = append(args, arg{s: f})
		}
		x.argv(args, inner)
	case pathListEnv[name]:
		for _, d := range strings.Split(v, ":") {
			if d == "" || path.IsAbs(d) || d == ".." || strings.HasPrefix(d, "../") || strings.Contains(d, "/../") || strings.HasPrefix(d, "~") {
				x.opaque(cx.origin, fmt.Sprintf("%s loads code from %q, outside the working directory", name, d), KindExecute)
				continue
			}
			x.path(d, false, KindRead, true, "assignment "+name, x.cwdsFor(cx))
		}
	default:
		x.sideCommand(name, v, inner)
	}
}

// proxyEnv reports whether a variable names a proxy (HTTPS_PROXY,
// all_proxy, ...): its value is where connections go.
func proxyEnv(name string) bool {
	up := strings.ToUpper(name)
	return strings.HasSuffix(up, "_PROXY") && up != "NO_PROXY"
}

// redirects records the files a statement's redirections read or write.
func (x *extractor) redirects(rs []*syntax.Redirect, cx cmdCtx) {
	for _, r := range rs {
		var kind Kind
		switch r.Op {
		case syntax.RdrIn:
			kind = KindRead
		case syntax.RdrOut, syntax.AppOut, syntax.RdrInOut, syntax.RdrClob, syntax.AppClob,
			syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob:
			kind = KindEdit
		case syntax.DplIn, syntax.DplOut:
			if lit := r.Word.Lit(); lit == "-" || isDigits(lit) {
				continue // duplicating or closing a descriptor
			}
			kind = KindEdit // >&file is &>file
		default:
			continue // here-documents and here-strings are not files
		}
		for _, a := range x.words(r.Word, cx) {
			if a.opaque != "" {
				x.opaque("redirect", "redirect target "+a.opaque, kind)
				continue
			}
			x.path(a.s, a.glob, kind, false, "redirect", x.cwdsFor(cx))
			// bash opens a network connection for /dev/tcp/HOST/PORT.
			for _, dev := range []string{"/dev/tcp/", "/dev/udp/"} {
				if rest, ok := strings.CutPrefix(path.Clean(a.s), dev); ok {
					host, _, _ := strings.Cut(rest, "/")
					x.host(host, "redirect to "+dev)
				}
			}
		}
	}
}

// literalStdin returns the text of a here-document or here-string on stdin
// when it has no expansions.
func literalStdin(rs []*syntax.Redirect) *string {
	var text *string
	for _, r := range rs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			if r.Hdoc == nil {
				s := ""
				text = &s
				continue
			}
			if s, ok := PlainText(r.Hdoc); ok {
				text = &s
			} else {
				text = nil
			}
		case syntax.WordHdoc:
			if s, ok := PlainText(r.Word); ok {
				s += "\n"
				text = &s
			} else {
				text = nil
			}
		case syntax.RdrIn, syntax.DplIn, syntax.RdrInOut:
			text = nil
		}
	}
	return text
}

// PlainText returns a word's text when it has no expansions.
func PlainText(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescapeDouble(l.Value))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// testOperands records the words of a [[ ... ]] test that look like paths.
func (x *extractor) testOperands(e syntax.TestExpr, cx cmdCtx) {
	switch e := e.(type) {
	case *syntax.BinaryTest:
		x.testOperands(e.X, cx)
		x.testOperands(e.Y, cx)
	case *syntax.UnaryTest:
		x.testOperands(e.X, cx)
	case *syntax.ParenTest:
		x.testOperands(e.X, cx)
	case *syntax.Word:
		for _, a := range x.words(e, cx) {
			if a.opaque == "" && looksLikePath(a.s) {
				x.path(a.s, a.glob, KindRead, false, "test", x.cwdsFor(cx))
			}
		}
	}
}

// cwdsFor returns the directories relative paths of a command are
// relative to; nil with an opaque item when a cd made them unknowable.
func (x *extractor) cwdsFor(cx cmdCtx) []string {
	if cx.cwdUnknown {
		x.opaque(cx.origin, "a cd to a directory known only at run time: relative paths cannot be resolved", KindExecute)
	}
	if len(cx.cwds) == 0 {
		return []string{}
	}
	return cx.cwds
}

// cdClosure returns every directory commands of f may run in: the
// starting ones and every sequence of the cd and pushd targets in f, each
// applied at most once (order-free, so the order of statements cannot hide
// a cd), and whether some directory is only known at run time (a target
// computed at run time, cd -, or a relative cd inside a loop or function,
// which may repeat).
func (x *extractor) cdClosure(f *syntax.File, cx cmdCtx) ([]string, bool) {
	type target struct {
		dir      string
		repeated bool
	}
	var targets []target
	unknown := cx.cwdUnknown
	repeats := map[*syntax.CallExpr]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.ForClause, *syntax.WhileClause, *syntax.FuncDecl:
			syntax.Walk(n, func(m syntax.Node) bool {
				if c, ok := m.(*syntax.CallExpr); ok {
					repeats[c] = true
				}
				return true
			})
		case *syntax.CallExpr:
			for _, a := range n.Assigns {
				if a.Name != nil && cwdVars[a.Name.Value] {
					unknown = true // PWD, OLDPWD, DIRSTACK, CDPATH: where cd, pushd, popd go
				}
			}
			if len(n.Args) == 0 || !mayChangeDir(n.Args[0]) {
				return true
			}
			var args []arg
			for _, w := range n.Args {
				args = x.appendWords(args, w, cx)
			}
			dir, ok, unk := x.cdTarget(args, cx)
			if unk {
				unknown = true
			} else if ok {
				targets = append(targets, target{dir, repeats[n]})
			}
		case *syntax.DeclClause:
			for _, a := range n.Args {
				if a.Name != nil && cwdVars[a.Name.Value] {
					unknown = true
				}
			}
		}
		return true
	})
	if len(targets) == 0 {
		return cx.cwds, unknown
	}
	if len(targets) > 8 {
		return cx.cwds, true
	}
	type state struct {
		dir  string
		used uint16
	}
	dirs := slices.Clone(cx.cwds)
	queue := make([]state, 0, len(dirs))
	for _, d := range dirs {
		queue = append(queue, state{d, 0})
	}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		for i, t := range targets {
			if st.used&(1<<i) != 0 {
				continue
			}
			if t.repeated && !path.IsAbs(t.dir) {
				unknown = true // cd .. in a loop: any depth
				continue
			}
			raw := t.dir
			if !path.IsAbs(raw) {
				raw = st.dir + "/" + raw
			}
			// The shell applies .. to its logical directory (cd -L), the
			// kernel and cd -P after resolving the symlinks before it; a
			// shell started in a symlinked directory may not know the
			// logical one. Both are candidates.
			for _, n := range x.logicalPhysical(raw) {
				if !slices.Contains(dirs, n) {
					if len(dirs) >= 16 {
						return dirs, true
					}
					dirs = append(dirs, n)
				}
				queue = append(queue, state{n, st.used | 1<<i})
			}
		}
	}
	return dirs, unknown
}

// logicalPhysical returns the directory raw (absolute, maybe with . and
// ..) names as the shell's logical cd sees it (cleaned) and, when the
// symlinks before a .. make it another one, as the kernel does.
func (x *extractor) logicalPhysical(raw string) []string {
	c := path.Clean(raw)
	if x.fs == nil || !strings.Contains(raw, "..") {
		return []string{c}
	}
	r, err := x.fs.Resolve(raw)
	if err != nil {
		return []string{c}
	}
	if rc, err := x.fs.Resolve(c); err == nil && path.Clean(r) != path.Clean(rc) {
		return []string{c, path.Clean(r)}
	}
	return []string{c}
}

// mayChangeDir is a cheap test of a command's first word: can it be cd,
// pushd, popd, a prefix before them, a shell option that turns on autocd,
// or a directory (autocd)? A quoted or escaped word is looked at closer.
func mayChangeDir(w *syntax.Word) bool {
	if len(w.Parts) != 1 {
		return true
	}
	l, ok := w.Parts[0].(*syntax.Lit)
	if !ok {
		_, ok := w.Parts[0].(*syntax.ParamExp)
		return !ok // "cd", 'cd', $'cd'; a lone $X is opaque anyway
	}
	switch v := l.Value; v {
	case "cd", "pushd", "popd", "builtin", "command", "shopt", "setopt", "set", ".", "..":
		return true
	default:
		return strings.ContainsAny(v, `\/~`)
	}
}

// cwdVars are the variables that change where cd, pushd and popd go.
var cwdVars = map[string]bool{"PWD": true, "OLDPWD": true, "DIRSTACK": true, "CDPATH": true}

// cdTarget reads one command that may change the directory of the
// commands after it (cd, pushd, popd, builtin and command before them,
// autocd): the directory it goes to (ok), or unknown when that is only
// known at run time. popd and pushd without a directory go back to one
// the script was in before, which the closure has anyway.
func (x *extractor) cdTarget(args []arg, cx cmdCtx) (dir string, ok, unknown bool) {
	for len(args) > 0 && args[0].opaque == "" && (args[0].s == "builtin" || args[0].s == "command") {
		builtin := args[0].s == "builtin"
		args = args[1:]
		// command -p runs the builtin too; command -v/-V only print.
		for !builtin && len(args) > 0 && args[0].opaque == "" && strings.HasPrefix(args[0].s, "-") && len(args[0].s) > 1 {
			if strings.ContainsAny(args[0].s, "vV") {
				return "", false, false
			}
			if args[0].s == "--" {
				args = args[1:]
				break
			}
			args = args[1:]
		}
	}
	if len(args) == 0 || args[0].opaque != "" {
		return "", false, false
	}
	name := args[0].s
	switch name {
	case "cd", "pushd", "popd":
	case "shopt", "setopt", "set":
		// autocd (bash shopt -s autocd, zsh setopt auto_cd, set -o
		// autocd): a command that names a directory changes into it.
		for _, a := range args[1:] {
			if a.opaque != "" || autocdOption(a.s) {
				return "", false, true
			}
		}
		return "", false, false
	default:
		// A directory as a command: bash's autocd and zsh's AUTO_CD cd
		// into it. Followed when it has the shape of a directory or is
		// one (executing a directory otherwise only fails).
		if args[0].glob || len(args) > 1 {
			return "", false, false
		}
		if name == "." || name == ".." || strings.HasSuffix(name, "/") ||
			(strings.Contains(name, "/") || strings.HasPrefix(name, "~")) && x.isDir(name, cx.cwds) {
			return name, true, false
		}
		return "", false, false
	}
	var ops []arg
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a.opaque != "":
			ops = append(ops, a)
		case a.s == "--":
			ops = append(ops, args[i+1:]...)
			i = len(args)
		case len(a.s) > 1 && a.s[0] == '-' && !isDigits(a.s[1:]) || len(a.s) > 1 && a.s[0] == '+':
			for _, c := range a.s[1:] {
				switch {
				case name == "cd" && strings.ContainsRune("LPe@", c):
					// -P: the physical directory, which the closure has too.
				case name != "cd" && c == 'n' && a.s[0] == '-':
					// pushd -n / popd -n: only the stack changes.
				default:
					return "", false, true // an option the router does not know
				}
			}
			if name != "cd" && strings.Contains(a.s, "n") {
				return "", false, false
			}
		default:
			ops = append(ops, a)
		}
	}
	switch {
	case len(ops) > 1:
		return "", false, true // zsh cd OLD NEW substitutes in $PWD; pushd/popd +N -N
	case name == "popd" && len(ops) == 0, name == "pushd" && len(ops) == 0:
		return "", false, false // back to a directory visited before
	case name == "popd":
		return "", false, true // popd +N / -N: an entry of the stack (or an error)
	case len(ops) == 0 && (x.home == "" || cx.homeUnknown):
		return "", false, true
	case len(ops) == 0:
		return x.home, true, false
	}
	t := ops[0]
	if t.opaque != "" || t.s == "-" || t.glob || t.s == "" {
		return "", false, true
	}
	if name == "pushd" && len(t.s) > 1 && (t.s[0] == '+' || t.s[0] == '-') && isDigits(t.s[1:]) {
		return "", false, true // pushd +N / -N rotates the stack
	}
	return t.s, true, false
}

// autocdOption reports whether a shopt/setopt/set argument turns on
// autocd (AUTO_CD, auto_cd, autocd in any case).
func autocdOption(s string) bool {
	if len(s) > 1 && (s[0] == '-' || s[0] == '+') && s[1] != '-' && strings.ContainsRune(s[1:], 'J') {
		return true // zsh's single-letter AUTO_CD
	}
	s = strings.ToLower(strings.ReplaceAll(s, "_", ""))
	return s == "autocd"
}

// isDir reports whether p names an existing directory relative to one of
// the directories (or absolutely, or under ~).
func (x *extractor) isDir(p string, cwds []string) bool {
	if x.fs == nil {
		return false
	}
	if strings.HasPrefix(p, "~") {
		if x.home == "" || (p != "~" && !strings.HasPrefix(p, "~/")) {
			return false
		}
		p = x.home + p[1:]
	}
	if path.IsAbs(p) {
		cwds = []string{"/"}
	}
	for _, d := range cwds {
		if ok, dir := x.fs.Stat(path.Join(d, p)); ok && dir {
			return true
		}
	}
	return false
}

// words returns the arguments a word becomes: brace expansion, quote
// removal, tilde expansion. Expansions the router cannot evaluate give an
// opaque argument; unquoted glob characters are flagged.
func (x *extractor) words(w *syntax.Word, cx cmdCtx) []arg {
	return x.appendWords(nil, w, cx)
}

// appendWords appends the arguments of w to dst.
func (x *extractor) appendWords(dst []arg, w *syntax.Word, cx cmdCtx) []arg {
	if len(w.Parts) == 1 {
		if l, ok := w.Parts[0].(*syntax.Lit); ok && !strings.ContainsAny(l.Value, "\\*?[~{") {
			return append(dst, arg{s: l.Value}) // the common case: a plain word
		}
	}
	// SplitBraces rewrites the word it is given; the tree must stay as
	// parsed (syntax.Walk panics on a BraceExp), so it gets a copy.
	if w2 := (&syntax.Word{Parts: w.Parts}); syntax.SplitBraces(w2) {
		// Issue 14 point 3: past maxBraces words the command is too large
		// to allow, but every word is still evidence for deny and ask
		// rules; past maxEvidence the request is refused.
		words, large := braceExpand(w2.Parts, maxBraces)
		if words == nil && !large {
			return append(dst, arg{s: WordSource(w), opaque: "a brace sequence the router does not expand"})
		}
		if large {
			if words, _ = braceExpand(w2.Parts, maxEvidence); words == nil {
				x.refuse(cx.origin, fmt.Sprintf("a brace expansion of more than %d words: too large to decide", maxEvidence), KindExecute)
				return append(dst, arg{s: WordSource(w), opaque: "a brace expansion too large to check"})
			}
		}
		for _, parts := range words {
			dst = append(dst, x.lit(parts, cx))
		}
		if large {
			dst = append(dst, arg{s: WordSource(w), opaque: fmt.Sprintf("a brace expansion of more than %d words: too large to allow", maxBraces)})
		}
		return dst
	}
	return append(dst, x.lit(w.Parts, cx))
}

// braceExpand expands the brace expressions in parts into at most limit
// part lists. nil means they cannot be expanded: large says whether
// because there would be more than limit (else a sequence is invalid).
func braceExpand(parts []syntax.WordPart, limit int) (out [][]syntax.WordPart, large bool) {
	out = [][]syntax.WordPart{nil}
	for _, p := range parts {
		be, ok := p.(*syntax.BraceExp)
		if !ok {
			for i := range out {
				out[i] = append(out[i], p)
			}
			continue
		}
		var alts [][]syntax.WordPart
		if be.Sequence {
			seq, large := braceSequence(be, limit)
			if seq == nil {
				return nil, large
			}
			for _, s := range seq {
				alts = append(alts, []syntax.WordPart{&syntax.Lit{Value: s}})
			}
		} else {
			for _, e := range be.Elems {
				sub, large := braceExpand(e.Parts, limit)
				if sub == nil {
					return nil, large
				}
				alts = append(alts, sub...)
				if len(alts) > limit {
					return nil, true
				}
			}
		}
		if len(out)*len(alts) > limit {
			return nil, true
		}
		var next [][]syntax.WordPart
		for _, o := range out {
			for _, a := range alts {
				next = append(next, append(slices.Clip(o), a...))
			}
		}
		out = next
	}
	return out, false
}

// braceSequence expands {x..y[..incr]} of numbers or single letters; nil
// when it is invalid or (large) has more than limit words.
func braceSequence(be *syntax.BraceExp, limit int) (seq []string, large bool) {
	if len(be.Elems) < 2 {
		return nil, false
	}
	from, to := be.Elems[0].Lit(), be.Elems[1].Lit()
	incr := 1
	if len(be.Elems) > 2 {
		n, err := strconv.Atoi(be.Elems[2].Lit())
		if err != nil {
			return nil, false
		}
		incr = max(n, -n, 1)
	}
	a, errA := strconv.Atoi(from)
	b, errB := strconv.Atoi(to)
	letters := false
	if errA != nil || errB != nil {
		if len(from) != 1 || len(to) != 1 {
			return nil, false
		}
		a, b, letters = int(from[0]), int(to[0]), true
	}
	// Bounded before subtracting: b-a must not overflow.
	const bound = 1 << 40
	if a > bound || a < -bound || b > bound || b < -bound || (b-a)/incr > limit || (a-b)/incr > limit {
		return nil, true
	}
	var out []string
	step := incr
	if b < a {
		step = -incr
	}
	for i := a; (step > 0 && i <= b) || (step < 0 && i >= b); i += step {
		if letters {
			out = append(out, string(rune(i)))
		} else {
			out = append(out, strconv.Itoa(i))
		}
	}
	return out, true
}

// lit turns word parts into the argument the program would receive.
func (x *extractor) lit(parts []syntax.WordPart, cx cmdCtx) arg {
	var a arg
	var b strings.Builder
	var pb strings.Builder // the word as a glob pattern
	for i, part := range parts {
		switch p := part.(type) {
		case *syntax.Lit:
			v := p.Value
			if i == 0 && strings.HasPrefix(v, "~") {
				user, rest, _ := strings.Cut(v, "/")
				if len(parts) > 1 && !strings.Contains(v, "/") {
					// ~"/x": a quoted character in the tilde-prefix
					// leaves it unexpanded.
					b.WriteString(v)
					continue
				}
				switch user {
				case "~":
					if x.home == "" || cx.homeUnknown {
						return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "~ without a home directory"}
					}
					b.WriteString(x.home)
					pb.WriteString(globEscape(x.home))
				case "~+":
					if len(cx.cwds) != 1 || cx.cwdUnknown {
						return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "~+ after a cd"}
					}
					b.WriteString(cx.cwds[0])
					pb.WriteString(globEscape(cx.cwds[0]))
				default:
					return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: fmt.Sprintf("%s is another user's home directory", user)}
				}
				if strings.Contains(v, "/") {
					b.WriteString("/")
					pb.WriteString("/")
				}
				v = rest
			}
			s, glob := unescapeUnquoted(v)
			b.WriteString(s)
			pb.WriteString(globPattern(v))
			a.glob = a.glob || glob
		case *syntax.SglQuoted:
			if p.Dollar {
				s, ok := ansiC(p.Value)
				if !ok {
					return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "an escape sequence the router does not decode"}
				}
				b.WriteString(s)
				pb.WriteString(globEscape(s))
			} else {
				b.WriteString(p.Value)
				pb.WriteString(globEscape(p.Value))
			}
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				switch q := q.(type) {
				case *syntax.Lit:
					b.WriteString(unescapeDouble(q.Value))
					pb.WriteString(globEscape(unescapeDouble(q.Value)))
				case *syntax.ParamExp:
					v, ok := x.param(q, cx)
					if !ok {
						return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "depends on a variable"}
					}
					if lv := cx.loopVars[q.Param.Value]; q.Param != nil && lv.glob {
						if len(parts) > 1 || len(p.Parts) > 1 {
							if why := x.loopNamesInWord(lv, cx); why != "" {
								return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: why}
							}
						}
						a.glob = true // a file the loop's glob matched
						pb.WriteString(lv.pat)
					} else {
						pb.WriteString(globEscape(v))
					}
					b.WriteString(v)
				case *syntax.ArithmExp:
					if len(parts) > 1 || len(p.Parts) > 1 {
						return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "depends on arithmetic"}
					}
					b.WriteString("0")
					pb.WriteString("0")
				default:
					return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "depends on a command substitution"}
				}
			}
		case *syntax.ParamExp:
			v, ok := x.param(p, cx)
			if !ok {
				return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "depends on a variable"}
			}
			if lv := cx.loopVars[p.Param.Value]; p.Param != nil && lv.glob {
				if len(parts) > 1 {
					if why := x.loopNamesInWord(lv, cx); why != "" {
						return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: why}
					}
				}
				// Unquoted: each file name is split into words too.
				a.glob, a.split = true, true
				pb.WriteString(lv.pat)
			} else {
				pb.WriteString(globEscape(v))
			}
			b.WriteString(v)
		case *syntax.ArithmExp:
			if len(parts) > 1 {
				return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "depends on arithmetic"}
			}
			b.WriteString("0")
			pb.WriteString("0")
		case *syntax.CmdSubst:
			return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "depends on a command substitution"}
		case *syntax.ProcSubst:
			// <(cmd) passes a pipe (/dev/fd/N); cmd itself is analysed
			// where the walk reaches it.
			b.WriteString("/dev/fd/63")
			pb.WriteString("/dev/fd/63")
		case *syntax.ExtGlob:
			// Extended globs (@(a|b), !(x)) need shopt extglob; their
			// matches are not worth guessing.
			return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "is an extended glob"}
		default:
			return arg{s: WordSource(&syntax.Word{Parts: parts}), opaque: "a word the router does not analyse"}
		}
	}
	a.s = b.String()
	if a.glob {
		a.pat = pb.String()
	}
	return a
}

// globEscape escapes the glob characters of s for path.Match.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// param returns the value of the few parameter expansions the router can
// know: $HOME (unless the command line may set HOME) and the special
// parameters that expand to a number ($?, $#, $$, $!; their value does not
// matter to a policy).
func (x *extractor) param(p *syntax.ParamExp, cx cmdCtx) (string, bool) {
	if p.Param == nil || p.Excl || p.Length || p.Width || p.IsSet || p.Index != nil || p.Slice != nil ||
		p.Repl != nil || p.Names != 0 || p.Exp != nil || p.NestedParam != nil || p.Flags != nil {
		return "", false
	}
	if v, ok := cx.loopVars[p.Param.Value]; ok {
		return v.s, true
	}
	switch p.Param.Value {
	case "?", "#", "$", "!":
		return "0", true
	case "HOME":
		if x.home != "" && !cx.homeUnknown {
			return x.home, true
		}
	}
	return "", false
}

// maxWordSource bounds the words WordSource prints.
const maxWordSource = 4096

// WordSource prints a word back as shell source (for display).
func WordSource(w *syntax.Word) string {
	// Printing every level of $(echo $(echo ...)) would take time
	// quadratic in the nesting: a long word is named by its size.
	if p, e := w.Pos(), w.End(); p.IsValid() && e.IsValid() && e.Offset() > p.Offset()+maxWordSource {
		return fmt.Sprintf("(a word of %d bytes)", e.Offset()-p.Offset())
	}
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, w); err != nil {
		return "?"
	}
	return b.String()
}

// unescapeUnquoted removes the backslashes of an unquoted literal (\rm is
// rm) and reports unescaped glob characters.
func unescapeUnquoted(v string) (string, bool) {
	if !strings.ContainsAny(v, `\*?[`) {
		return v, false
	}
	var b strings.Builder
	glob := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\' && i+1 < len(v):
			i++
			if v[i] != '\n' {
				b.WriteByte(v[i])
			}
			continue
		case c == '*' || c == '?':
			glob = true
		case c == '[' && strings.IndexByte(v[i+1:], ']') >= 0:
			glob = true
		}
		b.WriteByte(c)
	}
	return b.String(), glob
}

// unescapeDouble removes the backslashes that are special inside double
// quotes (before $ ` " \ and newline).
func unescapeDouble(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) && strings.IndexByte("$`\"\\\n", v[i+1]) >= 0 {
			i++
			if v[i] == '\n' {
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// ansiC decodes the body of a $'...' string.
func ansiC(v string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' || i+1 == len(v) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := v[i]; e {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '\'', '"', '?':
			b.WriteByte(e)
		case 'x', 'u', 'U', '0', '1', '2', '3', '4', '5', '6', '7':
			base, maxLen := 16, map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			start := i + 1
			if maxLen == 0 {
				base, maxLen, start = 8, 3, i
			}
			j := start
			for j < len(v) && j-start < maxLen && isDigitIn(v[j], base) {
				j++
			}
			if j == start {
				return "", false
			}
			n, err := strconv.ParseUint(v[start:j], base, 32)
			if err != nil {
				return "", false
			}
			if e == 'u' || e == 'U' {
				if !utf8.ValidRune(rune(n)) {
					return "", false
				}
				b.WriteRune(rune(n))
			} else {
				b.WriteByte(byte(n))
			}
			i = j - 1
		case 'c':
			if i+1 == len(v) {
				return "", false
			}
			i++
			b.WriteByte(v[i] & 0x1f)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), true
}

func isDigitIn(c byte, base int) bool {
	switch {
	case '0' <= c && c <= '7':
		return true
	case c == '8' || c == '9':
		return base == 16
	case 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		return base == 16
	}
	return false
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// looksLikePath reports whether an argument is a path by its shape: it
// contains a /, or starts with . or ~.
func looksLikePath(s string) bool {
	return s != "" && (strings.Contains(s, "/") || s[0] == '.' || s[0] == '~')
}

var urlPattern = regexp.MustCompile(`(?i)\b(?:https?|ftps?|wss?)://[^\s"'<>` + "`" + `]+`)

// urlsIn returns the http(s), ftp(s) and ws(s) URLs in a text.
func urlsIn(s string) []string {
	if !strings.Contains(s, "://") {
		return nil
	}
	return urlPattern.FindAllString(s, 16)
}

// schemeURL matches an argument that is a URL.
var schemeURL = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// scpLike matches user@host:path (ssh, scp, rsync and git remotes).
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@([A-Za-z0-9.\-\[\]:]+?):`)

// url records the host of a URL as a domain item (a file: URL is a path).
func (x *extractor) url(raw, origin string) {
	u, err := url.Parse(raw)
	if err != nil || strings.ContainsAny(raw, `\`) {
		x.add(Item{Type: ItemDomain, Domain: strings.ToLower(raw), DomainInvalid: true, Origin: origin}, KindFetch)
		return
	}
	if strings.EqualFold(u.Scheme, "file") {
		if path.IsAbs(u.Path) {
			x.path(u.Path, false, KindRead, false, origin, nil)
		}
		return
	}
	x.host(u.Hostname(), origin)
}

// host records a host name as a domain item.
func (x *extractor) host(h, origin string) {
	if h == "" {
		return
	}
	d, ok := NormDomain(h)
	x.add(Item{Type: ItemDomain, Domain: d, DomainInvalid: !ok, Origin: origin}, KindFetch)
}

// listedFiles returns the directories below which the command of s lists
// files, one per line (find DIR with tests only, git ls-files), or nil when
// it is not such a command or prints anything else.
func (x *extractor) listedFiles(s *syntax.Stmt, cx cmdCtx) []string {
	c, ok := s.Cmd.(*syntax.CallExpr)
	if !ok || len(c.Args) == 0 || len(c.Assigns) > 0 || len(s.Redirs) > 0 {
		return nil
	}
	var args []arg
	for _, w := range c.Args {
		if _, lit := PlainText(w); !lit {
			return nil
		}
		args = x.appendWords(args, w, cx)
	}
	for _, a := range args {
		if a.opaque != "" || a.glob {
			return nil
		}
	}
	switch ProgramName(args[0].s) {
	case "find":
		var starts []string
		i := 1
		for ; i < len(args) && !isFindExpr(args[i].s); i++ {
			starts = append(starts, args[i].s)
		}
		for _, a := range args[i:] {
			switch a.s {
			case "-name", "-iname", "-type", "-path", "-ipath", "-maxdepth", "-mindepth", "-not", "!", "-o", "-a",
				"-or", "-and", "(", ")", "-print", "-newer", "-mtime", "-mmin", "-size", "-empty":
			default:
				if strings.HasPrefix(a.s, "-") {
					return nil // -exec, -printf, -delete, ...: prints or does more
				}
			}
		}
		if len(starts) == 0 {
			starts = []string{"."}
		}
		return starts
	case "git":
		if len(args) >= 2 && args[1].s == "ls-files" {
			for _, a := range args[2:] {
				if strings.HasPrefix(a.s, "-") && a.s != "--" && a.s != "-c" && a.s != "--cached" && a.s != "-m" && a.s != "--modified" {
					return nil
				}
			}
			return []string{"."}
		}
	}
	return nil
}

// loopBindings binds the variable of each for loop that iterates over one
// word (a literal or a glob: for f in src/*.go) for the commands in its
// body, unless the body assigns the variable (read, f=..., a nested for)
// or the loop is nested in a way that rebinds it. $f in such a command is
// any file the glob matches.
func (x *extractor) loopBindings(f *syntax.File, cx cmdCtx) map[*syntax.CallExpr]map[string]arg {
	var out map[*syntax.CallExpr]map[string]arg
	syntax.Walk(f, func(n syntax.Node) bool {
		fc, ok := n.(*syntax.ForClause)
		if !ok {
			return true
		}
		it, ok := fc.Loop.(*syntax.WordIter)
		if !ok || it.Name == nil || len(it.Items) != 1 || dangerousEnv(it.Name.Value) != "" {
			return true
		}
		vals := x.words(it.Items[0], cx)
		if len(vals) != 1 || vals[0].opaque != "" {
			return true
		}
		name := it.Name.Value
		assigned := false
		var calls []*syntax.CallExpr
		for _, st := range fc.Do {
			syntax.Walk(st, func(m syntax.Node) bool {
				switch m := m.(type) {
				case *syntax.Assign:
					if m.Name != nil && m.Name.Value == name {
						assigned = true
					}
				case *syntax.ForClause:
					if wi, ok := m.Loop.(*syntax.WordIter); ok && wi.Name != nil && wi.Name.Value == name {
						assigned = true
					}
				case *syntax.CallExpr:
					if len(m.Args) > 0 {
						if w, ok := PlainText(m.Args[0]); ok && (w == "read" || w == "mapfile" || w == "readarray" || w == "getopts" || w == "declare" || w == "local" || w == "typeset" || w == "printf") {
							assigned = true
						}
					}
					calls = append(calls, m)
				}
				return true
			})
		}
		if assigned {
			return true
		}
		if out == nil {
			out = map[*syntax.CallExpr]map[string]arg{}
		}
		for _, c := range calls {
			if out[c] == nil {
				out[c] = map[string]arg{}
			}
			out[c][name] = vals[0]
		}
		return true
	})
	return out
}

// loopNamesInWord says why a loop variable over a glob cannot stand for
// its pattern inside a larger word ("" if it can). The walk reads such a
// word as one glob, which is right for a path ("src/$f", "$f.bak") but
// not for text a program parses (awk "BEGIN { print \"$f\" }", sed
// "s|x|$f|"): there a name holding a quote, | or ; is code. Names of
// letters, digits and ._+-@%,:/ change no such text.
func (x *extractor) loopNamesInWord(lv arg, cx cmdCtx) string {
	if x.fs == nil || cx.cwdUnknown || len(cx.cwds) == 0 {
		return "a file name of a loop's glob inside a larger word"
	}
	for _, cwd := range cx.cwds {
		words, why := x.globWords(lv.pat, cwd)
		if why != "" {
			return why
		}
		for _, w := range words {
			for i := 0; i < len(w); i++ {
				c := w[i]
				if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._+-@%,:/", c) >= 0 {
					continue
				}
				return fmt.Sprintf("the file name %q of a loop's glob is inside a larger word, where a program may read it as code", w)
			}
		}
	}
	return ""
}

// repeatedCalls returns the commands of f that a loop or a function may
// run more than once: what a later command writes, a repeated one may
// list on its next pass.
func repeatedCalls(f *syntax.File) map[*syntax.CallExpr]bool {
	repeats := map[*syntax.CallExpr]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n.(type) {
		case *syntax.ForClause, *syntax.WhileClause, *syntax.FuncDecl:
			syntax.Walk(n, func(m syntax.Node) bool {
				if c, ok := m.(*syntax.CallExpr); ok {
					repeats[c] = true
				}
				return true
			})
			return false
		}
		return true
	})
	return repeats
}
