package extract

import (
	"errors"
	"path"
	"slices"
	"strings"
)

// Symlinks a command line makes (ln -s) change what its later paths are:
// 'ln -s ../.. a/b/k && cat a/b/k/../.netrc' reads ~/.netrc, though
// a/b/k/../.netrc is a/b/.netrc to path.Clean and to a resolver that
// does not know the link yet. The extractor records every link ln -s
// makes; Extract then reads the request a second time with a filesystem
// that has them (linkFS), so that every path of the line is resolved
// through them, before or after the ln (order-free, as for cd: a loop may
// run the ln first).

// lnTargets rewrites the relative targets of ln -s as the kernel will
// read them, relative to the link's directory (-t DIR's, or LINK's, LINK
// itself when it is a directory), except with -r, which takes them
// relative to the working directory; and records each link the command
// makes (x.madeLinks). The two are joined without cleaning: a .. in the
// target applies after the symlinks of the directory, as the resolver
// applies it.
func (x *extractor) lnTargets(p *parsedArgs, cwds []string) {
	targets := p.ops
	dir, known, link := "", true, ""
	for _, v := range p.vals {
		if (v.opt.name == "-t" || v.opt.name == "--target-directory") && v.has {
			dir, known = v.v.s, v.v.opaque == ""
		}
	}
	if dir == "" {
		if len(p.ops) < 2 {
			dir = "." // ln -s TARGET: ./NAME
		} else {
			l := p.ops[len(p.ops)-1]
			targets = p.ops[:len(p.ops)-1]
			dir, known = path.Dir(l.s), l.opaque == ""
			if x.isDir(l.s, cwds) && !p.flags.any("-T", "--no-target-directory") {
				dir = l.s
			} else {
				link = l.s // ln -s TARGET LINK: the link is LINK
			}
		}
	}
	if !known {
		return // the command is not understood: it asks
	}
	orig := slices.Clone(targets)
	if !p.flags.any("-r", "--relative") && dir != "." {
		for i := range targets {
			if t := targets[i]; t.opaque == "" && !path.IsAbs(t.s) && !strings.HasPrefix(t.s, "~") {
				targets[i].s = strings.TrimSuffix(dir, "/") + "/" + t.s
			}
		}
	}
	if link != "" {
		x.recordLink(link, targets[0], cwds)
		return
	}
	for i, t := range targets {
		name := path.Base(orig[i].s)
		if orig[i].opaque != "" || name == "/" || name == "." || name == ".." {
			continue // ln fails, or the argument is not understood
		}
		x.recordLink(strings.TrimSuffix(dir, "/")+"/"+name, t, cwds)
	}
}

// recordLink records that the command makes link (as written, relative to
// each of cwds) a symlink to target (as rewritten by lnTargets: relative
// to the working directory).
func (x *extractor) recordLink(link string, target arg, cwds []string) {
	if cwds == nil {
		cwds = x.dirs(x.cwd)
	}
	for _, cwd := range cwds {
		l := link
		if !path.IsAbs(l) {
			l = cwd + "/" + l
		}
		// Where the kernel makes it: in the directory as resolved.
		key := path.Clean(l)
		if x.fs != nil {
			if d, err := x.fs.Resolve(path.Dir(l)); err == nil {
				key = path.Join(path.Clean(d), path.Base(key))
			}
		}
		t := ""
		if target.opaque == "" && target.s != "" {
			t = target.s
			if !path.IsAbs(t) {
				t = cwd + "/" + t
			}
		}
		if x.madeLinks == nil {
			x.madeLinks = map[string][]string{}
		}
		if !slices.Contains(x.madeLinks[key], t) {
			x.madeLinks[key] = append(x.madeLinks[key], t)
		}
		x.madeKeys = append(x.madeKeys, key)
	}
}

// errLinkUnknown: a path goes through a symlink the command line makes
// whose target is not known (several candidates, or computed at run time).
var errLinkUnknown = errors.New("through a symlink the command makes, to a target not known before it runs")

