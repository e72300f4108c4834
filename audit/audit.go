// Package audit owns the permission audit log (DESIGN §6): one JSON object
// a line in a 0600 file, written to the OS per decision, rotated when it
// grows past a size cap. It never records file contents or environment
// values: callers pass evidence (paths, commands, domains) only.
//
// # Several processes, one file
//
// Several routers (one per editor window) append to the same file and any of
// them may rotate it (DESIGN §7). Every record is written under an exclusive
// flock(2) on a separate lock file, FILE.lock, which is never removed. One
// Write is:
//
//	flock(FILE.lock, LOCK_EX)
//	lstat(FILE.lock) is the file locked, else reopen it and lock again
//	lstat(FILE) is the file this Log has open (same device and inode), else reopen FILE
//	if size > 0 && size+len(line) > MaxBytes: FILE.N-1 → FILE.N ... FILE → FILE.1, create FILE
//	write(FILE, line): one write(2) of the whole line (O_APPEND)
//	flock(FILE.lock, LOCK_UN)
//
// Why no record is lost and none is torn: every append and every rename is
// done under the same lock (the lstat check after locking makes sure it is
// the lock file at the path, not one unlinked with its directory). Under it,
// the descriptor written to is the file at FILE, so a Log whose file another
// process rotated writes to the new live file, never into FILE.1 or into an
// unlinked file. Nobody else appends or renames meanwhile, so the size read
// is exact (the cap holds: a file exceeds MaxBytes only when it holds a
// single larger record) and a line is never interleaved with another. A
// rename moves whole files, so a record once written stays whole in some
// generation until it is older than Generations rotations. A write that
// fails half way (disk full) is truncated back to the size before it, so
// the next record does not start inside a torn line.
//
// The lock is taken for every record rather than only to rotate: without
// it, another process could rotate between the check and the write, and the
// record would land in FILE.1 (past its cap) or, after more rotations, in a
// file already removed. O_APPEND alone keeps concurrent appends apart on
// local file systems but says nothing about which file receives them; it is
// kept so that a writer that does not take the lock (an older router) still
// appends at the end. The cost is a few system calls a record
// (BenchmarkWrite); records are written once per decision, not per message.
//
// A failure (the directory removed or read-only, the disk full) fails that
// Write with the cause, and the next Write tries again from the start, so
// writing resumes when the directory is back. The caller fails closed: an
// allow that cannot be audited is denied with the error. The directory is
// created by Open only, not recreated by Write: a log that disappears stays
// visible as errors rather than being silently started again elsewhere.
//
// The log and its lock file are opened with O_NOFOLLOW: either file being a
// symbolic link is refused (ErrSymlink), so that a link cannot redirect the
// audit trail, or the router's writes, to another file. Links among the
// directories above them are followed, as the user configured them.
//
// The lock is taken within a deadline (Options.LockTimeout), counted from
// the call to Write, this process's own writers queued before it included:
// flock(2) itself would wait for ever, and a router stopped while holding
// the lock (^Z in its terminal, a debugger) would then freeze every decision
// of every other router, since a decision is not carried out before its
// record is written (issue 27). Past the deadline Write fails with
// ErrLockTimeout, and the caller fails closed as for any other failure.
//
// The lock is advisory: a process that renames or removes the files without
// it (logrotate) is followed at the next Write, but a record written at the
// same moment may land in the renamed file.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acp-router/acp-router/internal/atomicfile"
)

// Defaults of Options.
const (
	// DefaultMaxBytes is the size at which the log is rotated.
	DefaultMaxBytes = 64 << 20
	// DefaultGenerations is how many rotated files are kept: FILE.1 (the
	// newest) to FILE.5.
	DefaultGenerations = 5
	// DefaultLockTimeout bounds the wait for the lock. A record takes a
	// few system calls under it (BenchmarkWrite): a lock held this long is
	// held by a process that is stopped or stuck.
	DefaultLockTimeout = 2 * time.Second
)

var (
	// ErrClosed is returned by Write after Close.
	ErrClosed = errors.New("audit: log closed")
	// ErrSymlink: the log or its lock file is a symbolic link. It is refused
	// so that a link cannot redirect the audit trail.
	ErrSymlink = errors.New("is a symbolic link, refused")
	// ErrNotRegular: the log or its lock file is not a regular file.
	ErrNotRegular = errors.New("is not a regular file")
	// ErrLockTimeout: the lock was not free within Options.LockTimeout
	// (another process holds it, stopped or stuck).
	ErrLockTimeout = errors.New("the lock is held by another writer")
)

