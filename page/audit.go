package page

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/acp-router/acp-router/acp"
)

// Filter selects audit records; empty fields match all. Before is a
// cursor: records are numbered from the oldest (0) of the whole log, the
// rotated files (FILE.N, the oldest, ... FILE.1) then the live FILE, and a
// page holds those below Before (0: from the newest). A rotation keeps the
// numbers (a file renamed is the same records); only the drop of the
// oldest generation shifts them down.
type Filter struct {
	Agent, Session, Rule, Effect string
	Before                       int
	Limit                        int
}

// DefaultLimit and MaxLimit bound one page of the timeline.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Entry is one audit record as the page shows it: the record itself
// (every field the log has, evidence included) and its cursor.
type Entry struct {
	N      int             `json:"n"`
	Record json.RawMessage `json:"record"`
}

// AuditPage is one answer of /api/audit.
type AuditPage struct {
	Entries []Entry `json:"entries"`
	// Next is the Before of the next (older) page; 0 when there is none.
	Next int `json:"next"`
	// Counts are the decisions per rule over the last day ("" for those
	// no rule decided), whatever the filter.
	Counts map[string]int `json:"counts"`
	// Total is how many records match the filter.
	Total int `json:"total"`
	// Where is each rule's file:line:col in the policy in force (a record
	// older than the last reload may have been decided where the rule
	// was then: its policyHash says which policy decided).
	Where map[string]string `json:"where"`
}

// maxRecord bounds one record: a longer line is counted but not read
// (the router writes none: evidence is bounded).
const maxRecord = 4 << 20

// maxGenerations bounds the rotated files read (audit/ keeps 5).
const maxGenerations = 64

// ReadAudit reads the audit log at file, rotated generations included,
// and returns the page f asks for, newest first. Each call reads the
// whole log; an AuditReader keeps what it read.
func ReadAudit(file string, f Filter, now time.Time) (AuditPage, error) {
	r := NewAuditReader(file)
	defer r.Close()
	return r.Read(f, now)
}

// AuditReader answers audit pages from an index of the log it keeps in
// memory and brings up to date at each Read: a rotated file is indexed
// once (audit/ only renames it, so that it is known by its inode), the
// live file from where the last Read stopped, so that a Read costs the
// records appended since, a pass over the index, and reading the page's
// own records. The index holds a few fields and the offset of each record
// (about 40 bytes a record; the log itself is bounded by audit/'s cap and
// generations).
type AuditReader struct {
	path string

	mu      sync.Mutex
	files   []*logFile // oldest first; the live file last
	strs    map[string]uint32
	names   []string
	scanned int64 // bytes indexed so far (tests)
}

// logFile is one file of the log and its index.
type logFile struct {
	f        *os.File // open across renames: a rotation keeps it readable
	dev, ino uint64
	size     int64 // indexed up to here (whole lines)
	recs     []rec
}

// rec is one line of the log: where it is and the fields the filter and
// the counts read (interned; 0 is "").
type rec struct {
	off                                    int64
	n                                      int32
	valid                                  bool
	unix                                   int64 // seconds
	agent, session, parent, rule, decision uint32
}

// NewAuditReader returns a reader of the log at path ("" reads nothing).
func NewAuditReader(path string) *AuditReader {
	return &AuditReader{path: path, strs: map[string]uint32{"": 0}, names: []string{""}}
}

// Close closes the files the reader holds.
func (a *AuditReader) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, lf := range a.files {
		lf.f.Close()
	}
	a.files = nil
}

// recordFields are the record members the filter and the counts read.
var recordFields = [...]string{"time", "agent", "session", "parentSession", "decision", "rule"}

// internJSON interns a JSON string value ("" for anything else: null, a
// number, absent), as decoding it into a string field would (a
// non-string fails that decode: the old reader skipped such a record;
// here its field is empty).
func (a *AuditReader) internJSON(v json.RawMessage) uint32 {
	if len(v) < 2 || v[0] != '"' {
		return 0
	}
	if bytes.IndexByte(v, '\\') < 0 {
		if i, ok := a.strs[string(v[1:len(v)-1])]; ok {
			return i
		}
		return a.intern(string(v[1 : len(v)-1]))
	}
	var s string
	json.Unmarshal(v, &s)
	return a.intern(s)
}

func (a *AuditReader) intern(s string) uint32 {
	if i, ok := a.strs[s]; ok {
		return i
	}
	i := uint32(len(a.names))
	a.strs[s] = i
	a.names = append(a.names, s)
	return i
}

// refresh brings the index up to the files at the path now.
func (a *AuditReader) refresh() error {
	paths := []string{}
	for g := 1; g <= maxGenerations; g++ {
		p := a.path + "." + strconv.Itoa(g)
		if _, err := os.Lstat(p); err != nil {
			break
		}
		paths = append(paths, p)
	}
	// Oldest first: FILE.N ... FILE.1, FILE.
	for i, j := 0, len(paths)-1; i < j; i, j = i+1, j-1 {
		paths[i], paths[j] = paths[j], paths[i]
	}
	paths = append(paths, a.path)
	old := map[[2]uint64]*logFile{}
	for _, lf := range a.files {
		old[[2]uint64{lf.dev, lf.ino}] = lf
	}
	var files []*logFile
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // rotated away meanwhile
			}
			return err
		}
		key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		lf := old[key]
		if lf == nil || st.Size < lf.size {
			// New, or truncated and written again: from the start.
			f, err := os.Open(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			lf = &logFile{f: f, dev: key[0], ino: key[1]}
		}
		delete(old, key)
		if err := a.index(lf); err != nil {
			return err
		}
		files = append(files, lf)
	}
	for _, lf := range old {
		lf.f.Close()
	}
	a.files = files
	if len(old) > 0 {
		a.compact()
	}
	return nil
}

