// Package store owns the session store in state_dir (issue 5, requirement 1;
// DESIGN §4 `history:`): what the router remembers of each router session so
// that editors can list and reopen threads after an agent or the router
// itself restarted. Several router processes (one per editor window) use one
// directory at the same time; nothing takes an exclusive lock on open.
//
// # Use from the router
//
//	st, err := store.Open(filepath.Join(cfg.StateDir, "sessions"), store.Options{...})
//	defer st.Close()
//
//	st.Create(store.Meta{ID: id, Cwd: cwd, ActiveAgent: "claude", Agents: ...}) // session/new
//	st.Update(id, func(m *store.Meta) { m.Title = title })                      // title, mode, options, switch
//	st.TurnStart(id)                                                             // session/prompt accepted
//	st.Append(id, line)                                                          // each session/update sent to the editor
//	st.TurnEnd(id)                                                               // the prompt response was sent
//	page, err := st.List(ctx, store.ListOptions{Cwd: cwd, Cursor: c, Limit: 50}) // session/list
//	h, err := st.Load(ctx, id)                                                   // session/load: replay h.Updates
//	st.Release(id)                                                               // session/close: keep the history
//	st.Delete(ctx, id)                                                           // session/delete
//
// Create, Update, TurnStart, TurnEnd, Append and Release never do I/O and never
// wait for the disk: they change memory under one short mutex and a writer
// goroutine commits. They are safe on the relay path. List, Load, Delete,
// Sync and Close do I/O and may wait. Append, Update and the turn calls work
// on sessions this Store holds: the ones it created or loaded and has not
// released or deleted.
//
// # Commits and durability
//
// The writer commits every CommitInterval (50 ms) after the first change, at
// once when CommitBytes (1 MiB) are queued, and at once at Sync, Load,
// Delete and Close. A commit that contains a turn end fsyncs that session's
// log (one fsync for all the turns that ended in the window), unless the
// session's log was fsynced less than SyncInterval (1 s) before: then the
// first commit after that second has passed fsyncs it. A kill -9 therefore
// loses at most what was queued in memory (one commit window); an
// operating system crash loses at most what was written since the last
// fsync (the turn in progress, or the turns of the last second: a busy
// session is fsynced once a second, not twenty times). Neither can corrupt
// the store: records are checksummed, a torn or partly written last record
// is ignored by readers and truncated away by the next writer under the
// session's lock, and metadata is replaced atomically (temp file + fsync +
// rename). A session's metadata is written by the commit after it changes,
// except when only its UpdatedAt moved (a turn's start or end): then at
// most once per TouchInterval (1 s), and at once at Sync and Close. Sixteen
// busy sessions thus cost sixteen metadata writes a second, not sixteen per
// commit window; a crash may leave UpdatedAt on disk up to a second behind.
//
// # When the queue is full
//
// Append copies the line into a queue bounded by MaxQueueBytes (128 MiB) of
// memory held (chunks' capacity, in flight until written, and the lines
// AppendShared keeps by reference instead of copying them). The relay of
// an agent's updates calls WaitRoom after each one, holding no lock: it
// waits while the queue holds RoomBytes (2 MiB) or more, unless a commit
// has been running for StallTimeout (1 s), so that a disk slower than the
// agents slows the agents instead of queueing a flood, and a hung disk
// does not stop them. A line that does not fit (the disk is hung or slower
// than the agents, or the line is over 64 MiB, or the turn grew past
// MaxSessionBytes) is not stored, and neither is anything else Appended to
// that session until its next TurnStart: Append returns ErrDropped and a
// gap record is queued. Readers end a turn at its gap, so a stored turn is
// always a prefix of what the editor saw, never a turn with a hole in it
// (an update without its tool call). The relay waits only for a disk that
// makes progress and the store is never corrupted; the loss shows as
// History.Partial and Stats.Dropped. A failed disk write is handled the
// same way.
//
// # Limits
//
// MaxSessionBytes caps one session's log (all its segments): past 1/16 of
// the cap, the file appended to is sealed and a new one started, and the
// oldest sealed segments are deleted so that the log keeps between 3/4 of
// the cap and the cap, never copying what it keeps (segment.go); replay
// never starts mid-turn. A turn over the cap less three segments is cut (a
// gap), so that the last turn always survives. On a file system without
// hard links the log is instead rewritten without its oldest turns, down to
// 3/4 of the cap. MaxTotalBytes and MaxAge evict whole sessions,
// least recently used first (by file modification time: every write and every
// Load counts as use), at Open, every SweepInterval and after every
// MaxTotalBytes/64 bytes written. Sessions this Store holds are never evicted
// by it, nor sessions whose log another process is writing at that moment.
// With MetadataOnly (`history.content: metadata-only`) no update is ever
// written and stored logs are deleted: ids, titles, agents, modes and options
// are kept, and session/load relies on the agents' own load.
//
// # Files
//
// The directory (made 0700) holds, per session, NAME.json and NAME.log, and
// for a long session NAME.log-NONCE, all 0600, where NAME is the first 32 hex
// digits of the SHA-256 of the session id. NAME.json is the metadata (Meta, plus the updatedAt history List uses
// for stable cursors), replaced atomically. NAME.log is append-only: a 16 byte
// header (magic "acprlog1", 8 random bytes naming this incarnation of the
// file) and records of
//
//	length uint32 LE | CRC-32C uint32 LE of body | body = type byte + payload
//
// with types S (turn start), U (update: the line as sent, without its
// newline), E (turn end), G (gap: what follows up to the next S was not all
// stored) and D (older turns were trimmed, or the file was lost: what follows
// up to the next S may lack its context). Writers take an exclusive flock(2)
// on NAME.log for each commit, and on NAME.json while they merge its
// UpdatedAt history with theirs; Load takes a shared one on NAME.log. The
// sealed segments of a long log, NAME.log-NONCE, hold its older records:
// NAME.log then starts with a link, a D record whose payload is the nonce
// and length of the segment before it (8 bytes each), which starts with a
// link to the one before, and so on; a link to a segment no longer there
// reads as a trim, one to a segment shorter than its length as a gap
// (segment.go). A sealed segment is fsynced with the next commit that
// fsyncs the log (a turn's end), not when it is sealed. Sealing and a trim write a new NAME.log and rename it over
// the old one; a writer that locked the old file notices and reopens. Temporary files are .tmp-*; the sweep
// removes stale ones. Removing the directory while no router runs wipes every
// stored session.
//
// A session deleted or evicted by another process while this Store still
// holds it comes back with this Store's next write (metadata and the updates
// written from then on). Two processes may write the same session; both
// writers' records stay intact, but turns they run at the same time
// interleave.
//
// The measured costs (Append on the relay, per turn commit, bytes per 1,000
// updates) and the commands that reproduce them are in README.md.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults for Options (DESIGN §4 `history:`, issue 5).
const (
	DefaultMaxTotalBytes   = 1 << 30
	DefaultMaxAge          = 720 * time.Hour
	DefaultMaxSessionBytes = 128 << 20
	DefaultMaxQueueBytes   = 128 << 20
	DefaultCommitInterval  = 50 * time.Millisecond
	DefaultCommitBytes     = 1 << 20
	DefaultSweepInterval   = 10 * time.Minute
	DefaultStallTimeout    = time.Second
	DefaultTouchInterval   = time.Second
	DefaultSyncInterval    = time.Second

	// MaxLineBytes is the largest update stored: ACP messages may be 64 MiB
	// (DESIGN §7).
	MaxLineBytes = 64 << 20
)

