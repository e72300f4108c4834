package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Limits of Resolve.
const (
	// DefaultWalkLimit bounds the directory entries Resolve reads to find
	// the paths a glob matches: past it, the profile cannot be applied
	// (ErrWalkLimit), rather than silently leave files open.
	DefaultWalkLimit = 100_000
	// HomeDepth: a glob that may match anywhere (**/.env) is searched in
	// the roots, whole, and in the home directory this many levels deep
	// (~/work/proj/.env): below that, home is mostly caches (~/.cache,
	// ~/go/pkg/mod, ~/.pyenv ...), and walking it
	// would cost seconds at every agent start.
	HomeDepth = 3
	// MaxMasks bounds the mounts of one profile (a glob such as
	// **/*.json can match thousands of files; each is a mount): past it,
	// the profile cannot be applied (ErrTooManyMasks).
	MaxMasks = 1000
)

// Errors of Resolve.
var (
	// ErrWalkLimit: a glob needs more of the file system read than the
	// limit.
	ErrWalkLimit = errors.New("too many files to search")
	// ErrTooManyMasks: the globs match more than MaxMasks paths.
	ErrTooManyMasks = errors.New("too many paths to hide")
)

// Plan is a profile resolved on this machine: the existing paths to mask
// and to leave writable. It is what the helper applies.
type Plan struct {
	// HideFiles are masked with an empty read-only file, HideDirs with an
	// empty read-only directory.
	HideFiles []string `json:"hideFiles,omitempty"`
	HideDirs  []string `json:"hideDirs,omitempty"`
	// WritableDirs and WritableFiles exist; everything else is read-only.
	WritableDirs  []string `json:"writableDirs"`
	WritableFiles []string `json:"writableFiles,omitempty"`
	// Net, when set, confines the network (net_linux.go); the Confiner
	// sets it once the agent's egress proxy listens.
	Net *NetPlan `json:"net,omitempty"`
	// Keeper is what the mask keeper needs to mask the paths matching
	// the profile's rules that appear after the start (keeper_linux.go);
	// nil when nothing is hidden.
	Keeper *KeeperPlan `json:"keeper,omitempty"`
	// Warnings are limits that apply to this plan (a hard link the walk
	// could not find), for the log and check.
	Warnings []string `json:"-"`
	// Visited is how many directory entries were read.
	Visited int `json:"-"`

	// profile is what the plan was resolved from (nil in a plan handed
	// over): Terminal resolves it again.
	profile *Profile
}

// KeeperPlan is a profile's hidden paths as the mask keeper rebuilds
// them in its own process: the rules, and the places they expand in.
type KeeperPlan struct {
	Agent string       `json:"agent"`
	Home  string       `json:"home"`
	Roots []string     `json:"roots"`
	Rules []KeeperRule `json:"rules"`
	// Required: the agent may not run without a keeper (sandbox.mode
	// enforce); otherwise one that cannot start is said on stderr and the
	// agent runs with the masks of its start.
	Required bool `json:"required,omitempty"`
	// MaxWatches bounds the directories the keeper watches (each pins
	// about 1 KB of kernel memory); DefaultMaxWatches when 0. Past it the
	// keeper cannot hold the profile, as past the inotify limit.
	MaxWatches int `json:"maxWatches,omitempty"`
}

// DefaultMaxWatches is the keeper's bound on watched directories, as
// DefaultWalkLimit bounds a start's search.
const DefaultMaxWatches = DefaultWalkLimit

// KeeperRule is one kernel-held deny rule: its path globs as written, and
// the unless: globs that apply to the agent.
type KeeperRule struct {
	Paths  []string `json:"paths"`
	Except []string `json:"except,omitempty"`
}

// ResolveOptions tune Resolve; the zero value is the defaults.
type ResolveOptions struct {
	WalkLimit int // DefaultWalkLimit when 0
	// CreateStateDirs creates the agent's missing state directories, so
	// that an agent's first run under the sandbox can write its state.
	CreateStateDirs bool
}

// Resolve finds the existing paths the profile hides and the writable
// paths that exist. It reads the file system, bounded by the walk limit.
func Resolve(p *Profile, o ResolveOptions) (*Plan, error) {
	if o.WalkLimit <= 0 {
		o.WalkLimit = DefaultWalkLimit
	}
	r := &resolver{p: p, limit: o.WalkLimit, hidden: map[string]bool{}}
	var walks []search
	for _, s := range p.searches() {
		if s.walk {
			walks = append(walks, s)
		} else if _, err := os.Lstat(s.base); err == nil && p.Hides(s.base) {
			r.hide(s.base)
		}
	}
	walkAll := func() error {
		done := map[search]bool{}
		for _, w := range walks {
			key := search{base: w.base, depth: w.depth, walk: true}
			if done[key] {
				continue
			}
			done[key] = true
			if err := r.walk(w.base, w.depth); err != nil {
				return fmt.Errorf("sandbox: rule %q: %w", w.rule, err)
			}
		}
		return nil
	}
	if err := walkAll(); err != nil {
		return nil, err
	}
	// A hidden file with other names: search again, this time for them
	// (a stat of every file, which the first search spares).
	ids := r.hiddenIDs()
	if len(ids) > 0 && len(walks) > 0 {
		r.links = map[fileKey][]string{}
		for k := range ids {
			r.links[k] = nil
		}
		if err := walkAll(); err != nil {
			return nil, err
		}
	}
	plan := &Plan{Visited: r.visited, Warnings: r.linkWarnings(ids), profile: p}
	if len(p.rules) > 0 {
		plan.Keeper = &KeeperPlan{Agent: p.Agent, Home: p.Home, Roots: p.Roots}
		for _, k := range p.rules {
			plan.Keeper.Rules = append(plan.Keeper.Rules, KeeperRule{Paths: k.Paths, Except: k.ExceptFor(p.Agent)})
		}
	}
	for path := range r.hidden {
		if r.coveredAbove(path) {
			continue
		}
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			// A dangling symlink: nothing to read through it.
		case fi.IsDir():
			plan.HideDirs = append(plan.HideDirs, path)
		default:
			plan.HideFiles = append(plan.HideFiles, path)
		}
	}
	slices.Sort(plan.HideDirs)
	slices.Sort(plan.HideFiles)
	if n := len(plan.HideDirs) + len(plan.HideFiles); n > MaxMasks {
		return nil, fmt.Errorf("sandbox: %w: the deny rules match %d paths (at most %d): deny their directory instead (e.g. DIR/**)", ErrTooManyMasks, n, MaxMasks)
	}
	for _, w := range p.Writable {
		fi, err := os.Stat(w)
		if errors.Is(err, fs.ErrNotExist) && o.CreateStateDirs && slices.Contains(p.StateDirs, w) && filepath.Ext(w) == "" {
			if os.MkdirAll(w, 0o700) == nil {
				fi, err = os.Stat(w)
			}
		}
		switch {
		case err != nil:
		case fi.IsDir():
			plan.WritableDirs = append(plan.WritableDirs, w)
		default:
			plan.WritableFiles = append(plan.WritableFiles, w)
		}
	}
	return plan, nil
}

