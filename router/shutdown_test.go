package router

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/internal/leaktest"
)

// TestServeJoinsEditorWriter: when the editor quits without reading what
// is left for it, Serve gives up on it after a second and returns once
// the editor stream's writer has ended: nothing of the router runs after
// Serve.
func TestServeJoinsEditorWriter(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf("version: 1\nstate_dir: '%s'\nagents:\n  - name: a\n    command: '%s'\n    lazy: true\n    env: {%s: '1'}\nrouting: {default: a}\n", t.TempDir(), bin, envTestAgent)
	cfg, err := config.Parse("test.yaml", []byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	r := New(cfg, Options{})
	routerIn, editorOut := io.Pipe()
	editorIn, routerOut := io.Pipe() // never read: the writer blocks
	defer editorIn.Close()
	served := make(chan error, 1)
	go func() { served <- r.Serve(context.Background(), routerIn, routerOut) }()
	<-r.editorReady
	s := r.editor.Stream()
	if err := s.WriteRaw([]byte(`{"jsonrpc":"2.0","method":"session/update","params":{}}`)); err != nil {
		t.Fatal(err)
	}
	for s.Queued() == 0 {
		runtime.Gosched()
	}
	editorOut.Close() // the editor quits
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	// The stream's methods and the pipe it writes to show their
	// receivers in the stacks.
	if n := leaktest.Count(fmt.Sprintf("%p", s), fmt.Sprintf("%p", routerOut)); n != 0 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines of the editor's stream still run after Serve returned:\n%s", n, buf[:runtime.Stack(buf, true)])
	}
}
