package router

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/acp-router/acp-router/policy"
)

// OSFS is the real filesystem, as the policy sees it (policy.FS): symlinks
// resolved the way the kernel does, the deepest existing ancestor for a
// path that does not exist yet.
type OSFS struct{}

var _ policy.FS = OSFS{}

// Resolve implements policy.FS.
func (OSFS) Resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	for depth := 0; ; depth++ {
		resolved, err := filepath.EvalSymlinks(p)
		if err == nil {
			return resolved, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || depth > 255 {
			return "", err
		}
		// Resolve what exists and keep the rest: a file about to be
		// created lands where its existing directory really is.
		dir, base := filepath.Dir(p), filepath.Base(p)
		if dir == p {
			return "", err
		}
		parent, err := OSFS{}.Resolve(dir)
		if err != nil {
			return "", err
		}
		return filepath.Join(parent, base), nil
	}
}

// Stat implements policy.FS.
func (OSFS) Stat(p string) (exists, dir bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return false, false
	}
	return true, fi.IsDir()
}

// Glob implements policy.FS.
func (OSFS) Glob(pattern string) ([]string, error) {
	matches, err := filepath.Glob(pattern)
	sort.Strings(matches)
	return matches, err
}

// ErrOrgPolicyUnsafe: an org policy file anyone but root could change.
var ErrOrgPolicyUnsafe = errors.New("not owned by root or writable by group or others")

// LoadOrgLayer reads the org layer: every *.yaml in dir, in name order,
// merged. A missing directory is no org layer (nil). A file or the
// directory that is not root-owned, or is group- or world-writable, is an
// error: the router refuses to start rather than enforce a policy a user
// could have edited (DESIGN §6).
func LoadOrgLayer(dir string) (*policy.Layer, error) {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("org policy: %w", err)
	}
	if err := rootOwned(dir, fi); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("org policy: %w", err)
	}
	sort.Strings(files)
	var layer *policy.Layer
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("org policy: %w", err)
		}
		if err := rootOwned(f, fi); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("org policy: %w", err)
		}
		l, err := policy.ParseFile(f, data)
		if err != nil {
			return nil, err
		}
		if layer == nil {
			layer = l
		} else if err := layer.Merge(l); err != nil {
			return nil, err
		}
	}
	return layer, nil
}

func rootOwned(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("org policy %s: %w (mode %v); fix with: sudo chown root %s && sudo chmod go-w %s",
			path, ErrOrgPolicyUnsafe, fi.Mode().Perm(), path, path)
	}
	return nil
}
