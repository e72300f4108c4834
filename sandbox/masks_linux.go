//go:build linux

package sandbox

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// masks are the masks of a plan as the router can check them later: each
// masked path, every symlink resolved (the mount is on the real path),
// with the identity of what it masked. A mask holds as long as the path
// still names that file: a file or directory replaced or renamed from
// outside the namespace since (which detaches the mount there) has
// another identity, and is not credited.
type masks struct {
	files, dirs map[string]ident
}

// ident is a file's identity: a birth time tells a reused inode number
// apart; without one (a file system that keeps none) the change time
// does, and any change since then is taken for a replacement.
type ident struct {
	dev, ino uint64
	time     unix.StatxTimestamp
	birth    bool
}

func identOf(p string) (ident, bool) {
	var st unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_BTIME|unix.STATX_CTIME, &st) != nil {
		return ident{}, false
	}
	id := ident{dev: unix.Mkdev(st.Dev_major, st.Dev_minor), ino: st.Ino, time: st.Ctime}
	if st.Mask&unix.STATX_BTIME != 0 {
		id.time, id.birth = st.Btime, true
	}
	return id, true
}

func newMasks(pl *Plan) *masks {
	m := &masks{files: map[string]ident{}, dirs: map[string]ident{}}
	add := func(to map[string]ident, paths []string) {
		for _, p := range paths {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				continue
			}
			if id, ok := identOf(real); ok {
				to[real] = id
			}
		}
	}
	add(m.files, pl.HideFiles)
	add(m.dirs, pl.HideDirs)
	return m
}

// hides: p, its symlinks resolved, is a masked file or lies below a
// masked directory, whose mask still holds.
func (m *masks) hides(p string) bool {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	if id, ok := m.files[real]; ok {
		return same(real, id)
	}
	for d := real; ; d = filepath.Dir(d) {
		if id, ok := m.dirs[d]; ok {
			return same(d, id)
		}
		if d == "/" || d == "." {
			return false
		}
	}
}

func same(p string, was ident) bool {
	now, ok := identOf(p)
	return ok && now == was
}
