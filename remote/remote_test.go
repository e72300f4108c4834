package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func post(t *testing.T, url string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+secret)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const initMsg = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`

// open initializes an HTTP connection and returns its id.
func open(t *testing.T, url string) string {
	t.Helper()
	resp, body := post(t, url, nil, initMsg)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderConnectionID) == "" {
		t.Fatalf("initialize: %d %q", resp.StatusCode, body)
	}
	return resp.Header.Get(HeaderConnectionID)
}

// An unauthenticated request gets 401 and nothing else, whatever it is,
// and no log line carries the token it tried.
func TestUnauthenticated(t *testing.T) {
	_, url, logs := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: tokenAuth})
	id := open(t, url)
	for _, tc := range []struct{ name, method, url, auth string }{
		{"no token", "POST", url, ""},
		{"wrong bearer", "POST", url, "Bearer wrong-" + secret},
		{"wrong query", "GET", url + "?token=wrong-" + secret, ""},
		{"sse", "GET", url, "Bearer nope"},
		{"delete", "DELETE", url, ""},
		{"websocket", "GET", url, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(initMsg))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(HeaderConnectionID, id)
			req.Header.Set("Accept", "text/event-stream")
			if tc.name == "websocket" {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 || len(b) != 0 || resp.Header.Get(HeaderConnectionID) != "" || resp.Header.Get("Set-Cookie") != "" {
				t.Errorf("got %d %q %v, want 401 with nothing", resp.StatusCode, b, resp.Header)
			}
		})
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the token is in the log:\n%s", logs.String())
	}
}

// What the RFD leaves to the SDK: status codes of the HTTP profile.
func TestHTTPRefusals(t *testing.T) {
	_, url, _ := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: tokenAuth, MaxMessage: 1024})
	id := open(t, url)
	big := `{"jsonrpc":"2.0","method":"x","params":{"pad":"` + strings.Repeat("a", 2000) + `"}}`
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		body string
		code int
		want string
	}{
		{"batch", map[string]string{HeaderConnectionID: id}, `[` + initMsg + `]`, 400, `"code":-32600`},
		{"not json", map[string]string{HeaderConnectionID: id}, `{"jsonrpc":`, 400, "Invalid JSON"},
		{"scalar", map[string]string{HeaderConnectionID: id}, `42`, 400, "Invalid JSON-RPC message"},
		{"oversized", map[string]string{HeaderConnectionID: id}, big, 413, "message exceeds the 1024-byte limit"},
		{"no connection id", nil, `{"jsonrpc":"2.0","method":"x"}`, 400, "Missing Acp-Connection-Id"},
		{"unknown connection", map[string]string{HeaderConnectionID: "feedface"}, `{"jsonrpc":"2.0","method":"x"}`, 404, "Unknown Acp-Connection-Id"},
		{"second initialize", map[string]string{HeaderConnectionID: id}, initMsg, 400, "Initialize not allowed on existing connection"},
		{"session method without header", map[string]string{HeaderConnectionID: id}, `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s"}}`, 400, "Missing Acp-Session-Id"},
		{"mismatched session", map[string]string{HeaderConnectionID: id, HeaderSessionID: "t"}, `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s"}}`, 400, "Mismatched Acp-Session-Id"},
		{"wrong content type", map[string]string{HeaderConnectionID: id, "Content-Type": "text/plain"}, `{}`, 415, "Unsupported Media Type"},
		{"accepted", map[string]string{HeaderConnectionID: id}, `{"jsonrpc":"2.0","method":"x"}`, 202, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, url, tc.hdr, tc.body)
			if resp.StatusCode != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("got %d %q, want %d with %q", resp.StatusCode, body, tc.code, tc.want)
			}
		})
	}
	// Another token's requests cannot reach the connection.
	other := func(r *http.Request) (Identity, error) { return Identity{Name: "bob"}, nil }
	_, url2, _ := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: func(r *http.Request) (Identity, error) {
		if r.Header.Get("X-Bob") != "" {
			return other(r)
		}
		return tokenAuth(r)
	}})
	id2 := open(t, url2)
	if resp, body := post(t, url2, map[string]string{HeaderConnectionID: id2, "X-Bob": "1"}, `{"jsonrpc":"2.0","method":"x"}`); resp.StatusCode != 404 {
		t.Errorf("another identity's POST: %d %q, want 404", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("DELETE", url2, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set(HeaderConnectionID, id2)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, _ := post(t, url2, map[string]string{HeaderConnectionID: id2}, `{"jsonrpc":"2.0","method":"x"}`); resp.StatusCode != 404 {
		t.Errorf("POST after DELETE: %d, want 404", resp.StatusCode)
	}
}

func dial(t *testing.T, url string) (*websocket.Conn, *http.Response) {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), strings.Replace(url, "http", "ws", 1),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + secret}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, resp
}