// Options configure a Store. Zero values mean the defaults.
type Options struct {
	MaxTotalBytes   int64         // history.max_total_bytes: all sessions together
	MaxAge          time.Duration // history.max_age: sessions unused for longer are evicted
	MaxSessionBytes int64         // one session's log; at most MaxTotalBytes
	MetadataOnly    bool          // history.content: metadata-only

	MaxQueueBytes  int64         // memory held by updates waiting for the writer, all sessions
	RoomBytes      int64         // memory held past which WaitRoom waits
	StallTimeout   time.Duration // a commit running this long: WaitRoom stops waiting
	CommitInterval time.Duration // group commit window
	CommitBytes    int64         // queued bytes that commit at once
	SweepInterval  time.Duration // how often limits are enforced besides Open
	// TouchInterval: a session whose metadata changed only by its
	// UpdatedAt (a turn's start or end) has it written at most this often
	// (and at Sync and Close); other changes are written with the next
	// commit. List in another process sees such an UpdatedAt up to this
	// much later; its slack covers it (list.go).
	TouchInterval time.Duration
	// SyncInterval: a session's log is fsynced for a turn's end at most
	// this often (and at once at Sync and Close).
	SyncInterval time.Duration

	Logger hclog.Logger // write failures; nil: none

	// minShared replaces MinSharedBytes (tests: shared records of small lines).
	minShared int
	// verifyStarts (tests) has every trim check the turn starts it keeps
	// in memory against a scan of the log, and panic if they differ.
	verifyStarts bool
	// noLinks (tests) makes sealing fail as on a file system without
	// hard links.
	noLinks bool
	// sealFsync (tests), when set, runs before each fsync of a sealed
	// segment, on that fsync's goroutine.
	sealFsync func()
}

