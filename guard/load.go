package guard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/policy"
)

// ErrOrgPolicyUnsafe: an org policy file anyone but root could change.
var ErrOrgPolicyUnsafe = errors.New("not owned by root or writable by group or others")

// LoadOrgLayer reads the org layer: every *.yaml in dir, in name order,
// merged. A missing directory is no org layer (nil). A file or the
// directory that is not root-owned, or is group- or world-writable, is an
// error: the router refuses to start rather than enforce a policy a user
// could have edited (DESIGN §6).
func LoadOrgLayer(dir string) (*policy.Layer, error) {
	l, _, err := loadOrgLayer(dir, false)
	return l, err
}

// loadOrgLayer is LoadOrgLayer; with unowned, the ownership problems are
// returned as warnings instead of errors (LoadOptions.OrgUnowned).
func loadOrgLayer(dir string, unowned bool) (*policy.Layer, []string, error) {
	var warnings []string
	owned := func(path string, fi fs.FileInfo) error {
		err := rootOwned(path, fi)
		if err != nil && unowned {
			warnings = append(warnings, err.Error())
			return nil
		}
		return err
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("org policy: %w", err)
	}
	if err := owned(dir, fi); err != nil {
		return nil, nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, nil, fmt.Errorf("org policy: %w", err)
	}
	sort.Strings(files)
	var layer *policy.Layer
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, nil, fmt.Errorf("org policy: %w", err)
		}
		if err := owned(f, fi); err != nil {
			return nil, nil, err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("org policy: %w", err)
		}
		l, err := policy.ParseFile(f, data)
		if err != nil {
			return nil, nil, err
		}
		if layer == nil {
			layer = l
		} else if err := layer.Merge(l); err != nil {
			return nil, nil, err
		}
	}
	return layer, warnings, nil
}

func rootOwned(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("org policy %s: %w (mode %v); fix with: sudo chown root %s && sudo chmod go-w %s",
			path, ErrOrgPolicyUnsafe, fi.Mode().Perm(), path, path)
	}
	return nil
}

// LoadedPolicy is a compiled policy with the outcome of its own tests and
// the files it was read from.
type LoadedPolicy struct {
	Policy  *policy.Policy
	Results []policy.TestResult
	// Watch are the directories a change in which may change the policy
	// (editors save by rename, so files are watched through their
	// directory), and Files the files in them that matter ("" = any
	// *.yaml, for the org directory).
	Watch map[string][]string
	// Warnings are the org files' ownership problems LoadOptions.OrgUnowned
	// let through.
	Warnings []string
}

// LoadOptions change how LoadPolicyWith reads the org layer.
type LoadOptions struct {
	// OrgUnowned reads org files that are not root-owned, or are writable
	// by group or others, and reports each as a warning instead of
	// refusing it: for `acp-router check --org-dir`, a non-root user
	// checking files before they are installed. The router itself never
	// sets it: it enforces only a policy no user could have edited.
	OrgUnowned bool
}

// Failed are the test results that did not pass.
func (l *LoadedPolicy) Failed() []policy.TestResult {
	var out []policy.TestResult
	for _, r := range l.Results {
		if !r.Pass {
			out = append(out, r)
		}
	}
	return out
}

// LoadPolicy reads the org layer from orgDir and the user layer from the
// config's permissions: and its include: files, compiles them and runs
// their tests. A nil Policy with a nil error: no layer exists (the router
// enforces nothing). Failing tests are reported in Results, not as an
// error; the caller refuses such a policy (TestsError).
//
// The org files' telemetry: blocks are parsed into cfg.OrgTelemetry (an
// error in one is an error of its file, as for the policy); an org layer
// with nothing else is no policy layer.
func LoadPolicy(orgDir string, cfg *config.Config) (*LoadedPolicy, error) {
	return LoadPolicyWith(orgDir, cfg, LoadOptions{})
}

// LoadPolicyWith is LoadPolicy with options.
func LoadPolicyWith(orgDir string, cfg *config.Config, opt LoadOptions) (*LoadedPolicy, error) {
	out := &LoadedPolicy{Watch: map[string][]string{}}
	out.Watch[orgDir] = []string{""}
	org, warnings, err := loadOrgLayer(orgDir, opt.OrgUnowned)
	out.Warnings = warnings
	if err != nil {
		return nil, err
	}
	cfg.OrgTelemetry, cfg.OrgSandbox = nil, nil
	if org != nil {
		var errs []error
		for _, b := range org.Telemetry {
			t, err := config.ParseOrgTelemetry(b.File, b.Node)
			errs = append(errs, err)
			cfg.OrgTelemetry = append(cfg.OrgTelemetry, t)
		}
		for _, b := range org.Sandbox {
			s, err := config.ParseOrgSandbox(b.File, b.Node)
			errs = append(errs, err)
			cfg.OrgSandbox = append(cfg.OrgSandbox, s)
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if !org.HasPolicy() {
			org = nil
		}
	}
	var user *policy.Layer
	if cfg.File != "" {
		dir := filepath.Dir(cfg.File)
		out.Watch[dir] = append(out.Watch[dir], filepath.Base(cfg.File))
	}
	if perm := cfg.Permissions; perm != nil {
		if user, err = policy.ParseLayer(perm.File, perm.Node); err != nil {
			return nil, err
		}
		for _, inc := range user.Includes {
			path := inc.Path
			if rest, ok := strings.CutPrefix(path, "~/"); ok && perm.Home != "" {
				path = filepath.Join(perm.Home, rest)
			}
			out.Watch[filepath.Dir(path)] = append(out.Watch[filepath.Dir(path)], filepath.Base(path))
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("%s: include: %w", inc.Pos, err)
			}
			if err := user.AddInclude(path, data); err != nil {
				return nil, err
			}
		}
	}
	if org == nil && user == nil {
		return out, nil
	}
	if out.Policy, err = policy.Compile(org, user); err != nil {
		return nil, err
	}
	out.Results = out.Policy.RunTests()
	return out, nil
}

// TestsError describes failed policy tests; nil when every test passed.
func (l *LoadedPolicy) TestsError() error {
	failed := l.Failed()
	if len(failed) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of the policy's tests failed:", len(failed))
	for _, f := range failed {
		fmt.Fprintf(&b, "\n  %s: %s", f.Case.Pos, f.Problem)
	}
	return errors.New(b.String())
}
