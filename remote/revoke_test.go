package remote

import (
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/acp-router/acp-router/token"
)

// TestRevokeEndsConnections: `acp-router token revoke alice` ends what
// alice's token opened, not only its next request: a WebSocket is closed
// 1008 "token revoked", an HTTP connection's SSE streams (the
// connection's, and a session's mid-turn) end with that reason, and Serve
// sees both clients go, within 2 s; a client on bob's token goes on. A
// token revoked and created again under the same name is another token:
// the old connections end all the same, and the new token reaches none of
// them. No goroutine is left once the clients are gone.
func TestRevokeEndsConnections(t *testing.T) {
	for _, recreate := range []bool{false, true} {
		name := "revoke"
		if recreate {
			name = "revoke-and-recreate"
		}
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			running, err := token.Open(state, token.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cli, _ := token.Open(state, token.Options{}) // the CLI's, another Store on the same file
			alice, err := cli.Create("alice", token.RoleController, true)
			if err != nil {
				t.Fatal(err)
			}
			bob, _ := cli.Create("bob", token.RoleController, true)
			agent := newFakeAgent()
			s, url, logs := startServer(t, Options{Serve: agent.Serve,
				Auth: func(r *http.Request) (Identity, error) {
					id, err := running.Authenticate(r)
					return Identity{Name: id.Name, Role: id.Role, AllSessions: id.AllSessions, Token: id.ID}, err
				},
				Watch: func(id Identity, gone func()) func() { return running.Watch(id.Token, gone) }})
			// The server's own goroutines run once it has answered a
			// request: counted in the base, not as the clients' leftovers
			// (the base was 0 once, taken before Serve had started).
			if r, err := http.Get(url); err == nil {
				r.Body.Close()
			}
			base := transportGoroutines()

			ws := func(secret string) *websocket.Conn {
				t.Helper()
				c, _, err := websocket.Dial(t.Context(), strings.Replace(url, "http", "ws", 1),
					&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + secret}}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.CloseNow() })
				c.Write(t.Context(), websocket.MessageText, []byte(initMsg))
				readFrame(t, c)
				return c
			}
			aliceWS, bobWS := ws(alice), ws(bob)

			// alice over HTTP: the connection's stream and a session's,
			// a turn running on it.
			req := func(method, secret, conn, session, body string) *http.Request {
				r, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
				r.Header.Set("Authorization", "Bearer "+secret)
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Accept", "text/event-stream")
				if conn != "" {
					r.Header.Set(HeaderConnectionID, conn)
				}
				if session != "" {
					r.Header.Set(HeaderSessionID, session)
				}
				return r
			}
			do := func(r *http.Request) *http.Response {
				t.Helper()
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			resp := do(req("POST", alice, "", "", initMsg))
			resp.Body.Close()
			conn := resp.Header.Get(HeaderConnectionID)
			if resp.StatusCode != 200 || conn == "" {
				t.Fatalf("initialize: %d", resp.StatusCode)
			}
			mainStream := do(req("GET", alice, conn, "", ""))
			sessionStream := do(req("GET", alice, conn, "s", ""))
			if r := do(req("POST", alice, conn, "s", `{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"wait"}]}}`)); r.StatusCode != 202 {
				t.Fatalf("prompt: %d", r.StatusCode)
			}
			buf := make([]byte, 512)
			if n, _ := sessionStream.Body.Read(buf); !strings.Contains(string(buf[:n]), "waiting") {
				t.Fatalf("session stream: %q", buf[:n])
			}
			ended := func(body io.ReadCloser) <-chan string {
				ch := make(chan string, 1)
				go func() {
					b, _ := io.ReadAll(body)
					body.Close()
					ch <- string(b)
				}()
				return ch
			}
			mainEnd, sessionEnd := ended(mainStream.Body), ended(sessionStream.Body)
			wsEnd := make(chan error, 1)
			go func() {
				_, _, err := aliceWS.Read(t.Context())
				wsEnd <- err
			}()

			revoked := time.Now()
			if err := cli.Revoke("alice"); err != nil {
				t.Fatal(err)
			}
			var alice2 string
			if recreate {
				if alice2, err = cli.Create("alice", token.RoleController, true); err != nil {
					t.Fatal(err)
				}
			}
			timeout := time.After(2 * time.Second)
			select {
			case err := <-wsEnd:
				var ce websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "token revoked" {
					t.Errorf("alice's WebSocket ended with %v, want 1008 \"token revoked\"", err)
				}
			case <-timeout:
				t.Fatal("alice's WebSocket still open 2 s after the revoke")
			}
			for _, st := range []struct {
				name string
				end  <-chan string
			}{{"connection", mainEnd}, {"session", sessionEnd}} {
				select {
				case b := <-st.end:
					if !strings.HasSuffix(b, ": closed: token revoked\n\n") {
						t.Errorf("alice's %s SSE stream ended with %q, want the reason last", st.name, b)
					}
				case <-timeout:
					t.Fatalf("alice's %s SSE stream still open 2 s after the revoke", st.name)
				}
			}
			for range 2 {
				select {
				case id := <-agent.gone:
					if id.Name != "alice" {
						t.Errorf("Serve returned for %+v, want alice's clients only", id)
					}
				case <-timeout:
					t.Fatal("Serve did not return for alice's clients within 2 s")
				}
			}
			t.Logf("alice's connections ended %v after the revoke", time.Since(revoked))

			// bob goes on.
			bobWS.Write(t.Context(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/"}}`))
			if got := readFrame(t, bobWS); !strings.Contains(got, `"sessionId"`) {
				t.Errorf("bob after alice's revoke: %q", got)
			}
			// Serve has returned for alice's two; their connections are
			// released just after it (deferred), so the count may lag.
			for wait := time.Now().Add(2 * time.Second); s.Connections() != 1 && time.Now().Before(wait); {
				time.Sleep(5 * time.Millisecond)
			}
			if n := s.Connections(); n != 1 {
				t.Errorf("%d connections open 2 s after alice's ended, want bob's", n)
			}
			// The old connection is gone for any token of the name; a
			// new alice connects anew.
			if recreate {
				r := do(req("POST", alice2, conn, "", `{"jsonrpc":"2.0","method":"x"}`))
				r.Body.Close()
				if r.StatusCode != 404 {
					t.Errorf("the new alice's POST on the old connection: %d, want 404", r.StatusCode)
				}
				ws(alice2).CloseNow()
			}
			r := do(req("POST", alice, conn, "", `{"jsonrpc":"2.0","method":"x"}`))
			r.Body.Close()
			if r.StatusCode != 401 {
				t.Errorf("the revoked token's POST: %d, want 401", r.StatusCode)
			}

			bobWS.Close(websocket.StatusNormalClosure, "")
			deadline := time.Now().Add(10 * time.Second)
			for (s.Connections() > 0 || transportGoroutines() > base) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := transportGoroutines(); n > base || s.Connections() > 0 {
				buf := make([]byte, 1<<20)
				t.Errorf("%d transport goroutines, %d before the clients; %d connections:\n%s", n, base, s.Connections(), buf[:runtime.Stack(buf, true)])
			}
			if strings.Contains(logs.String(), alice) || !strings.Contains(logs.String(), "its token was revoked") {
				t.Errorf("log:\n%s", logs.String())
			}
		})
	}
}

// transportGoroutines counts the goroutines running remote/'s code, the
// test's fake agent and the token Store's file watch.
func transportGoroutines() int {
	buf := make([]byte, 4<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "acp-router/remote.(*") || strings.Contains(g, "token.(*Store).poll") {
			n++
		}
	}
	return n
}