// Record is one audited decision. Field names are the log's (DESIGN §6).
type Record struct {
	Time       time.Time `json:"time"`
	DecisionID string    `json:"decisionId"`
	Session    string    `json:"session,omitempty"`
	// ParentSession is the session a subagent session (Session) belongs
	// to, up to its top-level session.
	ParentSession string  `json:"parentSession,omitempty"`
	Agent         string  `json:"agent,omitempty"`
	Method        string  `json:"method"`
	ToolCallID    string  `json:"toolCallId,omitempty"`
	Evidence      any     `json:"evidence"`
	Decision      string  `json:"decision"`
	Rule          *string `json:"rule"` // null when no rule decided
	Layer         string  `json:"layer,omitempty"`
	Source        string  `json:"source"` // rule | default | grant | user | builtin
	UserChoice    string  `json:"userChoice,omitempty"`
	// AnsweredBy is who answered an ask (issue 30): a client of the
	// router's by its token's name (never the token), or "editor" for the
	// editor that launched it; "" when no one answered.
	AnsweredBy string `json:"answeredBy,omitempty"`
	// Answerers are who the policy lets answer the ask (answered_by), when
	// a rule says so; absent when anyone may, and when the rules name no
	// one in common (AnswerRefused then says so).
	Answerers []string `json:"answerers,omitempty"`
	// AnswerRefused says why an answer, or the ask itself, was not taken:
	// the answer came from a client the policy does not let answer, or no
	// client that may answer can (UserChoice is then cancelled).
	AnswerRefused string `json:"answerRefused,omitempty"`
	PolicyHash    string `json:"policyHash"`
	LatencyUs     int64  `json:"latencyUs"`
}

// Options configure a Log. The zero value is the defaults.
type Options struct {
	// MaxBytes is the size at which the log is rotated; <= 0: DefaultMaxBytes.
	MaxBytes int64
	// Generations is how many rotated files are kept (FILE.1 ... FILE.N);
	// <= 0: DefaultGenerations.
	Generations int
	// LockTimeout bounds how long Write and Open wait for the lock;
	// <= 0: DefaultLockTimeout.
	LockTimeout time.Duration
}

// Log appends records to a file shared with other processes. It is safe for
// concurrent use.
type Log struct {
	path     string
	lockPath string
	maxBytes int64
	gens     int
	timeout  time.Duration
	seq      atomic.Uint64

	// turn serializes this process's writers (the flock is per open file,
	// shared by them) and guards what follows. A channel rather than a
	// mutex, so that the wait for it counts against the lock's deadline.
	turn   chan struct{}
	closed bool
	lock   *os.File // FILE.lock; nil until opened, or after it was found replaced
	lockID fileID
	f      *os.File // the live file as last seen; nil after a failed reopen
	fID    fileID
	// rotations counts the rotations this Log did (tests).
	rotations int
}

// fileID identifies a file: what os.SameFile compares, without allocating.
type fileID struct{ dev, ino uint64 }

func idOf(st *syscall.Stat_t) fileID { return fileID{uint64(st.Dev), uint64(st.Ino)} }

