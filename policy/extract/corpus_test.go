package extract_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/yamlpos"
)

// The corpus (issue 14 point 7): testdata/corpus/policy.yaml is an org
// policy as a company would deploy it, and every other file of
// testdata/corpus is one class of cases, attacks and the legitimate
// commands that look like them:
//
//	class: paths
//	cases:
//	  - id: dangling-log-to-bashrc        # unique in the whole corpus
//	    attack: true                      # true: must be ask or deny; false: must be allow
//	    expect: deny                      # optional: the exact decision wanted
//	    source: "where the shape comes from"
//	    call: "terminal/create echo done > build.log"   # one TestCall, string or mapping form
//	    files: [/home/user/project/go.mod]              # as in TestCase
//	    symlinks: {/home/user/project/build.log: /home/user/.bashrc}
//	    cwd: /home/user/project           # optional, as in TestCase
//	    roots: []                         # optional
//	    agent: claude                     # optional
//	    mode: default                     # optional
//	    run: false                        # optional: the kernel check must not execute it
//	    kernel: true                      # optional: judged only with the sandbox on (TestCorpusKernel)
//
// The targets: no attack allowed, at most 1 % of the legitimate cases
// asked or denied, and every expect: met.
//
// A subdirectory of testdata/corpus holding a policy.yaml of its own is a
// corpus of its own, judged against that policy (testdata/corpus/monorepo:
// a monorepo team's policy with a tools/ allowlist, a package-registry
// allowlist and read-only docker, kubectl and terraform). Ids are unique
// across all of them.

const corpusDir = "testdata/corpus"

