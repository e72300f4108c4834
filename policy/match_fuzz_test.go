package policy

import (
	"path"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/acp-router/acp-router/policy/extract"
)

// FuzzMatch: any pattern against any path or argv never panics; when a
// path pattern compiles, a strict (allow) match implies a loose one, and
// a match of a directory implies that something below it may match.
func FuzzMatch(f *testing.F) {
	seeds := [][2]string{
		{"**/.env", "/home/user/project/.env"}, {"${roots}/**", "/home/user/project/src/a.go"},
		{"~/.ssh/**", "/home/user/.ssh"}, {"/etc/{passwd,shadow}", "/etc/shadow"}, {"/a/[!b]*/**/c", "/a/x/y/c"},
		{"git push **", "git push -f origin"}, {"*.x.com", "a.x.com"}, {"re:^a(b", "ab"}, {"**/**/x/**/y", "/x/a/y"},
		{"**/node_modules/**", "/a/node_modules"}, {"**/*.pem", "/k/.pem"}, {"/srv/app/**/*.go", "/srv/app/x.go"},
		{"**/.env", "/.env"}, {"/etc/**", "/etcx"}, {"**/a/**", "/ba/a"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	v := &extract.Vars{Cwd: []string{TestCwd}, Roots: []string{TestCwd, "/srv"}, Home: []string{TestHome}}
	f.Fuzz(func(t *testing.T, pattern, subject string) {
		p := "/" + strings.TrimLeft(path.Clean("/"+subject), "/")
		if pp, err := compilePath(pattern); err == nil {
			if pp.fast != fastNone {
				rel := p[1:]
				want, _ := doublestar.Match(pp.rest, rel)
				if got := pp.matchRel(rel); got != want {
					t.Fatalf("%q on %q: fast match %v, doublestar %v", pattern, rel, got, want)
				}
			}
			m := pp.match(p, v)
			if pp.covers(p, v) && !m {
				t.Fatalf("%q covers %q but does not match it", pattern, p)
			}
			if m && !pp.mayMatchBelow(p, v, false) {
				t.Fatalf("%q matches %q but mayMatchBelow says no", pattern, p)
			}
			pp.mayMatchBelow(p, v, true)
		}
		if cp, err := compileCommand(pattern); err == nil {
			args := strings.Fields(subject)
			if len(args) > 0 {
				it := extract.Item{Type: extract.ItemCommand, Argv: args, Program: extract.ProgramName(args[0]), ProgramPath: args[0]}
				if strings.Contains(args[0], "/") {
					it.ProgramForms = []string{path.Join(TestCwd, args[0]), path.Join("/", args[0])}
				}
				it.SetCanon(extract.CanonArgs(args, nil))
				if cp.match(&it, v, true) && !cp.match(&it, v, false) {
					t.Fatalf("%q matches %q strictly but not loosely", pattern, subject)
				}
			}
		}
		if tp, err := compileTitle(pattern); err == nil {
			tp.match(subject)
		}
		if dp, err := compileDomain(pattern); err == nil {
			if d, ok := extract.NormDomain(subject); ok {
				dp.match(d)
			}
		}
		var c Cond
		c.src = map[string][]string{}
		for _, key := range matcherKeys {
			_ = c.add(key, pattern)
		}
		_ = c.infeasible()
	})
}
