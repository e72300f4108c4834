// Package token owns the named bearer tokens of the remote transport (issue
// 30, "Authentication"): creating, listing and revoking them, and deciding
// whether an HTTP request carries one.
//
// A token is 32 random bytes, shown once as "acpr_" + base64url. The store
// keeps only its SHA-256, with a name, a role (controller or observer),
// whether it may see sessions other clients started, when it was created and
// (coarsely) when it was last used, in STATE_DIR/tokens/tokens.json: a 0600
// file in a 0700 directory. A secret of 256 random bits needs no slow hash:
// nobody can guess it, so the digest only keeps a copy of the file from
// being a key.
//
// # Several processes, one file
//
// The CLI and every running router share the file. Each change (create,
// revoke, the last-used time) is made under an exclusive flock(2) on
// tokens.lock, which is never removed: read the file, change it, write a
// 0600 temp file, fsync, rename it over tokens.json. Readers take no lock (a
// rename is atomic: they see the old file or the new one). A running Store
// stats the file on every Authenticate and reads it again when it changed
// (the rename gives it a new inode), and at least once a second anyway, so a
// revoke takes effect in every router at once.
//
// A revoke ends the connections the token opened too, not only its next
// request: the transport watches each connection's token (Watch, by
// Identity.ID, which a token created again under the same name does not
// share), and while any is watched the Store looks at the file every
// watchEvery, ending the watches of every token no longer in it.
//
// # What is never written anywhere
//
// Secrets are neither stored nor logged nor put in errors: logs and errors
// name a token by its name, and a failed attempt by its source address. The
// audit records the name (the hub's Identity.Name).
package token

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Roles: the most a client holding the token may be (RFD #533's roles).
const (
	RoleController = "controller"
	RoleObserver   = "observer"
)

// Where a request may carry its token (Authenticate).
const (
	// CookieName is the cookie remote/ sets after a first URL carried
	// ?token=, so that the secret leaves the address bar and history.
	CookieName = "acp_router_token"
	// QueryParam is meant for the first URL only (the one printed at
	// start, or opened on a phone).
	QueryParam = "token"
	// Prefix starts every secret, so that secret scanners and people
	// recognise one.
	Prefix = "acpr_"
)

// MaxNameLen bounds a token's name: names go into logs, the audit and
// policy rules (answered_by:).
const MaxNameLen = 64

// Defaults of Options.
const (
	DefaultLastUsedEvery = 5 * time.Minute
	DefaultLockTimeout   = 5 * time.Second
	DefaultBaseDelay     = 250 * time.Millisecond
	DefaultMaxDelay      = 30 * time.Second
	DefaultForget        = 15 * time.Minute
	DefaultMaxTracked    = 10000
	// rereadEvery is how stale the cached file may be even when its stat
	// did not change (two writes in one timestamp tick, the same size, an
	// inode reused): a revoke holds within it.
	rereadEvery = time.Second
)

var (
	// ErrUnauthorized is every authentication failure. Callers answer 401
	// and nothing else; the wrapped detail is for the log only.
	ErrUnauthorized = errors.New("token: unauthorized")
	// ErrNoCredentials: the request carries no token at all (wraps
	// ErrUnauthorized). Not counted as a failed attempt.
	ErrNoCredentials = fmt.Errorf("%w: no token in the request", ErrUnauthorized)
	// ErrHeldBack: the source address failed too often recently; its
	// attempts are refused unread until its delay has passed (wraps
	// ErrUnauthorized).
	ErrHeldBack = fmt.Errorf("%w: too many failures from this address, held back", ErrUnauthorized)
	// ErrBadName: an empty, too long or reserved name, or one with
	// characters outside [A-Za-z0-9._@-].
	ErrBadName = errors.New("token: bad name")
	// ErrExists: a token of that name exists.
	ErrExists = errors.New("token: a token of that name exists")
	// ErrNotFound: no token of that name.
	ErrNotFound = errors.New("token: no such token")
	// ErrBadRole: a role other than controller or observer.
	ErrBadRole = errors.New("token: role must be controller or observer")
	// ErrInsecure: the tokens file or directory may be read or written
	// by someone else, or is a symbolic link; nothing in it is trusted.
	ErrInsecure = errors.New("token: insecure tokens file")
	// ErrLockTimeout: another process held the lock past LockTimeout.
	ErrLockTimeout = errors.New("token: timed out waiting for the tokens lock")
)

// Identity is who a request authenticated as. hub.Identity and remote/
// convert from it (Editor is never set by a token).
type Identity struct {
	Name        string // the token's name
	Role        string // RoleController or RoleObserver: the most this client may be
	AllSessions bool   // may see and attach sessions other clients started
	// ID names this token among all the store ever held: derived from its
	// digest (never the secret, nor the digest itself), so a token revoked
	// and created again under the same name has another ID. Watch takes it.
	ID string
}

// Info is what List tells about a token: never its secret or digest.
type Info struct {
	Name        string
	Role        string
	AllSessions bool
	Created     time.Time
	LastUsed    time.Time // zero: never used; updated at most every LastUsedEvery
}

// Options tunes a Store. Zero values take the defaults.
type Options struct {
	// Logger receives failures by source address and store errors,
	// never a secret. nil: none.
	Logger hclog.Logger
	// Now is the clock of the failure delays and of created / last-used
	// times (tests pass a fake). nil: time.Now.
	Now func() time.Time
	// LastUsedEvery: the last-used time on disk is rewritten only when it
	// is older than this, so that a busy token costs no write per request.
	LastUsedEvery time.Duration
	// LockTimeout bounds the wait for tokens.lock: a process stopped
	// while holding it must not freeze the others.
	LockTimeout time.Duration
	// BaseDelay is how long an address is held back after its first
	// failure; it doubles with each further failure up to MaxDelay.
	BaseDelay, MaxDelay time.Duration
	// Forget: an address with no failure for this long starts again from
	// zero.
	Forget time.Duration
	// MaxTracked caps the addresses whose failures are remembered (the
	// least recently failing are forgotten first), so that failures from
	// many addresses cannot grow the router's memory.
	MaxTracked int
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LastUsedEvery <= 0 {
		o.LastUsedEvery = DefaultLastUsedEvery
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = DefaultBaseDelay
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.Forget <= 0 {
		o.Forget = DefaultForget
	}
	if o.MaxTracked <= 0 {
		o.MaxTracked = DefaultMaxTracked
	}
}

// Store is the tokens file of one state directory. It is safe for
// concurrent use, and with other processes using the same directory.
type Store struct {
	dir, path, lockPath string
	opts                Options
	log                 hclog.Logger
	lim                 *limiter

	mu      sync.Mutex // guards what follows
	cache   []record   // the file as last read
	stamp   stamp      // the stat of the file cache was read from
	readAt  time.Time  // when cache was read (monotonic clock)
	touched map[string]time.Time
	failed  string // the error reading the file last logged; "" when it was read
	gen     uint64 // counts the reads of the file (and the failures to read it)

	wmu      sync.Mutex                       // guards what follows (taken before mu, never inside it)
	watchers map[string]map[*watcher]struct{} // by token ID
	polling  bool                             // poll runs
	swept    uint64                           // the gen poll last swept
}

// Dir is where the tokens of stateDir are kept.
func Dir(stateDir string) string { return filepath.Join(stateDir, "tokens") }

// Open returns the Store of stateDir (config's StateDir). Nothing is created
// until a token is.
func Open(stateDir string, opts Options) (*Store, error) {
	if !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("token: state dir %q is not absolute", stateDir)
	}
	opts.setDefaults()
	dir := Dir(stateDir)
	return &Store{
		dir:      dir,
		path:     filepath.Join(dir, "tokens.json"),
		lockPath: filepath.Join(dir, "tokens.lock"),
		opts:     opts,
		log:      opts.Logger,
		lim:      newLimiter(opts),
		touched:  map[string]time.Time{},
	}, nil
}

// Path is the tokens file.
func (s *Store) Path() string { return s.path }

// CheckName says why name cannot name a token (ErrBadName), or nil.
// "editor" is reserved: it names the stdio editor in the audit and in
// answered_by: rules, and a token must never pass for it.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrBadName, MaxNameLen)
	case strings.EqualFold(name, "editor"):
		return fmt.Errorf("%w: %q is reserved for the stdio editor", ErrBadName, name)
	case name[0] == '-':
		return fmt.Errorf("%w: %q starts with '-'", ErrBadName, name)
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._@-", c) >= 0
		if !ok {
			return fmt.Errorf("%w: %q has a character outside A-Z a-z 0-9 . _ @ -", ErrBadName, name)
		}
	}
	return nil
}

