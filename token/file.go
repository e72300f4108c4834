package token

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/acp-router/acp-router/internal/atomicfile"
)

// fileVersion is the format of tokens.json. Another version is refused, not
// guessed at: a router must not accept tokens from a file it misreads.
const fileVersion = 1

type fileData struct {
	Version int      `json:"version"`
	Tokens  []record `json:"tokens"`
}

// record is one token on disk.
type record struct {
	Name        string    `json:"name"`
	Role        string    `json:"role"`
	AllSessions bool      `json:"all_sessions"`
	Created     time.Time `json:"created"`
	LastUsed    time.Time `json:"last_used,omitzero"`
	// SHA256 is the hex digest of the whole secret, prefix included.
	SHA256 string `json:"sha256"`

	sum [sha256.Size]byte // SHA256 decoded, on load
	id  string            // idOf(sum)
}

// idOf is a token's Identity.ID: a hash of its digest, so that what goes
// around the process with every connection is neither the secret nor what
// the file keeps of it.
func idOf(sum [sha256.Size]byte) string {
	h := sha256.Sum256(append([]byte("acp-router token id\x00"), sum[:]...))
	return hex.EncodeToString(h[:16])
}

func newRecord(name, role string, all bool, secret string, now time.Time) record {
	sum := sha256.Sum256([]byte(secret))
	return record{Name: name, Role: role, AllSessions: all, Created: now.UTC().Truncate(time.Second),
		SHA256: hex.EncodeToString(sum[:]), sum: sum, id: idOf(sum)}
}

// stamp tells whether the file at the path is still the one read: each
// write renames a new file over it, so its inode changes; size and times
// cover an inode reused at once.
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func stampOf(st *syscall.Stat_t) stamp {
	return stamp{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// errNoChange from an update's change function: write nothing.
var errNoChange = errors.New("no change")

// maxFileBytes bounds what is read: a tokens file is a few hundred bytes a
// token.
const maxFileBytes = 4 << 20

// read reads the tokens file (none: no tokens) and returns its records and
// the stamp of the file read. The file must be a regular file of this user
// that nobody else may read or write (ErrInsecure).
func (s *Store) read() ([]record, stamp, error) {
	f, err := os.OpenFile(s.path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, stamp{}, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, stamp{}, fmt.Errorf("%w: %s is a symbolic link", ErrInsecure, s.path)
	}
	if err != nil {
		return nil, stamp{}, fmt.Errorf("token: %w", err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, stamp{}, fmt.Errorf("token: %s: %w", s.path, err)
	}
	if err := secure(s.path, &st, fileMode); err != nil {
		return nil, stamp{}, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, stamp{}, fmt.Errorf("token: %s: %w", s.path, err)
	}
	if len(b) > maxFileBytes {
		return nil, stamp{}, fmt.Errorf("token: %s: larger than %d bytes", s.path, maxFileBytes)
	}
	recs, err := parse(b)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("token: %s: %w", s.path, err)
	}
	return recs, stampOf(&st), nil
}

// secure refuses a file or directory that is not this user's, or that
// grants anything to group or others.
func secure(path string, st *syscall.Stat_t, want os.FileMode) error {
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s belongs to uid %d, not to this user", ErrInsecure, path, st.Uid)
	}
	if mode := os.FileMode(st.Mode) & 0o777; mode&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o, want %#o (chmod %o %s)", ErrInsecure, path, mode, want, want, path)
	}
	return nil
}

func parse(b []byte) ([]record, error) {
	var d fileData
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	if d.Version != fileVersion {
		return nil, fmt.Errorf("version %d, this router reads version %d", d.Version, fileVersion)
	}
	seen := map[string]bool{}
	for i := range d.Tokens {
		r := &d.Tokens[i]
		if CheckName(r.Name) != nil || checkRole(r.Role) != nil || seen[r.Name] {
			return nil, fmt.Errorf("token %d: bad or duplicate name, or bad role", i+1)
		}
		seen[r.Name] = true
		sum, err := hex.DecodeString(r.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("token %q: bad sha256", r.Name)
		}
		copy(r.sum[:], sum)
		r.id = idOf(r.sum)
	}
	return d.Tokens, nil
}

