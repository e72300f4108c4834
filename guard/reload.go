package guard

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/config"
)

// reloadDebounce: editors save in several steps (write a temporary file,
// rename it); the policy is read once they are done.
const reloadDebounce = 150 * time.Millisecond

// WatchOptions configure Watch.
type WatchOptions struct {
	// Load reads the config file again and the policy of every layer.
	Load func() (*config.Config, *LoadedPolicy, error)
	// Running is the config the router runs with; Watch the directories
	// and files of its policy (LoadedPolicy.Watch).
	Running *config.Config
	Watch   map[string][]string
	// Hup delivers SIGHUP.
	Hup <-chan os.Signal
	// Applied, when set, is told the fingerprint (config.Keys) of the
	// config in force at start and after each reload: the keys a reload
	// could not apply keep their running value. The map is the callee's.
	Applied func(keys map[string]string)
	Logger  hclog.Logger
}

// Watch keeps the policy in force up to date until ctx ends (DESIGN §6,
// reload): on SIGHUP, and when a file the config or policy was read from
// changes, it loads them again. The new policy replaces the old one only
// if it loads, compiles and passes all its tests; otherwise the last good
// policy stays in force and the reason is logged. Decisions in flight keep
// the policy they started with. A new audit file is applied too; every
// other changed key is logged as "restart to apply", by name: agents,
// routing and commands are fixed for the router's life.
//
// Close stops it too, and waits until it has returned.
func (g *Guard) Watch(ctx context.Context, opts WatchOptions) {
	if !g.holdWatch() {
		return
	}
	defer g.watchers.Done()
	g.watch(ctx, opts)
}

// StartWatch runs Watch on a goroutine of the guard's: it ends with ctx or
// Close, and Close waits for it.
func (g *Guard) StartWatch(ctx context.Context, opts WatchOptions) {
	if !g.holdWatch() {
		return
	}
	go func() {
		defer g.watchers.Done()
		g.watch(ctx, opts)
	}()
}

// holdWatch counts a watcher that Close must wait for; false on a nil
// *Guard (nothing to keep up to date) or a closed one.
func (g *Guard) holdWatch() bool {
	if g == nil {
		return false
	}
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	if g.closed {
		return false
	}
	g.watchers.Add(1)
	return true
}

func (g *Guard) watch(ctx context.Context, opts WatchOptions) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	running := opts.Running.Keys()
	if opts.Applied != nil {
		opts.Applied(maps.Clone(running)) // its own: running changes on a later reload
	}
	watch := opts.Watch
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("cannot watch the config and policy files; reload with SIGHUP", "error", err)
	}
	var watched []string
	rewatch := func(want map[string][]string) {
		if w == nil {
			return
		}
		dirs := watchDirs(want)
		for _, d := range watched {
			if !slices.Contains(dirs, d) {
				w.Remove(d)
			}
		}
		for _, d := range dirs {
			if !slices.Contains(watched, d) {
				if err := w.Add(d); err != nil {
					log.Warn("cannot watch a policy directory; reload with SIGHUP", "dir", d, "error", err)
				}
			}
		}
		watched = dirs
	}
	rewatch(watch)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	reload := func(why string) {
		cfg, lp, err := opts.Load()
		if err == nil {
			err = lp.TestsError()
		}
		if err == nil {
			err = g.Set(lp.Policy)
		}
		if err != nil {
			log.Error("policy reload failed; the last good policy stays in force", "trigger", why, "error", err)
			return
		}
		watch = lp.Watch
		rewatch(watch)
		hash := "none"
		if lp.Policy != nil {
			hash = lp.Policy.Hash()
		}
		keys := cfg.Keys()
		applied := []string{"permissions"}
		if audit := config.Changed(pick(running, "audit."), pick(keys, "audit.")); len(audit) > 0 {
			if err := g.SetAuditFile(cfg.Audit.File, cfg.Audit.MaxBytes); err != nil {
				log.Error("the new audit file cannot be opened; decisions go on to the old one", "file", cfg.Audit.File, "error", err)
			} else {
				applied = append(applied, audit...)
				maps.Copy(running, pick(keys, "audit."))
			}
		}
		g.Protect(lp.Watch) // with the audit file now in force
		log.Info("policy reloaded", "trigger", why, "applied", strings.Join(applied, ", "), "policyHash", hash)
		if pending := config.Changed(running, keys); len(pending) > 0 {
			log.Warn("restart to apply: "+strings.Join(pending, ", "), "trigger", why)
		}
		if opts.Applied != nil {
			opts.Applied(maps.Clone(running)) // its own: running changes on a later reload
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.closing:
			return
		case <-opts.Hup:
			reload("SIGHUP")
		case ev := <-events:
			if !relevant(watch, ev.Name) {
				// Logged so that a change that was expected to reload
				// can be told from one that never reached the watcher.
				log.Trace("a change that cannot change the policy; ignored", "file", ev.Name, "op", ev.Op.String())
				continue
			}
			timer.Reset(reloadDebounce)
		case err := <-errs:
			log.Warn("watching the config and policy files", "error", err)
		case <-timer.C:
			reload("file change")
		}
	}
}

// pick is the part of a fingerprint under prefix.
func pick(keys map[string]string, prefix string) map[string]string {
	out := map[string]string{}
	for k, v := range keys {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// watchDirs are the directories to watch: each policy directory, or for
// one that does not exist yet, its nearest existing ancestor.
func watchDirs(want map[string][]string) []string {
	var out []string
	for dir := range want {
		for d := dir; ; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				if !slices.Contains(out, d) {
					out = append(out, d)
				}
				break
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// relevant: a change of name may change the policy.
func relevant(want map[string][]string, name string) bool {
	for dir, files := range want {
		if name == dir || isBelow(dir, name) {
			// The directory itself, or a path on the way to it, appeared
			// or went away.
			return true
		}
		if filepath.Dir(name) != dir {
			continue
		}
		for _, f := range files {
			if (f == "" && filepath.Ext(name) == ".yaml") || filepath.Base(name) == f {
				return true
			}
		}
	}
	return false
}

// isBelow: dir is below name (name is one of its ancestors).
func isBelow(dir, name string) bool {
	rel, err := filepath.Rel(name, dir)
	return err == nil && rel != "." && filepath.IsLocal(rel)
}