func (o *Options) setDefaults() {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxTotalBytes, DefaultMaxTotalBytes)
	def(&o.MaxSessionBytes, min(DefaultMaxSessionBytes, o.MaxTotalBytes))
	def(&o.MaxQueueBytes, DefaultMaxQueueBytes)
	def(&o.CommitBytes, DefaultCommitBytes)
	def(&o.RoomBytes, DefaultRoomBytes)
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	o.MaxSessionBytes = min(o.MaxSessionBytes, o.MaxTotalBytes)
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = DefaultCommitInterval
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.TouchInterval <= 0 {
		o.TouchInterval = DefaultTouchInterval
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.minShared <= 0 {
		o.minShared = MinSharedBytes
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
}

// Errors.
var (
	// ErrNotFound: Load found no stored session with that id.
	ErrNotFound = errors.New("store: no such session")
	// ErrNotOpen: the session is not held by this Store (Create or Load it).
	ErrNotOpen = errors.New("store: session not open in this store")
	// ErrExists: Create of a session this Store already holds.
	ErrExists = errors.New("store: session already open")
	// ErrDropped: the update was not stored (queue full or a size cap); the
	// rest of the session's updates up to its next TurnStart are dropped too.
	ErrDropped = errors.New("store: update dropped")
	// ErrBadCursor: List got a cursor it did not make.
	ErrBadCursor = errors.New("store: invalid cursor")
	// ErrClosed: the Store is closed.
	ErrClosed = errors.New("store: closed")
)

// Stats are counters for logs and tests.
type Stats struct {
	Queued      int64  // bytes waiting for the writer
	Dropped     uint64 // updates not stored (ErrDropped)
	Commits     uint64 // writer commits that wrote something
	WriteErrors uint64 // failed commits of one session
}

// Store is the session store of one router process. It is safe for
// concurrent use.
type Store struct {
	dir  string
	opts Options
	log  hclog.Logger

	mu       sync.Mutex
	sessions map[string]*session    // held by this Store, by id
	dirty    []*session             // sessions with something to commit
	deletes  []string               // file names to remove at the next commit
	waiters  []*waiter              // served by the next commit
	queued   int64                  // bytes of records in pending buffers and in flight
	inflight int64                  // of which the running commit's
	held     atomic.Int64           // memory they hold: chunks' capacity, shared lines (changed under mu)
	room     *sync.Cond             // wakes WaitRoom: a commit freed what it wrote
	commitAt time.Time              // when the running commit started (busy)
	free     [chunkClasses][][]byte // empty chunks for reuse, by chunkClass
	urgent   bool                   // commit now, without waiting for the window
	syncAll  bool                   // the next commit fsyncs everything it writes
	sweepReq bool                   // the next commit also enforces the limits
	busy     bool                   // a commit is running
	closed   bool
	stats    Stats

	listSlack time.Duration // see defaultListSlack
	listGrain time.Duration // see defaultListGrain

	kick chan struct{} // wakes the writer; capacity 1
	// later holds the sessions whose UpdatedAt waits for TouchInterval,
	// and touchTimer wakes the writer when the first is due (laterLocked);
	// guarded by mu.
	later      []*session
	touchTimer *time.Timer
	quit       chan struct{}
	done       chan struct{}

	// Owned by the writer goroutine.
	files      map[string]*logState  // what this process knows of each log, by file name
	noLinks    bool                  // no hard links in dir (segment.go)
	sinceSweep int64                 // bytes written since the last sweep
	fail       func(op string) error // see failpoint
	// dirUnsynced: a commit changed the directory (a file created,
	// replaced or removed) and no fsync of it followed yet. The writer's.
	dirUnsynced bool
	// fsyncs are the fsyncs of sealed segments in flight (fsyncSealed):
	// Close waits for them.
	fsyncs sync.WaitGroup
}

// session is a session held by this Store. All fields are guarded by
// Store.mu.
type session struct {
	id, name string
	meta     Meta
	bumps    []int64 // earlier UpdatedAt values, for List cursors (see list.go)

	pending   []piece   // records for the writer, who fills in the CRCs
	spare     []piece   // the previous pending slice, for reuse
	sync      bool      // a turn end was written or is pending: fsync (at syncedAt+SyncInterval at the earliest)
	syncedAt  time.Time // when the log was last taken for an fsync
	metaDirty bool
	touched   bool      // UpdatedAt moved since the metadata was last written
	metaAt    time.Time // when the metadata was last taken for writing
	fresh     bool      // made by Create: replace any log stored under this id
	queuedIn  bool      // in Store.dirty
	deleted   bool
	dropping  bool  // dropping records until the next TurnStart
	unitBytes int64 // bytes queued since the last TurnStart
	// transient: held only for one UpdateStored, released after it
	// unless a Load took it meanwhile.
	transient bool
}

type waiter struct {
	done chan struct{}
	err  error
}

// Open opens (creating it 0700) the store in dir and starts its writer.
func Open(dir string, opts Options) (*Store, error) {
	return open(dir, opts, nil)
}

func open(dir string, opts Options, fail func(string) error) (*Store, error) {
	opts.setDefaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	// The directory is ours and holds conversations: whatever made it
	// earlier, only the user may read it.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	s := &Store{
		dir:       dir,
		opts:      opts,
		log:       opts.Logger,
		sessions:  map[string]*session{},
		kick:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		files:     map[string]*logState{},
		fail:      fail,
		sweepReq:  true,
		listSlack: opts.TouchInterval + defaultListSlack,
		listGrain: defaultListGrain,
	}
	s.room = sync.NewCond(&s.mu)
	go s.run()
	return s, nil
}

