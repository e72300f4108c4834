package guard

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/acp-router/acp-router/policy/extract"
)

// Bounds of walking the directories of recursive reads (extract.Walker),
// besides the policy's own (extract.MaxWalkEntries, extract.MaxWalkDepth).
const (
	// walkBudget is the time the walks of one decision may take, all
	// together; past it a walk is cut short (the read asks).
	walkBudget = 250 * time.Millisecond
	// walkBatch is how many entries of a directory are read at a time: a
	// directory of a million files is never read whole.
	walkBatch = 256
	// maxTurnWalkBytes bounds the walks a session keeps for its turn
	// (WalkResult.Size); past it the oldest are forgotten.
	maxTurnWalkBytes = 8 << 20
)

var (
	_ extract.Walker = OSFS{}
	_ extract.Walker = (*cachedOSFS)(nil)
)

// Walk implements extract.Walker, with walkBudget for this walk alone.
func (OSFS) Walk(dir string, skipHidden bool) extract.WalkResult {
	return walkOS(dir, skipHidden, time.Now().Add(walkBudget), OSFS{}.Resolve)
}

// Walk implements extract.Walker: a directory walked in the session's turn
// is not walked again (the turn's cache, cleared by EndTurn); the walks of
// one decision share walkBudget.
func (c *cachedOSFS) Walk(dir string, skipHidden bool) extract.WalkResult {
	if r, ok := c.turn.get(dir, skipHidden); ok {
		return r
	}
	if c.deadline.IsZero() {
		c.deadline = time.Now().Add(walkBudget)
	}
	r := walkOS(dir, skipHidden, c.deadline, c.Resolve)
	c.turn.put(dir, skipHidden, r)
	return r
}

// walkOS lists what is below dir, breadth first, reading each directory
// walkBatch entries at a time, never following a symlink below dir (its
// target is resolved with resolve) and, with skipHidden, skipping names
// starting with a dot. It stops past extract.MaxWalkEntries entries,
// extract.MaxWalkDepth levels, deadline, or a directory it cannot read.
func walkOS(dir string, skipHidden bool, deadline time.Time, resolve func(string) (string, error)) extract.WalkResult {
	var res extract.WalkResult
	type pending struct {
		rel   string
		depth int
	}
	queue := []pending{{"", 0}}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		full := dir
		if d.rel != "" {
			full = dir + "/" + d.rel
		}
		f, err := os.Open(full)
		if err != nil {
			if d.rel == "" && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return res // nothing there, or a file: nothing below it
			}
			if d.rel != "" && errors.Is(err, fs.ErrNotExist) {
				continue // removed since it was listed
			}
			res.Cut = fmt.Sprintf("cannot read %s: %v", full, errors.Unwrap(err))
			return res
		}
		for {
			ents, err := f.ReadDir(walkBatch)
			for _, e := range ents {
				name := e.Name()
				if skipHidden && strings.HasPrefix(name, ".") {
					continue
				}
				if len(res.Entries) >= extract.MaxWalkEntries {
					f.Close()
					res.Cut = fmt.Sprintf("more than %d entries", extract.MaxWalkEntries)
					return res
				}
				rel := name
				if d.rel != "" {
					rel = d.rel + "/" + name
				}
				en := extract.WalkEntry{Rel: rel}
				switch t := e.Type(); {
				case t&fs.ModeSymlink != 0:
					en.Link = true
					if target, err := resolve(full + "/" + name); err == nil {
						en.Target = filepath.Clean(target)
						_, en.TargetDir = OSFS{}.Stat(en.Target)
					}
				case t.IsDir():
					en.Dir = true
					if d.depth+1 >= extract.MaxWalkDepth {
						f.Close()
						res.Cut = fmt.Sprintf("more than %d levels of directories", extract.MaxWalkDepth)
						return res
					}
					queue = append(queue, pending{rel, d.depth + 1})
				}
				res.Entries = append(res.Entries, en)
			}
			if time.Now().After(deadline) {
				f.Close()
				res.Cut = fmt.Sprintf("the time bound of %v", walkBudget)
				return res
			}
			if err == io.EOF || err == nil && len(ents) == 0 {
				break
			}
			if err != nil {
				f.Close()
				if d.rel == "" && errors.Is(err, syscall.ENOTDIR) {
					return res // a file: nothing below it
				}
				res.Cut = fmt.Sprintf("cannot read %s: %v", full, err)
				return res
			}
		}
		f.Close()
	}
	return res
}

// turnWalks are the walks of a session's running turn, bounded by
// maxTurnWalkBytes. Safe for concurrent use; a nil *turnWalks keeps
// nothing.
type turnWalks struct {
	mu    sync.Mutex
	m     map[walkKey]extract.WalkResult
	order []walkKey // oldest first
	size  int
}

type walkKey struct {
	dir        string
	skipHidden bool
}

func (t *turnWalks) get(dir string, skipHidden bool) (extract.WalkResult, bool) {
	if t == nil {
		return extract.WalkResult{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.m[walkKey{dir, skipHidden}]
	return r, ok
}

func (t *turnWalks) put(dir string, skipHidden bool, r extract.WalkResult) {
	if t == nil {
		return
	}
	n := r.Size()
	if n > maxTurnWalkBytes {
		return
	}
	k := walkKey{dir, skipHidden}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[walkKey]extract.WalkResult{}
	}
	if old, ok := t.m[k]; ok {
		t.size -= old.Size()
	} else {
		t.order = append(t.order, k)
	}
	t.m[k] = r
	t.size += n
	for t.size > maxTurnWalkBytes && len(t.order) > 0 {
		old := t.order[0]
		t.order = t.order[1:]
		if o, ok := t.m[old]; ok {
			t.size -= o.Size()
			delete(t.m, old)
		}
	}
}

// clear forgets every walk: the turn ended.
func (t *turnWalks) clear() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.m, t.order, t.size = nil, nil, 0
	t.mu.Unlock()
}
