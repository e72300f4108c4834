package policy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/acp-router/acp-router/policy/extract"
)

// textPattern is a glob over a whole string (agent, mode, program, title,
// command token, environment variable name): * is any run of characters
// (including /), ? one character, [...] a class ([!...] negated), {a,b}
// alternatives, \x a literal x. A title may instead be "re:REGEXP" (RE2,
// unanchored).
type textPattern struct {
	src   string
	exact bool   // no meta: compare with lit
	lit   string // the literal, unescaped
	re    *regexp.Regexp
}

func compileText(s string) (textPattern, error) {
	if !strings.ContainsAny(s, `*?[{\`) {
		return textPattern{src: s, exact: true, lit: s}, nil
	}
	expr, err := globRegexp(s)
	if err != nil {
		return textPattern{}, err
	}
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return textPattern{}, fmt.Errorf("invalid glob %q", s)
	}
	if lit, ok := unescapeGlob(s); ok {
		return textPattern{src: s, exact: true, lit: lit}, nil
	}
	return textPattern{src: s, re: re}, nil
}

// compileTitle reads a title matcher: a glob, or "re:" and a regexp.
func compileTitle(s string) (textPattern, error) {
	if expr, ok := strings.CutPrefix(s, "re:"); ok {
		re, err := regexp.Compile(expr)
		if err != nil {
			return textPattern{}, fmt.Errorf("invalid regexp %q: %s", expr, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		return textPattern{src: s, re: re}, nil
	}
	return compileText(s)
}

func (t *textPattern) match(s string) bool {
	if t.exact {
		return s == t.lit
	}
	return t.re.MatchString(s)
}

// unescapeGlob returns the literal a glob stands for when its only meta
// characters are escapes.
func unescapeGlob(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', '{':
			return "", false
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// globRegexp translates a text glob into a regexp body.
func globRegexp(s string) (string, error) {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			if i+1 == len(s) {
				return "", fmt.Errorf("invalid glob %q: trailing \\", s)
			}
			i++
			b.WriteString(regexp.QuoteMeta(s[i : i+1]))
		case '[':
			j := i + 1
			if j < len(s) && (s[j] == '!' || s[j] == '^') {
				j++
			}
			if j < len(s) && s[j] == ']' {
				j++
			}
			for j < len(s) && s[j] != ']' {
				j++
			}
			if j >= len(s) {
				return "", fmt.Errorf("invalid glob %q: unclosed [", s)
			}
			class := s[i+1 : j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			class = strings.ReplaceAll(class, `\`, `\\`)
			if _, err := regexp.Compile("[" + class + "]"); err != nil || class == "" || class == "^" {
				return "", fmt.Errorf("invalid glob %q: bad character class", s)
			}
			b.WriteString("[" + class + "]")
			i = j
		case '{':
			depth++
			b.WriteString("(?:")
		case '}':
			if depth == 0 {
				b.WriteString(`\}`)
				continue
			}
			depth--
			b.WriteString(")")
		case ',':
			if depth > 0 {
				b.WriteString("|")
			} else {
				b.WriteString(",")
			}
		default:
			b.WriteString(regexp.QuoteMeta(s[i : i+1]))
		}
	}
	if depth != 0 {
		return "", fmt.Errorf("invalid glob %q: unclosed {", s)
	}
	return b.String(), nil
}

// anchor is where a path pattern starts.
type anchor uint8

const (
	anchorRoot  anchor = iota // /...
	anchorAny                 // **/... (also relative to /)
	anchorCwd                 // ${cwd}
	anchorRoots               // ${roots}
	anchorHome                // ${home}, ~
)

var anchorNames = map[string]anchor{"${cwd}": anchorCwd, "${roots}": anchorRoots, "${home}": anchorHome, "~": anchorHome}

// pathPattern is a doublestar glob over absolute, cleaned paths, with an
// optional variable at its start. "DIR/**" also matches DIR (doublestar
// does this itself).
type pathPattern struct {
	src    string
	anchor anchor
	rest   string // the pattern below the anchor, without the leading /; "" = the anchor itself
	lit    bool   // rest has no meta characters
	all    bool   // rest == "**"
	fast   fastKind
	a, b   string // the literal parts of a fast shape
}

// compilePath reads a path glob.
func compilePath(s string) (pathPattern, error) {
	pp := pathPattern{src: s}
	rest := ""
	switch {
	case strings.HasPrefix(s, "/"):
		pp.anchor, rest = anchorRoot, s[1:]
	case strings.HasPrefix(s, "**"):
		pp.anchor, rest = anchorAny, s
	default:
		found := false
		for name, a := range anchorNames {
			if r, ok := strings.CutPrefix(s, name); ok && (r == "" || r[0] == '/') {
				pp.anchor, rest, found = a, strings.TrimPrefix(r, "/"), true
				break
			}
		}
		if !found {
			if strings.HasPrefix(s, "${") {
				return pp, fmt.Errorf("unknown variable in %q (use ${cwd}, ${roots}, ${home} or ~)", s)
			}
			return pp, fmt.Errorf("path glob %q must be absolute: start with /, ~, ${cwd}, ${roots}, ${home} or **", s)
		}
	}
	if strings.Contains(rest, "${") {
		return pp, fmt.Errorf("path glob %q: a variable may only start a glob", s)
	}
	if rest != "" {
		for seg := range strings.SplitSeq(rest, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return pp, fmt.Errorf("path glob %q is not clean (empty, . or .. segment)", s)
			}
		}
	}
	if !doublestar.ValidatePattern(rest) {
		return pp, fmt.Errorf("invalid glob %q", s)
	}
	// Consecutive ** segments mean the same as one; collapsing them keeps
	// the subtree check below linear.
	for strings.Contains(rest, "**/**") {
		rest = strings.ReplaceAll(rest, "**/**", "**")
	}
	pp.rest = rest
	pp.lit = !strings.ContainsAny(rest, `*?[{\`)
	pp.all = rest == "**"
	pp.fast, pp.a, pp.b = fastShape(rest)
	return pp, nil
}

// fastShape recognises the glob shapes policies use most and that can be
// matched with string operations, exactly as doublestar would match them.
func fastShape(rest string) (fastKind, string, string) {
	plain := func(s string) bool { return s != "" && !strings.ContainsAny(s, `*?[{\`) }
	if lit, ok := strings.CutPrefix(rest, "**/"); ok {
		if plain(lit) && !strings.Contains(lit, "/") {
			return fastBase, lit, "" // **/LIT
		}
		if seg, ok := strings.CutSuffix(lit, "/**"); ok && plain(seg) && !strings.Contains(seg, "/") {
			return fastSeg, seg, "" // **/LIT/**
		}
		if ext, ok := strings.CutPrefix(lit, "*"); ok && plain(ext) && !strings.Contains(ext, "/") {
			return fastExt, ext, "" // **/*.EXT
		}
		return fastNone, "", ""
	}
	if pre, ok := strings.CutSuffix(rest, "/**"); ok && plain(pre) {
		return fastPrefix, pre, "" // PREFIX/**
	}
	if pre, ext, ok := strings.Cut(rest, "/**/*"); ok && plain(pre) && plain(ext) && !strings.Contains(ext, "/") {
		return fastPrefixExt, pre, ext // PREFIX/**/*.EXT
	}
	return fastNone, "", ""
}

// fastKind is a glob shape matched without doublestar.
type fastKind uint8

const (
	fastNone fastKind = iota
	fastBase
	fastSeg
	fastExt
	fastPrefix
	fastPrefixExt
)

// bases returns the directories the pattern is relative to.
func (pp *pathPattern) bases(v *extract.Vars) []string {
	switch pp.anchor {
	case anchorCwd:
		return v.Cwd
	case anchorRoots:
		return v.Roots
	case anchorHome:
		return v.Home
	}
	return rootBase
}

var rootBase = []string{"/"}

// match reports whether the absolute, cleaned path p matches.
func (pp *pathPattern) match(p string, v *extract.Vars) bool {
	for _, base := range pp.bases(v) {
		rel, ok := extract.Below(base, p)
		if ok && pp.matchRel(rel) {
			return true
		}
	}
	return false
}

func (pp *pathPattern) matchRel(rel string) bool {
	switch {
	case pp.all:
		return true
	case pp.lit:
		return rel == pp.rest
	case pp.rest == "":
		return rel == ""
	}
	switch pp.fast {
	case fastBase:
		return rel == pp.a || strings.HasSuffix(rel, pp.a) && rel[len(rel)-len(pp.a)-1] == '/'
	case fastSeg:
		return hasSegment(rel, pp.a)
	case fastExt:
		return strings.HasSuffix(rel[strings.LastIndexByte(rel, '/')+1:], pp.a)
	case fastPrefix:
		return rel == pp.a || len(rel) > len(pp.a) && rel[len(pp.a)] == '/' && strings.HasPrefix(rel, pp.a)
	case fastPrefixExt:
		return len(rel) > len(pp.a) && rel[len(pp.a)] == '/' && strings.HasPrefix(rel, pp.a) &&
			strings.HasSuffix(rel[strings.LastIndexByte(rel, '/')+1:], pp.b)
	}
	ok, _ := doublestar.Match(pp.rest, rel)
	return ok
}

// hasSegment reports whether seg is one of the /-separated segments of rel.
func hasSegment(rel, seg string) bool {
	for i := 0; ; {
		j := strings.Index(rel[i:], seg)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(seg)
		if (j == 0 || rel[j-1] == '/') && (end == len(rel) || rel[end] == '/') {
			return true
		}
		i = j + 1
	}
}

// probe is a name no real path contains: a pattern that matches DIR/probe/probe
// matches everything below DIR.
const probe = "\x00probe"

// covers reports whether the pattern matches the directory p and
// everything below it.
func (pp *pathPattern) covers(p string, v *extract.Vars) bool {
	return pp.match(p, v) && pp.match(path.Join(p, probe, probe), v)
}

// mayMatchBelow reports whether the pattern can match p or some path below
// p (a recursive read of p would touch it). With skipHidden, only paths
// whose names below p do not start with a dot count.
func (pp *pathPattern) mayMatchBelow(p string, v *extract.Vars, skipHidden bool) bool {
	if pp.match(p, v) {
		return true
	}
	patSegs := strings.Split(pp.rest, "/")
	if pp.rest == "" {
		patSegs = nil
	}
	if strings.Contains(pp.rest, "{") {
		// Alternatives may span segments: assume they can match.
		patSegs = []string{"**"}
	}
	for _, base := range pp.bases(v) {
		if rel, ok := extract.Below(base, p); ok {
			var dir []string
			if rel != "" {
				dir = strings.Split(rel, "/")
			}
			if prefixMatch(patSegs, dir, skipHidden) {
				return true
			}
		} else if rest, ok := extract.Below(p, base); ok {
			// The pattern's base is itself below p.
			if !skipHidden || !hasHiddenSegment(rest) {
				return true
			}
		}
	}
	return false
}

func hasHiddenSegment(rel string) bool {
	for seg := range strings.SplitSeq(rel, "/") {
		if strings.HasPrefix(seg, ".") {
			return true
		}
	}
	return false
}

// prefixMatch reports whether the pattern segments can match dir followed
// by one or more further segments (not starting with a dot when
// skipHidden).
func prefixMatch(pat, dir []string, skipHidden bool) bool {
	// seen[i][j]: pat[i:] against dir[j:] already tried (and failed).
	seen := make([]bool, (len(pat)+1)*(len(dir)+1))
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		if j == len(dir) {
			if !skipHidden {
				return true
			}
			for _, s := range pat[i:] {
				if strings.HasPrefix(s, ".") {
					return false
				}
			}
			return true
		}
		if i == len(pat) {
			return false
		}
		k := i*(len(dir)+1) + j
		if seen[k] {
			return false
		}
		seen[k] = true
		if pat[i] == "**" {
			return rec(i+1, j) || rec(i, j+1)
		}
		ok, _ := doublestar.Match(pat[i], dir[j])
		return ok && rec(i+1, j+1)
	}
	return rec(0, 0)
}

// tokKind is the kind of a command pattern token.
type tokKind uint8

const (
	tokLit tokKind = iota // a glob over one token
	tokOne                // * alone: exactly one token
	tokAny                // ** alone: any number of tokens
)

type cmdToken struct {
	kind  tokKind
	p     textPattern
	slash bool // a program token with a /: matched against the path as written
	// path: a program token with a /, as the path of the program run
	// (compileProgramPath): matched against Item.ProgramForms.
	path *pathPattern
}

// compileProgramPath compiles a program pattern with a / (./x, tools/x,
// /abs/x, ~/bin/x, ${roots}/x, **/x) as the path of the program the shell
// runs (issue 27): one written from the session's directory (./ or a bare
// dir/) is below ${cwd}, as the README's ./scripts/release.sh means.
func compileProgramPath(w string) (*pathPattern, error) {
	s := w
	switch {
	case strings.HasPrefix(s, "/"), strings.HasPrefix(s, "~"), strings.HasPrefix(s, "${"), strings.HasPrefix(s, "**"):
	default:
		s = "${cwd}/" + strings.TrimPrefix(s, "./")
	}
	pp, err := compilePath(s)
	if err != nil {
		return nil, fmt.Errorf("program %q: write it from the session's directory (./x, tools/x), absolute, or from ~, ${roots} or ${home}, without . or .. after its start: %w", w, err)
	}
	return &pp, nil
}

// commandPattern is a whitespace-separated list of tokens matched against
// a simple command's argv: * is one token, ** any number of tokens, other
// tokens are text globs. The first token matches the program (see
// matchProgram). Runs of literal flags are compared after the same
// normalisation as the argv (short clusters split, each run sorted), so
// "rm -rf *" and "rm -f -r *" are the same pattern and match "rm -fr x".
type commandPattern struct {
	src  string
	toks []cmdToken
	// literal: every token names one word (no *, **, or glob meta), so
	// the pattern names each argument of what it matches.
	literal bool
}

func compileCommand(s string) (commandPattern, error) {
	words := strings.Fields(s)
	if len(words) == 0 {
		return commandPattern{}, errors.New("empty command pattern")
	}
	fixed := func(i int) bool { return !strings.ContainsAny(words[i], `*?[{\`) }
	words = extract.CanonArgs(words, fixed)
	cp := commandPattern{src: s, literal: true}
	for i, w := range words {
		if !fixed(i) {
			cp.literal = false
		}
		switch w {
		case "*":
			cp.toks = append(cp.toks, cmdToken{kind: tokOne})
		case "**":
			if n := len(cp.toks); n > 0 && cp.toks[n-1].kind == tokAny {
				continue
			}
			cp.toks = append(cp.toks, cmdToken{kind: tokAny})
		default:
			p, err := compileText(w)
			if err != nil {
				return cp, err
			}
			t := cmdToken{p: p, slash: i == 0 && strings.Contains(w, "/")}
			if t.slash {
				if t.path, err = compileProgramPath(w); err != nil {
					return cp, err
				}
			}
			cp.toks = append(cp.toks, t)
		}
	}
	return cp, nil
}

// match reports whether the command item's argv matches, as given or
// without the options before its subcommands (a pattern naming git's push
// matches git --no-pager push and git -C dir push: those options' own
// evidence is extracted all the same).
func (cp *commandPattern) match(it *extract.Item, v *extract.Vars, strict bool) bool {
	return cp.matchArgv(it.Canon(), it, v, strict) || it.SubCanon() != nil && cp.matchArgv(it.SubCanon(), it, v, strict)
}

// matchWritten reports whether the pattern matches the command item's
// argv as given: only then does it name every word (a literal pattern
// vouches for the arguments it names, not for options it leaves out).
func (cp *commandPattern) matchWritten(it *extract.Item, v *extract.Vars) bool {
	return cp.matchArgv(it.Canon(), it, v, true)
}

func (cp *commandPattern) matchArgv(argv []string, it *extract.Item, v *extract.Vars, strict bool) bool {
	n, m := len(cp.toks), len(argv)
	// dp[j]: toks[i:] matches argv[j:], computed for i from n down to 0.
	var buf [32]bool
	var dp, next []bool
	if 2*(m+1) <= len(buf) {
		dp, next = buf[:m+1], buf[m+1:2*(m+1)]
	} else {
		dp, next = make([]bool, m+1), make([]bool, m+1)
	}
	clear(next)
	next[m] = true // empty pattern matches empty argv
	for i := n - 1; i >= 0; i-- {
		t := &cp.toks[i]
		for j := m; j >= 0; j-- {
			switch {
			case t.kind == tokAny:
				dp[j] = next[j] || (j < m && dp[j+1])
			case j == m:
				dp[j] = false
			default:
				dp[j] = next[j+1] && tokenMatch(t, argv[j], j == 0, it, v, strict)
			}
		}
		dp, next = next, dp
	}
	return next[0]
}

func tokenMatch(t *cmdToken, arg string, first bool, it *extract.Item, v *extract.Vars, strict bool) bool {
	if t.kind == tokOne {
		return !first || it.Program != "" || !strict
	}
	if first {
		return matchProgram(t, it, v, strict)
	}
	return t.p.match(arg)
}

// matchProgram matches a program pattern against the item's argv[0]. A
// pattern with a / names the file run (issue 27): it matches the
// program's path joined to the directory the command runs in, cleaned and
// with its symlinks resolved (Item.ProgramForms) — every form for an
// allow (strict), so that ./tools/../scripts/x or a symlink out of tools/
// is not ./tools/x, and a program the shell finds on PATH (written
// without a /) is never one; any form, or the path as written, for a deny
// or ask. A pattern without a / matches the basename, so /tmp/git and
// \git are git; for an allow the program must also be written without a
// path, so that allowing "git" never allows some other file named git.
func matchProgram(t *cmdToken, it *extract.Item, v *extract.Vars, strict bool) bool {
	if it.Program == "" {
		return false // unknown program
	}
	if t.slash {
		if strict {
			return len(it.ProgramForms) > 0 && v != nil && !slices.ContainsFunc(it.ProgramForms, func(f string) bool { return !t.path.match(f, v) })
		}
		return t.p.match(it.ProgramPath) || v != nil && slices.ContainsFunc(it.ProgramForms, func(f string) bool { return t.path.match(f, v) })
	}
	p := &t.p
	if strict && strings.Contains(it.ProgramPath, "/") {
		return false
	}
	return p.match(it.Program)
}

// flagMatch reports whether the evidence flag f is the rule flag want. In
// loose matching a long flag also matches when it is an abbreviation
// (getopt_long and git accept unambiguous prefixes: --forc is --force).
func flagMatch(want, f string, strict bool) bool {
	if f == want {
		return true
	}
	return !strict && len(f) >= 4 && f[1] == '-' && strings.HasPrefix(want, f)
}

// domainPattern matches an IDNA-normalised, lower-case host name: exact,
// "*.x.com" (strict subdomains of x.com) or "*" (any host).
type domainPattern struct {
	src    string
	any    bool
	exact  string
	suffix string // ".x.com"
}

func compileDomain(s string) (domainPattern, error) {
	dp := domainPattern{src: s}
	if s == "*" {
		dp.any = true
		return dp, nil
	}
	host, sub := strings.CutPrefix(s, "*.")
	if strings.ContainsAny(host, "*?[]{}/:@ ") {
		return dp, fmt.Errorf("invalid domain %q: write a host name, *.host or *", s)
	}
	norm, ok := extract.NormDomain(host)
	if !ok || norm == "" {
		return dp, fmt.Errorf("invalid domain %q", s)
	}
	if sub {
		dp.suffix = "." + norm
	} else {
		dp.exact = norm
	}
	return dp, nil
}

func (dp *domainPattern) match(d string) bool {
	switch {
	case dp.any:
		return true
	case dp.exact != "":
		return d == dp.exact
	}
	return len(d) > len(dp.suffix) && strings.HasSuffix(d, dp.suffix)
}
