//go:build linux

package sandbox

// The mask keeper (issue 29 point 4): masks the paths matching a hidden
// rule that appear after an agent started (a .env a build writes, a new
// ~/.aws, a directory renamed into place holding a .env, a new hard link
// to a hidden file, a masked file replaced by an editor's rename).
//
// The agent's watchdog starts it (EnterKeeping) after it masked the start's
// paths and before it confines itself: the keeper is this executable re-run
// with keeperArg, in the agent's mount namespace (and user namespace, with
// the capability to mount there), outside the agent's Landlock domain.
// Landlock denies a confined process ptrace of any process outside its
// domain, and with it /proc/PID/mem, /proc/PID/root and /proc/PID/fd: the
// agent cannot change what the keeper does (TestKeeperOutOfReach). It can
// kill it (it runs as the same user): the watchdog then ends the agent,
// which the router restarts as after any exit, masks resolved again.
//
// It watches, with inotify, exactly the places a start searches
// (Profile.searches): the roots whole, home HomeDepth levels deep, each
// rule's base, and the directories above each of those (so that a
// directory created or replaced there is seen). A new name there is
// masked as the start masks it (maskPaths) when a rule hides it; a new
// directory that may hold such names is watched, then read (so that
// nothing created in between is missed); a new name of a hidden file (a
// hard link) is masked too. Inotify's queue overflowing makes it search
// everything again. Inotify, not fsnotify: fsnotify keys watches by path,
// and a watched directory renamed inside the tree keeps reporting its old
// path (its watch descriptor is reused), so a .env created in it later
// would be masked at a path that no longer exists. Here each watch is a
// node of a tree, and a rename moves the node.
//
// The limit is a window, not a hole: between a file's creation and its
// mask (TestLateFilesWindow measures it), and through a descriptor opened
// before the mask (a mount hides a name, not an open file): an agent that
// opened a file, or entered a directory, before a rule's name appeared
// there keeps what it holds.
//
// Fail closed: a keeper that cannot watch (the inotify watch limit), mask
// or read its events exits, and the watchdog ends the agent. At the start,
// the plan says whether the agent may run without one (best-effort) or
// not (enforce).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/acp-router/acp-router/policy"
)

// keeperArg, as the first argument, runs the executable as the mask
// keeper. Versioned like helperArg.
const keeperArg = "__acp-router-mask-keeper-v1"

// keeperConfig is what the watchdog hands the keeper on its stdin.
type keeperConfig struct {
	Plan KeeperPlan `json:"plan"`
	// Masks are the start's masked paths: the keeper learns their file
	// systems, to tell a masked path from one to mask.
	Masks []string `json:"masks"`
	// Hidden are the identities of the hidden files, read before they
	// were masked: a new hard link to one is masked too.
	Hidden [][2]uint64 `json:"hidden"`
}

// Keeper is the mask keeper a watchdog started.
type Keeper struct {
	// Pid is the keeper's process: the watchdog, its parent, ends the
	// agent when it exits.
	Pid int
}

// EnterKeeping is Enter for the agent's watchdog: between the masks and
// the confinement, it starts the mask keeper, and returns it (nil when the
// plan hides nothing, or when it could not start and the plan allows
// that: then warn says why). The caller must end the agent when the
// keeper exits, and call it from the thread that stays (the keeper dies
// with it).
//
// The start waits for the keeper to watch everything (its first search
// costs about what Resolve's does): an agent started beside it could
// kill it, or use up the user's inotify watches, before it watched, and
// a best-effort start would then carry on without it. Once the agent
// runs, any end of the keeper stops the agent.
func EnterKeeping() (k *Keeper, warn string, entered bool, err error) {
	runtime.LockOSThread()
	entered, err = enter(func(pl *Plan, hidden [][2]uint64) error {
		if pl.Keeper == nil {
			return nil
		}
		k, err = startKeeper(pl, hidden)
		if err != nil && !pl.Keeper.Required {
			warn, err = fmt.Sprintf("files matching a hidden rule that appear from now on are not masked: %v", err), nil
		}
		return err
	})
	return k, warn, entered, err
}

// hiddenIdentities are the identities of the plan's hidden files and of
// the files in its hidden directories, read before they are masked.
func hiddenIdentities(pl *Plan) [][2]uint64 {
	var ids [][2]uint64
	note := func(fi fs.FileInfo) {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			ids = append(ids, [2]uint64{uint64(st.Dev), st.Ino})
		}
	}
	for _, f := range pl.HideFiles {
		if fi, err := os.Stat(f); err == nil {
			note(fi)
		}
	}
	seen := 0
	for _, d := range pl.HideDirs {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if seen++; err != nil || seen > DefaultWalkLimit {
				return fs.SkipDir
			}
			if e.Type().IsRegular() {
				if fi, err := e.Info(); err == nil {
					note(fi)
				}
			}
			return nil
		})
	}
	return ids
}

