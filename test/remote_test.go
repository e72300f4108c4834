package test

// acp-router serve and connect (issue 30 point 1): the official
// TypeScript SDK 2.4.0's remote clients (experimental/ws-client and
// http-client, test/peers/sdk24/remote.mjs) drive a session through the
// real router to the fake agent: initialize, session/new, a prompt, a
// permission request, a cancel, and session/load from a second
// connection. The listening address is found as `check` finds it, in the
// state directory.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// remoteRouter is a config whose state dir the test knows, a token for
// it, and the router started with args (serve, or stdio with listen:).
type remoteRouter struct {
	cfg, state, token string
}

func newRemoteConfig(t *testing.T, extra string) remoteRouter {
	t.Helper()
	state := t.TempDir()
	y := "version: 1\nstate_dir: " + yamlQuote(state) + "\nagents:\n" + fakeAgentYAML("fake", fakeOpts{}) + extra
	r := remoteRouter{cfg: writeConfig(t, y), state: state}
	out, err := exec.Command(needRouter(t), "token", "create", "alice", "--config", r.cfg).Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	r.token = strings.TrimSpace(string(out))
	return r
}

// listening waits for n listening records in the state dir and returns
// their URLs.
func (r remoteRouter) listening(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var urls []string
		files, _ := filepath.Glob(filepath.Join(r.state, "running", "*.listen"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			var l struct{ URL string }
			if json.Unmarshal(b, &l) == nil && l.URL != "" {
				urls = append(urls, l.URL)
			}
		}
		if len(urls) >= n {
			return urls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listening records, want %d", len(urls), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServe runs acp-router serve; its stderr is returned for the
// test's checks once it exits.
func startServe(t *testing.T, r remoteRouter, args ...string) *tailBuffer {
	t.Helper()
	cmd := exec.Command(needRouter(t), append([]string{"serve", "--config", r.cfg, "--log-level", "trace"}, args...)...)
	stderr := &tailBuffer{max: 4 << 20}
	cmd.Stderr = stderr
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve exited: %v\n%s", err, truncate(stderr.String(), 4000))
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Error("serve did not stop on SIGINT")
		}
	})
	return stderr
}

func TestServeSDKClients(t *testing.T) {
	p := needSDK24(t)
	r := newRemoteConfig(t, "")
	stderr := startServe(t, r, "--listen", "127.0.0.1:0")
	url := r.listening(t, 1)[0]
	nodeArgs := []string{}
	if out, _ := exec.Command(p.node, "-e", "process.stdout.write(typeof WebSocket)").Output(); string(out) != "function" {
		nodeArgs = append(nodeArgs, "--experimental-websocket")
	}
	for _, profile := range []string{"ws", "http"} {
		t.Run(profile, func(t *testing.T) {
			args := append(append([]string{}, nodeArgs...), filepath.Join(p.dir, "remote.mjs"), "--agent", "router",
				"--profile", profile, "--url", url, "--cwd", t.TempDir(), "--timeout", "60000")
			cmd := exec.Command(p.node, args...)
			cmd.Env = append(os.Environ(), "ACP_SDK24_DIR="+p.prefix, "ACP_ROUTER_TOKEN="+r.token)
			var cerr bytes.Buffer
			cmd.Stderr = &cerr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("client: %v\n%s\n%s\nrouter: %s", err, out, cerr.String(), truncate(stderr.String(), 6000))
			}
			if !strings.Contains(string(out), `"load":{"history"`) {
				t.Errorf("summary: %s", out)
			}
		})
	}
	// acp-router check lists the listening router.
	out, _ := exec.Command(needRouter(t), "check", "--config", r.cfg).CombinedOutput()
	if !strings.Contains(string(out), url) {
		t.Errorf("check does not list %s:\n%s", url, out)
	}
	if strings.Contains(stderr.String(), r.token) {
		t.Errorf("the token is in the router's log")
	}
}