// update changes the file under the lock: change gets the records as they
// are on disk now and returns the new ones (errNoChange: leave the file).
func (s *Store) update(change func([]record) ([]record, error)) error {
	if err := s.ensureDir(); err != nil {
		return err
	}
	lock, err := s.lock(true)
	if err != nil {
		return err
	}
	defer lock.Close() // releases the flock
	return s.updateLocked(change)
}

func (s *Store) updateLocked(change func([]record) ([]record, error)) error {
	recs, _, err := s.read()
	if err != nil {
		return err
	}
	recs, err = change(recs)
	if errors.Is(err, errNoChange) {
		return nil
	}
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []record{}
	}
	b, err := json.MarshalIndent(fileData{Version: fileVersion, Tokens: recs}, "", "  ")
	if err != nil {
		return err
	}
	if err := s.writeAtomic(append(b, '\n')); err != nil {
		return fmt.Errorf("token: write %s: %w", s.path, err)
	}
	// This process sees its own change at once, whatever the stamps say.
	s.mu.Lock()
	s.stamp = stamp{}
	s.mu.Unlock()
	return nil
}

// ensureDir creates the tokens directory 0700, and tightens one made
// looser by someone else's hand (it is ours alone).
func (s *Store) ensureDir() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(s.dir, &st); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return fmt.Errorf("%w: %s is not a directory", ErrInsecure, s.dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s belongs to uid %d, not to this user", ErrInsecure, s.dir, st.Uid)
	}
	if st.Mode&0o077 != 0 {
		if err := os.Chmod(s.dir, 0o700); err != nil {
			return fmt.Errorf("token: %w", err)
		}
	}
	return nil
}

// lock opens tokens.lock and takes its exclusive flock(2): within
// LockTimeout when wait, else at once or ErrLockTimeout. Closing the file
// releases it. flock belongs to the open file, so two Stores in one process
// exclude each other as two processes do.
func (s *Store) lock(wait bool) (*os.File, error) {
	deadline := time.Now() // at once
	if wait {
		deadline = deadline.Add(s.opts.LockTimeout)
	}
	f, err := atomicfile.OpenLocked(s.lockPath, deadline)
	if errors.Is(err, atomicfile.ErrLockTimeout) {
		return nil, ErrLockTimeout
	}
	if err != nil {
		return nil, fmt.Errorf("token: lock: %w", err)
	}
	return f, nil
}

// writeAtomic replaces the tokens file with data: a temp file in the same
// directory, mode 0600 whatever the umask, fsynced, renamed over it, the
// directory fsynced. Readers see the old or the new file, also after a
// crash.
func (s *Store) writeAtomic(data []byte) error {
	return atomicfile.Options{Perm: fileMode, Sync: true, SyncDir: true}.Write(s.path, data)
}

// current returns the records in force: the cached ones while the file's
// stamp is unchanged and the cache is younger than rereadEvery, else the
// file read again.
func (s *Store) current() ([]record, error) {
	recs, _, err := s.currentGen()
	return recs, err
}

// currentGen is current, and the generation of what it returns: gen
// changes whenever the file was read again (or failed to be).
func (s *Store) currentGen() ([]record, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, err := s.currentLocked()
	return recs, s.gen, err
}

func (s *Store) currentLocked() ([]record, error) {
	var st syscall.Stat_t
	err := syscall.Lstat(s.path, &st)
	switch {
	case errors.Is(err, syscall.ENOENT):
		if s.cache != nil || s.gen == 0 {
			s.gen++
		}
		s.cache, s.stamp, s.readAt = nil, stamp{}, time.Now()
		return nil, nil
	case err != nil:
		s.gen++
		return nil, fmt.Errorf("token: %w", err)
	}
	if s.stamp != (stamp{}) && stampOf(&st) == s.stamp && time.Since(s.readAt) < rereadEvery {
		return s.cache, nil
	}
	s.gen++
	recs, sp, err := s.read()
	if err != nil {
		// Fail closed: a file that cannot be read accepts no token,
		// rather than the ones it held before. Logged once per cause,
		// not once per request.
		s.cache, s.stamp = nil, stamp{}
		if err.Error() != s.failed {
			s.failed = err.Error()
			s.log.Error("tokens file unreadable: every token refused", "error", err)
		}
		return nil, err
	}
	if s.failed != "" {
		s.failed = ""
		s.log.Info("tokens file readable again", "file", s.path)
	}
	s.cache, s.stamp, s.readAt = recs, sp, time.Now()
	return recs, nil
}
