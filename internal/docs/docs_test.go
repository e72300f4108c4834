package docs

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// readmeBudget is issue 28's bound: the README says what the router is,
// how to install and configure it, what it guarantees, and links to the
// rest; everything else lives in docs/.
const readmeBudget = 10240

// root is the repository root: the test runs in internal/docs.
const root = "../.."

// pages returns the Markdown files the test keeps true, relative to root.
func pages(t *testing.T, dir string) []string {
	t.Helper()
	out := []string{"README.md", "CONTRIBUTING.md", "BENCHMARKS.md"}
	err := filepath.WalkDir(filepath.Join(dir, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReadmeBudget(t *testing.T) {
	fi, err := os.Stat(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > readmeBudget {
		t.Errorf("README.md is %d bytes, over its budget of %d: move the detail into docs/ and link it", fi.Size(), readmeBudget)
	}
}

// TestLinks fails on a relative link to a file that does not exist, on a
// #anchor that no heading of its page produces, and on a test function a
// link names (its text holds TestXxx) that its _test.go file does not
// declare. The guarantees in the README are only as good as these links.
func TestLinks(t *testing.T) {
	for _, page := range pages(t, root) {
		for _, p := range checkPage(root, page) {
			t.Error(p)
		}
	}
}

// link is one Markdown link of a page.
type link struct {
	line         int
	text, target string
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	// inlineLink matches [text](target) and [text](target "title"); text
	// may hold backticks (stripped before this runs, so only their content
	// remains) but no brackets.
	inlineLink = regexp.MustCompile(`\[([^\[\]]*)\]\(([^)\s]*)(?:\s+"[^"]*")?\)`)
	refDef     = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	testName   = regexp.MustCompile(`\bTest[A-Z0-9_]\w*|\bFuzz[A-Z0-9_]\w*|\bBenchmark[A-Z0-9_]\w*`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the links of a Markdown text outside code blocks and
// code spans; a code span's text inside a link's text is kept (the
// README writes [`TestOrderingInterleaved`](test/ordering_test.go)).
func links(text string) []link {
	var out []link
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		// A code span inside a link's text is the link's text; elsewhere
		// it is code, whose brackets are not links.
		plain := inlineCode.ReplaceAllStringFunc(line, func(s string) string {
			inner := s[1 : len(s)-1]
			if strings.ContainsAny(inner, "[]()") {
				return strings.Repeat(" ", len(s))
			}
			return inner
		})
		for _, m := range inlineLink.FindAllStringSubmatch(plain, -1) {
			out = append(out, link{line: i + 1, text: m[1], target: m[2]})
		}
		if m := refDef.FindStringSubmatch(plain); m != nil {
			out = append(out, link{line: i + 1, target: m[1]})
		}
	}
	return out
}

// checkPage returns the problems of one page's links.
func checkPage(dir, page string) []string {
	b, err := os.ReadFile(filepath.Join(dir, page))
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range links(string(b)) {
		if err := checkLink(dir, page, l); err != nil {
			out = append(out, fmt.Sprintf("%s:%d: link %q: %v", page, l.line, l.target, err))
		}
	}
	return out
}

func checkLink(dir, page string, l link) error {
	target := l.target
	if target == "" {
		return fmt.Errorf("empty target")
	}
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return nil // absolute URL: not this repository's to keep
	}
	path, anchor, _ := strings.Cut(target, "#")
	file := page
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return fmt.Errorf("absolute path: write it relative to %s", page)
		}
		file = filepath.ToSlash(filepath.Join(filepath.Dir(page), path))
		if strings.HasPrefix(file, "../") {
			return fmt.Errorf("points outside the repository")
		}
	}
	full := filepath.Join(dir, file)
	fi, err := os.Stat(full)
	if err != nil {
		return fmt.Errorf("no such file %s", file)
	}
	if anchor != "" {
		if fi.IsDir() || !strings.HasSuffix(file, ".md") {
			return fmt.Errorf("an anchor is checked only in a Markdown page; %s is not one", file)
		}
		b, err := os.ReadFile(full)
		if err != nil {
			return err
		}
		if !slices.Contains(anchors(string(b)), anchor) {
			return fmt.Errorf("no heading of %s makes the anchor #%s", file, anchor)
		}
	}
	names := testName.FindAllString(l.text, -1)
	if len(names) > 0 {
		if fi.IsDir() || !strings.HasSuffix(file, "_test.go") {
			return fmt.Errorf("names %s but is not a link to a _test.go file", strings.Join(names, ", "))
		}
		funcs, err := testFuncs(full)
		if err != nil {
			return err
		}
		for _, n := range names {
			if !funcs[n] {
				return fmt.Errorf("%s declares no func %s", file, n)
			}
		}
	}
	return nil
}

// testFuncs are the top-level functions a Go file declares.
func testFuncs(file string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
			out[fn.Name.Name] = true
		}
	}
	return out, nil
}

