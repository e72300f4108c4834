// Package atomicfile replaces a file so that a reader sees the old content
// or the new, never a mix: the one way the router writes its state files
// (the agents' cached initialize answers, the session store's metadata,
// the tokens, the hub's session owners, the running and listening
// records, the sandbox's plans).
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Options says how a file is written; the zero value is a 0600 file
// replaced atomically, not fsynced.
type Options struct {
	// Perm is the new file's mode (0600 when zero), whatever the umask.
	// The temporary file is created 0600 and changed before it is
	// written, so the content is never readable more widely than Perm.
	Perm fs.FileMode
	// Sync fsyncs the file before the rename, so that a crash leaves the
	// old content or the new, never an empty file (for what cannot be
	// rebuilt: the tokens, the store, the session owners).
	Sync bool
	// SyncDir fsyncs the directory after the rename: the new content, not
	// only a whole one, survives a crash.
	SyncDir bool
	// Failpoint, when set, is called before each step ("write", "sync",
	// "rename"); an error it returns aborts the write there, as a failed
	// step would (the store's crash tests).
	Failpoint func(step string) error
}

// Write replaces path with data, with the zero Options.
func Write(path string, data []byte) error { return Options{}.Write(path, data) }

// Write replaces path with data: a temporary file in the same directory,
// renamed over path. The temporary file is removed on any failure.
func (o Options) Write(path string, data []byte) (err error) {
	step := func(name string) error {
		if o.Failpoint == nil {
			return nil
		}
		return o.Failpoint(name)
	}
	if err := step("write"); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	perm := o.Perm
	if perm == 0 {
		perm = 0o600
	}
	if err = f.Chmod(perm); err != nil { // whatever the umask made of it
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if o.Sync {
		if err = step("sync"); err != nil {
			return err
		}
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = step("rename"); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	if o.SyncDir {
		return SyncDir(dir)
	}
	return nil
}

// SyncDir makes the renames and new files in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
