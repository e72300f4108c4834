package extract

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Walk is how a program walks the tree below a recursive operand (spec
// key walk:, issue 27): the symlinks it opens. What a program reads below
// a directory is what its walk reaches, not every entry there: rg, grep
// -r, tar c and cp -r never open a symlink below their operand (they skip
// it, or store or copy it as a link), and the go command opens a symlink
// only as a package file and descends into none to a directory. So a
// symlink to a secret somewhere below the project is evidence only for a
// program that opens it. A recursive item without a Walk is read whole,
// every symlink followed: what a program the specs do not model may do.
//
// The names a program skips are not modelled: what it skips is its
// configuration's (rg's ignore files, pytest's norecursedirs) or its
// input's (go skips _ and testdata names when it lists packages, but a
// //go:embed line reads any regular file of the package's tree).
//
// Only the program's own walk is modelled. Code it runs (go test's test
// binary, pytest's tests, npm test's script) may open anything; the
// router decides running it as it always did, by the rules on the
// command (the project's code is trusted as its Makefile is).
type Walk struct {
	// Links is what the program does with a symlink below the operand:
	// "none" (it opens none: the link is an entry seen by its own name),
	// "files" (it opens a symlink to a file whose name matches Open, and
	// never descends into a symlink to a directory) or "all".
	Links string `json:"links"`
	// Open are the name globs of the symlinks to files it opens (Links
	// "files").
	Open []string `json:"open,omitempty"`
}

// Follows reports whether the program opens the symlink rel (relative to
// the walked directory) whose target is a directory when targetDir: a
// followed link is read as its target, else it is only an entry.
func (w *Walk) Follows(rel string, targetDir bool) bool {
	if w == nil {
		return true
	}
	switch w.Links {
	case "none":
		return false
	case "files":
		if targetDir {
			return false
		}
		name := path.Base(rel)
		return slices.ContainsFunc(w.Open, func(g string) bool { ok, _ := path.Match(g, name); return ok })
	}
	return true
}

// walkSpec is the compiled walk: key of a program spec.
type walkSpec struct {
	walk   *Walk    // without any of follow
	follow []string // options that make it follow every symlink
	all    *Walk    // with one of follow: walk, every symlink opened
}

// parseWalk reads a spec's walk: mapping.
func parseWalk(v *yaml.Node) (*walkSpec, error) {
	var raw struct {
		Links  string   `yaml:"links"`
		Open   []string `yaml:"open"`
		Follow []string `yaml:"follow"`
	}
	if err := v.Decode(&raw); err != nil {
		return nil, err
	}
	if err := checkKeys(v, "links", "open", "follow"); err != nil {
		return nil, err
	}
	switch raw.Links {
	case "none", "all":
		if len(raw.Open) > 0 {
			return nil, fmt.Errorf("open: applies to links: files only")
		}
	case "files":
	default:
		return nil, fmt.Errorf("links must be none, files or all, not %q", raw.Links)
	}
	for _, g := range raw.Open {
		if _, err := path.Match(g, ""); err != nil || strings.Contains(g, "/") {
			return nil, fmt.Errorf("%q is not a glob of one name", g)
		}
	}
	ws := &walkSpec{walk: &Walk{Links: raw.Links, Open: raw.Open}, follow: raw.Follow}
	ws.all = &Walk{Links: "all"}
	return ws, nil
}

// checkKeys reports a key of the mapping v that is not one of keys.
func checkKeys(v *yaml.Node, keys ...string) error {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v.Kind != yaml.MappingNode {
		return fmt.Errorf("a mapping (%s)", strings.Join(keys, ", "))
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if !slices.Contains(keys, v.Content[i].Value) {
			return fmt.Errorf("unknown key %q (%s)", v.Content[i].Value, strings.Join(keys, ", "))
		}
	}
	return nil
}

// walkFor returns the program's walk given the flags; nil: read whole.
func (sp *argSpec) walkFor(flags flagSet) *Walk {
	if sp.walk == nil {
		return nil
	}
	if flags.any(sp.walk.follow...) {
		return sp.walk.all
	}
	return sp.walk.walk
}
