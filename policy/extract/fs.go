package extract

import (
	"errors"
	"fmt"
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

// Walker is an FS that can list what is below a directory, so that a
// recursive read (grep -r DIR, rg, cp -r) is decided by what it would
// really read: a deny or ask rule that could match something below DIR
// applies only when an existing entry below it does. With an FS that is
// not a Walker (or none) such a rule asks, as it must without knowing.
type Walker interface {
	FS
	// Walk lists the entries below the directory dir (absolute, clean,
	// its symlinks resolved), breadth first, without dir itself. It never
	// descends into a symlink (a symlink is an entry; WalkEntry.Target
	// says where it leads) and, with skipHidden, neither lists nor
	// descends into a name starting with a dot. It stops past
	// MaxWalkEntries entries, MaxWalkDepth levels or its own time bound,
	// and then says so in WalkResult.Cut. A dir that does not exist or is
	// not a directory has no entries.
	Walk(dir string, skipHidden bool) WalkResult
}

// Bounds of one walk (Walker): past them the walk is cut short and the
// recursive read asks, as it does without a Walker.
const (
	MaxWalkEntries = 20000
	MaxWalkDepth   = 64
)

// WalkEntry is one entry below a walked directory.
type WalkEntry struct {
	// Rel is the entry's path relative to the walked directory.
	Rel string
	// Dir: the entry is a directory (not a symlink to one).
	Dir bool
	// Link: the entry is a symlink. Target is where it leads, every
	// symlink resolved ("" when it cannot be resolved: a loop); TargetDir
	// says the target is an existing directory.
	Link      bool
	Target    string
	TargetDir bool
}

// WalkResult is what a Walk found.
type WalkResult struct {
	Entries []WalkEntry
	// Cut says why the walk stopped before listing everything ("" when it
	// did not): Entries are then only some of them.
	Cut string
}

// Size is an estimate of the bytes r holds, for caches bounding their
// memory.
func (r *WalkResult) Size() int {
	n := len(r.Cut) + 64
	for i := range r.Entries {
		n += len(r.Entries[i].Rel) + len(r.Entries[i].Target) + 48
	}
	return n
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
		if v := m.foldVariant(string(cur)); v != "" {
			cur = append(cur[:0], v...)
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

// foldVariant returns the entry that p names when p itself does not
// exist but one spelling of it differing only in case does ("" else). The
// resolvers take that one (guard's OSFS does the same): on a
// case-insensitive filesystem .ENV opens .env, and on a case-sensitive
// one matching the existing spelling too only makes the decision
// stricter.
func (m *MapFS) foldVariant(p string) string {
	if _, ok := m.files[p]; ok {
		return ""
	}
	if _, ok := m.symlinks[p]; ok {
		return ""
	}
	dir, base := path.Dir(p), path.Base(p)
	found := ""
	for _, set := range []map[string]bool{m.files, boolKeys(m.symlinks)} {
		for q := range set {
			if q != found && path.Dir(q) == dir && strings.EqualFold(path.Base(q), base) {
				if found != "" {
					return "" // several: which one is not known
				}
				found = q
			}
		}
	}
	return found
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

var _ Walker = (*MapFS)(nil)

// Walk implements Walker: the files, directories and symlinks below dir,
// breadth first and sorted within a level.
func (m *MapFS) Walk(dir string, skipHidden bool) WalkResult {
	var res WalkResult
	if !m.files[dir] {
		return res
	}
	type cand struct {
		rel   string
		depth int
	}
	var cands []cand
	consider := func(p string) {
		rel, ok := Below(dir, p)
		if !ok || rel == "" {
			return
		}
		segs := strings.Split(rel, "/")
		for i, seg := range segs {
			if skipHidden && strings.HasPrefix(seg, ".") {
				return
			}
			if i < len(segs)-1 {
				// Never below a symlink: the walk does not descend into one.
				if _, ok := m.symlinks[path.Join(dir, strings.Join(segs[:i+1], "/"))]; ok {
					return
				}
			}
		}
		cands = append(cands, cand{rel, len(segs)})
	}
	for p := range m.files {
		if _, ok := m.symlinks[p]; !ok {
			consider(p)
		}
	}
	for p := range m.symlinks {
		consider(p)
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.depth != b.depth {
			return a.depth - b.depth
		}
		return strings.Compare(a.rel, b.rel)
	})
	for _, c := range cands {
		if c.depth > MaxWalkDepth {
			res.Cut = fmt.Sprintf("more than %d levels of directories", MaxWalkDepth)
			break
		}
		if len(res.Entries) >= MaxWalkEntries {
			res.Cut = fmt.Sprintf("more than %d entries", MaxWalkEntries)
			break
		}
		full := path.Join(dir, c.rel)
		e := WalkEntry{Rel: c.rel}
		if _, ok := m.symlinks[full]; ok {
			e.Link = true
			if t, err := m.Resolve(full); err == nil {
				e.Target = t
				e.TargetDir = m.files[t]
			}
		} else {
			e.Dir = m.files[full]
		}
		res.Entries = append(res.Entries, e)
	}
	return res
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