// Open opens the log at path, creating it 0600 in a 0700 directory, and its
// lock file path+".lock". A file created earlier with looser permissions is
// tightened to 0600.
func Open(path string, o Options) (*Log, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Generations <= 0 {
		o.Generations = DefaultGenerations
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	l := &Log{path: path, lockPath: path + ".lock", maxBytes: o.MaxBytes, gens: o.Generations, timeout: o.LockTimeout,
		turn: make(chan struct{}, 1)}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l.turn <- struct{}{}
	defer func() { <-l.turn }()
	if err := l.acquire(time.Now().Add(l.timeout)); err != nil {
		l.closeFiles()
		return nil, err
	}
	_, err := l.live()
	l.release()
	if err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

// NewID returns a decision id unique among the processes writing the log.
func (l *Log) NewID() string {
	return strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 10) + "-" +
		strconv.FormatUint(l.seq.Add(1), 10)
}

// Write appends r as one line, written to the OS before it returns. It
// rotates the log first when the line would take it past the cap. An error
// means r was not written; the next Write tries again (reopening the file).
// It waits for the lock at most Options.LockTimeout (ErrLockTimeout).
func (l *Log) Write(r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	line = append(line, '\n')
	deadline := time.Now().Add(l.timeout)
	wait := time.NewTimer(l.timeout)
	select {
	case l.turn <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		return l.lockTimeout()
	}
	defer func() { <-l.turn }()
	if l.closed {
		return ErrClosed
	}
	if err := l.acquire(deadline); err != nil {
		return err
	}
	defer l.release()
	size, err := l.live()
	if err != nil {
		return err
	}
	if size > 0 && size+int64(len(line)) > l.maxBytes {
		if size, err = l.rotate(); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(line); err != nil {
		// Cut a partial line off, so that the next record starts a line.
		if terr := l.f.Truncate(size); terr != nil {
			err = errors.Join(err, terr)
		}
		return fmt.Errorf("audit: write %s: %w", l.path, err)
	}
	return nil
}

// Close closes the log, once the Write under way (if any) is done. Later
// Writes return ErrClosed.
func (l *Log) Close() error {
	l.turn <- struct{}{}
	defer func() { <-l.turn }()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.closeFiles()
}

func (l *Log) closeFiles() error {
	var errs []error
	if l.f != nil {
		errs = append(errs, l.f.Close())
		l.f = nil
	}
	if l.lock != nil {
		errs = append(errs, l.lock.Close())
		l.lock = nil
	}
	return errors.Join(errs...)
}

func (l *Log) lockTimeout() error {
	return fmt.Errorf("audit: lock %s: %w (waited %v)", l.lockPath, ErrLockTimeout, l.timeout)
}

// acquire takes the exclusive lock on the lock file at lockPath by the
// deadline. Holding a lock on a lock file that was unlinked (its directory
// removed and created again) would exclude no one who opened the new one,
// so after locking it checks the file is still the one at the path, and
// reopens it if not.
func (l *Log) acquire(deadline time.Time) error {
	for range 10 {
		if l.lock == nil {
			var st syscall.Stat_t
			f, err := openFile(l.lockPath, os.O_RDWR|os.O_CREATE, &st)
			if err != nil {
				return fmt.Errorf("audit: lock: %w", err)
			}
			l.lock, l.lockID = f, idOf(&st)
		}
		if err := lockBy(l.lock, deadline); err != nil {
			if errors.Is(err, ErrLockTimeout) {
				return l.lockTimeout()
			}
			l.lock.Close()
			l.lock = nil
			return fmt.Errorf("audit: lock %s: %w", l.lockPath, err)
		}
		var st syscall.Stat_t
		err := lstat(l.lockPath, &st)
		if err == nil && idOf(&st) == l.lockID {
			return nil
		}
		l.lock.Close() // releases the lock
		l.lock = nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("audit: lock: %w", &fs.PathError{Op: "lstat", Path: l.lockPath, Err: err})
		}
	}
	return fmt.Errorf("audit: lock %s: replaced again and again", l.lockPath)
}

// release drops the lock. Should unlocking fail, closing the file releases it.
func (l *Log) release() {
	if flock(l.lock, syscall.LOCK_UN) != nil {
		l.lock.Close()
		l.lock = nil
	}
}

// live makes l.f the file at path, reopening it when another process rotated
// it (or it was removed), and returns its size. Called with the lock held.
func (l *Log) live() (int64, error) {
	var st syscall.Stat_t
	err := lstat(l.path, &st)
	if l.f != nil && err == nil && idOf(&st) == l.fID {
		return st.Size, nil
	}
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	f, err := openFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, &st)
	if err != nil {
		return 0, fmt.Errorf("audit: %w", err)
	}
	l.f, l.fID = f, idOf(&st)
	return st.Size, nil
}

// rotate renames FILE.N-1 to FILE.N (dropping the oldest) ... FILE to FILE.1
// and opens a new FILE, whose size it returns. Called with the lock held.
// A failure leaves l.f on the file it was (or nil) and the next Write retries.
func (l *Log) rotate() (int64, error) {
	for g := l.gens - 1; g >= 1; g-- {
		if err := os.Rename(l.generation(g), l.generation(g+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("audit: rotate: %w", err)
		}
	}
	if err := os.Rename(l.path, l.generation(1)); err != nil {
		return 0, fmt.Errorf("audit: rotate: %w", err)
	}
	l.rotations++
	return l.live()
}

// generation is the name of the g-th newest rotated file.
func (l *Log) generation(g int) string { return l.path + "." + strconv.Itoa(g) }

// openFile opens path with flag, never through a symbolic link, creating it
// 0600 (tightening an existing file to 0600), and fills st with what it opened.
func openFile(path string, flag int, st *syscall.Stat_t) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) && lstat(path, st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			return nil, fmt.Errorf("%s %w", path, ErrSymlink)
		}
		return nil, err
	}
	if err := syscall.Fstat(int(f.Fd()), st); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s %w", path, ErrNotRegular)
	}
	if st.Mode&0o777 != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// flock takes or releases an advisory lock (syscall.LOCK_EX, LOCK_UN) on f.
// flock(2) locks belong to the open file: two Logs on one path exclude each
// other even in one process, and closing f releases the lock.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// lockBy takes the exclusive lock on f by the deadline (ErrLockTimeout).
func lockBy(f *os.File, deadline time.Time) error {
	err := atomicfile.LockBy(f, deadline)
	if errors.Is(err, atomicfile.ErrLockTimeout) {
		return ErrLockTimeout
	}
	return err
}

// lstat is syscall.Lstat retried on EINTR.
func lstat(path string, st *syscall.Stat_t) error {
	for {
		err := syscall.Lstat(path, st)
		if err != syscall.EINTR {
			return err
		}
	}
}
