package token

import (
	"slices"
	"sync"
	"time"
)

// watchEvery is how often the tokens file is looked at while connections
// are watched: a revoke (in this process or by `acp-router token revoke` in
// another) ends the connections of the token within it, plus the time
// their transport takes to close. A look is one lstat(2) when the file did
// not change.
const watchEvery = 250 * time.Millisecond

// watcher is one Watch call: gone runs once at most.
type watcher struct {
	once sync.Once
	gone func()
}

func (w *watcher) fire() { w.once.Do(w.gone) }

// Watch calls gone, once, when the token whose Identity.ID is id is no
// longer in the store: revoked (also when a token of the same name was
// created since: that is another token, with another ID), the tokens file
// removed, or unreadable (fail closed, as Authenticate refuses every token
// then). A request authenticated before a revoke has a live connection
// the revoke must end too: the transport calls Watch for each connection
// it accepts and closes it from gone. When the token is already gone,
// gone runs before Watch returns. gone runs on the Store's goroutine
// (or the caller's): it must not block.
//
// stop ends the watch (the connection ended first); it may be called more
// than once. While any watch is on, one goroutine looks at the file
// every watchEvery; with none it ends.
func (s *Store) Watch(id string, gone func()) (stop func()) {
	w := &watcher{gone: gone}
	s.wmu.Lock()
	if s.watchers == nil {
		s.watchers = map[string]map[*watcher]struct{}{}
	}
	set := s.watchers[id]
	if set == nil {
		set = map[*watcher]struct{}{}
		s.watchers[id] = set
	}
	set[w] = struct{}{}
	if !s.polling {
		s.polling = true
		go s.poll()
	}
	s.wmu.Unlock()
	stop = func() {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if set := s.watchers[id]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(s.watchers, id)
			}
		}
	}
	// Checked after w is in the set: a revoke after this read changes
	// the file, and poll's next sweep then sees w.
	recs, err := s.current()
	if id == "" || err != nil || !slices.ContainsFunc(recs, func(r record) bool { return r.id == id }) {
		stop()
		w.fire()
	}
	return stop
}

// poll sweeps on every tick while watches are on.
func (s *Store) poll() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for range t.C {
		s.wmu.Lock()
		if len(s.watchers) == 0 {
			s.polling = false
			s.wmu.Unlock()
			return
		}
		s.wmu.Unlock()
		s.sweep()
	}
}

// sweep ends the watches of the tokens no longer in the file, when the
// file was read again since the last sweep (it is re-read when it changes,
// and at least every rereadEvery).
func (s *Store) sweep() {
	recs, gen, err := s.currentGen()
	live := make(map[string]bool, len(recs))
	if err == nil {
		for _, r := range recs {
			live[r.id] = true
		}
	}
	var gone []*watcher
	s.wmu.Lock()
	if gen == s.swept {
		s.wmu.Unlock()
		return
	}
	s.swept = gen
	for id, set := range s.watchers {
		if live[id] {
			continue
		}
		for w := range set {
			gone = append(gone, w)
		}
		delete(s.watchers, id)
	}
	s.wmu.Unlock()
	if len(gone) > 0 {
		s.log.Info("connections of revoked tokens ended", "connections", len(gone))
	}
	for _, w := range gone {
		w.fire()
	}
}
