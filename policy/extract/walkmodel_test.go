package extract

import (
	"strings"
	"testing"
)

// TestWalkModel: the names a program's walk skips and the symlinks it
// opens (issue 27).
func TestWalkModel(t *testing.T) {
	goWalk := specs()["go"].subs["test"].walkFor(nil)
	if goWalk == nil || goWalk != specs()["go"].subs["vet"].walkFor(nil) {
		t.Fatalf("go's subcommands do not share go's walk: %+v", goWalk)
	}
	for _, tc := range []struct {
		name      string
		w         *Walk
		rel       string
		targetDir bool
		follows   bool
	}{
		{"go: a link in a _ directory", goWalk, "_local/creds", false, false},
		{"go: a source file link in testdata", goWalk, "internal/db/testdata/x.go", false, true},
		{"go: a source file link", goWalk, "internal/db/zz.go", false, true},
		{"go: a cgo header link", goWalk, "internal/db/sqlite.h", false, true},
		{"go: go.mod link", goWalk, "sub/go.mod", false, true},
		{"go: a link to a directory named .go", goWalk, "pkg.go", true, false},
		{"go: a data file link", goWalk, "notes/aws", false, false},
		{"go: a link named .go.txt", goWalk, "notes/a.go.txt", false, false},
		{"rg", specs()["rg"].walkFor(nil), "notes/aws", false, false},
		{"rg -L", specs()["rg"].walkFor(flagSet{"-L"}), "notes/aws", true, true},
		{"grep -R", specs()["grep"].walkFor(flagSet{"-R"}), "docs/ssh", true, true},
		{"cp -l", specs()["cp"].walkFor(flagSet{"-l"}), "a", false, true},
		{"cp -a", specs()["cp"].walkFor(flagSet{"-a"}), "a", false, false},
		{"no model: everything", nil, "_x/testdata/y", true, true},
	} {
		if got := tc.w.Follows(tc.rel, tc.targetDir); got != tc.follows {
			t.Errorf("%s: Follows(%s) = %v, want %v", tc.name, tc.rel, got, tc.follows)
		}
	}
	if specs()["pytest"].walk != nil || specs()["zip"].walk != nil {
		t.Error("pytest (python_files and norecursedirs are its configuration's) and zip (follows) must read everything")
	}
}

// TestWalkSpecErrors: a walk: key the loader cannot read is an error,
// never a walk that reads less.
func TestWalkSpecErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"x: {walk: {links: some}}", "links must be none, files or all"},
		{"x: {walk: {links: none, open: ['*.go']}}", "open: applies to links: files only"},
		{"x: {walk: {links: files, open: ['a/b']}}", "not a glob of one name"},
		{"x: {walk: {links: files, open: ['[']}}", "not a glob of one name"},
		{"x: {walk: {links: none, skip: [testdata]}}", `unknown key "skip"`},
		{"x: {walk: {links: none, folow: [-L]}}", `unknown key "folow"`},
		{"x: {walk: {links: none, follow: [-L]}}", "walk: follow names -L, which is not one of its options"},
		{"x: {walk: {follow: [-L]}, options: {-L: flag}}", "links must be none, files or all"},
	} {
		err := parseSpecs("t.yaml", []byte(tc.spec), map[string]*argSpec{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.spec, err, tc.want)
		}
	}
	m := map[string]*argSpec{}
	if err := parseSpecs("t.yaml", []byte("x: {walk: {links: none, follow: [-L]}, options: {-L: flag}}"), m); err != nil {
		t.Fatal(err)
	}
	if w := m["x"].walkFor(flagSet{"-L"}); w == nil || w.Links != "all" {
		t.Errorf("-L: %+v, want every link followed", w)
	}
}
