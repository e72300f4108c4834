package router

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/acp-router/acp-router/acp"
)

// TestEditorDispatchFollowsTable ties editorHandler.Handle to the protocol
// table (acp.Methods): every method it has a case for is one the table
// says the router handles, and every method the table says the router
// handles (at this commit: Current) has a case there; the rest go through
// byTable. Read from the source: the cases name acp.Method* constants.
func TestEditorDispatchFollowsTable(t *testing.T) {
	consts := acpConstants(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "dispatch.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Handle" || fn.Recv == nil || recvName(fn) != "editorHandler" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				sel, ok := e.(*ast.SelectorExpr)
				if !ok || sel.X.(*ast.Ident).Name != "acp" {
					continue
				}
				v, ok := consts[sel.Sel.Name]
				if !ok {
					t.Fatalf("editorHandler.Handle: case acp.%s is no acp constant", sel.Sel.Name)
				}
				cases = append(cases, v)
			}
			return true
		})
	}
	if len(cases) == 0 {
		t.Fatal("no case in editorHandler.Handle")
	}
	for _, name := range cases {
		m, ok := acp.LookupMethod(name, false)
		if !ok || m.Treatment != acp.Handled {
			t.Errorf("editorHandler.Handle has a case for %s, which the table says is %v", name, m.Treatment)
		}
	}
	var want []string
	for _, m := range acp.Methods {
		if m.Side != acp.SideClient && m.Treatment == acp.Handled && !slices.Contains(want, m.Name) {
			want = append(want, m.Name)
		}
	}
	sort.Strings(want)
	for _, name := range want {
		if !slices.Contains(cases, name) {
			t.Errorf("the table says the router handles %s (%s), but editorHandler.Handle has no case for it", name, rowOf(name).Handler)
		}
	}
}

func rowOf(name string) acp.Method {
	m, _ := acp.LookupMethod(name, false)
	return m
}

func recvName(fn *ast.FuncDecl) string {
	switch x := fn.Recv.List[0].Type.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return id.Name
		}
	}
	return ""
}

// acpConstants are the string constants of package acp, by name.
func acpConstants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "acp", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							out[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return out
}