func readFrame(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWebSocketRefusals(t *testing.T) {
	_, url, logs := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: tokenAuth, MaxMessage: 1024})
	c, resp := dial(t, url)
	if resp.Header.Get(HeaderConnectionID) == "" {
		t.Errorf("101 without %s", HeaderConnectionID)
	}
	ctx := t.Context()
	send := func(s string) { c.Write(ctx, websocket.MessageText, []byte(s)) }
	send(`{"jsonrpc":`)
	if got := readFrame(t, c); !strings.Contains(got, `"code":-32700`) || !strings.Contains(got, `"id":null`) {
		t.Errorf("bad JSON: %s", got)
	}
	send(`[` + initMsg + `]`)
	if got := readFrame(t, c); !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "batches") {
		t.Errorf("batch: %s", got)
	}
	send(initMsg)
	if got := readFrame(t, c); !strings.Contains(got, `"protocolVersion":1`) {
		t.Errorf("initialize: %s", got)
	}
	send(strings.Replace(initMsg, `"id":1`, `"id":7`, 1))
	if got := readFrame(t, c); !strings.Contains(got, `"id":7`) || !strings.Contains(got, "Initialize not allowed") {
		t.Errorf("second initialize: %s", got)
	}
	// A frame over the limit closes the socket, saying why.
	send(`{"jsonrpc":"2.0","method":"x","params":{"pad":"` + strings.Repeat("a", 2000) + `"}}`)
	_, _, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("oversized frame: %v, want close 1009", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "over the message limit") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "over the message limit") {
		t.Errorf("the oversized frame is not logged:\n%s", logs.String())
	}

	// The first message must be initialize.
	c2, _ := dial(t, url)
	c2.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{}}`))
	_, _, err = c2.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusProtocolError {
		t.Errorf("first message not initialize: %v, want close 1002", err)
	}
}

// blockedServe writes forever to a client that never reads: Write must
// give up after WriteTimeout, not hold the goroutine.
func TestWriteTimeout(t *testing.T) {
	for _, profile := range []string{"ws", "http"} {
		t.Run(profile, func(t *testing.T) {
			result := make(chan error, 1)
			serve := func(ctx context.Context, c Conn, id Identity) error {
				if _, err := c.Read(ctx); err != nil {
					return err
				}
				c.Write(ctx, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
				msg := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"pad":"` + strings.Repeat("a", 64<<10) + `"}}`)
				start := time.Now()
				for {
					if err := c.Write(ctx, msg); err != nil {
						result <- fmt.Errorf("%w after %v", err, time.Since(start).Round(100*time.Millisecond))
						return err
					}
				}
			}
			_, url, _ := startServer(t, Options{Serve: serve, Auth: tokenAuth, WriteTimeout: 300 * time.Millisecond, StreamBuffer: 64 << 10})
			if profile == "ws" {
				c, _ := dial(t, url)
				c.Write(t.Context(), websocket.MessageText, []byte(initMsg))
				// never read
			} else {
				id := open(t, url)
				// An event stream opened and never read.
				req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set(HeaderConnectionID, id)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { resp.Body.Close() })
			}
			select {
			case err := <-result:
				t.Logf("Write: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("Write still blocked on a client that does not read")
			}
		})
	}
}

