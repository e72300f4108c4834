//go:build linux

package test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEditorStreamBreaks: when the editor's stream breaks (its stdin
// cannot be read, or nothing can be written to its stdout) the router
// exits non-zero with a message saying so on stderr (issue 12, point 7),
// where it used to exit 0 without a word.
func TestEditorStreamBreaks(t *testing.T) {
	t.Parallel()
	bin := needRouter(t)
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}))
	run := func(t *testing.T, cmd *exec.Cmd) (int, string) {
		t.Helper()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return code, stderr.String()
		case <-time.After(waitTimeout):
			cmd.Process.Kill()
			t.Fatalf("the router did not exit; stderr:\n%s", stderr.String())
		}
		return 0, ""
	}

	t.Run("stdin cannot be read", func(t *testing.T) {
		dir, err := os.Open(t.TempDir()) // read(2) on a directory: EISDIR
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		cmd := exec.Command(bin, "--config", cfg)
		cmd.Stdin = dir
		code, stderr := run(t, cmd)
		if code == 0 || !strings.Contains(stderr, "acp-router: router: reading from the editor") || !strings.Contains(stderr, "is a directory") {
			t.Errorf("exit %d, stderr:\n%s\nwant non-zero and a line naming the read error", code, stderr)
		}
	})

	t.Run("stdout closed by the editor", func(t *testing.T) {
		var out [2]int
		if err := syscall.Pipe2(out[:], syscall.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		syscall.Close(out[0]) // the editor stopped reading for good: EPIPE
		w := os.NewFile(uintptr(out[1]), "router-stdout")
		defer w.Close()
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer inW.Close() // stdin stays open: only the write side broke
		cmd := exec.Command(bin, "--config", cfg)
		cmd.Stdin, cmd.Stdout = inR, w
		go func() {
			inW.WriteString(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}` + "\n")
		}()
		code, stderr := run(t, cmd)
		inR.Close()
		if code == 0 || !strings.Contains(stderr, "acp-router: router: writing to the editor") {
			t.Errorf("exit %d, stderr:\n%s\nwant non-zero and a line naming the write error", code, stderr)
		}
	})
}

// TestUnknownMethodSaysWhy: a method the router does not know goes to the
// routing default agent; when that agent failed to start, the editor's
// error says which agent and why, not only "method not found".
func TestUnknownMethodSaysWhy(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{"  - name: ghost\n    command: /bin/false\n"}))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, rpcErr := e.Call(ctx, "_vendor/ping", map[string]any{})
	if rpcErr == nil {
		t.Fatal("the call succeeded")
	}
	if rpcErr.Code != -32601 || !strings.Contains(rpcErr.Message, `"ghost"`) || !strings.Contains(rpcErr.Message, "exit") {
		t.Errorf("error %d %q; want -32601 naming the agent ghost and why it did not start", rpcErr.Code, rpcErr.Message)
	}
}
