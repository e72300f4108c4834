package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
)

// A session's log is a chain of segments: NAME.log, the one appended to,
// and the sealed ones before it, NAME.log-NONCE (NONCE: 16 hex digits, the
// sealed file's own header nonce). A segment that continues another starts
// with a link: a trim record whose payload is its predecessor's nonce and
// length (8 bytes each, little-endian): a predecessor shorter than that
// lost its end (an OS crash before the turn's fsync) and is followed by a
// gap, not by the rest of a turn. Readers that do not know links (an older
// router) take it for a trim record and see the newest segment only.
//
// When the file appended to holds more than segBytes, the writer seals it
// before the next turn start (or, in a turn that goes on, once it holds
// twice that): it gives it its sealed name (a hard link, made durable by a
// directory fsync), drops the oldest sealed segments while they would leave
// less than 2×segBytes of the cap, and renames a new file with the link
// over NAME.log. The sealed file is fsynced on a goroutine of its own; the
// next sync commit waits for that (none when the file was sealed as its
// last fsync left it). A log past its cap thus loses whole segments, never
// copies what it keeps; the first segment kept may start mid-turn, which
// readers hide up to the next turn start as after any trim record. All of
// it happens under the exclusive lock of NAME.log; Load reads the chain
// under a shared one, so it sees the chain before a roll or after it. A
// seal that fails leaves the file as it was: it grows on, and is trimmed by
// copy past the cap.

// segBytes is the size past which the appended file is sealed: 1/16 of the
// cap, so that the log keeps between 3/4 of the cap and the cap.
func (s *Store) segBytes() int64 { return max(s.opts.MaxSessionBytes/16, 64) }

// linkLen is the length of a link record.
const linkLen = recHeaderLen + 1 + 16

func (s *Store) segPath(name string, nonce uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s.log-%016x", name, nonce))
}

// segment is a sealed segment of a log.
type segment struct {
	nonce uint64
	size  int64
}

// readLink returns the predecessor named by the link at the start of f's
// records, if there is one.
func readLink(f *os.File) (prev uint64, ok bool) {
	var b [linkLen]byte
	if _, err := f.ReadAt(b[:], logHeaderLen); err != nil {
		return 0, false
	}
	prev, _, ok = parseLink(b[:])
	return prev, ok
}

// parseLink reads a link record at the start of b (a log's records): the
// predecessor's nonce and length.
func parseLink(b []byte) (prev uint64, size int64, ok bool) {
	if len(b) < linkLen || binary.LittleEndian.Uint32(b) != 1+16 || b[recHeaderLen] != recTrim ||
		crc32.Checksum(b[recHeaderLen:linkLen], castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b[recHeaderLen+1:]), int64(binary.LittleEndian.Uint64(b[recHeaderLen+9:])), true
}

// linkPayload is the payload of a link to the segment nonce of size bytes.
func linkPayload(nonce uint64, size int64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, nonce), uint64(size))
}

// maxSegments bounds a chain a reader follows (the cap makes about 17;
// only a damaged directory could hold a longer one).
const maxSegments = 1024

// openSegment opens the sealed segment nonce of name, nil when it is gone
// or is not that segment.
func (s *Store) openSegment(name string, nonce uint64) *os.File {
	f, err := os.Open(s.segPath(name, nonce))
	if err != nil {
		return nil
	}
	var hdr [logHeaderLen]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil || string(hdr[:len(logMagic)]) != logMagic ||
		binary.LittleEndian.Uint64(hdr[len(logMagic):]) != nonce {
		f.Close()
		return nil
	}
	return f
}