// linkFS is an FS with the symlinks a command line makes added: link (the
// path where the kernel makes it) → its absolute target ("" or several:
// not known).
type linkFS struct {
	base  FS
	links map[string][]string
	// suspended: links not followed while the command that makes them
	// is read (movedLinks).
	suspended map[string]int
	// trees: directories an archive is extracted into (extractedTree):
	// a path below one may go through a symlink the archive holds.
	trees []string
}

// linkWalker is a linkFS over a Walker: walks are the base's.
type linkWalker struct {
	linkFS
}

func (w *linkWalker) Walk(dir string, skipHidden bool) WalkResult {
	return w.base.(Walker).Walk(dir, skipHidden)
}

func newLinkFS(base FS, links map[string][]string, trees []string) FS {
	l := linkFS{base: base, links: links, suspended: map[string]int{}, trees: trees}
	if _, ok := base.(Walker); ok {
		return &linkWalker{l}
	}
	return &l
}

// Resolve implements FS: one component at a time, a made link replaced by
// its target, every other one resolved by the base.
func (l *linkFS) Resolve(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", errors.New("not an absolute path")
	}
	cur, rest, hops := "/", p, 0
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		for _, t := range l.trees {
			if strings.HasPrefix(next, t+"/") && l.suspended[treeKey+t] == 0 {
				return "", errLinkUnknown
			}
		}
		if ts, ok := l.links[next]; ok && l.suspended[next] == 0 {
			switch {
			case len(ts) == 1 && ts[0] != "":
				if hops++; hops > 40 {
					return "", errLoop
				}
				cur = "/"
				if rest != "" {
					rest = ts[0] + "/" + rest
				} else {
					rest = ts[0]
				}
				continue
			case len(ts) == 1 && strings.Trim(rest, "/") == "":
				// A moved or copied link as the last component: what
				// the command writes; the path is that name.
			default:
				return "", errLinkUnknown
			}
		}
		if l.base == nil {
			cur = next
			continue
		}
		r, err := l.base.Resolve(next)
		if err != nil {
			return "", err
		}
		cur = path.Clean(r)
	}
	return cur, nil
}

// Stat implements FS: the base's, of the resolved path.
func (l *linkFS) Stat(p string) (exists, dir bool) {
	if l.base == nil {
		return false, false
	}
	r, err := l.Resolve(p)
	if err != nil {
		return false, false
	}
	return l.base.Stat(r)
}

// Glob implements FS: the base's (a made link matches no glob).
func (l *linkFS) Glob(pattern string) ([]string, error) {
	if l.base == nil {
		return nil, nil
	}
	return l.base.Glob(pattern)
}

// movedLinks records what mv and cp make of symlinks they move or copy as
// symlinks (mv; cp -a, -d, -P, -r, -R, --no-dereference, -s): a link keeps
// its target's text, so a relative one leads elsewhere from its new
// place (mv a/k k2 with a/k -> .. makes k2 lead to the project's parent),
// and a directory keeps the links below it. Where the copy leads is not
// known to the policy, so a path through it (below it) is not
// allowable; the copy itself, as a last component, is what the command
// writes.
//
// It returns what to call once the command's own paths are recorded: in
// the second reading (linkFS), the links the command makes are not
// followed for its own paths (mv a/k k2 writes k2, and k2/k if k2 were a
// directory: not through the link it makes).
func (x *extractor) movedLinks(p *parsedArgs, cwds []string) (done func()) {
	before := len(x.madeKeys)
	x.movedLinksOf(p, cwds)
	keys := x.madeKeys[before:]
	lf := x.linkFS()
	if lf == nil || len(keys) == 0 {
		return func() {}
	}
	for _, k := range keys {
		lf.suspended[k]++
	}
	return func() {
		for _, k := range keys {
			lf.suspended[k]--
		}
	}
}

// treeKey prefixes a tree's key in linkFS.suspended.
const treeKey = "tree:"