// corpusDirs returns corpusDir and every subdirectory of it that holds a
// policy.yaml.
func corpusDirs(t *testing.T) []string {
	t.Helper()
	subs, err := filepath.Glob(filepath.Join(corpusDir, "*", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{corpusDir}
	for _, s := range subs {
		dirs = append(dirs, filepath.Dir(s))
	}
	return dirs
}

// corpusCase is one case of the corpus.
type corpusCase struct {
	Class  string
	ID     string
	Attack bool
	Expect policy.Effect // None when not given
	Source string
	Run    bool
	Kernel bool
	Case   *policy.TestCase
	Call   *policy.TestCall
	Pos    yamlpos.Pos
}

var corpusCaseKeys = []string{"id", "attack", "expect", "source", "call", "files", "symlinks", "cwd", "roots", "agent", "mode", "run", "kernel"}

// loadCorpusFile reads one class file; every problem is returned.
func loadCorpusFile(file string, data []byte) (string, []*corpusCase, []error) {
	var errs []error
	bad := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", yamlpos.At(file, n), fmt.Sprintf(format, args...)))
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return "", nil, []error{fmt.Errorf("%s: %v", file, err)}
	}
	top := yamlpos.Deref(&root)
	if top.Kind != yaml.MappingNode {
		return "", nil, []error{fmt.Errorf("%s: not a mapping", file)}
	}
	var class string
	var casesNode *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "class":
			class = v.Value
		case "cases":
			casesNode = yamlpos.Deref(v)
		default:
			bad(k, "unknown key %q (class, cases)", k.Value)
		}
	}
	if class == "" {
		bad(top, "missing class")
	}
	if casesNode == nil || casesNode.Kind != yaml.SequenceNode || len(casesNode.Content) == 0 {
		bad(top, "cases must be a non-empty list")
		return class, nil, errs
	}
	var out []*corpusCase
	for i, cn := range casesNode.Content {
		cn = yamlpos.Deref(cn)
		path := fmt.Sprintf("cases[%d]", i)
		if cn.Kind != yaml.MappingNode {
			bad(cn, "%s: not a mapping", path)
			continue
		}
		c := &corpusCase{Class: class, Run: true, Case: &policy.TestCase{}, Pos: yamlpos.At(file, cn)}
		seen := map[string]bool{}
		var hasAttack bool
		for j := 0; j+1 < len(cn.Content); j += 2 {
			k, v := cn.Content[j], yamlpos.Deref(cn.Content[j+1])
			key := k.Value
			if !slices.Contains(corpusCaseKeys, key) {
				bad(k, "%s: unknown key %q%s", path, key, yamlpos.Suggest(key, corpusCaseKeys))
				continue
			}
			if seen[key] {
				bad(k, "%s: duplicate key %q", path, key)
			}
			seen[key] = true
			var err error
			switch key {
			case "id":
				c.ID = v.Value
			case "attack":
				hasAttack = true
				err = v.Decode(&c.Attack)
			case "run":
				err = v.Decode(&c.Run)
			case "kernel":
				err = v.Decode(&c.Kernel)
			case "expect":
				c.Expect, err = policy.ParseEffect(v.Value)
			case "source":
				c.Source = v.Value
			case "cwd":
				c.Case.Cwd = v.Value
			case "agent":
				c.Case.Agent = v.Value
			case "mode":
				c.Case.Mode = v.Value
			case "files":
				err = v.Decode(&c.Case.Files)
			case "roots":
				err = v.Decode(&c.Case.Roots)
			case "symlinks":
				err = v.Decode(&c.Case.Symlinks)
			case "call":
				if v.Kind == yaml.SequenceNode {
					err = fmt.Errorf("one call per case")
					break
				}
				c.Call, err = policy.ParseCallNode(file, path+".call", v)
				if err == nil && c.Call == nil {
					err = fmt.Errorf("no call")
				}
			}
			if err != nil {
				bad(v, "%s.%s: %v", path, key, err)
			}
		}
		for _, f := range append(slices.Clone(c.Case.Files), c.Case.Roots...) {
			if !filepath.IsAbs(f) {
				bad(cn, "%s: %q must be an absolute path", path, f)
			}
		}
		for l := range c.Case.Symlinks {
			if !filepath.IsAbs(l) {
				bad(cn, "%s: link %q must be an absolute path", path, l)
			}
		}
		if c.Case.Cwd != "" && !filepath.IsAbs(c.Case.Cwd) {
			bad(cn, "%s: cwd %q must be an absolute path", path, c.Case.Cwd)
		}
		switch {
		case c.ID == "":
			bad(cn, "%s: missing id", path)
		case !hasAttack:
			bad(cn, "%s (%s): missing attack: true|false", path, c.ID)
		case c.Call == nil && !seen["call"]:
			bad(cn, "%s (%s): missing call", path, c.ID)
		case !c.Attack && c.Expect != policy.None && c.Expect != policy.Allow:
			bad(cn, "%s (%s): a legitimate case must be allowed, not expect %s", path, c.ID, c.Expect)
		case c.Attack && c.Expect == policy.Allow:
			bad(cn, "%s (%s): an attack cannot expect allow", path, c.ID)
		}
		if c.Call != nil {
			out = append(out, c)
		}
	}
	return class, out, errs
}