// loadSegments makes st.segs the sealed segments before the locked
// appended file f, oldest first, as the links name them.
func (s *Store) loadSegments(f *os.File, st *logState, name string) {
	var segs []segment
	prev, ok := readLink(f)
	for ok && len(segs) < maxSegments {
		g := s.openSegment(name, prev)
		if g == nil {
			break
		}
		fi, err := g.Stat()
		if err == nil {
			segs = append(segs, segment{nonce: prev, size: fi.Size()})
			prev, ok = readLink(g)
		}
		g.Close()
		if err != nil {
			break
		}
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	st.segs, st.segsOK = segs, true
}

// chainOf returns the sealed segments the locked file f links to, oldest
// first.
func (s *Store) chainOf(f *os.File, name string) []segment {
	var st logState
	s.loadSegments(f, &st, name)
	return st.segs
}

// removeChain removes segs, oldest first: a crash midway leaves the newer
// ones still linked.
func (s *Store) removeChain(name string, segs []segment) error {
	for _, g := range segs {
		if err := os.Remove(s.segPath(name, g.nonce)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// removeAllSegments removes every sealed segment of name, linked or not,
// by listing the directory: only for what no file links to any more (a
// crash's leftovers, a header an OS crash zeroed).
func (s *Store) removeAllSegments(name string) error {
	paths, _ := filepath.Glob(filepath.Join(s.dir, name+".log-*"))
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// errNoLinks: the file system cannot hard-link; logs are trimmed by copy.
var errNoLinks = errors.New("store: no hard links in the state directory")

// roll seals the locked appended file f of name (st its state) and returns
// the new one, locked. On an error f is still the appended file, intact.
func (s *Store) roll(f *os.File, st *logState, name string) (*os.File, error) {
	if !st.segsOK {
		s.loadSegments(f, st, name)
	}
	// The sealed file is fsynced by another goroutine (fsyncSealed), and
	// the next sync commit (a turn's end) waits for that: the writer does
	// not wait for the disk in the middle of a flood, nor for a cache
	// flush per segment at the turn's end. Until then, what an OS crash
	// may take from its end is the turn in progress, which readers end
	// there (a segment shorter than its link says is followed by a gap).
	if err := s.failpoint("roll.seal"); err != nil {
		return f, err
	}
	if err := s.failpoint("roll.link"); err != nil {
		return f, err
	}
	sealed := s.segPath(name, st.nonce)
	link := os.Link
	if s.opts.noLinks {
		link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
	}
	if err := link(s.logPath(name), sealed); err != nil {
		if fi, e := os.Stat(sealed); !errors.Is(err, fs.ErrExist) || e != nil || !sameFile(f, fi) {
			if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EXDEV) {
				return f, fmt.Errorf("%w: %w", errNoLinks, err)
			}
			return f, err
		}
		// A crash after the link left it: it is this file.
	}
	// The new name must be on disk before the rename below takes the old
	// one: a file system without a journal may keep the rename of a crash
	// and lose the link, and with it the sealed file.
	if err := syncDir(s.dir); err != nil {
		return f, err
	}
	segs := append(st.segs, segment{nonce: st.nonce, size: st.end})
	st.segsOK = false // until the new state is set
	// The newest kept whole while they leave room for two more segments;
	// the newest one always.
	first, kept := len(segs)-1, segs[len(segs)-1].size
	for first > 0 && kept+segs[first-1].size <= s.opts.MaxSessionBytes-2*s.segBytes() {
		first--
		kept += segs[first].size
	}
	for _, g := range segs[:first] {
		if err := s.failpoint("roll.remove"); err != nil {
			return f, err
		}
		if err := os.Remove(s.segPath(name, g.nonce)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	segs = append([]segment(nil), segs[first:]...)

	nonce := rand.Uint64()
	if err := s.failpoint("roll.write"); err != nil {
		return f, err
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return f, err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := flock(tmp, syscall.LOCK_EX); err != nil {
		return f, err
	}
	head := append(newHeader(nonce), sealedRecord(recTrim, linkPayload(st.nonce, st.end))...)
	if _, err := tmp.Write(head); err != nil {
		return f, err
	}
	if err := s.failpoint("roll.sync"); err != nil {
		return f, err
	}
	if err := tmp.Sync(); err != nil {
		return f, err
	}
	if err := s.failpoint("roll.rename"); err != nil {
		return f, err
	}
	if err := os.Rename(tmp.Name(), s.logPath(name)); err != nil {
		return f, err
	}
	ok = true
	f.Close()
	unsynced := st.unsynced
	if !st.clean { // a file its last fsync wrote whole (sealed at a turn's start) needs none
		unsynced = append(unsynced, s.fsyncSealed(sealed))
	}
	*st = logState{nonce: nonce, end: int64(len(head)), lost: st.lost, startsOK: true, segs: segs, segsOK: true,
		unsynced: unsynced, clean: true}
	return tmp, nil
}

// fsyncSealed fsyncs the sealed segment at path on a goroutine of its own
// (s.fsyncs: Close waits for it) and returns where its result will be
// (nil: done, or the file is gone, dropped as the oldest: it needs no
// fsync).
func (s *Store) fsyncSealed(path string) <-chan error {
	done := make(chan error, 1)
	s.fsyncs.Go(func() {
		if s.opts.sealFsync != nil {
			s.opts.sealFsync()
		}
		g, err := os.Open(path)
		if err == nil {
			err = g.Sync()
			g.Close()
		}
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		done <- err
	})
	return done
}

// syncSealed waits for the fsyncs of the segments st sealed since its last
// sync commit.
func (s *Store) syncSealed(st *logState) error {
	for len(st.unsynced) > 0 {
		if err := s.failpoint("log.sync.sealed"); err != nil {
			return err
		}
		err := <-st.unsynced[0]
		st.unsynced = st.unsynced[1:]
		if err != nil {
			return err // reported once, as a failed fsync of the log is
		}
	}
	return nil
}

func sameFile(f *os.File, fi os.FileInfo) bool {
	gi, err := f.Stat()
	return err == nil && os.SameFile(gi, fi)
}

// readChain reads name's log: the records of each segment (without its
// header), oldest first, under a shared lock of the appended file. A
// segment whose predecessor is gone starts with what readers take for a
// trim record.
func (s *Store) readChain(name string) ([][]byte, error) {
	f, err := openLocked(s.logPath(name), syscall.LOCK_SH, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := readSegment(f)
	if err != nil || data == nil {
		return nil, err
	}
	chain := [][]byte{data}
	for len(chain) < maxSegments {
		prev, _, ok := parseLink(chain[len(chain)-1])
		if !ok {
			break
		}
		g := s.openSegment(name, prev)
		if g == nil {
			break
		}
		d, err := readSegment(g)
		g.Close()
		if err != nil || d == nil {
			break // unreadable: the chain ends here, as if trimmed
		}
		chain = append(chain, d)
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// readSegment returns the records of an open segment (nil for a file torn
// at creation).
func readSegment(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, fi.Size()), data); err != nil {
		return nil, err
	}
	if len(data) < logHeaderLen {
		return nil, nil // torn at creation: nothing was stored
	}
	if string(data[:len(logMagic)]) != logMagic {
		if string(data[:logHeaderLen]) == string(make([]byte, logHeaderLen)) {
			return nil, nil
		}
		return nil, errors.New("not a session log (bad magic)")
	}
	return data[logHeaderLen:], nil
}