// compact drops the interned strings only records gone with a dropped
// generation named (session ids, mostly), so that the table stays
// bounded by the log as the index is.
func (a *AuditReader) compact() {
	strs, names := map[string]uint32{"": 0}, []string{""}
	keep := func(id uint32) uint32 {
		s := a.names[id]
		if i, ok := strs[s]; ok {
			return i
		}
		i := uint32(len(names))
		strs[s] = i
		names = append(names, s)
		return i
	}
	for _, lf := range a.files {
		for i := range lf.recs {
			r := &lf.recs[i]
			r.agent, r.session, r.parent, r.rule, r.decision = keep(r.agent), keep(r.session), keep(r.parent), keep(r.rule), keep(r.decision)
		}
	}
	a.strs, a.names = strs, names
}

// index reads lf from where it was indexed to its last whole line.
func (a *AuditReader) index(lf *logFile) error {
	buf := make([]byte, 256<<10)
	var line []byte // a line that spans reads
	long := false   // the line is over maxRecord: counted, not kept
	start := lf.size
	pos := lf.size
	for {
		n, err := lf.f.ReadAt(buf, pos)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				if !long && len(line)+len(chunk) > maxRecord {
					long, line = true, nil
				}
				if !long {
					line = append(line, chunk...)
				}
				break
			}
			end := pos + int64(n-len(chunk)) + int64(i) + 1
			if !long && len(line)+i > maxRecord {
				long, line = true, nil
			}
			if long {
				a.add(lf, start, end, nil)
			} else if len(line) > 0 {
				line = append(line, chunk[:i]...)
				a.add(lf, start, end, line)
			} else {
				a.add(lf, start, end, chunk[:i])
			}
			line, long, start = line[:0], false, end
			lf.size = end
			chunk = chunk[i+1:]
		}
		pos += int64(n)
		a.scanned += int64(n)
		if errors.Is(err, io.EOF) || n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// add indexes the line at [start, end) of lf (nil: too long to read).
func (a *AuditReader) add(lf *logFile, start, end int64, line []byte) {
	r := rec{off: start, n: int32(end - start - 1)}
	// The few members read, without decoding the rest (the evidence):
	// acp.Members checks the whole line is a JSON object, as a decode
	// would.
	var out [len(recordFields)]json.RawMessage
	if line != nil && acp.Members(line, recordFields[:], out[:]) == nil {
		var t time.Time
		if out[0] != nil && json.Unmarshal(out[0], &t) == nil {
			r.unix = t.Unix()
		}
		r.valid = true
		r.agent, r.session, r.parent, r.decision = a.internJSON(out[1]), a.internJSON(out[2]), a.internJSON(out[3]), a.internJSON(out[4])
		r.rule = a.internJSON(out[5])
	}
	lf.recs = append(lf.recs, r)
}

// Read returns the page f asks for, newest first, and the counts per rule
// over the day before now.
func (a *AuditReader) Read(f Filter, now time.Time) (AuditPage, error) {
	res := AuditPage{Entries: []Entry{}, Counts: map[string]int{}, Where: map[string]string{}}
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	f.Limit = min(f.Limit, MaxLimit)
	if a.path == "" {
		return res, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.refresh(); err != nil {
		return res, err
	}
	// The filter's values as interned ids: a value never seen matches
	// nothing.
	want := func(s string) (uint32, bool) {
		if s == "" {
			return 0, true
		}
		i, ok := a.strs[s]
		return i, ok
	}
	agent, okA := want(f.Agent)
	session, okS := want(f.Session)
	rule, okR := want(f.Rule)
	effect, okE := want(f.Effect)
	matchable := okA && okS && okR && okE
	since := now.Add(-24 * time.Hour).Unix()
	counts := map[uint32]int{}
	type hit struct {
		lf *logFile
		r  *rec
		n  int
	}
	var hits []hit // the newest f.Limit+1 matches below Before
	n := -1
	for _, lf := range a.files {
		for i := range lf.recs {
			n++
			r := &lf.recs[i]
			if !r.valid {
				continue
			}
			if r.unix >= since {
				counts[r.rule]++
			}
			if !matchable || f.Agent != "" && r.agent != agent ||
				f.Session != "" && r.session != session && r.parent != session ||
				f.Rule != "" && r.rule != rule || f.Effect != "" && r.decision != effect {
				continue
			}
			res.Total++
			if f.Before > 0 && n >= f.Before {
				continue
			}
			hits = append(hits, hit{lf, r, n})
			if len(hits) > 4*(f.Limit+1) {
				// Keep only what the page can need: the newest.
				hits = append(hits[:0], hits[len(hits)-f.Limit-1:]...)
			}
		}
	}
	for id, c := range counts {
		res.Counts[a.names[id]] = c
	}
	if len(hits) > f.Limit+1 {
		hits = hits[len(hits)-f.Limit-1:]
	}
	for i := len(hits) - 1; i >= 0 && len(res.Entries) < f.Limit; i-- {
		h := hits[i]
		line := make([]byte, h.r.n)
		if _, err := h.lf.f.ReadAt(line, h.r.off); err != nil {
			return res, err
		}
		res.Entries = append(res.Entries, Entry{N: h.n, Record: line})
	}
	if len(hits) > f.Limit {
		res.Next = res.Entries[len(res.Entries)-1].N
	}
	return res, nil
}
