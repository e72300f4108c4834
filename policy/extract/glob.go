package extract

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Words that become options after expansion (issue 27): bash expands an
// unquoted glob to the names of the files that match it, and the program
// reads each as any other argument: a file named --checkpoint-action=exec=sh
// x.sh makes tar cf x.tar * run sh, one named -e sh x.sh does the same for
// rsync -a * dst. So the evidence of a command is its argv after
// expansion, against the files that exist, as bash expands it: no dotfiles
// for a pattern component that does not start with a literal ., names
// sorted, an unmatched glob left as written. A glob the router cannot
// expand (a POSIX class, too many matches, an unreadable directory) is not
// understood. Names bash collates in another order than bytes (the locale)
// give a second argv in that order.

// maxGlobMatches bounds the words one glob expands to: past it the
// argument is opaque (too large to allow).
const maxGlobMatches = 1024

// globRun is a command's argv after expansion and the directories it runs
// in that expand its globs so.
type globRun struct {
	args []arg
	cwds []string
}

// globPattern turns the text of an unquoted literal into a path.Match
// pattern: backslash escapes stay escapes, [! is [^, a [ without its ]
// is literal.
func globPattern(v string) string {
	if !strings.ContainsAny(v, `\*?[]`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\' && i+1 < len(v):
			i++
			if v[i] != '\n' {
				b.WriteByte('\\')
				b.WriteByte(v[i])
			}
		case c == '[' && strings.IndexByte(v[i+1:], ']') >= 0:
			// A bracket expression, copied to its ] (a ] first in it is
			// one of its characters).
			b.WriteByte('[')
			j := i + 1
			if j < len(v) && (v[j] == '!' || v[j] == '^') {
				b.WriteByte('^')
				j++
			}
			k := strings.IndexByte(v[j+1:], ']')
			if j < len(v) && v[j] == ']' && k >= 0 {
				k += j + 1
			} else {
				k = strings.IndexByte(v[j:], ']') + j
			}
			if k < j {
				b.WriteString(`\[`)
				continue
			}
			b.WriteString(v[j : k+1])
			i = k
		case c == '[' || c == ']' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// hasMeta reports whether a pattern component holds an unescaped glob
// character.
func hasMeta(p string) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}

// unescapePattern removes the escapes of a pattern component without glob
// characters.
func unescapePattern(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+1 < len(p) {
			i++
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// expandGlobs returns the argvs a command runs with once bash has expanded
// its unquoted globs in each of its working directories, grouped by the
// directories that expand them alike (one run, args unchanged, when there
// is nothing to expand or no filesystem to expand it against). The
// program (args[0]) is not expanded: a glob there is opaque already.
func (x *extractor) expandGlobs(args []arg, cx cmdCtx) []globRun {
	has := slices.ContainsFunc(args[min(1, len(args)):], func(a arg) bool { return a.glob && a.opaque == "" && a.pat != "" })
	if !has || x.fs == nil || cx.cwdUnknown || len(cx.cwds) == 0 {
		return []globRun{{args: args, cwds: cx.cwds}}
	}
	var runs []globRun
	for _, cwd := range cx.cwds {
		expanded := []arg{args[0]}
		sorted := false // the dictionary order differs from bytes
		for _, a := range args[1:] {
			if !a.glob || a.opaque != "" || a.pat == "" {
				expanded = append(expanded, a)
				continue
			}
			words, why := x.globWords(a.pat, cwd)
			switch {
			case why != "":
				expanded = append(expanded, arg{s: a.s, opaque: why})
				continue
			case len(words) == 0:
				expanded = append(expanded, a) // unmatched: bash leaves it as written
				x.unmatchedGlob = true
				continue
			}
			if dictOrder(words) {
				sorted = true
			}
			for _, w := range words {
				if a.split {
					// An unquoted variable holding a file name: bash
					// splits the name at blanks into words.
					for _, f := range strings.Fields(w) {
						expanded = append(expanded, arg{s: f})
					}
					continue
				}
				expanded = append(expanded, arg{s: w})
			}
		}
		variants := [][]arg{expanded}
		if sorted {
			variants = append(variants, x.reexpand(args, cwd))
		}
		for _, v := range variants {
			i := slices.IndexFunc(runs, func(r globRun) bool { return slices.Equal(r.args, v) })
			if i < 0 {
				runs = append(runs, globRun{args: v})
				i = len(runs) - 1
			}
			if !slices.Contains(runs[i].cwds, cwd) {
				runs[i].cwds = append(runs[i].cwds, cwd)
			}
		}
	}
	return runs
}

// reexpand is expandGlobs' argv for one directory with each glob's names
// in dictionary order (case and punctuation ignored first), as bash sorts
// them in most locales.
func (x *extractor) reexpand(args []arg, cwd string) []arg {
	out := []arg{args[0]}
	for _, a := range args[1:] {
		if !a.glob || a.opaque != "" || a.pat == "" {
			out = append(out, a)
			continue
		}
		words, why := x.globWords(a.pat, cwd)
		if why != "" || len(words) == 0 {
			out = append(out, a)
			continue
		}
		slices.SortStableFunc(words, func(p, q string) int { return strings.Compare(dictKey(p), dictKey(q)) })
		for _, w := range words {
			if a.split {
				for _, f := range strings.Fields(w) {
					out = append(out, arg{s: f})
				}
				continue
			}
			out = append(out, arg{s: w})
		}
	}
	return out
}

// dictKey is a name as a dictionary collation orders it first: letters and
// digits only, in one case.
func dictKey(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || r > 127 {
			b.WriteRune(r)
		}
	}
	return b.String() + "\x00" + s
}

// dictOrder reports whether the dictionary order of words (sorted by
// bytes) is another one.
func dictOrder(words []string) bool {
	return !slices.IsSortedFunc(words, func(p, q string) int { return strings.Compare(dictKey(p), dictKey(q)) })
}

// globWords expands the pattern pat (relative to cwd, or absolute) as
// bash does, component by component, into the words it becomes, sorted by
// bytes; nil when nothing matches. why says why it cannot be expanded.
func (x *extractor) globWords(pat, cwd string) (words []string, why string) {
	if strings.Contains(pat, "[:") || strings.Contains(pat, "[=") || strings.Contains(pat, "[.") {
		return nil, "a glob with a character class the router does not expand"
	}
	type cand struct{ word, dir string }
	comps := strings.Split(pat, "/")
	start := cand{dir: cwd}
	if strings.HasPrefix(pat, "/") {
		start = cand{word: "", dir: "/"}
	}
	cands := []cand{start}
	last := len(comps) - 1
	for i, comp := range comps {
		join := func(w, name string) string {
			if i == 0 {
				return name
			}
			return w + "/" + name
		}
		if !hasMeta(comp) {
			lit := unescapePattern(comp)
			for k := range cands {
				cands[k].word = join(cands[k].word, lit)
				if lit != "" {
					cands[k].dir = cands[k].dir + "/" + lit
				}
			}
			continue
		}
		goPat := comp
		if _, err := path.Match(goPat, ""); err != nil {
			return nil, "a glob the router cannot read: " + err.Error()
		}
		var next []cand
		for _, c := range cands {
			dir, err := x.fs.Resolve(c.dir)
			if err != nil {
				return nil, "a glob below a directory the router cannot resolve"
			}
			if i == firstMeta(comps) {
				x.globbed = append(x.globbed, globAt{dir: path.Clean(dir), comp: comp, at: len(x.ev.Items), lead: i == 0, again: x.loopDepth > 0})
			}
			matches, err := x.fs.Glob(globEscape(path.Clean(dir)) + "/" + goPat)
			if err != nil {
				return nil, "a glob the router cannot expand: " + err.Error()
			}
			for _, m := range matches {
				name := path.Base(m)
				if name == "." || name == ".." || name[0] == '.' && comp[0] != '.' && !strings.HasPrefix(comp, `\.`) {
					continue // bash: a leading dot is matched only by a literal one
				}
				if i < last {
					if ok, isDir := x.fs.Stat(c.dir + "/" + name); !ok || !isDir {
						continue
					}
				}
				next = append(next, cand{word: join(c.word, name), dir: c.dir + "/" + name})
				if len(next) > maxGlobMatches {
					return nil, fmt.Sprintf("a glob of more than %d files: too large to allow", maxGlobMatches)
				}
			}
		}
		cands = next
		if len(cands) == 0 {
			return nil, ""
		}
	}
	for _, c := range cands {
		if !hasMeta(comps[last]) || comps[last] == "" {
			// A literal last component (*/go.mod) or a trailing /
			// (*/): the path must exist (be a directory).
			ok, isDir := x.fs.Stat(c.dir)
			if !ok || comps[last] == "" && !isDir {
				continue
			}
		}
		words = append(words, c.word)
	}
	slices.Sort(words)
	return words, ""
}

// firstMeta is the index of the first component with a glob character.
func firstMeta(comps []string) int {
	return slices.IndexFunc(comps, hasMeta)
}

// globAt is a directory a glob of the line lists, the pattern its names
// are matched against, and how many items the line had recorded when the
// glob was expanded (the writes of earlier commands); lead: the pattern
// is the word's first component, so a name it lists begins the word.
// again: its command runs more than once (a loop's body), so every write
// of the line but its command's own [start, end) comes before one of its
// passes.
type globAt struct {
	dir, comp  string
	at         int
	lead       bool
	again      bool
	start, end int
}

// writtenOptions makes the request opaque when the line writes a file
// whose name starts with - (and does not exist yet) into a directory a glob of the same line lists
// (touch -- --checkpoint-action=exec=sh\ x.sh; tar cf a.tar *): the glob is
// expanded against the files that exist before the line runs, but runs
// after the write, and the new name becomes an option of its command.
func (x *extractor) writtenOptions() {
	if x.nullglob && x.unmatchedGlob {
		// Under nullglob an unmatched glob is no word at all: its command
		// runs on its default (find -delete, rm -rf, ls: the directory;
		// cat: stdin). A line that turns it on anywhere, in a subshell or
		// a loop's later iteration, is read as bash would: not at all.
		x.opaque("glob", "a glob matches no file on a line that turns nullglob on: its command gets no word there", KindExecute)
	}
	if len(x.globbed) == 0 || x.fs == nil {
		return
	}
	for i := range x.ev.Items {
		it := &x.ev.Items[i]
		if it.Type != ItemPath || it.kinds&(KindBit(KindEdit)|KindBit(KindMove)) == 0 {
			continue
		}
		for _, f := range it.Forms {
			if g, ok := x.unlistedNames(i, it, f); ok {
				x.opaque("glob", fmt.Sprintf("%s gets names the router cannot list (%s) before a glob (%s) lists it: its command may read one as an option", g.dir, it.Origin, g.comp), KindExecute)
				return
			}
			base := path.Base(f)
			if !strings.HasPrefix(base, "-") {
				continue
			}
			if ok, _ := x.fs.Stat(f); ok {
				continue // the glob found it already
			}
			for _, g := range x.globbed {
				if ok, _ := path.Match(g.comp, base); ok && path.Dir(f) == g.dir {
					x.opaque("glob", fmt.Sprintf("%s, written by the command line, is a name a later glob (%s) expands to: its command reads it as an option", base, g.comp), KindExecute)
					return
				}
			}
		}
	}
}

// unlistedNames returns the glob of the line that lists a directory the
// write it (form f) puts names into the router cannot know: an archive
// extracted or a tree copied into it (recursive), a revision checked out
// or a program's output written into the directory itself (git checkout
// REV -- ., unzip, cp -r, go build). A new name there may be
// --checkpoint-action=exec=... when the glob runs. A glob whose names
// start with a literal other than - (test_*.py) or stand after a
// directory (dist/*, cmd/*/main.go) cannot list an option, and a write of the glob's own command comes after it (tar xzf
// *.tgz).
func (x *extractor) unlistedNames(i int, it *Item, f string) (globAt, bool) {
	if ok, isDir := x.fs.Stat(f); !ok || !isDir {
		return globAt{}, false
	}
	for _, g := range x.globbed {
		own := i >= g.start && i < g.end
		if own || i >= g.at && !g.again || !g.lead || g.comp != "" && !strings.ContainsRune("*?[-\\", rune(g.comp[0])) {
			continue
		}
		if g.dir == f || it.Recursive && strings.HasPrefix(g.dir, strings.TrimSuffix(f, "/")+"/") {
			return g, true
		}
	}
	return globAt{}, false
}