// acp-router connect: an editor (the test's) runs it as its agent and
// reaches the remote router's agent through it.
func TestConnect(t *testing.T) {
	skipShort(t, "runs acp-router serve")
	r := newRemoteConfig(t, "")
	startServe(t, r, "--listen", "127.0.0.1:0")
	url := r.listening(t, 1)[0]
	e := StartEditor(t, []string{needRouter(t), "connect", url}, withEnv("ACP_ROUTER_TOKEN="+r.token))
	e.Initialize(t, nil)
	sid := e.NewSession(t, t.TempDir())
	resp, err := e.Prompt(10*time.Second, sid, "say over the bridge")
	if err != nil || !strings.Contains(string(resp.Result), "end_turn") {
		t.Fatalf("prompt: %v %v", resp, err)
	}
	if got := e.Rec.Filter(func(m *Msg) bool {
		return m.Method == "session/update" && strings.Contains(string(m.Params), "over the bridge")
	}); len(got) != 1 {
		t.Errorf("%d updates with the text, want 1", len(got))
	}

	// A wrong token: connect says so, never printing it, and exits 1.
	cmd := exec.Command(needRouter(t), "connect", "--token", "acpr_wrong"+r.token, url)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "refused the token") || strings.Contains(string(out), r.token) {
		t.Errorf("wrong token: %v %q", err, out)
	}
}

// A non-loopback address without TLS is refused at start-up, before any
// agent starts, saying why.
func TestServeRefusesInsecure(t *testing.T) {
	skipShort(t, "runs the router")
	r := newRemoteConfig(t, "")
	for _, args := range [][]string{{"serve", "--listen", "0.0.0.0:0"}, {"serve", "--listen", "192.0.2.1:7420"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		out, err := exec.CommandContext(ctx, needRouter(t), append(args, "--config", r.cfg)...).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "requires TLS") {
			t.Errorf("%v: %v %s", args, err, out)
		}
	}
	// listen: in the config too, for a router an editor starts.
	r2 := newRemoteConfig(t, "listen: {address: '[::]:0'}\n")
	cmd := exec.Command(needRouter(t), "--config", r2.cfg)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "requires TLS") {
		t.Errorf("stdio with listen on [::]: %v %s", err, out)
	}
}

// Routers an editor starts with the same listen: port never collide: the
// second takes a free port, and both are found in the state directory.
func TestStdioRoutersListen(t *testing.T) {
	skipShort(t, "runs two routers")
	r := newRemoteConfig(t, "")
	// A port taken by a serve router: both editors' routers find it taken.
	startServe(t, r, "--listen", "127.0.0.1:0")
	port := r.listening(t, 1)[0]
	port = strings.TrimSuffix(port[strings.LastIndex(port, ":")+1:], "/acp")
	cfg := writeConfig(t, "version: 1\nstate_dir: "+yamlQuote(r.state)+"\nagents:\n"+fakeAgentYAML("fake", fakeOpts{})+"listen: {address: '127.0.0.1:"+port+"'}\n")
	e1 := StartRouter(t, cfg, nil)
	e2 := StartRouter(t, cfg, nil)
	urls := r.listening(t, 3)
	seen := map[string]bool{}
	for _, u := range urls {
		if seen[u] {
			t.Errorf("two routers record %s", u)
		}
		seen[u] = true
	}
	// Both still serve their editors.
	for _, e := range []*Editor{e1, e2} {
		e.Initialize(t, nil)
		sid := e.NewSession(t, t.TempDir())
		if _, err := e.Prompt(10*time.Second, sid, "say still here"); err != nil {
			t.Fatal(err)
		}
	}
	// A remote client reaches an editor's router while the editor uses it.
	for _, u := range urls {
		if strings.HasSuffix(u, ":"+port+"/acp") {
			continue // the serve router
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		c, _, err := websocket.Dial(ctx, strings.Replace(u, "http", "ws", 1), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + r.token}}})
		if err != nil {
			cancel()
			t.Fatalf("dial %s: %v", u, err)
		}
		call := func(id int, method string, params any) []byte {
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
			c.Write(ctx, websocket.MessageText, b)
			for {
				_, msg, err := c.Read(ctx)
				if err != nil {
					t.Fatalf("%s: %v", method, err)
				}
				if bytes.Contains(msg, []byte(fmt.Sprintf(`"id":%d,`, id))) || bytes.HasSuffix(msg, []byte(fmt.Sprintf(`"id":%d}`, id))) {
					return msg
				}
			}
		}
		call(1, "initialize", map[string]any{"protocolVersion": 1})
		var ns struct {
			Result struct{ SessionID string }
		}
		json.Unmarshal(call(2, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}), &ns)
		if got := call(3, "session/prompt", map[string]any{"sessionId": ns.Result.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "say remote"}}}); !bytes.Contains(got, []byte("end_turn")) {
			t.Errorf("remote prompt on %s: %s", u, got)
		}
		c.CloseNow()
		cancel()
	}
	out, _ := exec.Command(needRouter(t), "check", "--config", cfg).CombinedOutput()
	for u := range seen {
		if !strings.Contains(string(out), u) {
			t.Errorf("check does not list %s:\n%s", u, out)
		}
	}
}

