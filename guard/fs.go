package guard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

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
	resolved, err := filepath.EvalSymlinks(p)
	if err == nil {
		return resolved, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	// Resolve what exists and keep the rest: a file about to be created
	// lands where its existing directory really is. Each step is one
	// component shorter, down to "/".
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

// cachedOSFS is OSFS for one decision: every path of a command line, each
// in several spellings, shares its ancestors, so each directory is
// resolved once (one lstat per new path component instead of one per
// component of every path). Not safe for concurrent use: one per request.
type cachedOSFS struct {
	resolved map[string]resolved
	stats    map[string][2]bool
}

type resolved struct {
	path string
	err  error
}

func newCachedOSFS() *cachedOSFS {
	return &cachedOSFS{resolved: map[string]resolved{}, stats: map[string][2]bool{}}
}

// requestFS is the filesystem one decision sees.
func requestFS(fs policy.FS) policy.FS {
	if _, ok := fs.(OSFS); ok {
		return newCachedOSFS()
	}
	return fs
}

// Resolve implements policy.FS with OSFS's semantics.
func (c *cachedOSFS) Resolve(p string) (string, error) {
	if r, ok := c.resolved[p]; ok {
		return r.path, r.err
	}
	path, err := c.resolve(p)
	c.resolved[p] = resolved{path, err}
	return path, err
}

func (c *cachedOSFS) resolve(p string) (string, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		// ".." applies after the symlinks before it: OSFS does it the
		// kernel's way.
		return OSFS{}.Resolve(p)
	}
	dir := filepath.Dir(p)
	if dir == p {
		return p, nil
	}
	// The kernel resolves the directory first, then looks the last
	// component up in it.
	realDir, err := c.Resolve(dir)
	if err != nil {
		return "", err
	}
	full := filepath.Join(realDir, filepath.Base(p))
	fi, err := os.Lstat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return full, nil // a new file lands where its directory really is
	case err != nil:
		return "", err
	case fi.Mode()&os.ModeSymlink != 0:
		return OSFS{}.Resolve(full)
	}
	return full, nil
}

// Stat implements policy.FS.
func (c *cachedOSFS) Stat(p string) (exists, dir bool) {
	if s, ok := c.stats[p]; ok {
		return s[0], s[1]
	}
	exists, dir = OSFS{}.Stat(p)
	c.stats[p] = [2]bool{exists, dir}
	return exists, dir
}

// Glob implements policy.FS.
func (c *cachedOSFS) Glob(pattern string) ([]string, error) { return OSFS{}.Glob(pattern) }
