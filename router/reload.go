package router

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
)

// reloadDebounce: editors save in several steps (write a temporary file,
// rename it); the policy is read once they are done.
const reloadDebounce = 150 * time.Millisecond

// WatchPolicy keeps g's policy up to date until ctx ends (DESIGN §6,
// reload): on a signal from hup, and when a file the policy was read from
// changes, it calls load again. The new policy replaces the old one only if
// it loads, compiles and passes all its tests; otherwise the last good
// policy stays in force and the reason is logged. Decisions in flight keep
// the policy they started with. watch is the last load's LoadedPolicy.Watch.
func WatchPolicy(ctx context.Context, g *Guard, load func() (*LoadedPolicy, error), watch map[string][]string, hup <-chan os.Signal, log hclog.Logger) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("cannot watch the policy files; reload with SIGHUP", "error", err)
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
		lp, err := load()
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
		log.Info("policy reloaded", "trigger", why, "policyHash", hash)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("SIGHUP")
		case ev := <-events:
			if relevant(watch, ev.Name) {
				timer.Reset(reloadDebounce)
			}
		case err := <-errs:
			log.Warn("watching the policy files", "error", err)
		case <-timer.C:
			reload("file change")
		}
	}
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
