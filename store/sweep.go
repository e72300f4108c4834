package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// staleAge is when a temp file or a log without metadata is taken for the
// leftover of a crash: the writer writes both files of a session in one
// commit, within milliseconds.
const staleAge = time.Hour

// sweep enforces the limits across the directory, whoever wrote the
// sessions: logs in metadata-only mode, crash leftovers, then whole sessions
// older than MaxAge and, least recently used first, over MaxTotalBytes. It
// runs on the writer goroutine.
func (s *Store) sweep() {
	s.sinceSweep = 0
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		s.log.Warn("store: sweep failed", "error", err)
		return
	}
	now := time.Now()
	type stored struct {
		name      string
		metaBytes int64
		logBytes  int64
		hasMeta   bool
		hasLog    bool
		used      time.Time // the newest modification of its files
	}
	byName := map[string]*stored{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		n := e.Name()
		if strings.HasPrefix(n, ".tmp-") {
			if now.Sub(info.ModTime()) > staleAge && s.failpoint("sweep.remove") == nil {
				os.Remove(filepath.Join(s.dir, n))
			}
			continue
		}
		ext := filepath.Ext(n)
		if ext != ".json" && ext != ".log" && !strings.HasPrefix(ext, ".log-") { // .log-NONCE: a sealed segment
			continue
		}
		name := strings.TrimSuffix(n, ext)
		st := byName[name]
		if st == nil {
			st = &stored{name: name}
			byName[name] = st
		}
		switch ext {
		case ".json":
			st.hasMeta, st.metaBytes = true, info.Size()
		case ".log":
			st.hasLog = true
			st.logBytes += info.Size()
		default:
			st.logBytes += info.Size()
		}
		if info.ModTime().After(st.used) {
			st.used = info.ModTime()
		}
	}

	s.mu.Lock()
	held := make(map[string]bool, len(s.sessions))
	for _, se := range s.sessions {
		held[se.name] = true
	}
	s.mu.Unlock()

	var total int64
	var cands []*stored
	for _, st := range byName {
		switch {
		case !st.hasMeta && !held[st.name] && now.Sub(st.used) > staleAge:
			s.evict(st.name) // an orphan log: a crash during delete or create
			continue
		case s.opts.MetadataOnly && st.logBytes > 0:
			if s.dropContent(st.name) {
				st.logBytes = 0
			}
		}
		total += st.metaBytes + st.logBytes
		if !held[st.name] {
			cands = append(cands, st)
		}
	}
	slices.SortFunc(cands, func(a, b *stored) int { return a.used.Compare(b.used) })
	for _, st := range cands {
		if now.Sub(st.used) <= s.opts.MaxAge && total <= s.opts.MaxTotalBytes {
			break
		}
		if s.evict(st.name) {
			total -= st.metaBytes + st.logBytes
		}
	}
}

// evict removes a session unless another process is writing it right now.
func (s *Store) evict(name string) bool {
	err := s.remove(name, true)
	if err != nil && !errors.Is(err, errBusy) {
		s.log.Warn("store: evict failed", "error", err)
	}
	return err == nil
}

// dropContent removes a log in metadata-only mode.
func (s *Store) dropContent(name string) bool {
	f, err := openLocked(s.logPath(name), syscall.LOCK_EX|syscall.LOCK_NB, false)
	if errors.Is(err, fs.ErrNotExist) {
		return s.removeAllSegments(name) == nil // segments left by a crash
	}
	if err != nil {
		return false
	}
	defer f.Close()
	if s.failpoint("sweep.remove") != nil {
		return false
	}
	delete(s.files, name)
	segs := s.chainOf(f, name)
	return os.Remove(s.logPath(name)) == nil && s.removeChain(name, segs) == nil
}