// A policy that says who answers (answered_by: [alice]) holds through
// acp-router serve: the hub in front, the router reads who answered from
// the answer (Options.ClientMeta), alice's allow is taken and audited
// with her name. Without ClientMeta the router would take itself as
// editor-only and refuse the ask at once.
func TestServeAnsweredBy(t *testing.T) {
	skipShort(t, "runs acp-router serve")
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	r := newRemoteConfig(t, "audit: {file: "+yamlQuote(audit)+"}\npermissions:\n  default: allow\n  rules:\n    - id: edits-by-alice\n      decision: ask\n      when: {kind: [edit]}\n      answered_by: [alice]\n")
	startServe(t, r, "--listen", "127.0.0.1:0")
	url := strings.Replace(r.listening(t, 1)[0], "http", "ws", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + r.token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	send := func(v any) {
		b, _ := json.Marshal(v)
		c.Write(ctx, websocket.MessageText, b)
	}
	// until reads, answering permission requests with their allow_once
	// option, until the response to id; it returns the texts said.
	until := func(id int) (json.RawMessage, []string) {
		var texts []string
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v (texts %q)", err, texts)
			}
			var m struct {
				ID     json.RawMessage
				Method string
				Params struct {
					Options []struct{ OptionID, Kind string }
					Update  struct {
						Content struct{ Text string }
					}
				}
				Result json.RawMessage
			}
			json.Unmarshal(b, &m)
			switch {
			case m.Method == "session/request_permission":
				for _, o := range m.Params.Options {
					if o.Kind == "allow_once" {
						send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": o.OptionID}}})
					}
				}
			case m.Method == "session/update" && m.Params.Update.Content.Text != "":
				texts = append(texts, m.Params.Update.Content.Text)
			case m.Method == "" && string(m.ID) == strconv.Itoa(id):
				return b, texts
			}
		}
	}
	send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": 1}})
	until(1)
	send(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}})
	resp, _ := until(2)
	var ns struct{ Result struct{ SessionID string } }
	json.Unmarshal(resp, &ns)
	send(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": map[string]any{"sessionId": ns.Result.SessionID,
		"prompt": []any{map[string]any{"type": "text", "text": "permission"}}}})
	_, texts := until(3)
	if len(texts) == 0 || !strings.Contains(texts[len(texts)-1], `"selected"`) {
		t.Errorf("alice's allow was not taken: %q", texts)
	}
	b, _ := os.ReadFile(audit)
	if !strings.Contains(string(b), `"answeredBy":"alice"`) || strings.Contains(string(b), r.token) {
		t.Errorf("audit:\n%s", b)
	}
}

