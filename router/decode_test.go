package router

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/merge"
)

// droppedDecodeAllowed are the files whose dropped json.Unmarshal errors
// another change owns (permission.go: the permission request's tool call,
// being reworked with agentcalls.go); each entry is how many such calls
// the file may still have, so that a new one fails here all the same.
var droppedDecodeAllowed = map[string]int{}

// TestNoDroppedDecodeErrors: no non-test file of the package drops the
// error of a json.Unmarshal call, as a bare statement or assigned to _:
// each is answered (-32602), logged, or read as absent on purpose.
func TestNoDroppedDecodeErrors(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		var dropped []string
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ExprStmt:
				if isUnmarshal(n.X) {
					dropped = append(dropped, fset.Position(n.Pos()).String())
				}
			case *ast.AssignStmt:
				for i, rhs := range n.Rhs {
					if !isUnmarshal(rhs) || len(n.Lhs) != len(n.Rhs) {
						continue
					}
					if id, ok := n.Lhs[i].(*ast.Ident); ok && id.Name == "_" {
						dropped = append(dropped, fset.Position(n.Pos()).String())
					}
				}
			case *ast.GoStmt:
				if isUnmarshal(n.Call) {
					dropped = append(dropped, fset.Position(n.Pos()).String())
				}
			case *ast.DeferStmt:
				if isUnmarshal(n.Call) {
					dropped = append(dropped, fset.Position(n.Pos()).String())
				}
			}
			return true
		})
		if len(dropped) > droppedDecodeAllowed[name] {
			t.Errorf("json.Unmarshal errors dropped (answer, log, or read as absent with a reason): %s", strings.Join(dropped, ", "))
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d files: not run in the router package's directory?", checked)
	}
}

// isUnmarshal: e is a call of json.Unmarshal.
func isUnmarshal(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Unmarshal" {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "json"
}

// TestDroppedDecodeGuardCatches: the guard's matcher sees each form.
func TestDroppedDecodeGuardCatches(t *testing.T) {
	src := `package p
func f() {
	json.Unmarshal(a, &b)
	_ = json.Unmarshal(a, &b)
	if json.Unmarshal(a, &b) != nil {}
	err := json.Unmarshal(a, &b)
	_ = err
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	bare, blank := 0, 0
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ExprStmt:
			if isUnmarshal(n.X) {
				bare++
			}
		case *ast.AssignStmt:
			if id, ok := n.Lhs[0].(*ast.Ident); ok && id.Name == "_" && isUnmarshal(n.Rhs[0]) {
				blank++
			}
		}
		return true
	})
	if bare != 1 || blank != 1 {
		t.Errorf("matched %d bare and %d blank calls, want 1 and 1", bare, blank)
	}
}

// TestCorruptStoredRecordsLogged: what the router wrote itself and cannot
// read back (a damaged state_dir file, stored session/new params) is
// logged with the session or agent, and read as documented: no cached
// modes, the editor's params alone.
func TestCorruptStoredRecordsLogged(t *testing.T) {
	dir := t.TempDir()
	log, buf := testLogger(t)
	r := &Router{cfg: &config.Config{StateDir: dir}, log: log, upstreams: upstreams{modeCache: map[string][]merge.Mode{}}}
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.modesFile("codex"), []byte(`[{"id":"a"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if modes := r.cachedModes("codex"); modes != nil {
		t.Errorf("cached modes %v from a damaged file, want none", modes)
	}
	if got := buf.String(); !strings.Contains(got, "cached modes do not decode") || !strings.Contains(got, "agent=codex") {
		t.Errorf("damaged modes cache not logged: %q", got)
	}

	p := r.rewriteNewParams("s-1", []byte(`{"cwd":"/a","mcpServers":`), []byte(`{"additionalDirectories":["/b"]}`), "/c")
	if got := buf.String(); !strings.Contains(got, "stored session/new params do not decode") || !strings.Contains(got, "session=s-1") {
		t.Errorf("damaged stored params not logged: %q", got)
	}
	if dirs := r.newParamsDirs("s-1", p); len(dirs) != 1 || dirs[0] != "/b" {
		t.Errorf("params %s: directories %v, want the editor's [/b]", p, dirs)
	}
	if dirs := r.newParamsDirs("s-2", []byte(`{"additionalDirectories":"/b"}`)); dirs != nil {
		t.Errorf("directories %v from a damaged record, want none", dirs)
	}
	if got := buf.String(); !strings.Contains(got, "session=s-2") {
		t.Errorf("damaged directories not logged: %q", got)
	}

	if err := os.WriteFile(commandsFile(dir, "codex"), []byte(`["agent"`), 0o600); err != nil {
		t.Fatal(err)
	}
	w := Warnings(&config.Config{StateDir: dir, Agents: []config.Agent{{Name: "codex"}}})
	if len(w) != 1 || !strings.Contains(w[0], "cannot read codex's commands") {
		t.Errorf("warnings %q, want one saying the commands file cannot be read", w)
	}
}

// TestMalformedSystemPromptRefused: a systemPrompt whose content does not
// decode is answered -32602 saying why; before, its mode alone was read
// and the session opened without it, the prompt silently gone.
func TestMalformedSystemPromptRefused(t *testing.T) {
	noCap := capsJSON(t, `{}`)
	p := json.RawMessage(`{"cwd":"/","mcpServers":[],"systemPrompt":{"mode":"append","content":"be brief"}}`)
	out, carried, err := adaptSystemPrompt(p, noCap, "codex")
	var rpcErr *jsonrpc2.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != acp.CodeInvalidParams || !strings.Contains(rpcErr.Message, "malformed systemPrompt") {
		t.Fatalf("got %s, carried %q, error %v; want -32602 malformed systemPrompt", out, carried, err)
	}
	ok := json.RawMessage(`{"cwd":"/","mcpServers":[],"systemPrompt":{"mode":"append","content":[{"type":"text","text":"be brief"}]}}`)
	if out, carried, err := adaptSystemPrompt(ok, noCap, "codex"); err != nil || carried != "be brief" || strings.Contains(string(out), "systemPrompt") {
		t.Errorf("well-formed append: %s, carried %q, %v", out, carried, err)
	}
}
