package router

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPackageRule: the router asks guard and carries out its verdict; it
// imports neither the policy nor the audit package (DESIGN §2). Read from
// the sources, every file whatever its build tags, so that a file built
// only on another system cannot bring them back.
func TestPackageRule(t *testing.T) {
	const module = "github.com/acp-router/acp-router/"
	forbidden := map[string]string{
		module + "policy":         "decisions are guard's: ask guard (guard/mcp.go)",
		module + "policy/extract": "reading a request is the policy's, for guard",
		module + "audit":          "the audit log is guard's: Guard.Record",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		read++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			for bad, why := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: %s", name, path, why)
				}
			}
		}
	}
	if read < 10 {
		t.Fatalf("read the imports of %d files of the router package, want its sources (run from router/)", read)
	}
}
