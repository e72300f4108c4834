package policy

import (
	"errors"
	"path"
	"slices"
	"strings"
)

// FS is what the policy needs to know about the filesystem. The router
// passes one backed by the real filesystem; tests and `policy test` pass a
// MapFS. A nil FS means: nothing exists and there are no symlinks.
//
// Every path given to FS is absolute; it may still contain "." and ".."
// (Resolve must apply them after resolving the symlinks before them, as the
// kernel does).
type FS interface {
	// Resolve returns path with every symlink resolved, as the kernel
	// would: a symlink whose target does not exist is still followed (a
	// write through it creates the target). For a path that does not
	// exist, the deepest existing ancestor is resolved and the rest
	// appended. An error (a loop, no permission, a /proc magic link: see
	// ProcMagicLink) makes the path impossible to allow.
	Resolve(path string) (string, error)
	// Stat reports whether path exists (following symlinks) and whether it
	// is a directory.
	Stat(path string) (exists, dir bool)
	// Glob returns the existing paths matching the shell glob pattern (an
	// absolute path with *, ? and [...] in it), sorted; nil when none does.
	Glob(pattern string) ([]string, error)
}

// MapFS is an in-memory FS: a set of files and directories and a set of
// symlinks. The zero value is empty. Build one with NewMapFS.
type MapFS struct {
	files    map[string]bool   // path -> is a directory
	symlinks map[string]string // link -> absolute target
}

// NewMapFS returns a MapFS holding files (a trailing / makes a directory;
// every parent is a directory too) and symlinks (link → target; a relative
// target is relative to the link's directory). Paths must be absolute.
func NewMapFS(files []string, symlinks map[string]string) *MapFS {
	m := &MapFS{files: map[string]bool{"/": true}, symlinks: map[string]string{}}
	add := func(p string, dir bool) {
		p = path.Clean(p)
		if !m.files[p] {
			m.files[p] = dir
		}
		for d := path.Dir(p); ; d = path.Dir(d) {
			m.files[d] = true
			if d == "/" {
				break
			}
		}
	}
	for _, f := range files {
		add(f, strings.HasSuffix(f, "/"))
	}
	for link, target := range symlinks {
		link = path.Clean(link)
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(link), target)
		}
		m.symlinks[link] = path.Clean(target)
		add(path.Dir(link), true)
	}
	return m
}

var (
	errLoop = errors.New("too many levels of symbolic links")
	// errProcLink: see ProcMagicLink.
	errProcLink = errors.New("a /proc magic link is never resolved")
)

// ProcMagicLink reports whether p (absolute, clean) is one of the kernel's
// magic links: /proc/PID/root, cwd, exe, fd/N or map_files/X, also under
// /proc/PID/task/TID/, with PID a number, self or thread-self. What they
// point to depends on the process that looks (the agent's command, not
// the router), so a resolver refuses them.
func ProcMagicLink(p string) bool {
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return false
	}
	c := strings.Split(rest, "/")
	if !procID(c[0]) && c[0] != "self" && c[0] != "thread-self" {
		return false
	}
	c = c[1:]
	if len(c) >= 3 && c[0] == "task" && procID(c[1]) {
		c = c[2:]
	}
	switch {
	case len(c) == 1:
		return c[0] == "root" || c[0] == "cwd" || c[0] == "exe"
	case len(c) == 2:
		return c[0] == "fd" || c[0] == "map_files"
	}
	return false
}

func procID(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Resolve implements FS, walking path one component at a time as the
// kernel does.
func (m *MapFS) Resolve(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", errors.New("not an absolute path")
	}
	cur := make([]byte, 0, len(p))
	rest := p
	hops := 0
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
			continue
		case "..":
			if i := bytesLastSlash(cur); i >= 0 {
				cur = cur[:i]
			}
			continue
		}
		cur = append(cur, '/')
		cur = append(cur, c...)
		if ProcMagicLink(string(cur)) {
			return "", errProcLink
		}
		if target, ok := m.symlinks[string(cur)]; ok {
			if hops++; hops > 40 {
				return "", errLoop
			}
			cur = cur[:0]
			if rest != "" {
				rest = target + "/" + rest
			} else {
				rest = target
			}
			continue
		}
		if _, ok := m.files[string(cur)]; !ok {
			// The deepest existing ancestor is resolved; the rest is
			// appended as written.
			return path.Clean(string(cur) + "/" + rest), nil
		}
	}
	if len(cur) == 0 {
		return "/", nil
	}
	return string(cur), nil
}

func bytesLastSlash(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '/' {
			return i
		}
	}
	return -1
}

// Stat implements FS.
func (m *MapFS) Stat(p string) (exists, dir bool) {
	r, err := m.Resolve(p)
	if err != nil {
		return false, false
	}
	dir, exists = m.files[r]
	return exists, dir
}

// Glob implements FS with path.Match semantics over every known path.
func (m *MapFS) Glob(pattern string) ([]string, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	var out []string
	for _, set := range []map[string]bool{m.files, boolKeys(m.symlinks)} {
		for p := range set {
			if ok, _ := path.Match(pattern, p); ok && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func boolKeys(m map[string]string) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = false
	}
	return out
}

// FileID identifies a file the way the kernel does: a hard link to a file
// is the same file under another name.
type FileID struct {
	Dev, Ino uint64
	Nlink    uint64 // the number of names the file has
}

// IdentityFS is an FS that can also tell which file a path is: the router's
// real filesystem does, to find a hard link to a denied file under a name no
// rule denies. Identity follows symlinks; ok is false when path does not
// name an existing regular file.
type IdentityFS interface {
	FS
	Identity(path string) (id FileID, ok bool)
}

// DenyRoot is a literal path under which a deny or ask rule's paths may
// match: the part of a pattern before its first meta character, anchored
// at / or the home directory (~/.ssh for ~/.ssh/**, /etc/shadow for
// /etc/shadow). The files under it can be enumerated, to know them under
// another name (a hard link). Patterns anchored anywhere (**/.env) or at
// the session's directories have none.
type DenyRoot struct {
	Path    string
	Rule    string
	Layer   string
	Effect  Effect
	Message string
	// Kinds are the rule's kind matcher; nil: any kind.
	Kinds []Kind
}

// DenyRoots returns the DenyRoots of the deny and ask rules of p, with ~
// and ${home} as home (skipped when home is not absolute). A root of "/"
// alone is skipped: it cannot be enumerated. A rule's unless is not
// applied: a file it carves out is still under the root.
func (p *Policy) DenyRoots(home string) []DenyRoot {
	var out []DenyRoot
	for _, r := range p.rules {
		if r.Decision != Deny && r.Decision != Ask || r.When == nil {
			continue
		}
		c := r.When
		var kinds []Kind
		for i, k := range allKinds {
			if c.kinds&(1<<i) != 0 {
				kinds = append(kinds, k)
			}
		}
		for i := range c.paths {
			pp := &c.paths[i]
			base := "/"
			switch pp.anchor {
			case anchorRoot:
			case anchorHome:
				if !path.IsAbs(home) {
					continue
				}
				base = path.Clean(home)
			default:
				continue
			}
			lit := base
			for _, comp := range strings.Split(pp.rest, "/") {
				if comp == "" || strings.ContainsAny(comp, `*?[{\`) {
					break
				}
				lit = path.Join(lit, comp)
			}
			if lit == "/" {
				continue
			}
			out = append(out, DenyRoot{Path: lit, Rule: r.ID, Layer: r.Layer, Effect: r.Decision, Message: r.Message, Kinds: kinds})
		}
	}
	return out
}
