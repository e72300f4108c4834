package extract_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/yamlpos"
)

// hideSet is a kernel guard that hides the paths below any of its
// directories (after resolving symlinks in fs), as a mount mask does.
type hideSet struct {
	dirs []string
	fs   *extract.MapFS
}

func (h hideSet) Hides(p string) bool {
	if r, err := h.fs.Resolve(p); err == nil {
		p = r
	}
	return slices.ContainsFunc(h.dirs, func(d string) bool { return p == d || strings.HasPrefix(p, d+"/") })
}

// TestKernelGuard (issue 29 req. 5): a recursive read that a deny rule
// asks about only because a symlink below it leads to a secret is not
// asked when the kernel hides that secret from the processes that run it,
// and explain says the kernel holds it; a secret the kernel does not hide
// still asks, a secret named on the line is still denied (both guards
// hold it), and a recursive write is not credited.
func TestKernelGuard(t *testing.T) {
	pol, _, _ := loadCorpus(t, corpusDir, map[string]yamlpos.Pos{})
	tc := &policy.TestCase{
		Files:    []string{"/home/user/project/go.mod", "/home/user/project/tests/test_app.py", "/home/user/.aws/credentials", "/home/user/.ssh/id_ed25519"},
		Symlinks: map[string]string{"/home/user/project/notes/aws": "/home/user/.aws/credentials", "/home/user/project/notes/key": "/home/user/.ssh/id_ed25519"},
	}
	fs := tc.FS()
	both := hideSet{dirs: []string{"/home/user/.aws", "/home/user/.ssh"}, fs: fs}
	awsOnly := hideSet{dirs: []string{"/home/user/.aws"}, fs: fs}
	decide := func(line string, k extract.KernelGuard) (policy.Decision, string) {
		t.Helper()
		call, err := policy.ParseCall(line)
		if err != nil {
			t.Fatal(err)
		}
		req, err := call.Request(tc.Session(""), fs)
		if err != nil {
			t.Fatal(err)
		}
		req.Kernel = k
		d := pol.Decide(req)
		return d, policy.Explain(&d)
	}
	for _, c := range []struct {
		line   string
		kernel extract.KernelGuard
		want   policy.Effect
		says   []string
	}{
		{"terminal/create pytest -q", nil, policy.Ask, []string{"the rule matches /home/user/project/notes/"}},
		{"terminal/create pytest -q", both, policy.Allow, []string{"held by the kernel: /home/user/project/notes/aws -> /home/user/.aws/credentials matches no-secrets below this directory"}},
		{"session/request_permission execute \"grep -Rn TODO .\" cwd=/home/user/project", awsOnly, policy.Ask, []string{"the rule matches /home/user/project/notes/key -> /home/user/.ssh/id_ed25519 below this directory, so it asks"}},
		{"terminal/create cat notes/aws", both, policy.Deny, []string{"held by the rule and the kernel: /home/user/project/notes/aws is hidden from the agent too"}},
		{"terminal/create cat notes/key", awsOnly, policy.Deny, []string{"held by the rule only: the kernel does not hide it"}},
		{"terminal/create chmod -R go-w .", nil, policy.Ask, nil},
		{"terminal/create chmod -R go-w .", both, policy.Ask, nil},
	} {
		d, out := decide(c.line, c.kernel)
		if d.Effect != c.want {
			t.Errorf("%s (kernel %v): %s, want %s\n%s", c.line, c.kernel != nil, d.Effect, c.want, out)
		}
		for _, s := range c.says {
			if !strings.Contains(out, s) {
				t.Errorf("%s (kernel %v): explain lacks %q:\n%s", c.line, c.kernel != nil, s, out)
			}
		}
		if c.kernel == nil && strings.Contains(out, "kernel") {
			t.Errorf("%s without a kernel guard: explain names the kernel:\n%s", c.line, out)
		}
	}
}