// TestServeRevoke: `acp-router token revoke alice` against a running
// `acp-router serve` ends what alice's token opened, within 2 s: her
// WebSocket is closed 1008 "token revoked", her HTTP connection's event
// stream ends with that reason, her `acp-router connect` bridge exits 1
// saying so; bob's connection goes on. alice created again is another
// token: revoked and created once more at once, her new connection ends
// all the same.
func TestServeRevoke(t *testing.T) {
	skipShort(t, "runs acp-router serve")
	r := newRemoteConfig(t, "")
	tokenCmd := func(args ...string) string {
		t.Helper()
		code, out, errOut := runRouterCmd(t, nil, append(append([]string{"token"}, args...), "--config", r.cfg)...)
		if code != 0 {
			t.Fatalf("token %v: exit %d: %s", args, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	bob := tokenCmd("create", "bob")
	stderr := startServe(t, r, "--listen", "127.0.0.1:0")
	url := r.listening(t, 1)[0]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	initMsg := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`
	ws := func(secret string) *websocket.Conn {
		t.Helper()
		c, _, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + secret}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		c.Write(ctx, websocket.MessageText, []byte(initMsg))
		if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), `"protocolVersion"`) {
			t.Fatalf("initialize: %s %v", b, err)
		}
		return c
	}
	// closed waits for the server to close c, and returns how.
	closed := func(c *websocket.Conn) <-chan error {
		ch := make(chan error, 1)
		go func() {
			for {
				if _, _, err := c.Read(ctx); err != nil {
					ch <- err
					return
				}
			}
		}()
		return ch
	}
	wantRevoked := func(who string, ch <-chan error, by <-chan time.Time) {
		t.Helper()
		select {
		case err := <-ch:
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "token revoked" {
				t.Errorf("%s ended with %v, want 1008 \"token revoked\"", who, err)
			}
		case <-by:
			t.Fatalf("%s still open 2 s after the revoke", who)
		}
	}

	aliceWS, bobWS := ws(r.token), ws(bob)
	aliceEnd := closed(aliceWS)
	// alice over HTTP, her connection's event stream open.
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(initMsg))
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ = http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Acp-Connection-Id", resp.Header.Get("Acp-Connection-Id"))
	sse, err := http.DefaultClient.Do(req)
	if err != nil || sse.StatusCode != 200 {
		t.Fatalf("event stream: %v %v", sse, err)
	}
	sseEnd := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(sse.Body)
		sse.Body.Close()
		sseEnd <- string(b)
	}()
	// alice through acp-router connect, as an editor runs it.
	bridge := exec.CommandContext(ctx, needRouter(t), "connect", "--token", r.token, url)
	stdin, _ := bridge.StdinPipe()
	stdout, _ := bridge.StdoutPipe()
	var bridgeErr bytes.Buffer
	bridge.Stderr = &bridgeErr
	if err := bridge.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	io.WriteString(stdin, initMsg+"\n")
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.Contains(line, `"protocolVersion"`) {
		t.Fatalf("connect: %q %v %s", line, err, bridgeErr.String())
	}
	bridgeEnd := make(chan error, 1)
	go func() { bridgeEnd <- bridge.Wait() }()

	revoked := time.Now()
	tokenCmd("revoke", "alice")
	by := time.After(2 * time.Second)
	wantRevoked("alice's WebSocket", aliceEnd, by)
	select {
	case b := <-sseEnd:
		if !strings.HasSuffix(b, ": closed: token revoked\n\n") {
			t.Errorf("alice's event stream ended with %q", b)
		}
	case <-by:
		t.Fatal("alice's event stream still open 2 s after the revoke")
	}
	select {
	case err := <-bridgeEnd:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(bridgeErr.String(), "1008 token revoked") {
			t.Errorf("connect: %v, stderr %q; want exit 1 saying 1008 token revoked", err, bridgeErr.String())
		}
	case <-by:
		t.Fatal("acp-router connect still running 2 s after the revoke")
	}
	t.Logf("alice's connections ended %v after the revoke", time.Since(revoked))

	// bob goes on.
	bobWS.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":`+strconv.Quote(t.TempDir())+`,"mcpServers":[]}}`))
	if _, b, err := bobWS.Read(ctx); err != nil || !strings.Contains(string(b), `"sessionId"`) {
		t.Errorf("bob after alice's revoke: %s %v", b, err)
	}

	// alice again: another token. Revoked and created once more at once,
	// her connection ends all the same.
	alice2 := tokenCmd("create", "alice")
	alice2End := closed(ws(alice2))
	tokenCmd("revoke", "alice")
	tokenCmd("create", "alice")
	wantRevoked("the second alice's WebSocket", alice2End, time.After(2*time.Second))
	if strings.Contains(stderr.String(), r.token) || strings.Contains(stderr.String(), alice2) {
		t.Errorf("a token is in the router's log")
	}
}