// anchors are the fragment ids GitHub gives the headings of a Markdown
// text: lowercased, code and punctuation marks dropped but for - and _,
// spaces made -, and -1, -2... added to repeats.
func anchors(text string) []string {
	var out []string
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if len(h) == len(line) || len(line)-len(h) > 6 || (h != "" && h[0] != ' ') {
			continue
		}
		slug := slugify(strings.TrimSpace(h))
		if n := seen[slug]; n > 0 {
			out = append(out, slug+"-"+strconv.Itoa(n))
		} else {
			out = append(out, slug)
		}
		seen[slug]++
	}
	return out
}

func slugify(h string) string {
	// Link text in a heading counts, its target does not.
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestAnchors pins the slug rules on headings the docs use.
func TestAnchors(t *testing.T) {
	got := anchors("# Configuration\n## `agents:` keys\n```\n# not a heading\n```\n## What it guarantees\n## What it guarantees\n### Results at c999f92 (2026-11-27)\n#hashtag\n")
	want := []string{"configuration", "agents-keys", "what-it-guarantees", "what-it-guarantees-1", "results-at-c999f92-2026-11-27"}
	if !slices.Equal(got, want) {
		t.Errorf("anchors = %q, want %q", got, want)
	}
}

// TestBrokenLinksFail proves the check can fail: a page with each kind of
// broken link gets one problem for each, and a page of good links none.
func TestBrokenLinksFail(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pkg/a_test.go", "package pkg\n\nfunc TestReal(t *testing.T) {}\n")
	write("docs/page.md", "# Page\n\n## Second part\n")
	write("good.md", "[p](docs/page.md) [s](docs/page.md#second-part) [self](#top) [`TestReal`](pkg/a_test.go) [web](https://example.com/x.md)\n"+
		"`[not a link](nowhere.md)`\n```\n[nor this](nowhere.md)\n```\n# Top\n")
	write("bad.md", "[gone](docs/gone.md)\n[anchor](docs/page.md#third-part)\n[self](#nothing)\n[`TestGone`](pkg/a_test.go)\n"+
		"[abs](/etc/passwd)\n[up](../outside.md)\n[ref]: docs/missing.md\n")
	if p := checkPage(dir, "good.md"); len(p) != 0 {
		t.Errorf("good.md: %q", p)
	}
	p := checkPage(dir, "bad.md")
	if len(p) != 7 {
		t.Fatalf("bad.md: %d problems, want 7:\n%s", len(p), strings.Join(p, "\n"))
	}
	for i, want := range []string{"no such file docs/gone.md", "#third-part", "#nothing", "declares no func TestGone", "absolute path", "outside the repository", "no such file docs/missing.md"} {
		if !strings.Contains(p[i], want) {
			t.Errorf("problem %d = %q, want it to say %q", i, p[i], want)
		}
	}
}

// TestConfigKeysDocumented fails when a key the config or the policy
// accepts is not on docs/configuration.md. The keys are read from the
// source, the lists the loaders check every mapping against (config's
// topKeys, agentKeys..., policy's ruleKeys, matcherKeys...), so a key
// added there without a line in the docs fails here.
func TestConfigKeysDocumented(t *testing.T) {
	keys := map[string][]string{}
	for _, dir := range []string{"config", "policy"} {
		for k, v := range keyLists(t, filepath.Join(root, dir)) {
			keys[dir+"."+k] = v
		}
	}
	for _, must := range []string{"config.topKeys", "config.agentKeys", "config.TelemetryKeys", "policy.ruleKeys", "policy.matcherKeys"} {
		if keys[must] == nil {
			t.Errorf("%s not found: the loaders' key lists moved; point this test at them", must)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for list, ks := range keys {
		for _, k := range ks {
			if !strings.Contains(page, "`"+k+"`") && !regexp.MustCompile(`(?m)^\s*(- )?`+regexp.QuoteMeta(k)+`:`).MatchString(page) {
				t.Errorf("docs/configuration.md does not mention key %q (%s)", k, list)
			}
		}
	}
}

// notConfig are []string variables named *Keys in config/ and policy/ that
// list something else than the keys a user writes.
var notConfig = map[string]bool{
	"unsupportedKeys": true, // sections not yet supported: none today
	"specKeys":        true, // policy/extract/specs/*.yaml: the programs' specs, documented in policy/extract/specs/README.md
	"writeKeys":       true, // rawInput fields an agent sends
	"moveKeys":        true,
	"rawCwdKeys":      true,
}

// keyLists returns the package-level variables of dir named *Keys whose
// value is a literal list of strings.
func keyLists(t *testing.T, dir string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(src, []byte("Keys")) {
			continue
		}
		f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasSuffix(name.Name, "Keys") || notConfig[name.Name] || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.CompositeLit)
				if !ok {
					continue
				}
				var ks []string
				for _, e := range lit.Elts {
					if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
						s, _ := strconv.Unquote(bl.Value)
						ks = append(ks, s)
					}
				}
				out[name.Name] = ks
			}
			return false
		})
	}
	return out
}
