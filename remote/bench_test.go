package remote

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/hashicorp/go-hclog"
)

// The transport's own cost, without the router or a Node.js client: a
// prompt's round trip (the request, one update, the response) and a
// flood of agent_message_chunk updates (about 130 bytes each), to the fake agent in this process, over
// WebSocket and over HTTP/SSE, with Go clients.
//
//	go test -run '^$' -bench . -benchmem ./remote

func benchServer(b *testing.B) string {
	s := NewServer(Options{Serve: newFakeAgent().Serve, Auth: tokenAuth, Logger: hclog.NewNullLogger()})
	l, err := Listen(ListenConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Serve(ctx, l)
	b.Cleanup(cancel)
	return l.URL()
}

// benchClient sends a prompt and reads until its response.
type benchClient interface {
	prompt(text string, id int) (updates int)
}

type wsBench struct {
	c   *websocket.Conn
	ctx context.Context
}

func (w wsBench) prompt(text string, id int) int {
	w.c.Write(w.ctx, websocket.MessageText, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":%q}]}}`, id, text))
	n := 0
	want := fmt.Appendf(nil, `"id":%d`, id)
	for {
		_, b, err := w.c.Read(w.ctx)
		if err != nil {
			panic(err)
		}
		if bytes.Contains(b, want) {
			return n
		}
		n++
	}
}

type httpBench struct {
	url, conn string
	events    *bufio.Reader
}

func (h httpBench) prompt(text string, id int) int {
	req, _ := http.NewRequest("POST", h.url, strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":%q}]}}`, id, text)))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderConnectionID, h.conn)
	req.Header.Set(HeaderSessionID, "s")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 202 {
		panic(fmt.Sprint(resp, err))
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	n := 0
	want := fmt.Appendf(nil, `"id":%d`, id)
	for {
		line, err := h.events.ReadSlice('\n')
		if err != nil {
			panic(err)
		}
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		if bytes.Contains(line, want) {
			return n
		}
		n++
	}
}

func openBench(b *testing.B, profile string) benchClient {
	url := benchServer(b)
	if profile == "ws" {
		c, _, err := websocket.Dial(b.Context(), strings.Replace(url, "http", "ws", 1), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + secret}}})
		if err != nil {
			b.Fatal(err)
		}
		c.SetReadLimit(-1)
		b.Cleanup(func() { c.CloseNow() })
		c.Write(b.Context(), websocket.MessageText, []byte(initMsg))
		c.Read(b.Context())
		return wsBench{c, b.Context()}
	}
	req, _ := http.NewRequest("POST", url, strings.NewReader(initMsg))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get(HeaderConnectionID)
	get, _ := http.NewRequestWithContext(b.Context(), "GET", url, nil)
	get.Header.Set("Authorization", "Bearer "+secret)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set(HeaderConnectionID, id)
	get.Header.Set(HeaderSessionID, "s")
	sse, err := http.DefaultClient.Do(get)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sse.Body.Close() })
	return httpBench{url: url, conn: id, events: bufio.NewReaderSize(sse.Body, 1<<20)}
}

func BenchmarkPromptRoundTrip(b *testing.B) {
	for _, profile := range []string{"ws", "http"} {
		b.Run(profile, func(b *testing.B) {
			c := openBench(b, profile)
			b.ResetTimer()
			for i := range b.N {
				c.prompt("hi", i+10)
			}
		})
	}
}

func BenchmarkUpdates(b *testing.B) {
	for _, profile := range []string{"ws", "http"} {
		b.Run(profile, func(b *testing.B) {
			c := openBench(b, profile)
			b.ResetTimer()
			if got := c.prompt(fmt.Sprintf("flood %d", b.N), 10); got != b.N {
				b.Fatalf("%d updates, want %d", got, b.N)
			}
		})
	}
}
