package page

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"time"
)

// Filter selects audit records; empty fields match all. Before is a
// cursor: records are numbered from the oldest (0) in the live file, and
// a page holds those below Before (0: from the newest).
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

// fields are the record members the filter and the counts read.
type fields struct {
	Time     time.Time `json:"time"`
	Session  string    `json:"session"`
	Parent   string    `json:"parentSession"`
	Agent    string    `json:"agent"`
	Decision string    `json:"decision"`
	Rule     *string   `json:"rule"`
}

// maxRecord bounds one line read from the log; a longer one ends the read
// with an error (the router writes none: evidence is bounded).
const maxRecord = 4 << 20

// ReadAudit reads the live audit file (rotated generations are not read)
// and returns the page f asks for, newest first.
func ReadAudit(file string, f Filter, now time.Time) (AuditPage, error) {
	res := AuditPage{Entries: []Entry{}, Counts: map[string]int{}, Where: map[string]string{}}
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	f.Limit = min(f.Limit, MaxLimit)
	if file == "" {
		return res, nil
	}
	fh, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), maxRecord)
	since := now.Add(-24 * time.Hour)
	var matched []Entry
	n := -1
	for sc.Scan() {
		n++
		line := sc.Bytes()
		var r fields
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		rule := ""
		if r.Rule != nil {
			rule = *r.Rule
		}
		if !r.Time.Before(since) {
			res.Counts[rule]++
		}
		if f.Before > 0 && n >= f.Before {
			continue
		}
		if f.Agent != "" && r.Agent != f.Agent ||
			f.Session != "" && r.Session != f.Session && r.Parent != f.Session ||
			f.Rule != "" && rule != f.Rule ||
			f.Effect != "" && r.Decision != f.Effect {
			continue
		}
		matched = append(matched, Entry{N: n, Record: json.RawMessage(append([]byte(nil), line...))})
		if len(matched) > 4*MaxLimit {
			// Keep only what a page can need: the newest.
			matched = append(matched[:0], matched[len(matched)-f.Limit-1:]...)
		}
		res.Total++
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	for i := len(matched) - 1; i >= 0 && len(res.Entries) < f.Limit; i-- {
		res.Entries = append(res.Entries, matched[i])
	}
	if len(matched) > f.Limit {
		res.Next = res.Entries[len(res.Entries)-1].N
	}
	return res, nil
}
