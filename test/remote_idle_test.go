package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// 10,000 idle WebSocket clients on acp-router serve, each initialized
// (so each is a hub client with its writer goroutine): the router keeps
// serving, a new client's prompt still answers, and the router's memory
// per idle client is measured (RSS growth over the connections; kernel
// socket buffers are not in it). ACP_REMOTE_IDLE_N changes the count.
func TestServeIdleConnections(t *testing.T) {
	skipShort(t, "opens 10,000 connections")
	n := 10000
	if s := os.Getenv("ACP_REMOTE_IDLE_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	// Each connection is a descriptor here and one in the router, which
	// inherits this limit: raise the soft limit to the hard one.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < uint64(n)+1000 {
		t.Skipf("the descriptor limit (%d) is below %d connections: raise ulimit -Hn", lim.Cur, n)
	}
	t.Run("ws", func(t *testing.T) { idleClients(t, "ws", n) })
	// An idle HTTP client holds its connection's event stream open.
	t.Run("http", func(t *testing.T) { idleClients(t, "http", n/5) })
}

func idleClients(t *testing.T, profile string, n int) {
	r := newRemoteConfig(t, "")
	startServe(t, r, "--listen", "127.0.0.1:0", "--log-level", "warn")
	httpURL := r.listening(t, 1)[0]
	url := strings.Replace(httpURL, "http", "ws", 1)
	pid := routerPID(t, r)
	hdr := http.Header{"Authorization": {"Bearer " + r.token}}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	type closer interface{ CloseNow() error }
	dial := func(ctx context.Context) (closer, error) {
		if profile == "http" {
			return dialHTTP(ctx, hc, httpURL, r.token)
		}
		return dialWS(ctx, url, hdr)
	}
	// The first client starts the agents: the baseline is after it.
	first, err := dialWS(t.Context(), url, hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.CloseNow()
	time.Sleep(500 * time.Millisecond)
	before := rss(t, pid)
	conns := make([]closer, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	start := time.Now()
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			c, err := dial(ctx)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("connection: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
	})
	opened := time.Since(start)
	time.Sleep(time.Second) // let the router settle
	after := rss(t, pid)
	per := float64(after-before) / float64(n)
	t.Logf("%d idle %s clients opened in %v; router RSS %d -> %d KiB: %.1f KiB per idle client",
		n, profile, opened.Round(time.Millisecond), before>>10, after>>10, per/1024)
	if per > 256<<10 {
		t.Errorf("%.0f KiB per idle client", per/1024)
	}
	// The router still serves: a session on the first client answers.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir())))
	for {
		_, b, err := first.Read(ctx)
		if err != nil {
			t.Fatalf("session/new with %d idle clients: %v", n, err)
		}
		if strings.Contains(string(b), `"id":2`) {
			if !strings.Contains(string(b), "sessionId") {
				t.Fatalf("session/new: %s", b)
			}
			break
		}
	}
}

// dialWS opens an initialized WebSocket client.
func dialWS(ctx context.Context, url string, hdr http.Header) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return nil, err
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)); err != nil {
		return nil, err
	}
	if _, _, err := c.Read(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// httpIdle is an initialized HTTP client holding its event stream open.
type httpIdle struct{ body io.Closer }

func (h httpIdle) CloseNow() error { return h.body.Close() }

func dialHTTP(ctx context.Context, hc *http.Client, url, token string) (httpIdle, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return httpIdle{}, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return httpIdle{}, fmt.Errorf("initialize: %d", resp.StatusCode)
	}
	get, _ := http.NewRequest("GET", url, nil) // lives past ctx
	get.Header.Set("Authorization", "Bearer "+token)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Acp-Connection-Id", resp.Header.Get("Acp-Connection-Id"))
	sse, err := hc.Do(get)
	if err != nil {
		return httpIdle{}, err
	}
	if sse.StatusCode != 200 {
		sse.Body.Close()
		return httpIdle{}, fmt.Errorf("event stream: %d", sse.StatusCode)
	}
	return httpIdle{sse.Body}, nil
}

func routerPID(t *testing.T, r remoteRouter) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(r.state, "running", "*.listen"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var l struct{ PID int }
		if json.Unmarshal(b, &l) == nil && l.PID > 0 {
			return l.PID
		}
	}
	t.Fatal("no listening record")
	return 0
}

// rss is the process's resident memory in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