// fileName is the base name of a session's files: ids come from agents and
// may hold any character, or be too long for a file name.
func fileName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

func (s *Store) metaPath(name string) string { return filepath.Join(s.dir, name+".json") }
func (s *Store) logPath(name string) string  { return filepath.Join(s.dir, name+".log") }

// Create starts holding a new session and records m (a copy). Zero CreatedAt
// and UpdatedAt are set to now. A history stored earlier under the same id is
// replaced. It does no I/O.
func (s *Store) Create(m Meta) error {
	if m.ID == "" {
		return errors.New("store: create: empty session id")
	}
	m = m.clone()
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now()
	}
	if m.UpdatedAt.IsZero() {
		m.UpdatedAt = m.CreatedAt
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.sessions[m.ID] != nil {
		return ErrExists
	}
	se := &session{id: m.ID, name: fileName(m.ID), meta: m, metaDirty: true, fresh: true}
	s.sessions[m.ID] = se
	s.queueLocked(se)
	return nil
}

// Exists reports whether a session with this id is held by this Store or
// stored by any process (one stat): the router never reuses the id of a
// stored session for a new one, which would replace its history.
func (s *Store) Exists(id string) bool {
	s.mu.Lock()
	held := s.sessions[id] != nil
	s.mu.Unlock()
	if held {
		return true
	}
	_, err := os.Stat(s.metaPath(fileName(id)))
	return err == nil
}

// Stored is Exists after what this Store queued before the call is
// written: a session released a moment ago (Release) is stored then.
func (s *Store) Stored(ctx context.Context, id string) (bool, error) {
	if err := s.committed(ctx); err != nil {
		return false, err
	}
	return s.Exists(id), nil
}