// keeperStartTimeout bounds the keeper's first search and watches.
const keeperStartTimeout = 60 * time.Second

// startKeeper starts the keeper and waits until it watches everything and
// masked what appeared since the plan was resolved.
func startKeeper(pl *Plan, hidden [][2]uint64) (*Keeper, error) {
	exe, err := helperExecutable()
	if err != nil {
		return nil, fmt.Errorf("mask keeper: %w", err)
	}
	cfg, err := json.Marshal(keeperConfig{Plan: *pl.Keeper, Masks: append(append([]string(nil), pl.HideFiles...), pl.HideDirs...), Hidden: hidden})
	if err != nil {
		return nil, fmt.Errorf("mask keeper: %w", err)
	}
	cmd := exec.Command(exe, keeperArg)
	cmd.Args[0] = os.Args[0]
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + os.TempDir()}
	cmd.Stdin = strings.NewReader(string(cfg))
	cmd.Stderr = os.Stderr
	ready, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("mask keeper: %w", err)
	}
	// It dies with the watchdog's thread that started it, which is the
	// one that stays (the caller's).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mask keeper: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(ready).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s == "ready\n" {
			// Not Wait: the watchdog reaps every child itself (and
			// Release forgets the pid).
			pid := cmd.Process.Pid
			cmd.Process.Release()
			return &Keeper{Pid: pid}, nil
		}
		cmd.Wait()
		return nil, errors.New("the mask keeper could not start (its error is logged above)")
	case <-time.After(keeperStartTimeout):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("the mask keeper did not watch everything within %s", keeperStartTimeout)
	}
}

// runKeeper is the keeper's main.
func runKeeper() int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "acp-router sandbox: mask keeper: "+format+"\n", a...)
		return 1
	}
	var cfg keeperConfig
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		return fail("runs only when an agent's watchdog starts it (%v)", err)
	}
	prof, err := cfg.Plan.profile()
	if err != nil {
		return fail("%v", err)
	}
	k, err := newKeeper(prof, cfg)
	if err != nil {
		return fail("%v", err)
	}
	if err := k.searchAll(); err != nil {
		return fail("%v", err)
	}
	os.Stdout.WriteString("ready\n")
	os.Stdout.Close()
	// It runs until it fails (or dies with its watchdog).
	return fail("%v; the agent is stopped, files appearing now could not be masked", k.run())
}

// profile rebuilds the profile's rules in the keeper's process.
func (kp *KeeperPlan) profile() (*Profile, error) {
	type cond struct {
		Paths []string `yaml:"paths"`
	}
	type rule struct {
		ID       string `yaml:"id"`
		Decision string `yaml:"decision"`
		When     cond   `yaml:"when"`
		Unless   *cond  `yaml:"unless,omitempty"`
	}
	var layer struct {
		Rules []rule `yaml:"rules"`
	}
	for i, r := range kp.Rules {
		lr := rule{ID: fmt.Sprintf("hidden-%d", i), Decision: "deny", When: cond{r.Paths}}
		if len(r.Except) > 0 {
			lr.Unless = &cond{r.Except}
		}
		layer.Rules = append(layer.Rules, lr)
	}
	var node yaml.Node
	if err := node.Encode(layer); err != nil {
		return nil, err
	}
	l, err := policy.ParseLayer("sandbox plan", &node)
	if err != nil {
		return nil, err
	}
	pol, err := policy.Compile(l)
	if err != nil {
		return nil, err
	}
	held, skipped := pol.KernelDenies()
	if len(held) != len(kp.Rules) || len(skipped) > 0 {
		return nil, fmt.Errorf("the plan's %d rules rebuilt as %d", len(kp.Rules), len(held))
	}
	return &Profile{Agent: kp.Agent, Home: kp.Home, Roots: kp.Roots, rules: held}, nil
}

// wnode is a directory of the watched tree: a watched one (wd >= 0), or
// one on the way to a watched one.
type wnode struct {
	wd     int
	name   string // the whole path for the root
	parent *wnode // nil: the root, or detached (moved out of sight)
	kids   map[string]*wnode
}

func (n *wnode) path() (string, bool) {
	if n.parent == nil {
		return n.name, n.name == "/"
	}
	p, ok := n.parent.path()
	if !ok {
		return "", false
	}
	if p == "/" {
		return "/" + n.name, true
	}
	return p + "/" + n.name, true
}