// search is where a rule's paths are looked for: base, and when walk is
// set everything below it, at most depth levels deep (-1: no limit).
// Resolve searches these places once; the mask keeper watches them.
type search struct {
	base  string
	depth int
	walk  bool
	rule  string
}

// searches are the places the profile's rules can match: a glob that may
// match anywhere (**/.env) in the roots, whole, and in home HomeDepth
// levels deep; a literal path or a whole directory (~/.aws/**) at its
// base only; any other glob below its base.
func (p *Profile) searches() []search {
	var out []search
	for _, k := range p.rules {
		for _, b := range k.Bases(p.Home, p.Roots) {
			switch {
			case b.AnyDir:
				for _, root := range p.Roots {
					out = append(out, search{root, -1, true, k.Rule})
				}
				if p.Home != "" && p.Home != "/" {
					out = append(out, search{p.Home, HomeDepth, true, k.Rule})
				}
			case b.Literal || b.Subtree && len(k.Except) == 0:
				out = append(out, search{b.Base, 0, false, k.Rule})
			default:
				out = append(out, search{b.Base, -1, true, k.Rule})
			}
		}
	}
	return out
}

type fileKey struct{ dev, ino uint64 }

type resolver struct {
	p       *Profile
	limit   int
	visited int
	hidden  map[string]bool
	// links are the files with more than one name seen by the walks, by
	// identity: a hard link to a hidden file is hidden too.
	links map[fileKey][]string
}

func (r *resolver) hide(path string) { r.hidden[path] = true }

// coveredAbove: an ancestor of path is hidden already.
func (r *resolver) coveredAbove(path string) bool {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if r.hidden[d] {
			return true
		}
		if d == "/" || d == "." {
			return false
		}
	}
}

// walk searches base, at most depth levels below it (-1: no limit).
func (r *resolver) walk(base string, depth int) error {
	if _, err := os.Lstat(base); err != nil {
		return nil
	}
	baseDepth := strings.Count(base, "/")
	return filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// Unreadable here is unreadable for the agent too.
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		r.visited++
		if r.visited > r.limit {
			return fmt.Errorf("%w: more than %d files under %s; narrow the glob (e.g. ${roots}/**/.env) or the agent's cwd", ErrWalkLimit, r.limit, base)
		}
		if r.hidden[path] || r.p.Hides(path) {
			r.hide(path)
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if r.links != nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
					k := fileKey{uint64(st.Dev), uint64(st.Ino)}
					if _, want := r.links[k]; want && !slices.Contains(r.links[k], path) {
						r.links[k] = append(r.links[k], path)
					}
				}
			}
		}
		if d.IsDir() && depth >= 0 && strings.Count(path, "/")-baseDepth >= depth {
			return fs.SkipDir
		}
		return nil
	})
}

type hiddenFile struct {
	path  string
	nlink uint64
}

// hiddenIDs are the hidden files with more than one name, by identity;
// the files of a hidden directory count as hidden files.
func (r *resolver) hiddenIDs() map[fileKey]hiddenFile {
	ids := map[fileKey]hiddenFile{}
	note := func(path string, fi fs.FileInfo) {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			ids[fileKey{uint64(st.Dev), uint64(st.Ino)}] = hiddenFile{path, uint64(st.Nlink)}
		}
	}
	for path := range r.hidden {
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			note(path, fi)
			continue
		}
		filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			r.visited++
			if err != nil || r.visited > r.limit {
				return fs.SkipDir
			}
			if d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					note(p, fi)
				}
			}
			return nil
		})
	}
	return ids
}

// linkWarnings hides the other names of the hidden files ids, found by
// the second search, and returns a warning for each hidden file whose
// other names were not all found: they stay readable (a mount masks a
// name, not a file).
func (r *resolver) linkWarnings(ids map[fileKey]hiddenFile) []string {
	var warns []string
	for k, h := range ids {
		names := uint64(1)
		for _, other := range r.links[k] {
			if other != h.path {
				r.hide(other)
				names++
			}
		}
		if names < h.nlink {
			warns = append(warns, fmt.Sprintf("%s has %d hard links and only %d were found in the searched directories: the others stay readable", h.path, h.nlink, names))
		}
	}
	slices.Sort(warns)
	return warns
}
