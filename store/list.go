package store

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ListOptions select a page of sessions (session/list).
type ListOptions struct {
	Cwd    string // only sessions with exactly this cwd (cleaned); "" for all
	Cursor string // Page.NextCursor of the previous page; "" for the first
	Limit  int    // sessions per page; <= 0 for all the rest
	// Archived selects by Meta.Archived; the zero value takes every
	// session. It applies before pagination: a pagination keeps it.
	Archived ArchiveFilter
}

// ArchiveFilter selects sessions by their archive state.
type ArchiveFilter int

const (
	// ArchivedAny: archived or not.
	ArchivedAny ArchiveFilter = iota
	// ArchivedExclude: only sessions not archived.
	ArchivedExclude
	// ArchivedOnly: only archived sessions.
	ArchivedOnly
)

// keeps reports whether a session archived or not passes f.
func (f ArchiveFilter) keeps(archived bool) bool {
	switch f {
	case ArchivedExclude:
		return !archived
	case ArchivedOnly:
		return archived
	}
	return true
}

// Page is one page of List.
type Page struct {
	Sessions   []Meta // newest first
	NextCursor string // "" on the last page
}

// A pagination's ordering is taken TouchInterval plus defaultListSlack
// back, so that the order it uses is already on disk: another process's
// change reaches its files within a commit window (50 ms) plus the time to
// write them, and a moved UpdatedAt within TouchInterval (1 s) more.
const defaultListSlack = time.Second

// List returns sessions newest first: by UpdatedAt, then by id. It reads the
// metadata of every session in the directory, so it sees all processes'
// sessions; those this Store holds are taken from memory.
//
// Pagination is stable under concurrent writes. A pagination (a first page
// and the pages its cursors lead to) orders sessions by their UpdatedAt as
// it was at T0: two seconds (TouchInterval plus one) before its first page
// was read, rounded down to a whole second. Every session created before
// the first page and not deleted meanwhile is returned exactly once, in
// that order, whatever is updated meanwhile, by this process or others;
// sessions created after it are left to the next pagination. The returned
// metadata is current, so a session updated meanwhile carries an UpdatedAt
// newer than its position, and a session updated in the last two or three
// seconds before the first page shows where it was before that update.
// This holds for cursors up to an hour old and sessions updated in at most
// 512 distinct seconds of that hour (the UpdatedAt history each session
// keeps), and for changes other processes committed within that slack: a
// disk stalled for longer may make a session updated during the pagination
// appear twice or not at all.
func (s *Store) List(ctx context.Context, o ListOptions) (Page, error) {
	c, err := decodeCursor(o.Cursor)
	if err != nil {
		return Page{}, err
	}
	// A session released a moment ago (session/close) is neither held nor
	// on disk until its last changes are written.
	if err := s.committed(ctx); err != nil {
		return Page{}, err
	}
	first := o.Cursor == ""
	if first {
		c.t0 = time.Now().UnixNano()
	}
	// Positions are UpdatedAt values as of at: the slack before the first
	// page, down to a whole grain (see normalizeBumps).
	at := c.t0 - int64(s.listSlack)
	at -= at % int64(s.listGrain)
	cwd := ""
	if o.Cwd != "" {
		cwd = filepath.Clean(o.Cwd)
	}
	type item struct {
		m   Meta
		key int64
	}
	var items []item
	consider := func(m *Meta, bumps []int64) bool {
		if m.CreatedAt.UnixNano() > c.t0 || cwd != "" && m.Cwd != cwd || !o.Archived.keeps(m.Archived) {
			return false
		}
		k := sortKey(m.UpdatedAt.UnixNano(), bumps, at)
		if !first && !(k < c.key || k == c.key && m.ID > c.id) {
			return false
		}
		items = append(items, item{m: *m, key: k})
		return true
	}

	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return Page{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Page{}, ErrClosed
	}
	held := make(map[string]bool, len(s.sessions))
	for _, se := range s.sessions {
		held[se.name] = true
		if consider(&se.meta, se.bumps) {
			items[len(items)-1].m = se.meta.clone()
		}
	}
	s.mu.Unlock()
	for i, e := range entries {
		if i%256 == 0 && ctx.Err() != nil {
			return Page{}, ctx.Err()
		}
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") || held[name] {
			continue
		}
		mf, err := readMeta(filepath.Join(s.dir, e.Name()), name)
		if err != nil {
			continue // removed meanwhile, or not ours
		}
		consider(&mf.Session, mf.UpdatedHistory)
	}

	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(b.key, a.key), strings.Compare(a.m.ID, b.m.ID))
	})
	var p Page
	if o.Limit > 0 && len(items) > o.Limit {
		items = items[:o.Limit]
		last := items[len(items)-1]
		p.NextCursor = cursor{t0: c.t0, key: last.key, id: last.m.ID}.encode()
	}
	p.Sessions = make([]Meta, len(items))
	for i, it := range items {
		p.Sessions[i] = it.m
	}
	return p, nil
}

// sortKey is a session's place in a pagination: its UpdatedAt as of time t
// (Unix ns). UpdatedAt only grows, so that is the newest value not after t,
// from bumps (the earlier values, oldest first) when the current one is
// newer. A session with no value that old (created within the slack, or
// whose history was cut) keeps its oldest known value: that one does not
// change while the pagination runs.
func sortKey(updated int64, bumps []int64, t int64) int64 {
	if updated <= t {
		return updated
	}
	for i := len(bumps) - 1; i >= 0; i-- {
		if bumps[i] <= t {
			return bumps[i]
		}
	}
	if len(bumps) > 0 {
		return bumps[0]
	}
	return updated
}

// cursor is where a pagination stands: its T0 and the last session returned.
type cursor struct {
	t0, key int64
	id      string
}

const cursorVersion = 1

func (c cursor) encode() string {
	b := []byte{cursorVersion}
	b = binary.BigEndian.AppendUint64(b, uint64(c.t0))
	b = binary.BigEndian.AppendUint64(b, uint64(c.key))
	b = append(b, c.id...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 17 || b[0] != cursorVersion {
		return cursor{}, ErrBadCursor
	}
	return cursor{
		t0:  int64(binary.BigEndian.Uint64(b[1:])),
		key: int64(binary.BigEndian.Uint64(b[9:])),
		id:  string(b[17:]),
	}, nil
}