type keeper struct {
	prof     *Profile
	searches []search
	fd       int
	root     *wnode
	byWd     map[int]*wnode
	hidden   map[fileKey]bool
	devs     map[uint64]bool // the file systems of the masks
	// pending are the paths to mask once the current batch of events
	// is read: a batch shares one staging mount.
	files, dirs []string
	watches     int
	maxWatches  int
	masked      int
}

// keeperMaxMasks bounds the masks a keeper adds: past it the agent is
// stopped (a start masks at most MaxMasks; a restart resolves again).
const keeperMaxMasks = 10 * MaxMasks

const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

func newKeeper(prof *Profile, cfg keeperConfig) (*keeper, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w (fs.inotify.max_user_instances)", err)
	}
	k := &keeper{prof: prof, searches: prof.searches(), fd: fd, root: &wnode{wd: -1, name: "/", kids: map[string]*wnode{}},
		byWd: map[int]*wnode{}, hidden: map[fileKey]bool{}, devs: map[uint64]bool{}, maxWatches: cfg.Plan.MaxWatches}
	if k.maxWatches <= 0 {
		k.maxWatches = DefaultMaxWatches
	}
	for _, id := range cfg.Hidden {
		k.hidden[fileKey{id[0], id[1]}] = true
	}
	for _, m := range cfg.Masks {
		k.noteMask(m)
	}
	return k, nil
}

// noteMask records the file system of a mask at p.
func (k *keeper) noteMask(p string) {
	var st unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, p, 0, 0, &st) == nil {
		k.devs[unix.Mkdev(st.Dev_major, st.Dev_minor)] = true
	}
}

// isMasked: p (its symlinks followed, as a mount does) is the root of one
// of the masks.
func (k *keeper) isMasked(p string) bool {
	var st unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, p, 0, 0, &st) != nil {
		return false
	}
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 &&
		k.devs[unix.Mkdev(st.Dev_major, st.Dev_minor)]
}

// wantWatch: the names that appear in directory p can be hidden: p is in
// a searched tree above its depth, or above a searched place.
func (k *keeper) wantWatch(p string) bool {
	for _, s := range k.searches {
		if s.walk && within(p, s.base) {
			if s.depth < 0 || depthBelow(p, s.base) < s.depth {
				return true
			}
		}
		if p != s.base && within(s.base, p) {
			return true
		}
	}
	return false
}

// linkScope: a file at p is in a searched tree (where the start looks
// for other names of hidden files).
func (k *keeper) linkScope(p string) bool {
	for _, s := range k.searches {
		if s.walk && within(p, s.base) && (s.depth < 0 || depthBelow(p, s.base) <= s.depth) {
			return true
		}
	}
	return false
}

func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func depthBelow(p, dir string) int {
	if p == dir {
		return 0
	}
	if dir == "/" {
		return strings.Count(p, "/")
	}
	return strings.Count(p[len(dir):], "/")
}

// node returns the tree's node for p, creating the way to it.
func (k *keeper) node(p string) *wnode {
	n := k.root
	for _, c := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if c == "" {
			continue
		}
		kid := n.kids[c]
		if kid == nil {
			kid = &wnode{wd: -1, name: c, parent: n, kids: map[string]*wnode{}}
			n.kids[c] = kid
		}
		n = kid
	}
	return n
}

// watch watches directory p. A directory watched already under another
// path (renamed) moves there, with what is below it.
func (k *keeper) watch(p string) error {
	if k.watches >= k.maxWatches && k.node(p).wd < 0 {
		return fmt.Errorf("cannot watch %s: %d directories are watched already, the most a keeper watches; narrow the agent's roots or the rule", p, k.watches)
	}
	wd, err := unix.InotifyAddWatch(k.fd, p, watchMask)
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("cannot watch %s: the inotify watch limit is reached (%d watches here; raise fs.inotify.max_user_watches)", p, k.watches)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EACCES), errors.Is(err, unix.ELOOP):
		// Gone, replaced, or unreadable (to the agent as well).
		return nil
	default:
		return fmt.Errorf("cannot watch %s: %w", p, err)
	}
	at := k.node(p)
	if old := k.byWd[wd]; old != nil && old != at {
		if old.parent != nil && old.parent.kids[old.name] == old {
			delete(old.parent.kids, old.name)
		}
		for name, kid := range at.kids {
			if _, ok := old.kids[name]; !ok {
				old.kids[name], kid.parent = kid, old
			}
		}
		old.name, old.parent = at.name, at.parent
		at.parent.kids[at.name] = old
		return nil
	}
	if at.wd < 0 {
		k.watches++
	}
	at.wd = wd
	k.byWd[wd] = at
	return nil
}

