package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"time"
)

// logState is what the writer knows of one session's log, to append without
// reading it again: the file it last wrote (its nonce) and where its valid
// records ended then.
type logState struct {
	nonce uint64
	end   int64
	lost  bool // a write failed: the next one starts with a gap record

	// starts are the offsets of the log's turn-start records, all of
	// them when startsOK: where a trim may cut, known without reading
	// the log again (a trim of a 128 MiB log would scan it whole).
	starts   []int64
	startsOK bool

	// segs are the sealed segments before it, oldest first, when
	// segsOK (segment.go).
	segs   []segment
	segsOK bool
	// unsynced are the fsyncs of the segments sealed since the last sync
	// commit, which waits for them (segment.go).
	unsynced []<-chan error
	// clean: the file holds nothing its last fsync did not write (none
	// needed when it is sealed).
	clean bool
}

// maxStarts bounds logState.starts (8 bytes a turn); a log with more turns
// than this (empty turns, a tiny cap) is scanned when it is trimmed.
const maxStarts = 1 << 16

// firstStart is the offset in b (whole records) of its first turn start,
// -1 if none.
func firstStart(b []byte) int {
	for r := 0; r+recHeaderLen < len(b); r += recHeaderLen + int(binary.LittleEndian.Uint32(b[r:])) {
		if b[r+recHeaderLen] == recStart {
			return r
		}
	}
	return -1
}

// noteStarts adds the turn starts among the whole records of b, written at
// off.
func (st *logState) noteStarts(b []byte, off int64) {
	for r := 0; st.startsOK && r+recHeaderLen < len(b); {
		if b[r+recHeaderLen] == recStart {
			if len(st.starts) == maxStarts {
				st.starts, st.startsOK = nil, false
				return
			}
			st.starts = append(st.starts, off+int64(r))
		}
		r += recHeaderLen + int(binary.LittleEndian.Uint32(b[r:]))
	}
}

// job is one session's share of a commit.
type job struct {
	se    *session
	recs  []piece // whole records
	size  int64   // their length
	sync  bool
	fresh bool
	meta  *metaFile // nil: unchanged
}

// run is the writer goroutine: it waits for the first change, lets the
// commit window fill (or not, when something is urgent) and commits.
func (s *Store) run() {
	defer close(s.done)
	sweep := time.NewTicker(s.opts.SweepInterval)
	defer sweep.Stop()
	s.commit(false) // the first commit sweeps: Open enforces the limits
	for {
		select {
		case <-s.kick:
		case <-sweep.C:
			s.mu.Lock()
			s.sweepReq = true
			s.mu.Unlock()
		case <-s.quit:
			s.commit(true)
			s.mu.Lock()
			if s.touchTimer != nil {
				s.touchTimer.Stop()
			}
			s.mu.Unlock()
			return
		}
		if !s.isUrgent() {
			window := time.NewTimer(s.opts.CommitInterval)
		wait:
			for {
				select {
				case <-window.C:
					break wait
				case <-s.kick:
					if s.isUrgent() {
						window.Stop()
						break wait
					}
				case <-s.quit:
					window.Stop()
					break wait
				}
			}
		}
		s.commit(false)
	}
}

// laterLocked keeps the sessions whose UpdatedAt waits (commit) for a
// later commit, and wakes the writer when the first of them is due. They
// are not in dirty: a change queued meanwhile wakes the writer as usual.
func (s *Store) laterLocked(later []*session, now time.Time) {
	if len(later) == 0 {
		return
	}
	due := s.opts.TouchInterval
	for _, se := range later {
		s.later = append(s.later, se)
		if se.touched {
			due = min(due, se.metaAt.Add(s.opts.TouchInterval).Sub(now))
		}
		if se.sync {
			due = min(due, se.syncedAt.Add(s.opts.SyncInterval).Sub(now))
		}
	}
	if s.touchTimer == nil {
		s.touchTimer = time.AfterFunc(due, s.wake)
	} else {
		s.touchTimer.Reset(due)
	}
}

func (s *Store) isUrgent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.urgent
}