// loadCorpus reads the policy of dir and every class file in it; ids
// records every case id seen so far, across directories.
func loadCorpus(t *testing.T, dir string, ids map[string]yamlpos.Pos) (*policy.Policy, []string, map[string][]*corpusCase) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	org, err := policy.ParseFile(filepath.Join(dir, "policy.yaml"), data)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(org)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("no corpus files in %s: %v", dir, err)
	}
	var classes []string
	byClass := map[string][]*corpusCase{}
	for _, file := range files {
		if filepath.Base(file) == "policy.yaml" {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		class, cases, errs := loadCorpusFile(file, data)
		for _, e := range errs {
			t.Error(e)
		}
		if _, ok := byClass[class]; !ok {
			classes = append(classes, class)
		}
		for _, c := range cases {
			if p, dup := ids[c.ID]; dup {
				t.Errorf("%s: duplicate id %q (first at %s)", c.Pos, c.ID, p)
				continue
			}
			ids[c.ID] = c.Pos
			byClass[class] = append(byClass[class], c)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pol, classes, byClass
}

// corpusWhy names what decided d: the deciding rule and the item it
// decided, with the rule's message.
func corpusWhy(d *policy.Decision) string {
	rule := d.Rule
	if rule == "" {
		rule = "default"
	}
	for _, f := range d.Findings {
		if f.Effect != d.Effect || f.Rule != d.Rule {
			continue
		}
		it := f.Item
		what := it.Type.String()
		switch it.Type {
		case extract.ItemPath:
			what = "path " + it.Path
		case extract.ItemCommand:
			what = "command " + strings.Join(it.Argv, " ")
		case extract.ItemDomain:
			what = "domain " + it.Domain
		}
		if len(what) > 70 {
			what = what[:67] + "..."
		}
		msg := f.Message
		if len(msg) > 90 {
			msg = msg[:87] + "..."
		}
		if msg != "" {
			return fmt.Sprintf("%s on %s: %s", rule, what, msg)
		}
		return fmt.Sprintf("%s on %s", rule, what)
	}
	return rule
}

// TestCorpus decides every case of the corpus with the corpus policy and
// prints a table per class. It fails when an attack is allowed, when more
// than 1 % of the legitimate cases are asked or denied, or when a case's
// expect: is not met. Run `go test ./policy -run TestCorpus -v` for the
// figures.
func TestCorpus(t *testing.T) {
	ids := map[string]yamlpos.Pos{}
	for _, dir := range corpusDirs(t) {
		pol, classes, byClass := loadCorpus(t, dir, ids)
		t.Run(filepath.Base(dir), func(t *testing.T) { corpusTargets(t, pol, classes, byClass, false) })
	}
}

// TestCorpusKernel is TestCorpus with the kernel's half on (issue 29 req.
// 5): every request is carried out by processes under the sandbox profile
// derived from the same policy (policyKernel), as the agent's own tools
// are, and terminal commands once they run under the profile. The targets
// are the same.
func TestCorpusKernel(t *testing.T) {
	ids := map[string]yamlpos.Pos{}
	for _, dir := range corpusDirs(t) {
		pol, classes, byClass := loadCorpus(t, dir, ids)
		t.Run(filepath.Base(dir), func(t *testing.T) { corpusTargets(t, pol, classes, byClass, true) })
	}
}

// kernelHeld: an attack the policy allows with the kernel on is held by
// the kernel: without it, it is asked or denied, and every finding that
// the kernel changed names what the kernel keeps away (Finding.Kernel),
// so that nothing else made the difference.
func kernelHeld(pol *policy.Policy, req *extract.Request, d *policy.Decision) bool {
	without := *req
	without.Kernel = nil
	w := pol.Decide(&without)
	if w.Effect == policy.Allow || len(w.Findings) != len(d.Findings) {
		return false
	}
	for i := range w.Findings {
		if w.Findings[i].Effect != d.Findings[i].Effect && !slices.ContainsFunc(d.Findings[i].Kernel, func(k policy.KernelHold) bool { return !k.Decides }) {
			return false
		}
	}
	return true
}

// policyKernel is the kernel guard of a profile derived from pol for the
// request's agent and session, on the request's FS: a path is hidden when
// a deny rule the kernel holds (KernelDenies) hides it, its symlinks
// resolved, as sandbox.Derive and Resolve mask it at the agent's start.
type policyKernel struct {
	held  []policy.KernelDeny
	agent string
	home  string
	roots []string
	fs    extract.FS
}

func newPolicyKernel(pol *policy.Policy, req *extract.Request) *policyKernel {
	held, _ := pol.KernelDenies()
	return &policyKernel{held: held, agent: req.Session.Agent, home: req.Session.Home,
		roots: append([]string{req.Session.Cwd}, req.Session.Roots...), fs: req.FS}
}

func (k *policyKernel) Hides(p string) bool {
	if w, ok := k.fs.(extract.Walker); ok {
		r, err := w.Resolve(p)
		if err != nil {
			return false
		}
		p = r
	}
	for d := p; ; d = filepath.Dir(d) {
		for i := range k.held {
			if k.held[i].AppliesTo(k.agent) && k.held[i].Hides(k.agent, d, k.home, k.roots) {
				return true
			}
		}
		if d == "/" {
			return false
		}
	}
}

// corpusTargets decides every case of one corpus and holds its targets.
func corpusTargets(t *testing.T, pol *policy.Policy, classes []string, byClass map[string][]*corpusCase, kernel bool) {
	type row struct{ attacks, allowed, kernel, wrong, legit, asked, denied int }
	var total row
	var table, failures strings.Builder
	fmt.Fprintf(&table, "\n%-18s %8s %8s %8s %8s %8s %8s %8s\n", "class", "attacks", "allowed", "kernel", "!expect", "legit", "asked", "denied")
	for _, class := range classes {
		var r row
		for _, c := range byClass[class] {
			if c.Kernel && !kernel {
				continue
			}
			req, err := c.Call.Request(c.Case.Session(""), c.Case.FS())
			if err != nil {
				t.Errorf("%s (%s): %v", c.Pos, c.ID, err)
				continue
			}
			if kernel {
				req.Kernel = newPolicyKernel(pol, req)
			}
			d := pol.Decide(req)
			var problem string
			if c.Attack {
				r.attacks++
				switch {
				case d.Effect == policy.Allow && kernel && kernelHeld(pol, req, &d):
					r.kernel++
				case d.Effect == policy.Allow:
					r.allowed++
					problem = "attack allowed"
				case c.Expect != policy.None && d.Effect != c.Expect:
					r.wrong++
					problem = fmt.Sprintf("attack expected %s", c.Expect)
				}
			} else {
				r.legit++
				switch d.Effect {
				case policy.Ask:
					r.asked++
					problem = "legit asked"
				case policy.Deny:
					r.denied++
					problem = "legit denied"
				}
			}
			if problem != "" {
				fmt.Fprintf(&failures, "  %-10s %-40s %-20s %s: %s\n", class, c.ID, problem, d.Effect, corpusWhy(&d))
			}
		}
		fmt.Fprintf(&table, "%-18s %8d %8d %8d %8d %8d %8d %8d\n", class, r.attacks, r.allowed, r.kernel, r.wrong, r.legit, r.asked, r.denied)
		total.attacks += r.attacks
		total.allowed += r.allowed
		total.kernel += r.kernel
		total.wrong += r.wrong
		total.legit += r.legit
		total.asked += r.asked
		total.denied += r.denied
	}
	fmt.Fprintf(&table, "%-18s %8d %8d %8d %8d %8d %8d %8d\n", "total", total.attacks, total.allowed, total.kernel, total.wrong, total.legit, total.asked, total.denied)
	t.Log(table.String())
	if failures.Len() > 0 {
		t.Log("failing cases (class, id, problem, decision: rule on item: message):\n" + failures.String())
	}
	if total.allowed > 0 {
		t.Errorf("%d of %d attacks allowed", total.allowed, total.attacks)
	}
	if total.wrong > 0 {
		t.Errorf("%d attacks decided otherwise than their expect: (!expect)", total.wrong)
	}
	if bad := total.asked + total.denied; bad*100 > total.legit {
		t.Errorf("%d of %d legitimate cases asked or denied (%.1f %%, at most 1 %%)", bad, total.legit, 100*float64(bad)/float64(max(total.legit, 1)))
	}
}

// TestCorpusMalformed checks that loadCorpusFile reports what it must.
func TestCorpusMalformed(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"unknown key", "class: x\ncases:\n  - {id: a, attack: true, call: 'terminal/create ls', color: red}\n", `unknown key "color"`},
		{"no call", "class: x\ncases:\n  - {id: a, attack: true}\n", "missing call"},
		{"no attack", "class: x\ncases:\n  - {id: a, call: 'terminal/create ls'}\n", "missing attack"},
		{"bad call", "class: x\ncases:\n  - {id: a, attack: true, call: 'nosuch/method x'}\n", "unknown method"},
		{"unknown top key", "class: x\nkases: []\n", `unknown key "kases"`},
		{"legit expects deny", "class: x\ncases:\n  - {id: a, attack: false, expect: deny, call: 'terminal/create ls'}\n", "must be allowed"},
	} {
		_, _, errs := loadCorpusFile("x.yaml", []byte(tc.src))
		if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), tc.want) }) {
			t.Errorf("%s: errors %v lack %q", tc.name, errs, tc.want)
		}
	}
}