// unwatch forgets n and what is below it (moved out of sight).
func (k *keeper) unwatch(n *wnode) {
	for _, kid := range n.kids {
		k.unwatch(kid)
	}
	if n.wd >= 0 {
		unix.InotifyRmWatch(k.fd, uint32(n.wd))
		delete(k.byWd, n.wd)
		k.watches--
		n.wd = -1
	}
}

// searchAll watches and searches every searched place.
func (k *keeper) searchAll() error {
	// No lstat of every file for other names of hidden files: the start
	// searched for them (Resolve), and what is linked from now on is an
	// event.
	if err := k.search("/", false); err != nil {
		return err
	}
	return k.flush()
}

// search looks at p, which appeared or may have: masks it if a rule
// hides it, else watches and reads it if it is a directory whose names
// can be hidden, else (links) masks it if it is another name of a hidden
// file.
func (k *keeper) search(p string, links bool) error {
	return filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && q != p {
				return fs.SkipDir
			}
			return nil // gone since
		}
		if q != "/" && k.prof.Hides(q) {
			k.mask(q)
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			// (A directory a rule does not hide is no mask: no statx.)
			if !k.wantWatch(q) {
				return fs.SkipDir
			}
			// Watched before it is read: what is created meanwhile is an
			// event.
			return k.watch(q)
		}
		if links && d.Type().IsRegular() && len(k.hidden) > 0 && k.linkScope(q) {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 && k.hidden[fileKey{uint64(st.Dev), st.Ino}] {
					k.mask(q)
				}
			}
		}
		return nil
	})
}

// mask queues p for masking (flush), unless it is masked already.
func (k *keeper) mask(p string) {
	if k.isMasked(p) {
		return
	}
	fi, err := os.Stat(p)
	switch {
	case err != nil:
	case fi.IsDir():
		k.dirs = append(k.dirs, p)
	default:
		k.files = append(k.files, p)
	}
}

// flush masks the queued paths; a hidden file's identity is kept, so that
// a later hard link to it is masked too.
func (k *keeper) flush() error {
	if len(k.files)+len(k.dirs) == 0 {
		return nil
	}
	files, dirs := k.files, k.dirs
	k.files, k.dirs = nil, nil
	k.masked += len(files) + len(dirs)
	if k.masked > keeperMaxMasks {
		return fmt.Errorf("more than %d paths appeared that a rule hides", keeperMaxMasks)
	}
	for _, f := range files {
		var st unix.Stat_t
		if unix.Stat(f, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			k.hidden[fileKey{st.Dev, st.Ino}] = true
		}
	}
	for _, d := range dirs {
		for _, id := range hiddenIdentities(&Plan{HideDirs: []string{d}}) {
			k.hidden[fileKey{id[0], id[1]}] = true
		}
	}
	if err := maskPaths(files, dirs, true); err != nil {
		return err
	}
	for _, p := range append(files, dirs...) {
		k.noteMask(p)
	}
	return nil
}

// run reads and handles events until it fails: it returns the error.
func (k *keeper) run() error {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(k.fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read inotify events: %w", err)
		}
		if err := k.events(buf[:n]); err != nil {
			return err
		}
		if err := k.flush(); err != nil {
			return err
		}
	}
}

// events handles one read of events.
func (k *keeper) events(buf []byte) error {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := ""
		if ev.Len > 0 {
			b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			if i := strings.IndexByte(string(b), 0); i >= 0 {
				b = b[:i]
			}
			name = string(b)
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
		if err := k.event(int(ev.Wd), ev.Mask, name); err != nil {
			return err
		}
	}
	return nil
}

func (k *keeper) event(wd int, mask uint32, name string) error {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		// Events were lost: search everything again.
		return k.search("/", true)
	}
	n := k.byWd[wd]
	if n == nil {
		return nil
	}
	switch {
	case mask&unix.IN_IGNORED != 0:
		delete(k.byWd, wd)
		n.wd = -1
		k.watches--
		if len(n.kids) == 0 && n.parent != nil && n.parent.kids[n.name] == n {
			delete(n.parent.kids, n.name)
		}
		return nil
	case mask&unix.IN_MOVE_SELF != 0:
		// After the move's other events: a directory not found again
		// where it went is out of sight.
		if p, ok := n.path(); !ok || !k.wantWatch(p) {
			if n.parent != nil && n.parent.kids[n.name] == n {
				delete(n.parent.kids, n.name)
			}
			k.unwatch(n)
		}
		return nil
	case mask&unix.IN_MOVED_FROM != 0:
		if kid := n.kids[name]; kid != nil {
			delete(n.kids, name)
			kid.parent = nil
		}
		return nil
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		dir, ok := n.path()
		if !ok {
			return nil // moved out of sight; searched again if it comes back
		}
		return k.search(filepath.Join(dir, name), true)
	}
	return nil
}
