package guard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// RuleHardLink decides a request that names, by a name no rule denies, a
// file with several names (hard links) that is, or may be, a file under a
// denied path.
const RuleHardLink = "acp-router:hard-link"

// Bounds of the walk of the policy's deny roots, per policy load.
const (
	maxDenyFiles   = 10000
	denyWalkBudget = 2 * time.Second
)

// hardLinks knows the regular files under the literal deny roots of the
// policy in force (policy.DenyRoots) by identity, so that a hard link to
// one of them is known under its other name. Built per policy load
// (scanDenyRoots); read-only afterwards.
type hardLinks struct {
	roots []policy.DenyRoot
	files map[fileKey][]int32 // indexes into roots
	// incomplete says why not every file under the roots is known (a
	// bound was hit, a directory could not be read); "" if complete.
	incomplete string
}

type fileKey struct{ dev, ino uint64 }

// scanDenyRoots walks roots (symlinks in a root's own path resolved; none
// followed below it) and records the identity of every regular file, at
// most maxFiles of them and for at most budget.
func scanDenyRoots(roots []policy.DenyRoot, maxFiles int, budget time.Duration) *hardLinks {
	h := &hardLinks{roots: roots, files: map[fileKey][]int32{}}
	deadline := time.Now().Add(budget)
	n := 0
	errStop := errors.New("stop")
	for i, r := range roots {
		real, err := OSFS{}.Resolve(r.Path)
		if err != nil {
			h.incomplete = fmt.Sprintf("%s: %v", r.Path, err)
			continue
		}
		err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				h.incomplete = err.Error()
				return nil
			}
			if d.IsDir() || !d.Type().IsRegular() {
				return nil
			}
			if n++; n > maxFiles {
				h.incomplete = fmt.Sprintf("more than %d files under the denied paths", maxFiles)
				return errStop
			}
			if n%256 == 0 && time.Now().After(deadline) {
				h.incomplete = fmt.Sprintf("the denied paths took more than %v to list", budget)
				return errStop
			}
			fi, err := d.Info()
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					h.incomplete = err.Error()
				}
				return nil
			}
			if id, ok := fileID(fi); ok {
				k := fileKey{id.Dev, id.Ino}
				if !slices.Contains(h.files[k], int32(i)) {
					h.files[k] = append(h.files[k], int32(i))
				}
			}
			return nil
		})
		if errors.Is(err, errStop) {
			break
		}
	}
	return h
}

// identity implements extract.IdentityFS for the real filesystem.
func identity(p string) (extract.FileID, bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return extract.FileID{}, false
	}
	return fileID(fi)
}

// Identity implements extract.IdentityFS.
func (OSFS) Identity(p string) (extract.FileID, bool) { return identity(p) }

// Identity implements extract.IdentityFS.
func (c *cachedOSFS) Identity(p string) (extract.FileID, bool) { return identity(p) }

var (
	_ extract.IdentityFS = OSFS{}
	_ extract.IdentityFS = (*cachedOSFS)(nil)
)

// hardLinkVerdict is the decision on the path items of ev that are another
// name of a file with several names: the rule of a deny root the file is
// under, for an item of a kind the rule decides; ask (RuleHardLink) when
// the file is not known and the walk was incomplete. ok is false when no
// item is such a file.
func (h *hardLinks) verdict(ev *extract.Evidence, fsys extract.FS) (d policy.Decision, ok bool) {
	ifs, isID := fsys.(extract.IdentityFS)
	if h == nil || ev == nil || !isID {
		return d, false
	}
	for i := range ev.Items {
		it := &ev.Items[i]
		if it.Type != extract.ItemPath {
			continue
		}
		for _, f := range it.Forms {
			id, found := ifs.Identity(f)
			if !found || id.Nlink < 2 {
				continue
			}
			idx, known := h.files[fileKey{id.Dev, id.Ino}]
			if !known {
				if h.incomplete != "" && d.Effect != policy.Deny {
					d = policy.Decision{Effect: policy.Ask, Rule: RuleHardLink, Layer: policy.LayerBuiltin, Source: policy.SourceBuiltin,
						Message: fmt.Sprintf("%s has %d names and the files under the denied paths are not all known (%s)", f, id.Nlink, h.incomplete)}
					ok = true
				}
				continue
			}
			for _, j := range idx {
				r := &h.roots[j]
				if len(r.Kinds) > 0 && !slices.ContainsFunc(it.Kinds, func(k extract.Kind) bool { return slices.Contains(r.Kinds, k) }) {
					continue
				}
				if !ok || r.Effect == policy.Deny && d.Effect != policy.Deny {
					msg := fmt.Sprintf("%s is another name (a hard link) of a file under %s", f, r.Path)
					if r.Message != "" {
						msg = r.Message + " (" + msg + ")"
					}
					d = policy.Decision{Effect: r.Effect, Rule: r.Rule, Layer: r.Layer, Source: policy.SourceRule, Message: msg}
					ok = true
				}
			}
		}
	}
	return d, ok
}