func checkRole(role string) error {
	if role != RoleController && role != RoleObserver {
		return fmt.Errorf("%w (got %q)", ErrBadRole, role)
	}
	return nil
}

// newSecret is 32 random bytes as Prefix + base64url (no padding).
func newSecret() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24)
	return Prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Create adds a token and returns its secret, which is not kept: the caller
// shows it once. allSessions false limits it to the sessions its own
// clients started.
func (s *Store) Create(name, role string, allSessions bool) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	if err := checkRole(role); err != nil {
		return "", err
	}
	secret := newSecret()
	err := s.update(func(recs []record) ([]record, error) {
		if slices.ContainsFunc(recs, func(r record) bool { return r.Name == name }) {
			return nil, fmt.Errorf("%w: %q", ErrExists, name)
		}
		return append(recs, newRecord(name, role, allSessions, secret, s.opts.Now())), nil
	})
	if err != nil {
		return "", err
	}
	s.log.Info("token created", "token", name, "role", role, "all_sessions", allSessions)
	return secret, nil
}

// EnsureFirst creates a controller token named name that sees every
// session, when the store holds no token at all, and returns its secret
// with created true; otherwise it changes nothing (created false). It is
// what a router listening on loopback calls at start, to print a URL with
// a fresh token on its first use (issue 30); several routers starting at
// once create one token between them.
func (s *Store) EnsureFirst(name string) (secret string, created bool, err error) {
	if err := CheckName(name); err != nil {
		return "", false, err
	}
	candidate := newSecret()
	err = s.update(func(recs []record) ([]record, error) {
		if len(recs) > 0 {
			return nil, errNoChange
		}
		created = true
		return []record{newRecord(name, RoleController, true, candidate, s.opts.Now())}, nil
	})
	if err != nil || !created {
		return "", false, err
	}
	s.log.Info("token created", "token", name, "role", RoleController, "all_sessions", true, "first", true)
	return candidate, true, nil
}

// Revoke removes the token named name (ErrNotFound if there is none). A
// running Store refuses it from its next Authenticate on.
func (s *Store) Revoke(name string) error {
	err := s.update(func(recs []record) ([]record, error) {
		i := slices.IndexFunc(recs, func(r record) bool { return r.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		return slices.Delete(recs, i, i+1), nil
	})
	if err != nil {
		return err
	}
	s.log.Info("token revoked", "token", name)
	return nil
}

// List returns the tokens in the order they were created.
func (s *Store) List() ([]Info, error) {
	recs, _, err := s.read()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(recs))
	for _, r := range recs {
		out = append(out, Info{Name: r.Name, Role: r.Role, AllSessions: r.AllSessions, Created: r.Created, LastUsed: r.LastUsed})
	}
	return out, nil
}

// fileMode is checked on read and set on write: the file holds only
// digests, but one writable by others could be given a token of theirs.
const fileMode os.FileMode = 0o600
