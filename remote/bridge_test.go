package remote

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Bridge (acp-router connect) carries an editor's NDJSON to the router
// and back: initialize, session/new and a prompt answer in order.
func TestBridge(t *testing.T) {
	_, url, _ := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: tokenAuth})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Bridge(t.Context(), url, inR, outW, BridgeOptions{Token: secret}); outW.Close() }()
	lines := bufio.NewScanner(outR)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("no line: %v", lines.Err())
		}
		return lines.Text()
	}
	io.WriteString(inW, initMsg+"\n\n")
	if got := next(); !strings.Contains(got, `"protocolVersion":1`) {
		t.Errorf("initialize: %s", got)
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}`+"\n")
	if got := next(); !strings.Contains(got, `"sessionId":"sess-1"`) {
		t.Errorf("new: %s", got)
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sess-1","prompt":[{"type":"text","text":"hi"}]}}`+"\n")
	if got := next(); !strings.Contains(got, "echo: hi") {
		t.Errorf("update: %s", got)
	}
	if got := next(); !strings.Contains(got, `"stopReason":"end_turn"`) {
		t.Errorf("prompt: %s", got)
	}
	inW.Close() // the editor closes stdin
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Bridge: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Bridge did not end with stdin")
	}
}

// A refused token is said as such, and no error names a token, given as
// a flag or in the URL.
func TestBridgeNeverShowsToken(t *testing.T) {
	_, url, _ := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: tokenAuth})
	err := Bridge(t.Context(), url, strings.NewReader(""), io.Discard, BridgeOptions{Token: "wrong-" + secret})
	if !errors.Is(err, ErrRefused) || strings.Contains(err.Error(), secret) {
		t.Errorf("wrong token: %v", err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for _, u := range []string{"http://" + addr + "/acp?token=" + secret, "http://" + addr + "/acp"} {
		err := Bridge(ctx, u, strings.NewReader(""), io.Discard, BridgeOptions{Token: secret})
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v", err)
		}
	}
}