// Update changes the metadata of a session this Store holds: fn gets a copy
// and may change anything but ID and UpdatedAt, which the store keeps (it
// moves UpdatedAt at TurnStart and TurnEnd). fn runs under the store's mutex:
// it must be quick and must not call the Store. It does no I/O.
func (s *Store) Update(id string, fn func(*Meta)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.heldLocked(id)
	if err != nil {
		return err
	}
	m := se.meta.clone()
	fn(&m)
	m.ID, m.UpdatedAt = se.meta.ID, se.meta.UpdatedAt
	se.meta = m
	se.metaDirty = true
	s.queueLocked(se)
	return nil
}

// UpdateStored is Update for any stored session, held or not: one this
// Store does not hold is held just for the change, read from its metadata
// file (not its log), and released again. It returns ErrNotFound for an id
// nothing is stored under. For a session not held it does I/O: it waits
// for what is queued to be written, then reads.
func (s *Store) UpdateStored(ctx context.Context, id string, fn func(*Meta)) error {
	if err := s.Update(id, fn); !errors.Is(err, ErrNotOpen) {
		return err
	}
	if err := s.committed(ctx); err != nil { // one released a moment ago
		return err
	}
	name := fileName(id)
	mf, err := readMeta(s.metaPath(name), name)
	if errors.Is(err, os.ErrNotExist) || err == nil && mf.Session.ID != id {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.sessions[id] == nil {
		s.sessions[id] = &session{id: id, name: name, meta: mf.Session, bumps: mf.UpdatedHistory, transient: true}
	}
	s.mu.Unlock()
	err = s.Update(id, fn)
	s.mu.Lock()
	if se := s.sessions[id]; se != nil && se.transient {
		delete(s.sessions, id) // what Update queued is still committed (Release)
	}
	s.mu.Unlock()
	return err
}

// TurnStart marks the start of a prompt turn: trimming keeps or drops whole
// turns, and replay resumes here after a gap, so updates are stored again
// from here if earlier ones were dropped. It moves UpdatedAt to now. It does
// no I/O.
func (s *Store) TurnStart(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.heldLocked(id)
	if err != nil {
		return err
	}
	s.touchLocked(se, time.Now())
	se.dropping, se.unitBytes = false, 0
	if !s.opts.MetadataOnly {
		s.putLocked(se, recStart, nil)
	}
	s.queueLocked(se)
	return nil
}

// TurnEnd marks the end of the turn, moves UpdatedAt to now and has the
// session committed with an fsync in the current commit window: turns that
// end in one window share one fsync (a router answering thousands of
// prompts a second does not fsync thousands of times). It does not wait
// for the commit (Sync does) and does no I/O.
func (s *Store) TurnEnd(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, err := s.heldLocked(id)
	if err != nil {
		return err
	}
	s.touchLocked(se, time.Now())
	if !s.opts.MetadataOnly {
		s.putLocked(se, recEnd, nil)
		se.sync = true
	}
	s.queueLocked(se)
	return nil
}

// Append queues one session/update line as the editor was sent it (JSON,
// without the newline) and returns at once: it copies line into a queued
// chunk and does no I/O; the writer is woken by a channel send once per
// commit window. The caller may reuse line. It returns ErrDropped when the
// line was not stored (see the package comment). In metadata-only mode it
// does nothing.
func (s *Store) Append(id string, line []byte) error {
	return s.append(id, line, false, nil)
}

// AppendShared is Append of a line the caller will never modify again (a
// line the relay also queued for the editor): a line of at least
// MinSharedBytes is not copied but kept, by reference, until the writer
// has written it. The store's queue then holds the relayed bytes
// themselves, not a second copy of them (issue 16). ref, when not nil, is
// the reference count of line's buffer: held while the store keeps line,
// released once it is written (or its session deleted).
func (s *Store) AppendShared(id string, line []byte, ref Ref) error {
	return s.append(id, line, len(line) >= s.opts.minShared, ref)
}

// Ref is a reference count on a shared line's buffer (acp.Shared).
type Ref interface {
	Hold()
	Release()
}

// MinSharedBytes: AppendShared keeps a reference to lines of this size or
// more; smaller ones are copied into chunks (one write for many records).
const MinSharedBytes = 16 << 10

func (s *Store) append(id string, line []byte, shared bool, ref Ref) error {
	if s.opts.MetadataOnly {
		return nil
	}
	n := int64(recHeaderLen + 1 + len(line))
	s.mu.Lock()
	se, err := s.heldLocked(id)
	switch {
	case err != nil:
	case se.dropping:
		s.stats.Dropped++
		err = ErrDropped
	case len(line) > MaxLineBytes, s.held.Load()+s.growthLocked(se, n, shared) > s.opts.MaxQueueBytes, se.unitBytes+n > s.unitLimit():
		s.dropLocked(se)
		err = ErrDropped
	case shared:
		if ref != nil {
			ref.Hold()
		}
		s.putSharedLocked(se, line, ref)
		s.queueLocked(se)
	default:
		s.putLocked(se, recUpdate, line)
		s.queueLocked(se)
	}
	s.mu.Unlock()
	return err
}

// DefaultRoomBytes is the memory the queue may hold before WaitRoom waits:
// two commits' worth (CommitBytes commits at once).
const DefaultRoomBytes = 2 * DefaultCommitBytes

// Full reports whether WaitRoom would wait now.
func (s *Store) Full() bool { return s.held.Load() >= s.opts.RoomBytes }

// WaitRoom waits until the memory the queue holds (chunks and shared
// lines not yet written) is below RoomBytes: the backpressure of a disk
// slower than the agents on whoever can flood the store (the relay of an
// agent's updates, holding no lock), so that a flood of large updates does
// not queue up to MaxQueueBytes of them. It does not wait for a commit
// that has been running for StallTimeout (a hung disk: Append then drops
// at MaxQueueBytes, as before, and the relay goes on), nor once the store
// is closed. It does no I/O.
func (s *Store) WaitRoom() {
	if s.held.Load() < s.opts.RoomBytes {
		return // the relay's usual case: no lock taken
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var timer *time.Timer
	for !s.closed && s.held.Load() >= s.opts.RoomBytes {
		stalled := time.Duration(0)
		if s.busy {
			stalled = time.Since(s.commitAt)
		}
		if stalled >= s.opts.StallTimeout {
			break
		}
		// Someone waits for the queue: commit what it holds without
		// waiting for the window.
		s.urgent = true
		s.wake()
		if timer == nil {
			// Wake up to notice a commit that stalls meanwhile.
			timer = time.AfterFunc(s.opts.StallTimeout-stalled, func() {
				s.mu.Lock()
				s.room.Broadcast()
				s.mu.Unlock()
			})
		} else {
			timer.Reset(s.opts.StallTimeout - stalled)
		}
		s.room.Wait()
	}
	if timer != nil {
		timer.Stop()
	}
}

// trimRoom is what a log may hold after its header and a trim record:
// the most a trim by copy keeps.
func (s *Store) trimRoom() int64 {
	return s.opts.MaxSessionBytes - logHeaderLen - (recHeaderLen + 1)
}

// unitLimit bounds what may be queued for a session between two turn
// starts, so that its last turn always survives the loss of the oldest
// segments (segment.go): the segment its start is in holds at most
// segBytes before it, and the segments kept hold up to the cap less two
// segBytes; each segment the turn spans costs a header and a link.
func (s *Store) unitLimit() int64 {
	seg := s.segBytes()
	spans := s.opts.MaxSessionBytes/seg + 2
	return s.opts.MaxSessionBytes - 3*seg - spans*(logHeaderLen+linkLen) - 2*(recHeaderLen+1)
}

// dropLocked starts dropping se's records up to its next TurnStart, with a
// gap record so that readers end the turn here. Markers (S, E, G) are queued
// even when the queue is full: there are at most a few per turn.
func (s *Store) dropLocked(se *session) {
	s.stats.Dropped++
	se.dropping = true
	s.putLocked(se, recGap, nil)
	s.queueLocked(se)
}

// piece is a part of a session's pending records: a chunk of whole
// records (b, the store's own), or one update record whose payload is a
// line shared with the caller (AppendShared): its header and type byte in
// hdr, the line in ext, never written to nor recycled.
type piece struct {
	b   []byte
	ext []byte
	ref Ref // ext's, held
	hdr [recHeaderLen + 1]byte
}

// size is the piece's length in the log.
func (p *piece) size() int64 {
	if p.ext != nil {
		return int64(len(p.hdr) + len(p.ext))
	}
	return int64(len(p.b))
}

// heldBytes is the memory the piece holds.
func (p *piece) heldBytes() int64 {
	if p.ext != nil {
		return int64(len(p.hdr) + cap(p.ext))
	}
	return int64(cap(p.b))
}

// growthLocked is the memory the queue holds more once a record of n
// bytes is put in se's pending pieces (shared: by reference): none when it
// fits in the last chunk.
func (s *Store) growthLocked(se *session, n int64, shared bool) int64 {
	k := len(se.pending)
	switch {
	case shared:
		return n
	case k > 0 && se.pending[k-1].ext == nil && int64(cap(se.pending[k-1].b)-len(se.pending[k-1].b)) >= n:
		return 0
	}
	return int64(chunkFor(int(n), se.lastChunk()))
}

// lastChunk is the capacity of se's last pending chunk (0: none yet).
func (se *session) lastChunk() int {
	for i := len(se.pending) - 1; i >= 0; i-- {
		if se.pending[i].ext == nil {
			return cap(se.pending[i].b)
		}
	}
	return 0
}

// chunkFor is the capacity of the chunk a record of n bytes starts, after
// a chunk of prev bytes (0: the session's first of the window): chunks
// double from 4 KiB to 128 KiB, so that a session holds at most about
// twice what it queued, and sixteen sessions queueing some dozens of
// records each hold that, not a 128 KiB chunk each (their sum made the
// relay wait for the store: WaitRoom), while a flood soon writes 128 KiB at
// a time.
func chunkFor(n, prev int) int {
	if n > chunkSize {
		return n
	}
	size := smallChunkSize
	if prev > 0 {
		size = min(2*prev, chunkSize)
	}
	for size < n {
		size *= 2
	}
	return size
}

// putLocked appends one record to se's pending chunks: the caller's one copy.
func (s *Store) putLocked(se *session, typ byte, payload []byte) {
	n := recHeaderLen + 1 + len(payload)
	k := len(se.pending)
	if k == 0 || se.pending[k-1].ext != nil || cap(se.pending[k-1].b)-len(se.pending[k-1].b) < n {
		c := s.chunkLocked(chunkFor(n, se.lastChunk()))
		se.pending = append(se.pending, piece{b: c})
		s.held.Add(int64(cap(c)))
		k++
	}
	se.pending[k-1].b = appendRecord(se.pending[k-1].b, typ, payload)
	s.addedLocked(se, int64(n))
}

// putSharedLocked appends an update record whose payload is line itself.
func (s *Store) putSharedLocked(se *session, line []byte, ref Ref) {
	p := piece{ext: line, ref: ref}
	appendRecord(p.hdr[:0], recUpdate, nil)
	binary.LittleEndian.PutUint32(p.hdr[:], uint32(1+len(line)))
	se.pending = append(se.pending, p)
	s.held.Add(p.heldBytes())
	s.addedLocked(se, p.size())
}

// addedLocked counts n bytes of records queued for se.
func (s *Store) addedLocked(se *session, n int64) {
	se.unitBytes += n
	// What the running commit writes does not count: the next one must
	// not wait for the window either once CommitBytes more are queued.
	pend := s.queued - s.inflight
	s.queued += n
	if pend < s.opts.CommitBytes && pend+n >= s.opts.CommitBytes {
		s.urgent = true
		s.wake()
	}
}

// Records are queued in chunks, appended to and never moved: growing one
// buffer would copy all that is queued at every doubling, and its garbage
// would cost the relay more than the one copy it needs. A session's first
// chunk of a commit window is small: most sessions queue a record or two
// per window (a title, a command list), and a thousand sessions opened in
// one window would otherwise hold a large chunk each.
const (
	chunkSize      = 128 << 10 // a record larger than this gets a chunk of its own
	smallChunkSize = 4 << 10
	chunkClasses   = 6 // 4 KiB ... 128 KiB
	maxFreeChunks  = 32
)

// chunkLocked returns an empty chunk of capacity size (chunkFor), reused
// when one of its class is free.
func (s *Store) chunkLocked(size int) []byte {
	if c := chunkClass(size); c >= 0 && len(s.free[c]) > 0 {
		free := s.free[c]
		s.free[c] = free[:len(free)-1]
		return free[len(free)-1]
	}
	return make([]byte, 0, size)
}

// chunkClass is the free list of chunks of capacity size: 4 KiB, 8 KiB,
// ... 128 KiB; -1 for others.
func chunkClass(size int) int {
	if size < smallChunkSize || size > chunkSize || size&(size-1) != 0 {
		return -1
	}
	return bits.Len(uint(size/smallChunkSize)) - 1
}

// recycleLocked keeps written chunks for reuse and stops counting what the
// pieces held.
func (s *Store) recycleLocked(pieces []piece) {
	for i := range pieces {
		s.held.Add(-pieces[i].heldBytes())
		c := pieces[i].b
		if pieces[i].ext != nil {
			if pieces[i].ref != nil {
				pieces[i].ref.Release()
				pieces[i].ref = nil
			}
			continue
		}
		// Up to 1 MiB of free chunks per class (4 MiB of the largest).
		if k := chunkClass(cap(c)); k >= 0 && len(s.free[k]) < max(1<<20/cap(c), maxFreeChunks*(cap(c)/chunkSize)) {
			s.free[k] = append(s.free[k], c[:0])
		}
	}
}

func piecesLen(pieces []piece) int64 {
	var n int64
	for i := range pieces {
		n += pieces[i].size()
	}
	return n
}

// queueLocked puts se on the writer's list. The first change of a window
// wakes the writer, which then waits CommitInterval: one channel send per
// window, not per Append.
func (s *Store) queueLocked(se *session) {
	if se.queuedIn {
		return
	}
	se.queuedIn = true
	s.dirty = append(s.dirty, se)
	if len(s.dirty) == 1 {
		s.wake()
	}
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Store) heldLocked(id string) (*session, error) {
	if s.closed {
		return nil, ErrClosed
	}
	se := s.sessions[id]
	if se == nil {
		return nil, ErrNotOpen
	}
	return se, nil
}

// touchLocked moves se's UpdatedAt to now, keeping it strictly increasing
// (List positions rely on it; the wall clock may step back).
func (s *Store) touchLocked(se *session, now time.Time) {
	prev := se.meta.UpdatedAt
	if !now.After(prev) {
		now = prev.Add(time.Nanosecond)
	}
	se.bumps = pushBump(se.bumps, prev.UnixNano(), now, s.listGrain)
	se.meta.UpdatedAt = now
	se.touched = true
}

// Release stops holding a session (session/close): what was queued is still
// committed and the history is kept; the session may be evicted from now on.
// It does no I/O.
func (s *Store) Release(id string) {
	s.mu.Lock()
	delete(s.sessions, id)
	s.mu.Unlock()
}

// Delete removes a session and its history (session/delete). Deleting an
// unknown id is not an error.
func (s *Store) Delete(ctx context.Context, id string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if se := s.sessions[id]; se != nil {
		delete(s.sessions, id)
		se.deleted = true
		s.queued -= piecesLen(se.pending)
		s.recycleLocked(se.pending)
		s.room.Broadcast()
		se.pending = nil
	}
	s.deletes = append(s.deletes, fileName(id))
	w := s.addWaiterLocked()
	s.mu.Unlock()
	return w.wait(ctx)
}

// Sync waits until everything queued before the call is written and fsynced.
func (s *Store) Sync(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.syncAll = true
	w := s.addWaiterLocked()
	s.mu.Unlock()
	return w.wait(ctx)
}

// addWaiterLocked registers a waiter for the next commit and asks for it now.
func (s *Store) addWaiterLocked() *waiter {
	w := &waiter{done: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.urgent = true
	s.wake()
	return w
}

func (w *waiter) wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Queued = s.queued
	return st
}

// Close commits and fsyncs everything queued and stops the writer. The Store
// is unusable afterwards.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	w := &waiter{done: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	close(s.quit)
	<-s.done
	// The fsyncs no sync commit waited for (segments sealed in a turn
	// that had not ended, or sealed and then swept): joined, and their
	// failures logged, as nobody else will read them.
	s.fsyncs.Wait()
	for name, st := range s.files {
		for _, c := range st.unsynced {
			if err := <-c; err != nil {
				s.log.Warn("fsync of a sealed history segment failed", "file", name, "error", err)
			}
		}
		st.unsynced = nil
	}
	return w.err
}