// commit writes what is queued. It takes everything under the mutex at once,
// so that a waiter registered before sees all that was queued before it.
func (s *Store) commit(final bool) {
	s.mu.Lock()
	now := time.Now()
	// Sync, Close and the waiters of a commit get every change on disk;
	// otherwise a session's metadata that only moved its UpdatedAt waits
	// for TouchInterval to pass since it was last written (later).
	everything := final || s.syncAll || len(s.waiters) > 0
	// The sessions whose UpdatedAt waited are looked at again (those
	// queued since are in dirty already).
	cands := s.dirty
	for _, se := range s.later {
		if !se.queuedIn {
			cands = append(cands, se)
		}
	}
	clear(s.later)
	s.later = s.later[:0]
	jobs := make([]job, 0, len(cands))
	var later []*session
	for _, se := range cands {
		se.queuedIn = false
		if se.deleted {
			continue
		}
		meta := se.metaDirty || se.touched && (everything || now.Sub(se.metaAt) >= s.opts.TouchInterval)
		// A turn's end fsyncs the log at most once per SyncInterval: a
		// later one waits (later) for the commit when it is due.
		sync := se.sync && (everything || now.Sub(se.syncedAt) >= s.opts.SyncInterval)
		if !meta && se.touched || se.sync && !sync {
			later = append(later, se)
		}
		if !meta && len(se.pending) == 0 && !sync && !se.fresh {
			continue
		}
		j := job{se: se, recs: se.pending, size: piecesLen(se.pending), sync: sync || s.syncAll || final, fresh: se.fresh}
		if meta {
			j.meta = &metaFile{Version: metaVersion, Session: se.meta.clone(), UpdatedHistory: append([]int64(nil), se.bumps...)}
			se.metaAt, se.touched = now, false
		}
		if j.sync {
			se.syncedAt, se.sync = now, false
		}
		se.pending, se.spare = se.spare[:0], nil
		se.metaDirty, se.fresh = false, false
		jobs = append(jobs, j)
	}
	clear(cands)
	s.dirty = s.dirty[:0]
	s.laterLocked(later, now)
	deletes, waiters, sweep := s.deletes, s.waiters, s.sweepReq
	s.deletes, s.waiters = nil, nil
	syncAll := s.syncAll || final
	s.urgent, s.syncAll, s.sweepReq, s.busy = false, false, false, true
	for i := range jobs {
		s.inflight += jobs[i].size
	}
	s.commitAt = time.Now()
	s.mu.Unlock()

	var errs []error
	var written int64
	synced, dirChanged := syncAll, len(deletes) > 0
	for i := range jobs {
		j := &jobs[i]
		changed, err := s.runJob(j)
		if err != nil {
			errs = append(errs, err)
			s.log.Warn("store: commit failed", "session", j.se.id, "error", err)
		}
		written += j.size
		synced = synced || j.sync
		dirChanged = dirChanged || changed
	}
	for _, name := range deletes {
		if err := s.remove(name, false); err != nil {
			errs = append(errs, err)
		}
	}
	// An fsynced log is durable only with its directory entry: sync the
	// directory when a sync commit created, replaced or removed a file. (A
	// metadata rename alone may be lost by an OS crash; the previous
	// version is then still there.)
	// A commit that changed the directory without an fsync (a roll in a
	// long turn, a turn end whose fsync waits for SyncInterval) leaves it
	// to the next one that fsyncs: the fsynced log needs its name on disk.
	s.dirUnsynced = s.dirUnsynced || dirChanged
	if synced && (s.dirUnsynced || syncAll && len(jobs) > 0) {
		err := s.failpoint("dir.sync")
		if err == nil {
			err = syncDir(s.dir)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("store: %w", err))
		} else {
			s.dirUnsynced = false
		}
	}
	s.sinceSweep += written
	if sweep || s.sinceSweep >= s.opts.MaxTotalBytes/64 {
		s.sweep()
	}

	s.mu.Lock()
	for _, j := range jobs {
		s.queued -= j.size
		s.recycleLocked(j.recs)
		if j.se.spare == nil {
			clear(j.recs)
			j.se.spare = j.recs[:0]
		}
	}
	if len(jobs) > 0 {
		s.stats.Commits++
	}
	s.stats.WriteErrors += uint64(len(errs))
	s.busy, s.inflight = false, 0
	s.room.Broadcast()
	s.mu.Unlock()

	err := errors.Join(errs...)
	for _, w := range waiters {
		w.err = err
		close(w.done)
	}
}