// An HTTP client that goes away mid-stream (its event stream drops and
// nothing reopens it) is gone for the hub after IdleTimeout; a WebSocket
// client at once.
func TestDisconnectMidStream(t *testing.T) {
	for _, profile := range []string{"ws", "http"} {
		t.Run(profile, func(t *testing.T) {
			agent := newFakeAgent()
			_, url, _ := startServer(t, Options{Serve: agent.Serve, Auth: tokenAuth, IdleTimeout: 200 * time.Millisecond})
			if profile == "ws" {
				c, _ := dial(t, url)
				c.Write(t.Context(), websocket.MessageText, []byte(initMsg))
				readFrame(t, c)
				c.Write(t.Context(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"wait"}]}}`))
				readFrame(t, c) // "waiting": the turn is running
				c.CloseNow()
			} else {
				id := open(t, url)
				ctx, cancel := context.WithCancel(t.Context())
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set(HeaderConnectionID, id)
				req.Header.Set(HeaderSessionID, "s")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if r, body := post(t, url, map[string]string{HeaderConnectionID: id, HeaderSessionID: "s"},
					`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"wait"}]}}`); r.StatusCode != 202 {
					t.Fatalf("prompt: %d %s", r.StatusCode, body)
				}
				buf := make([]byte, 512)
				n, _ := resp.Body.Read(buf)
				if !bytes.Contains(buf[:n], []byte("waiting")) {
					t.Fatalf("stream: %q", buf[:n])
				}
				cancel()
				resp.Body.Close()
			}
			select {
			case id := <-agent.gone:
				if id.Name != "alice" {
					t.Errorf("identity %+v", id)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not see the client go")
			}
		})
	}
}

// Close tells the client why: the WebSocket close reason, the SSE
// stream's last comment.
func TestCloseReason(t *testing.T) {
	why := errors.New("dropped: the client's queue is full")
	serve := func(ctx context.Context, c Conn, id Identity) error {
		c.Read(ctx)
		c.Write(ctx, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
		time.Sleep(100 * time.Millisecond)
		return c.Close(why)
	}
	_, url, _ := startServer(t, Options{Serve: serve, Auth: tokenAuth})
	c, _ := dial(t, url)
	c.Write(t.Context(), websocket.MessageText, []byte(initMsg))
	readFrame(t, c)
	_, _, err := c.Read(t.Context())
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != why.Error() {
		t.Errorf("websocket: %v, want 1008 %q", err, why)
	}
	id := open(t, url)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(HeaderConnectionID, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), ": closed: "+why.Error()) {
		t.Errorf("sse: %q, want the reason as a last comment", b)
	}
}

// A request authenticated by ?token= gets the token back as an HttpOnly,
// SameSite=Strict cookie on / (the page and its API need it too, issue
// 31), which authenticates later requests alone (the SDK clients send
// back every cookie they got).
func TestTokenCookie(t *testing.T) {
	_, url, _ := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: tokenAuth})
	req, _ := http.NewRequest("POST", url+"?token="+secret, strings.NewReader(initMsg))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var c *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == TokenCookie {
			c = ck
		}
	}
	if resp.StatusCode != 200 || c == nil || c.Value != secret || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Fatalf("got %d, cookie %+v", resp.StatusCode, c)
	}
	req, _ = http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","method":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderConnectionID, resp.Header.Get(HeaderConnectionID))
	req.AddCookie(&http.Cookie{Name: TokenCookie, Value: c.Value})
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("with the cookie alone: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A client that opens no stream for the sessions it is sent cannot make
// the router hold a buffer for each: the connection's streams together
// hold at most connBuffer StreamBuffers, then Write waits and gives up.
func TestConnectionBufferBound(t *testing.T) {
	accepted := make(chan int, 1)
	serve := func(ctx context.Context, c Conn, id Identity) error {
		c.Read(ctx)
		c.Write(ctx, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
		pad := strings.Repeat("a", 60<<10)
		for i := range 100 {
			msg := fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s%d","pad":%q}}`, i, pad)
			if c.Write(ctx, []byte(msg)) != nil {
				accepted <- i
				return nil
			}
		}
		accepted <- 100
		return nil
	}
	_, url, _ := startServer(t, Options{Serve: serve, Auth: tokenAuth, StreamBuffer: 64 << 10, WriteTimeout: 200 * time.Millisecond})
	open(t, url)
	select {
	case n := <-accepted:
		// 4 StreamBuffers of 64 KiB: 4 messages of 60 KiB, and one more
		// taken while the first were counted.
		if n > 5 {
			t.Errorf("%d messages of 60 KiB buffered for sessions nobody reads, want at most 5", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked past its timeout")
	}
}

// The event stream's refusals: 406 without Accept: text/event-stream,
// 400 without a connection id, 404 for an unknown one, 409 for a second
// reader of one stream (the SDK's client fails that session only).
func TestSSERefusals(t *testing.T) {
	_, url, _ := startServer(t, Options{Serve: newFakeAgent().Serve, Auth: tokenAuth})
	id := open(t, url)
	get := func(hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	sse := "text/event-stream"
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		code int
	}{
		{"no accept", map[string]string{HeaderConnectionID: id}, 406},
		{"no connection id", map[string]string{"Accept": sse}, 400},
		{"unknown connection", map[string]string{"Accept": sse, HeaderConnectionID: "nope"}, 404},
		{"session stream", map[string]string{"Accept": sse, HeaderConnectionID: id, HeaderSessionID: "s1"}, 200},
		{"second reader of it", map[string]string{"Accept": sse, HeaderConnectionID: id, HeaderSessionID: "s1"}, 409},
		{"connection stream", map[string]string{"Accept": sse, HeaderConnectionID: id}, 200},
		{"second reader of it", map[string]string{"Accept": sse, HeaderConnectionID: id}, 409},
	} {
		if resp := get(tc.hdr); resp.StatusCode != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
	}
}
