package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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
func (s *Store) writeFileAtomic(path string, data []byte) (err error) {
	if err := s.failpoint("meta.write"); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = s.failpoint("meta.sync"); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = s.failpoint("meta.rename"); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// syncDir makes renames and new files in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// failpoint is called before each change to the disk, with its name. Tests
// make it crash the process or fail the change; nil in production.
func (s *Store) failpoint(op string) error {
	if s.fail == nil {
		return nil
	}
	return s.fail(op)
}