// runJob writes one session's records, then its metadata: a crash between
// the two leaves records whose metadata is one commit old, which is harmless.
// It reports whether a file was created or replaced.
func (s *Store) runJob(j *job) (changed bool, err error) {
	// A turn's end whose fsync waited (SyncInterval) comes with nothing to
	// write: the log is opened for the fsync alone, also when what it
	// waits for is in segments sealed since (a long turn rolls the log
	// after writing it: the new file is clean, the sealed one maybe not).
	st := s.files[j.se.name]
	if !s.opts.MetadataOnly && (j.size > 0 || j.fresh || j.sync && st != nil && (!st.clean || len(st.unsynced) > 0)) {
		changed, err = s.writeLog(j)
		if err != nil && j.fresh {
			// The old history under this id may still be there: the
			// next commit must replace it.
			s.mu.Lock()
			j.se.fresh = true
			s.queueLocked(j.se)
			s.mu.Unlock()
		}
		if changed && j.meta == nil {
			// The log was gone: another process deleted or evicted the
			// session while we hold it. Write the metadata back too.
			s.mu.Lock()
			j.meta = &metaFile{Version: metaVersion, Session: j.se.meta.clone(), UpdatedHistory: append([]int64(nil), j.se.bumps...)}
			s.mu.Unlock()
		}
	}
	if j.meta != nil {
		err = errors.Join(err, s.writeMeta(j.se.name, j.meta, j.fresh))
		changed = changed || j.fresh
	}
	if err != nil {
		return changed, fmt.Errorf("store: session %q: %w", j.se.id, err)
	}
	return changed, nil
}

// writeMeta replaces a session's metadata file. Unless the session is new,
// it first merges the UpdatedAt history of the version on disk, under that
// file's lock, so that two processes writing one session keep each other's
// values (mergeHistory).
func (s *Store) writeMeta(name string, mf *metaFile, fresh bool) error {
	path := s.metaPath(name)
	if !fresh {
		f, err := openLocked(path, syscall.LOCK_EX, false)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if f != nil {
			defer f.Close() // after the rename: the next writer reads ours
			var disk metaFile
			data, err := io.ReadAll(f)
			if err == nil && json.Unmarshal(data, &disk) == nil && disk.Session.ID == mf.Session.ID {
				mergeHistory(mf, &disk, time.Now(), s.listGrain)
			}
		}
	}
	data, err := json.Marshal(mf)
	if err != nil {
		return err
	}
	return s.writeFileAtomic(path, data)
}

// writeLog appends j's records to the session's log under an exclusive lock.
// It reports whether it created or replaced the file.
func (s *Store) writeLog(j *job) (changed bool, err error) {
	name := j.se.name
	st := s.files[name]
	if st == nil {
		st = &logState{}
		s.files[name] = st
	}
	path := s.logPath(name)
	var f *os.File
	if err = s.failpoint("log.open"); err == nil {
		f, err = openLocked(path, syscall.LOCK_EX, true)
	}
	if err != nil {
		st.lost = st.lost || j.size > 0
		return false, err
	}
	defer func() { f.Close() }() // a roll replaces f
	changed, err = s.prepareLog(f, st, j.fresh, name)
	if err != nil {
		st.lost = st.lost || j.size > 0
		return changed, err
	}
	if st.lost {
		gap := sealedRecord(recGap, nil)
		if err = s.failpoint("log.write"); err == nil {
			_, err = f.WriteAt(gap, st.end)
		}
		if err != nil {
			return changed, err
		}
		st.end += int64(len(gap))
		st.lost, st.clean = false, false
	}
	if j.size > 0 {
		err = s.failpoint("log.write")
		for i := range j.recs {
			if err != nil {
				break
			}
			p := &j.recs[i]
			if p.ext != nil { // an update record: no turn start
				st.end, err = s.writeShared(f, p, st.end)
				st.clean = false
				continue
			}
			sealRecords(p.b)
			b := p.b
			// A file past segBytes is sealed before the next turn
			// start, so that most segments start with one.
			r := -1
			if st.end+int64(len(b)) > s.segBytes() && !s.noLinks {
				r = firstStart(b)
			}
			if r >= 0 && st.end+int64(r) > s.segBytes() {
				if r > 0 { // the records before the turn start
					if _, err = f.WriteAt(b[:r], st.end); err != nil {
						break
					}
					st.end += int64(r)
					st.clean = false
				}
				var rolled bool
				f, rolled = s.tryRoll(f, st, name) // if it fails, the file grows on
				changed = changed || rolled
				b = b[r:]
			}
			if _, err = f.WriteAt(b, st.end); err == nil {
				st.noteStarts(b, st.end)
				st.end += int64(len(b))
				st.clean = false
			}
		}
		if err != nil {
			// These records are lost: cut what was written of them
			// (a later scan would also stop at it) and mark the gap.
			f.Truncate(st.end)
			st.lost = true
			return changed, err
		}
	}
	if j.sync {
		err = s.syncSealed(st)
		if err == nil {
			err = s.failpoint("log.sync")
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			return changed, err
		}
		st.clean = true
	}
	if st.end > 2*s.segBytes() && !s.noLinks { // a long turn
		var rolled bool
		f, rolled = s.tryRoll(f, st, name)
		changed = changed || rolled
	}
	if st.end > s.opts.MaxSessionBytes { // not sealed: trim by copy
		if err := s.trim(f, st, name); err != nil {
			return changed, fmt.Errorf("trim: %w", err)
		}
		changed = true
	}
	return changed, nil
}

