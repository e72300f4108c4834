package hub

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// owners remembers which identity started which session, so that a client
// that may not see every session (Identity.AllSessions false) sees its own
// after a restart too. The map is under Hub.mu; the file (mode 0600,
// written whole and renamed into place) under saveMu.
type owners struct {
	path  string
	log   hclog.Logger
	m     map[string]string
	dirty bool

	saveMu sync.Mutex
}

func loadOwners(path string, log hclog.Logger) *owners {
	o := &owners{path: path, log: log, m: map[string]string{}}
	if path == "" {
		return o
	}
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, &o.m); err != nil {
			log.Warn("session owners file does not decode; starting empty", "file", path, "error", err)
			o.m = map[string]string{}
		} else if o.m == nil { // the file says null
			o.m = map[string]string{}
		}
	} else if !os.IsNotExist(err) {
		log.Warn("cannot read the session owners file", "file", path, "error", err)
	}
	return o
}

func (o *owners) get(sid string) string { return o.m[sid] }

func (o *owners) set(sid, name string) {
	if o.m[sid] != name {
		o.m[sid] = name
		o.dirty = true
	}
}

func (o *owners) remove(sid string) {
	if _, ok := o.m[sid]; ok {
		delete(o.m, sid)
		o.dirty = true
	}
}

// snapshotLocked returns a copy to save when the map changed (under
// Hub.mu).
func (o *owners) snapshotLocked() map[string]string {
	if !o.dirty || o.path == "" {
		return nil
	}
	o.dirty = false
	return maps.Clone(o.m)
}

// write saves a snapshot (called without Hub.mu). Snapshots are written in
// the order they were taken: saveMu is taken before Hub.mu is released
// by the caller (save).
func (o *owners) write(snap map[string]string) {
	b, err := json.Marshal(snap)
	if err != nil {
		return
	}
	dir := filepath.Dir(o.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		o.log.Warn("cannot save the session owners", "file", o.path, "error", err)
		return
	}
	f, err := os.CreateTemp(dir, ".owners-*")
	if err != nil {
		o.log.Warn("cannot save the session owners", "file", o.path, "error", err)
		return
	}
	defer os.Remove(f.Name())
	if err = f.Chmod(0o600); err == nil {
		if _, err = f.Write(b); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), o.path)
	}
	if err != nil {
		o.log.Warn("cannot save the session owners", "file", o.path, "error", err)
	}
}

// save writes the owners file when it changed.
func (h *Hub) saveOwners() {
	h.mu.Lock()
	snap := h.owners.snapshotLocked()
	if snap == nil {
		h.mu.Unlock()
		return
	}
	h.owners.saveMu.Lock()
	h.mu.Unlock()
	defer h.owners.saveMu.Unlock()
	h.owners.write(snap)
}
