package guard

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// RuleOwnFiles asks about a change an agent would make to the router's own
// files, whatever the rules allow: its config and policy files, its audit
// log and its binary. A config the agent rewrites is a policy the agent
// chose (the router reloads it), an audit log it edits no longer records
// what it did, and a binary it replaces is the router the editor starts
// next time. The user may still say yes; nothing allows it alone.
const RuleOwnFiles = "acp-router:own-files"

// OwnFiles are the router's own files and directories as absolute, cleaned
// paths, each also as its symlinks resolve (what a request's evidence
// names); dirs are protected with everything below them.
type OwnFiles struct {
	files, dirs []string
}

// Protect makes the files of a loaded policy (LoadedPolicy.Watch: the
// config file, its include: files, the org policy directory) the router's
// own, with the audit log and the running binary. Call it with each policy
// set (start, reload).
func (g *Guard) Protect(watch map[string][]string) {
	if g == nil {
		return
	}
	g.own.Store(NewOwnFiles(watch, g.AuditFile()))
}

// NewOwnFiles are the router's own files for a policy loaded with watch
// (LoadedPolicy.Watch) and the audit log auditFile: what Protect protects,
// for `acp-router policy explain`.
func NewOwnFiles(watch map[string][]string, auditFile string) *OwnFiles {
	var own OwnFiles
	add := func(list *[]string, p string) {
		if p == "" || !filepath.IsAbs(p) {
			return
		}
		r, _ := OSFS{}.Resolve(p) // as the policy resolves a request's paths
		for _, f := range []string{filepath.Clean(p), r} {
			if f != "" && !slices.Contains(*list, f) {
				*list = append(*list, f)
			}
		}
	}
	for dir, names := range watch {
		for _, name := range names {
			if name == "" {
				add(&own.dirs, dir) // the org directory: every file in it
			} else {
				add(&own.files, filepath.Join(dir, name))
			}
		}
	}
	if auditFile != "" {
		add(&own.files, auditFile)
		// Rotated generations (audit.log.1, ...) are named after it.
		add(&own.dirs, auditFile+".")
	}
	if exe, err := os.Executable(); err == nil {
		add(&own.files, exe)
	}
	return &own
}

// Verdict says which of the router's own files an item of ev would change
// (edit, delete or move): a path that is one, is below an own directory, or
// is a directory written with its tree that holds one. ok is false when
// none would be changed.
func (o *OwnFiles) Verdict(ev *extract.Evidence) (d policy.Decision, ok bool) {
	if o == nil || ev == nil {
		return d, false
	}
	for i := range ev.Items {
		it := &ev.Items[i]
		if it.Type != extract.ItemPath || !slices.ContainsFunc(it.Kinds, changes) {
			continue
		}
		for _, f := range append([]string{it.Path}, it.Forms...) {
			if hit := o.hit(f, it.Recursive); hit != "" {
				what := fmt.Sprintf("%s is", f)
				if hit != f {
					what = fmt.Sprintf("%s would change %s,", f, hit)
				}
				return policy.Decision{Effect: policy.Ask, Rule: RuleOwnFiles, Layer: policy.LayerBuiltin, Source: policy.SourceBuiltin,
					Message: what + " one of the router's own files (its config, policy, audit log or binary)"}, true
			}
		}
	}
	return d, false
}

func changes(k extract.Kind) bool {
	return k == extract.KindEdit || k == extract.KindDelete || k == extract.KindMove
}

// hit returns the own file or directory that a change of p (with its tree
// when recursive) reaches, "" if none.
func (o *OwnFiles) hit(p string, recursive bool) string {
	if p == "" {
		return ""
	}
	below := func(q, dir string) bool {
		return dir == "/" || strings.HasPrefix(q, strings.TrimSuffix(dir, "/")+"/")
	}
	for _, f := range o.files {
		if p == f || recursive && below(f, p) {
			return f
		}
	}
	for _, d := range o.dirs {
		if strings.HasSuffix(d, ".") { // a name prefix: the audit log's generations
			if strings.HasPrefix(p, d) || recursive && below(d, p) {
				return d + "*"
			}
			continue
		}
		if p == d || below(p, d) || recursive && below(d, p) {
			return d
		}
	}
	return ""
}
