package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"
)

// Meta is what the store keeps of a router session besides its updates. The
// router owns the meaning of every field; the store only moves UpdatedAt
// (TurnStart, TurnEnd).
type Meta struct {
	ID                    string           `json:"id"`
	Cwd                   string           `json:"cwd"`
	AdditionalDirectories []string         `json:"additionalDirectories,omitempty"`
	Title                 string           `json:"title,omitempty"`
	CreatedAt             time.Time        `json:"createdAt"`
	UpdatedAt             time.Time        `json:"updatedAt"`
	ActiveAgent           string           `json:"activeAgent,omitempty"`
	Agents                map[string]Agent `json:"agents,omitempty"` // by agent name
	// Archived hides the session from a List that excludes archived
	// sessions (session/archive, unstable).
	Archived bool `json:"archived,omitempty"`
	// Extra is router state kept verbatim, e.g. the session/new params
	// (MCP servers) needed to open the session on an agent again.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Agent is what the router session knows of one agent it used.
type Agent struct {
	SessionID string                     `json:"sessionId"`         // the downstream session id
	Mode      string                     `json:"mode,omitempty"`    // current mode id
	Options   map[string]json.RawMessage `json:"options,omitempty"` // config option id → current value
	Extra     json.RawMessage            `json:"extra,omitempty"`   // router state kept verbatim
}

// clone is a deep copy: callers and the writer never share memory.
func (m Meta) clone() Meta {
	m.AdditionalDirectories = slices.Clone(m.AdditionalDirectories)
	m.Extra = slices.Clone(m.Extra)
	if m.Agents != nil {
		agents := make(map[string]Agent, len(m.Agents))
		for name, a := range m.Agents {
			a.Extra = slices.Clone(a.Extra)
			if a.Options != nil {
				a.Options = maps.Clone(a.Options)
				for k, v := range a.Options {
					a.Options[k] = slices.Clone(v)
				}
			}
			agents[name] = a
		}
		m.Agents = agents
	}
	return m
}

// metaFile is the content of NAME.json.
type metaFile struct {
	Version int  `json:"version"`
	Session Meta `json:"session"`
	// UpdatedHistory holds earlier UpdatedAt values (Unix ns, oldest first),
	// so that a List pagination keeps each session where it was when the
	// pagination began (list.go).
	UpdatedHistory []int64 `json:"updatedHistory,omitempty"`
}

const metaVersion = 1

// UpdatedAt history bounds. List positions are taken on a grid of
// defaultListGrain, so only the newest value of each grain can ever be a
// position; values older than cursorTTL are needed only for the newest of
// them; at most maxBumps are kept (a session updated in more than 512
// distinct seconds of an hour).
const (
	cursorTTL        = time.Hour
	defaultListGrain = time.Second
	maxBumps         = 512
)

// pushBump records prev, the UpdatedAt value replaced at now.
func pushBump(bumps []int64, prev int64, now time.Time, grain time.Duration) []int64 {
	return normalizeBumps(append(bumps, prev), now, grain)
}

// normalizeBumps sorts an UpdatedAt history and drops the values no List
// position can need (see the constants above).
func normalizeBumps(b []int64, now time.Time, grain time.Duration) []int64 {
	slices.Sort(b)
	g := int64(grain)
	out := b[:0]
	for i, v := range b {
		if i+1 < len(b) && b[i+1]/g == v/g {
			continue // not the newest of its grain
		}
		out = append(out, v)
	}
	cutoff := now.Add(-cursorTTL).UnixNano()
	drop := 0
	for drop+1 < len(out) && out[drop+1] <= cutoff {
		drop++
	}
	drop = max(drop, len(out)-maxBumps)
	return append(out[:0], out[drop:]...)
}

// mergeHistory adds to mf (about to be written) the UpdatedAt values of
// disk, the version another process may have written meanwhile: a List
// pagination in a third process must find the same position for the
// session in whichever version it reads. The newer UpdatedAt wins; the
// other fields are mf's (last writer wins).
func mergeHistory(mf, disk *metaFile, now time.Time, grain time.Duration) {
	ours, theirs := mf.Session.UpdatedAt, disk.Session.UpdatedAt
	vals := append(slices.Clone(mf.UpdatedHistory), disk.UpdatedHistory...)
	switch {
	case theirs.After(ours):
		vals = append(vals, ours.UnixNano())
		mf.Session.UpdatedAt = theirs
	case theirs.Before(ours):
		vals = append(vals, theirs.UnixNano())
	}
	mf.UpdatedHistory = normalizeBumps(vals, now, grain)
}

// readMeta reads and checks NAME.json.
func readMeta(path, name string) (metaFile, error) {
	var mf metaFile
	data, err := os.ReadFile(path)
	if err != nil {
		return mf, err
	}
	if err := json.Unmarshal(data, &mf); err != nil {
		return mf, fmt.Errorf("store: %s: %w", path, err)
	}
	if mf.Version != metaVersion || mf.Session.ID == "" || fileName(mf.Session.ID) != name {
		return mf, fmt.Errorf("store: %s: not a session of this store (version %d)", path, mf.Version)
	}
	return mf, nil
}
