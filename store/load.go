package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
	"unicode/utf8"
)

// History is a stored session (session/load).
type History struct {
	Meta Meta
	// Updates are the session/update lines to replay, oldest first, each
	// as Append got it. They start at a turn start (or with updates sent
	// before the first turn) and every turn in them is complete or, for a
	// turn cut short, a prefix of what the editor saw. Empty in
	// metadata-only mode.
	Updates [][]byte
	Trimmed bool // older turns were dropped for the per-session cap
	Partial bool // some updates were not stored (ErrDropped, a failed write)
}

// Load reads a stored session, written by this process or another, and
// holds it from then on: Append, Update and the turn calls work on it. What
// this Store queued before is committed first. Loading counts as use for
// eviction.
func (s *Store) Load(ctx context.Context, id string) (*History, error) {
	if err := s.committed(ctx); err != nil {
		return nil, err
	}

	name := fileName(id)
	h := &History{}
	var bumps []int64
	s.mu.Lock()
	se := s.sessions[id]
	if se != nil {
		h.Meta = se.meta.clone()
		se.transient = false // held from now on (UpdateStored)
	}
	s.mu.Unlock()
	if se == nil {
		mf, err := readMeta(s.metaPath(name), name)
		if errors.Is(err, fs.ErrNotExist) || err == nil && mf.Session.ID != id {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		h.Meta, bumps = mf.Session, mf.UpdatedHistory
	}
	if !s.opts.MetadataOnly {
		chain, err := s.readChain(name)
		if err != nil {
			return nil, fmt.Errorf("store: load %q: %w", id, err)
		}
		rp := readRecords(chain...)
		h.Updates, h.Trimmed, h.Partial = rp.updates, rp.trimmed, rp.partial
		repairUTF8(h.Updates)
	}
	if se == nil {
		s.mu.Lock()
		if !s.closed && s.sessions[id] == nil {
			s.sessions[id] = &session{id: id, name: name, meta: h.Meta.clone(), bumps: bumps}
		}
		s.mu.Unlock()
		now := time.Now()
		os.Chtimes(s.metaPath(name), now, now) // least recently used: loading is use
	}
	return h, nil
}

// committed waits until what this Store queued before the call is
// written: a session released meanwhile (Release) is on disk then. A failed
// write is no reason not to read what is stored.
func (s *Store) committed(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	var w *waiter
	if len(s.dirty) > 0 || s.busy {
		w = s.addWaiterLocked()
	}
	s.mu.Unlock()
	if w != nil {
		if err := w.wait(ctx); err != nil && ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// repairUTF8 replaces, in each line that is not UTF-8, every run of bytes
// that is not with U+FFFD, as the router's stream does with what it reads
// (acp: Stream). Lines stored by a router that relayed them unrepaired
// (before 2026-11-27) would otherwise end the connection of an editor that
// reads its input strictly as UTF-8 (Zed) on every session/load of that
// session. A check is 0.4 ms for 100,000 lines of 200 B.
func repairUTF8(lines [][]byte) {
	for i, l := range lines {
		if !utf8.Valid(l) {
			lines[i] = bytes.ToValidUTF8(l, []byte("\uFFFD"))
		}
	}
}
