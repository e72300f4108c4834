package store

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/acp-router/acp-router/internal/atomicfile"
)

// flock takes an advisory lock (syscall.LOCK_EX or LOCK_SH, maybe with
// LOCK_NB) on f. flock(2) locks belong to the open file, so they are held per
// commit, not per process, and closing f releases them.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// openLocked opens path and locks it. A trim replaces a log by renaming a new
// file over it, and a delete removes it, so the file locked may no longer be
// the one at path: then it opens again (or, without create, reports
// fs.ErrNotExist when path is gone).
func openLocked(path string, how int, create bool) (*os.File, error) {
	flag := os.O_RDWR
	if how&syscall.LOCK_SH != 0 {
		flag = os.O_RDONLY
	}
	if create {
		flag |= os.O_CREATE
	}
	for {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return nil, err
		}
		if err := flock(f, how); err != nil {
			f.Close()
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		pi, err := os.Stat(path)
		if err == nil && os.SameFile(fi, pi) {
			return f, nil
		}
		f.Close()
		if err != nil && (!errors.Is(err, fs.ErrNotExist) || !create) {
			return nil, err
		}
	}
}

// writeFileAtomic replaces path with data: a 0600 temp file in the same
// directory, fsynced, renamed over path. Readers see the old or the new
// content, never a mix, also after a crash.
func (s *Store) writeFileAtomic(path string, data []byte) error {
	return atomicfile.Options{Sync: true, Failpoint: func(step string) error { return s.failpoint("meta." + step) }}.Write(path, data)
}

// syncDir makes renames and new files in dir durable.
func syncDir(dir string) error { return atomicfile.SyncDir(dir) }

// failpoint is called before each change to the disk, with its name. Tests
// make it crash the process or fail the change; nil in production.
func (s *Store) failpoint(op string) error {
	if s.fail == nil {
		return nil
	}
	return s.fail(op)
}