// tryRoll seals f (roll) and returns the file to append to and whether it
// is a new one. A failure leaves f as it was (roll), logged: the file
// grows until a later roll succeeds, or is trimmed by copy past the cap.
// Where the file system has no hard links, the Store stops sealing
// (noLinks) and trims by copy.
func (s *Store) tryRoll(f *os.File, st *logState, name string) (*os.File, bool) {
	g, err := s.roll(f, st, name)
	switch {
	case errors.Is(err, errNoLinks):
		s.noLinks = true
		s.log.Warn("store: the state directory has no hard links; session logs past their cap are trimmed by copy", "error", err)
		return f, false
	case err != nil:
		s.log.Warn("store: cannot seal a session log; it grows on", "error", err)
		return f, false
	}
	return g, true
}

// writeShared writes p, an update record with a shared line, at off; it
// returns where it ends (off on an error).
func (s *Store) writeShared(f *os.File, p *piece, off int64) (int64, error) {
	sum := crc32.Update(crc32.Checksum(p.hdr[recHeaderLen:], castagnoli), castagnoli, p.ext)
	binary.LittleEndian.PutUint32(p.hdr[4:], sum)
	if _, err := f.WriteAt(p.hdr[:], off); err != nil {
		return off, err
	}
	if err := s.failpoint("log.write.shared"); err != nil {
		return off, err
	}
	if _, err := f.WriteAt(p.ext, off+int64(len(p.hdr))); err != nil {
		return off, err
	}
	return off + p.size(), nil
}

// prepareLog finds where the valid records of the locked log f end, cutting
// off a torn tail, so that the next record is appended right after the last
// valid one. It reads only what other processes appended since this one last
// wrote the same file; a new or replaced file is scanned whole.
func (s *Store) prepareLog(f *os.File, st *logState, fresh bool, name string) (created bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	size := fi.Size()
	var hdr [logHeaderLen]byte
	if size >= logHeaderLen {
		if _, err := f.ReadAt(hdr[:], 0); err != nil {
			return false, err
		}
	}
	if fresh || size < logHeaderLen || hdr == [logHeaderLen]byte{} {
		// A new history, a new file, or a header a crash tore (a header
		// of zeros: an OS crash lost the data of a file it had sized).
		// Unless the history is new, what this process appends next may
		// continue a turn whose beginning is not in the file: a trim
		// record hides it up to the next turn start.
		head := newHeader(rand.Uint64())
		if !fresh || st.lost {
			head = append(head, sealedRecord(recTrim, nil)...)
		}
		// The sealed segments of the history this file held go first:
		// a crash before the truncation leaves a link to nothing.
		switch {
		case size < logHeaderLen: // a new file
		case hdr == [logHeaderLen]byte{}:
			err = s.removeAllSegments(name)
		default:
			err = s.removeChain(name, s.chainOf(f, name))
		}
		if err == nil {
			err = s.failpoint("log.init")
		}
		if err == nil {
			err = f.Truncate(0)
		}
		if err != nil {
			return false, err
		}
		if _, err := f.WriteAt(head, 0); err != nil {
			return false, err
		}
		*st = logState{nonce: binary.LittleEndian.Uint64(head[len(logMagic):]), end: int64(len(head)), startsOK: true, segsOK: true} // the segments are gone
		return true, nil
	}
	if string(hdr[:len(logMagic)]) != logMagic {
		return false, errors.New("not a session log (bad magic)")
	}
	nonce := binary.LittleEndian.Uint64(hdr[len(logMagic):])
	start := int64(logHeaderLen)
	if nonce == st.nonce && st.end >= logHeaderLen && size >= st.end {
		if size == st.end {
			return false, nil
		}
		start = st.end
	} else {
		st.starts, st.startsOK = st.starts[:0], true // the whole file is read
		st.segs, st.segsOK = nil, false              // another process sealed or replaced it
	}
	st.clean = false // another process's records, or a tail cut
	end, err := scanLog(f, start, size, func(off int64, typ byte) {
		if typ == recStart && st.startsOK {
			if len(st.starts) == maxStarts {
				st.starts, st.startsOK = nil, false
			} else {
				st.starts = append(st.starts, off)
			}
		}
	})
	if err != nil {
		st.starts, st.startsOK = nil, false
		return false, err
	}
	if end < size {
		if err = s.failpoint("log.truncate"); err == nil {
			err = f.Truncate(end)
		}
		if err != nil {
			return false, err
		}
	}
	// st.lost stays: what we failed to write is in no file, a trimmed
	// copy included, so the gap must still be marked.
	st.nonce, st.end = nonce, end
	return false, nil
}