// extractedTree records that the command extracts an archive into dir
// (absolute): its members may be symlinks to anywhere ('tar xf x.tar &&
// echo x >> a/b' writes where the archive's link a leads; 'cat a' reads
// it), and which the archive holds the router does not know, so a path
// below dir, anywhere in the line, is not allowable (as through a link
// mv or cp makes). It returns what to call once the command's own paths
// are recorded: they are not judged through the tree (tar xf ./x.tar).
func (x *extractor) extractedTree(dir string) (done func()) {
	key := path.Clean(dir)
	if x.fs != nil {
		if r, err := x.fs.Resolve(key); err == nil {
			key = path.Clean(r)
		}
	}
	if key == "/" {
		key = ""
	}
	if !slices.Contains(x.madeTrees, key) {
		x.madeTrees = append(x.madeTrees, key)
	}
	lf := x.linkFS()
	if lf == nil {
		return func() {}
	}
	lf.suspended[treeKey+key]++
	return func() { lf.suspended[treeKey+key]-- }
}

// linkFS returns the extractor's filesystem as a linkFS (the second
// reading), nil if it is not one.
func (x *extractor) linkFS() *linkFS {
	switch f := x.fs.(type) {
	case *linkFS:
		return f
	case *linkWalker:
		return &f.linkFS
	}
	return nil
}

func (x *extractor) movedLinksOf(p *parsedArgs, cwds []string) {
	if p.label != "mv" && p.label != "cp" || len(p.ops) == 0 || x.fs == nil {
		return
	}
	if p.label == "cp" && !p.flags.any("-a", "--archive", "-d", "-P", "--no-dereference", "-r", "-R", "--recursive",
		"-s", "--symbolic-link") {
		return // cp follows the links it copies
	}
	if p.label == "cp" && p.flags.any("-L", "--dereference") {
		return
	}
	srcs := p.ops
	dir := ""
	for _, v := range p.vals {
		if (v.opt.name == "-t" || v.opt.name == "--target-directory") && v.has {
			if v.v.opaque != "" {
				return // not understood: it asks
			}
			dir = v.v.s
		}
	}
	dest := ""
	if dir == "" {
		if len(p.ops) < 2 {
			return
		}
		srcs, dest = p.ops[:len(p.ops)-1], p.ops[len(p.ops)-1].s
		if p.ops[len(p.ops)-1].opaque != "" {
			return
		}
		if x.isDir(dest, cwds) && !p.flags.any("-T", "--no-target-directory") {
			dir, dest = dest, ""
		}
	}
	if cwds == nil {
		cwds = x.dirs(x.cwd)
	}
	for _, s := range srcs {
		if s.opaque != "" || s.glob {
			continue
		}
		d := dest
		if d == "" {
			d = strings.TrimSuffix(dir, "/") + "/" + path.Base(s.s)
		}
		for _, cwd := range cwds {
			full := s.s
			if !path.IsAbs(full) {
				full = cwd + "/" + full
			}
			if x.linksBelow(full) {
				x.recordLink(d, arg{opaque: "a symlink moved or copied"}, []string{cwd})
			}
		}
	}
}

// linksBelow reports whether p is a symlink or, walked, has one below it
// (or cannot be walked to know).
func (x *extractor) linksBelow(p string) bool {
	r, err := x.fs.Resolve(p)
	if err != nil {
		return true
	}
	r = path.Clean(r)
	if d, err := x.fs.Resolve(path.Dir(p)); err != nil || path.Join(path.Clean(d), path.Base(p)) != r {
		return true // p itself is a symlink
	}
	if ok, dir := x.fs.Stat(r); !ok || !dir {
		return false
	}
	w, ok := x.fs.(Walker)
	if !ok {
		return true
	}
	res := w.Walk(r, false)
	if res.Cut != "" {
		return true
	}
	return slices.ContainsFunc(res.Entries, func(e WalkEntry) bool { return e.Link })
}
