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
	"time"

	"github.com/acp-router/acp-router/policy/extract"
)

// OSFS is the real filesystem, as the policy sees it (extract.FS): symlinks
// resolved the way the kernel does, one component at a time, dangling
// ones included (a write through a link creates its target); the deepest
// existing ancestor for a path that does not exist yet. A path through a
// /proc magic link (extract.ProcMagicLink) is refused: it names another
// process's root, cwd or descriptors.
type OSFS struct{}

var _ extract.FS = OSFS{}

// maxHops is the kernel's bound on symlinks followed in one lookup
// (ELOOP past it).
const maxHops = 40

// Resolve implements extract.FS.
func (OSFS) Resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	return resolveFrom("/", p, 0)
}

// resolveFrom resolves rest (absolute, or relative to cur, a resolved
// directory) after hops symlinks already followed.
func resolveFrom(cur, rest string, hops int) (string, error) {
	if filepath.IsAbs(rest) {
		cur = "/"
	}
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		if extract.ProcMagicLink(next) {
			return "", fmt.Errorf("%s: %w", next, errProcLink)
		}
		next, fi, err := lookup(cur, c)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			// The deepest existing ancestor is resolved; the rest is
			// appended as written. (Below a file that is no directory
			// nothing exists either: cp a b's b/a when b is a file.)
			return filepath.Join(next, rest), nil
		case err != nil:
			return "", err
		case fi.Mode()&os.ModeSymlink == 0:
			cur = next
			continue
		}
		if hops++; hops > maxHops {
			return "", fmt.Errorf("%s: %w", next, errLoop)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		// The target, relative to the link's directory, then the rest.
		if target == "" {
			return "", fmt.Errorf("%s: empty symlink", next)
		}
		if rest != "" {
			target += "/" + rest
		}
		return resolveFrom(cur, target, hops)
	}
	return cur, nil
}

// lookup finds name in the resolved directory dir as the filesystem
// does, and returns the entry's path in the spelling the directory holds
// it: on a case-insensitive filesystem (macOS, Windows, vfat, an ext4
// casefold directory) .ENV opens .env and ~/.SSH is ~/.ssh, and the deny
// rules are written for those names. A name that exists as given is
// checked against its case-toggled spelling (one more lstat: on a
// case-sensitive filesystem that one does not exist, or is another
// file); only when both are the same file, or when the name does not
// exist but a spelling of it differing in case does, is the directory
// read for the name it holds.
func lookup(dir, name string) (string, fs.FileInfo, error) {
	full := filepath.Join(dir, name)
	fi, err := os.Lstat(full)
	toggled := toggleCase(name)
	switch {
	case toggled == name:
		return full, fi, err
	case err == nil:
		fi2, err2 := os.Lstat(filepath.Join(dir, toggled))
		if err2 != nil || !os.SameFile(fi, fi2) {
			return full, fi, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return full, fi, err
	}
	if held := foldedName(dir, name); held != "" && held != name {
		if fi3, err3 := os.Lstat(filepath.Join(dir, held)); err3 == nil {
			return filepath.Join(dir, held), fi3, nil
		}
	}
	return full, fi, err
}

// maxFoldEntries bounds the directory entries foldedName reads.
const maxFoldEntries = 100000

// foldedName returns the name of the entry of dir that equals name but for
// case ("" if none or several).
func foldedName(dir, name string) string {
	f, err := os.Open(dir)
	if err != nil {
		return ""
	}
	defer f.Close()
	names, _ := f.Readdirnames(maxFoldEntries)
	found := ""
	for _, n := range names {
		if n == name {
			return n
		}
		if strings.EqualFold(n, name) {
			if found != "" {
				return ""
			}
			found = n
		}
	}
	return found
}

// toggleCase swaps the case of the ASCII letters of s.
func toggleCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

var (
	// errLoop: more than maxHops symlinks in one path (ELOOP).
	errLoop = errors.New("too many levels of symbolic links")
	// errProcLink: a path through /proc/PID/root, cwd, exe, fd/N or
	// map_files, which the router cannot resolve as the agent's command
	// will.
	errProcLink = errors.New("a /proc magic link is never resolved")
)

// Stat implements extract.FS.
func (OSFS) Stat(p string) (exists, dir bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return false, false
	}
	return true, fi.IsDir()
}

// Glob implements extract.FS.
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
	// turn is the session's cache of walks for the running turn (nil:
	// none); deadline ends the decision's walks (zero: none yet).
	turn     *turnWalks
	deadline time.Time
}

type resolved struct {
	path string
	err  error
}

func newCachedOSFS() *cachedOSFS {
	return &cachedOSFS{resolved: map[string]resolved{}, stats: map[string][2]bool{}}
}

// requestFS is the filesystem one decision of session s (nil: none)
// sees: with the real filesystem, a cache for the decision, and the
// session's walks of the turn.
func requestFS(fs extract.FS, s *Session) extract.FS {
	if _, ok := fs.(OSFS); ok {
		c := newCachedOSFS()
		if s != nil {
			c.turn = &s.walks
		}
		return c
	}
	return fs
}

// Resolve implements extract.FS with OSFS's semantics.
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
	if extract.ProcMagicLink(full) {
		return "", fmt.Errorf("%s: %w", full, errProcLink)
	}
	full, fi, err := lookup(realDir, filepath.Base(p))
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return full, nil // a new file lands where its directory really is
	case err != nil:
		return "", err
	case fi.Mode()&os.ModeSymlink != 0:
		// Followed even when its target does not exist, with OSFS's
		// bound on hops.
		return OSFS{}.Resolve(full)
	}
	return full, nil
}

// Stat implements extract.FS.
func (c *cachedOSFS) Stat(p string) (exists, dir bool) {
	if s, ok := c.stats[p]; ok {
		return s[0], s[1]
	}
	exists, dir = OSFS{}.Stat(p)
	c.stats[p] = [2]bool{exists, dir}
	return exists, dir
}

// Glob implements extract.FS.
func (c *cachedOSFS) Glob(pattern string) ([]string, error) { return OSFS{}.Glob(pattern) }
