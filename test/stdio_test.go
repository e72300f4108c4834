//go:build linux

package test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStdioNonblockRestored: the router polls its stdin and stdout pipes
// (non-blocking, issue 6) while it runs, and puts them back in blocking
// mode when it exits, because the open file descriptions may be shared
// with whoever started it (here: the test keeps the same ends open).
func TestStdioNonblockRestored(t *testing.T) {
	t.Parallel()
	bin := needRouter(t)
	cfg := writeConfig(t, routerYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}))
	var inFds, outFds [2]int
	if err := syscall.Pipe2(inFds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Pipe2(outFds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	routerIn := os.NewFile(uintptr(inFds[0]), "router-stdin") // kept: shares the router's fd 0 description
	toRouter := os.NewFile(uintptr(inFds[1]), "to-router")
	routerOut := os.NewFile(uintptr(outFds[1]), "router-stdout") // kept: the router's fd 1 description
	fromRouter := os.NewFile(uintptr(outFds[0]), "from-router")
	defer routerIn.Close()
	defer routerOut.Close()
	defer fromRouter.Close()
	nonblock := func(f *os.File) bool {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
		if errno != 0 {
			t.Fatal(errno)
		}
		return flags&syscall.O_NONBLOCK != 0
	}
	// Fd() above puts a file in blocking mode; these were created blocking.
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdin, cmd.Stdout = routerIn, routerOut
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if nonblock(routerIn) || nonblock(routerOut) {
		t.Fatal("the test's pipe ends are non-blocking before the router ran")
	}
	if _, err := toRouter.WriteString(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}` + "\n"); err != nil {
		t.Fatal(err)
	}
	fromRouter.SetReadDeadline(time.Now().Add(waitTimeout))
	line, err := bufio.NewReader(fromRouter).ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("initialize: %q, %v", line, err)
	}
	if !nonblock(routerIn) || !nonblock(routerOut) {
		t.Errorf("while the router runs: stdin non-blocking %v, stdout %v; want both (polled)", nonblock(routerIn), nonblock(routerOut))
	}
	toRouter.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("router exit: %v", err)
		}
	case <-time.After(waitTimeout):
		cmd.Process.Kill()
		t.Fatal("the router did not exit after stdin EOF")
	}
	if nonblock(routerIn) || nonblock(routerOut) {
		t.Errorf("after the router exited: stdin non-blocking %v, stdout %v; want both restored to blocking", nonblock(routerIn), nonblock(routerOut))
	}
}
