package atomicfile

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// ErrLockTimeout: LockBy's deadline passed with the lock held elsewhere.
var ErrLockTimeout = errors.New("the lock is held by another writer")

// LockBy takes the exclusive flock(2) of f by the deadline (at once or
// ErrLockTimeout when the deadline has passed). flock has no timeout, so a
// lock held by another process is polled with LOCK_NB at growing
// intervals: the router's locks are held for a few system calls, and
// polling costs nothing when the lock is free. flock belongs to the open
// file: two opens in one process exclude each other as two processes do,
// and closing f releases the lock.
func LockBy(f *os.File, deadline time.Time) error {
	pause := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			return err
		}
		if err == syscall.EINTR {
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return ErrLockTimeout
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// OpenLocked opens (creating it 0600, never through a symlink) the lock
// file path and takes its exclusive flock by the deadline: the file to
// close to release it, or ErrLockTimeout, or why it could not be opened
// or locked.
func OpenLocked(path string, deadline time.Time) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := LockBy(f, deadline); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