// trim rewrites the locked log f without its oldest turns, down to 3/4 of
// MaxSessionBytes so that it is not rewritten at every commit: it keeps the
// longest suffix that starts at a turn start and fits. The new file starts
// with a trim record and replaces f by rename; other writers waiting for
// f's lock notice the rename (openLocked) and reopen.
func (s *Store) trim(f *os.File, st *logState, name string) error {
	starts, end := st.starts, st.end
	if s.opts.verifyStarts && st.startsOK {
		var scanned []int64
		e, err := scanLog(f, logHeaderLen, st.end, func(off int64, typ byte) {
			if typ == recStart {
				scanned = append(scanned, off)
			}
		})
		if err != nil || e != end || !slices.Equal(scanned, starts) {
			panic(fmt.Sprintf("store: turn starts %v (end %d), the log has %v (end %d, %v)", starts, end, scanned, e, err))
		}
	}
	if !st.startsOK {
		starts = nil
		var err error
		end, err = scanLog(f, logHeaderLen, st.end, func(off int64, typ byte) {
			if typ == recStart {
				starts = append(starts, off)
			}
		})
		if err != nil {
			return err
		}
	}
	room := s.trimRoom()
	cut := end
	for _, want := range []int64{min(s.opts.MaxSessionBytes*3/4, room), room} {
		for _, c := range starts {
			if end-c <= want {
				cut = min(cut, c)
				break
			}
		}
		if cut < end {
			break
		}
	}

	nonce := rand.Uint64()
	if err := s.failpoint("trim.write"); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	segs := s.chainOf(f, name) // sealed before the file system lost its links
	head := append(newHeader(nonce), sealedRecord(recTrim, nil)...)
	if _, err := tmp.Write(head); err != nil {
		return err
	}
	// From f's own descriptor (writes use WriteAt, so its offset is free):
	// the kernel copies the kept suffix (copy_file_range) instead of
	// reading it into the process and writing it back.
	if _, err := f.Seek(cut, io.SeekStart); err != nil {
		return err
	}
	if n, err := io.Copy(tmp, io.LimitReader(f, end-cut)); err != nil || n != end-cut {
		if err == nil {
			err = fmt.Errorf("store: trim copied %d of %d bytes", n, end-cut)
		}
		return err
	}
	if err := s.failpoint("trim.sync"); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := s.failpoint("trim.rename"); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.logPath(name)); err != nil {
		return err
	}
	ok = true
	kept := st.starts[:0]
	if st.startsOK {
		for _, c := range starts {
			if c >= cut {
				kept = append(kept, c-cut+int64(len(head)))
			}
		}
	}
	*st = logState{nonce: nonce, end: int64(len(head)) + end - cut, starts: kept, startsOK: st.startsOK, segsOK: true}
	// The copy starts with a trim record, not a link: the segments are
	// history no more.
	return s.removeChain(name, segs)
}

// remove deletes a session's files: the metadata first, so that a crash in
// between leaves an orphan log (swept later), not a listed session with its
// history gone. With tryLock it gives up when another process is writing the
// log (eviction), and reports that with errBusy.
func (s *Store) remove(name string, tryLock bool) error {
	how := syscall.LOCK_EX
	if tryLock {
		how |= syscall.LOCK_NB
	}
	f, err := openLocked(s.logPath(name), how, false)
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return errBusy
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store: remove: %w", err)
	}
	if f != nil {
		defer f.Close()
	}
	if err := s.failpoint("remove.meta"); err != nil {
		return err
	}
	if err := os.Remove(s.metaPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: remove: %w", err)
	}
	// The sealed segments after the file that names them: a crash in
	// between leaves segments of no session, which the sweep removes.
	if f != nil {
		segs := s.chainOf(f, name)
		if err := s.failpoint("remove.log"); err != nil {
			return err
		}
		if err := os.Remove(s.logPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("store: remove: %w", err)
		}
		err = s.removeChain(name, segs)
	} else if !s.opts.MetadataOnly {
		err = s.removeAllSegments(name) // what a crash left
	}
	if err != nil {
		return fmt.Errorf("store: remove: %w", err)
	}
	delete(s.files, name)
	return nil
}

var errBusy = errors.New("store: session busy")
