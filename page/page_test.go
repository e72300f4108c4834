package page

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acp-router/acp-router/remote"
)

const (
	secret  = "s3cret-alice"
	phoneOf = "s3cret-bob"   // a token that sees only its own sessions
	watcher = "s3cret-carol" // a token that may only observe
	revoked = "s3cret-revoked"
)

var errUnknown = errors.New("unknown or revoked token")

func auth(r *http.Request) (remote.Identity, error) {
	tok := r.URL.Query().Get("token")
	if c, err := r.Cookie(remote.TokenCookie); err == nil && tok == "" {
		tok = c.Value
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok = strings.TrimPrefix(h, "Bearer ")
	}
	switch tok {
	case secret:
		return remote.Identity{Name: "alice", Role: "controller", AllSessions: true}, nil
	case phoneOf:
		return remote.Identity{Name: "bob", Role: "controller"}, nil
	case watcher:
		return remote.Identity{Name: "carol", Role: "observer", AllSessions: true}, nil
	}
	return remote.Identity{}, errUnknown
}

// startPage serves the page and /acp (serve as the hub) on a loopback
// HTTP server.
func startPage(t *testing.T, auditFile string, serve remote.ServeFunc) string {
	t.Helper()
	srv := remote.NewServer(remote.Options{Serve: serve, Auth: auth,
		Page: New(Options{AuditFile: auditFile}), SignIn: SignIn})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return hs.URL
}

func get(t *testing.T, url, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// The page and its API are behind /acp's authentication, every answer
// carries the CSP, and the token given in the URL comes back as a cookie
// on / that alone authenticates the page, its script and its API.
func TestServedAuthenticated(t *testing.T) {
	base := startPage(t, "", func(ctx context.Context, c remote.Conn, id remote.Identity) error { return nil })
	for _, path := range []string{"/", "/page/app.js", "/page/app.css", "/api/audit"} {
		resp, body := get(t, base+path, secret)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != CSP ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s with a token: %d %v", path, resp.StatusCode, resp.Header)
		}
		if path == "/" && (strings.Contains(body, "<script>") || strings.Contains(body, "style=")) {
			t.Errorf("the page has inline script or style, which the CSP forbids: %s", body)
		}
		for _, tok := range []string{"", revoked} {
			resp, body := get(t, base+path, tok)
			if resp.StatusCode != 401 {
				t.Errorf("%s token %q: %d, want 401", path, tok, resp.StatusCode)
			}
			if path == "/" && (!strings.Contains(body, "Not signed in") || strings.Contains(body, "<script")) {
				t.Errorf("sign-in page: %s", body)
			}
			if path != "/" && body != "" {
				t.Errorf("%s token %q: body %q, want none", path, tok, body)
			}
		}
	}
	if !strings.Contains(CSP, "default-src 'self'") || strings.Contains(CSP, "unsafe") {
		t.Errorf("CSP %q", CSP)
	}
	// The first URL: ?token= sets the cookie on /, which is then enough.
	resp, _ := get(t, base+"/?token="+secret, "")
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == remote.TokenCookie {
			ck = c
		}
	}
	if ck == nil || ck.Path != "/" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie %+v", ck)
	}
	req, _ := http.NewRequest("GET", base+"/api/audit", nil)
	req.AddCookie(&http.Cookie{Name: remote.TokenCookie, Value: ck.Value})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the API with the cookie alone: %v %v", resp, err)
	}
	// A token that sees only its own sessions does not read the audit.
	if resp, _ := get(t, base+"/api/audit", phoneOf); resp.StatusCode != 403 {
		t.Errorf("audit for an own-sessions token: %d, want 403", resp.StatusCode)
	}
	if resp, _ := get(t, base+"/elsewhere", secret); resp.StatusCode != 404 {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
}

func writeAudit(t *testing.T, recs ...map[string]any) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "audit.jsonl")
	var b strings.Builder
	for _, r := range recs {
		line, _ := json.Marshal(r)
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString("not json\n")
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestReadAudit(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rule := func(s string) *string { return &s }
	var recs []map[string]any
	for i := range 10 {
		agent := "claude"
		if i%2 == 1 {
			agent = "codex"
		}
		recs = append(recs, map[string]any{"time": now.Add(-time.Duration(10-i) * time.Hour), "agent": agent, "session": "s1",
			"decision": "allow", "rule": rule("r1")})
	}
	recs = append(recs, map[string]any{"time": now.Add(-48 * time.Hour), "agent": "claude", "session": "s2", "decision": "deny", "rule": rule("r2")},
		map[string]any{"time": now.Add(-time.Minute), "agent": "claude", "session": "s3", "parentSession": "s2", "decision": "ask", "rule": nil})
	f := writeAudit(t, recs...)
	res, err := ReadAudit(f, Filter{Agent: "claude", Limit: 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	ns := func(p AuditPage) (out []int) {
		for _, e := range p.Entries {
			out = append(out, e.N)
		}
		return out
	}
	if got := ns(res); len(got) != 3 || got[0] != 11 || got[1] != 10 || got[2] != 8 || res.Next != 8 || res.Total != 7 {
		t.Errorf("first page %v next %d total %d", got, res.Next, res.Total)
	}
	if res.Counts["r1"] != 10 || res.Counts[""] != 1 || res.Counts["r2"] != 0 {
		t.Errorf("counts over the last day %v", res.Counts)
	}
	res, _ = ReadAudit(f, Filter{Agent: "claude", Limit: 3, Before: 8}, now)
	if got := ns(res); len(got) != 3 || got[0] != 6 || got[2] != 2 || res.Next != 2 {
		t.Errorf("second page %v next %d", got, res.Next)
	}
	res, _ = ReadAudit(f, Filter{Agent: "claude", Limit: 3, Before: 2}, now)
	if got := ns(res); len(got) != 1 || got[0] != 0 || res.Next != 0 {
		t.Errorf("last page %v next %d", got, res.Next)
	}
	// A session takes its subagents' decisions; rule and effect filter.
	res, _ = ReadAudit(f, Filter{Session: "s2"}, now)
	if got := ns(res); len(got) != 2 {
		t.Errorf("session s2: %v", got)
	}
	res, _ = ReadAudit(f, Filter{Rule: "r2", Effect: "deny"}, now)
	if got := ns(res); len(got) != 1 || got[0] != 10 {
		t.Errorf("rule r2 deny: %v", got)
	}
	if res, err := ReadAudit(filepath.Join(t.TempDir(), "none"), Filter{}, now); err != nil || len(res.Entries) != 0 {
		t.Errorf("no log yet: %v %v", res, err)
	}
}

// hubFake is a scripted hub for the page: one session, whose agent
// streams what say holds when a client attaches, and asks a permission
// of a controller.
type hubFake struct {
	say []string
	ask bool
	// history entries (alternating user and agent messages "h-N") are
	// sent first on attach; big is one agent message of that many bytes;
	// burst that many agent updates, each its own message; dropFirst ends
	// the first connection after its first attach.
	history, big, burst int
	chunks              int // agent_message_chunk updates of 64 bytes after the burst
	dropFirst           bool
	conns               int
	waiting             bool // an ask is unanswered
	mu                  sync.Mutex
	answers             chan json.RawMessage
	roles               []string
	// updates are sent on attach after the tool call t1; script is
	// written to every connection as it comes (the test's live turn).
	updates  []map[string]any
	script   chan any
	detached int
}

// live is the hub's list of live sessions: s1 on claude.
func (h *hubFake) live() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	state := "idle"
	if h.waiting {
		state = "waiting"
	}
	return []any{map[string]any{"sessionId": "s1", "state": state, "clients": 1, "agent": "claude", "agentTitle": "Claude Code"}}
}

func (h *hubFake) serve(ctx context.Context, c remote.Conn, id remote.Identity) error {
	write := func(v any) { b, _ := json.Marshal(v); c.Write(ctx, b) }
	update := func(u map[string]any) {
		write(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1", "update": u}})
	}
	// The hub pushes the live list to a watching client at each change.
	changed := func() {
		write(map[string]any{"jsonrpc": "2.0", "method": "_acp-router/sessions_changed", "params": map[string]any{"sessions": h.live()}})
	}
	chunk := func(s string) {
		update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": s}})
	}
	if h.script != nil {
		go func() {
			for {
				select {
				case v := <-h.script:
					write(v)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		msg, err := c.Read(ctx)
		if err != nil {
			return nil
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Role string `json:"role"`
			} `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		json.Unmarshal(msg, &m)
		reply := func(res any) { write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": res}) }
		switch m.Method {
		case "initialize":
			reply(map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}})
		case "session/list":
			reply(map[string]any{"sessions": []any{map[string]any{"sessionId": "s1", "cwd": "/work/project", "title": "Fix the tests"}}})
		case "session/detach":
			h.mu.Lock()
			h.detached++
			h.mu.Unlock()
			reply(map[string]any{})
		case "_acp-router/watch":
			reply(map[string]any{"sessions": h.live(), "chunkIntervalMs": 16})
		case "session/attach":
			h.mu.Lock()
			h.roles = append(h.roles, m.Params.Role)
			h.mu.Unlock()
			reply(map[string]any{"sessionId": "s1", "role": m.Params.Role, "connectedClients": []any{}, "history": []any{}})
			for i := range h.history {
				kind := "user_message_chunk"
				if i%2 == 1 {
					kind = "agent_message_chunk"
				}
				update(map[string]any{"sessionUpdate": kind, "content": map[string]any{"type": "text", "text": fmt.Sprintf("h-%d", i)}})
			}
			for i := range h.burst {
				update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": fmt.Sprintf("b-%d", i), "title": fmt.Sprintf("burst-%d", i), "kind": "read", "status": "completed"})
			}
			for i := range h.chunks {
				head := fmt.Sprintf("#%06d ", i)
				chunk(head + strings.Repeat("u", 64-len(head)))
			}
			if h.big > 0 {
				update(map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]any{"type": "text", "text": "big follows"}})
				chunk(strings.Repeat("x", h.big-len("big-end")) + "big-end")
			}
			h.mu.Lock()
			h.conns++
			drop := h.dropFirst && h.conns == 1
			h.mu.Unlock()
			if drop {
				c.Close(errors.New("dropped by the test"))
				return nil
			}
			update(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": "code"})
			update(map[string]any{"sessionUpdate": "plan", "entries": []any{map[string]any{"content": "run the tests", "status": "in_progress", "priority": "high"}}})
			for _, s := range h.say {
				chunk(s)
			}
			update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit main.go", "kind": "edit", "status": "pending",
				"content": []any{map[string]any{"type": "diff", "path": "/work/project/main.go", "oldText": "a := 1", "newText": "a := 2"}}})
			for _, u := range h.updates {
				update(u)
			}
			if h.ask && m.Params.Role == "controller" {
				h.mu.Lock()
				h.waiting = true
				h.mu.Unlock()
				changed()
				write(map[string]any{"jsonrpc": "2.0", "id": "ask-1", "method": "session/request_permission", "params": map[string]any{
					"sessionId": "s1", "toolCall": map[string]any{"toolCallId": "t2", "title": "Run go test", "kind": "execute", "rawInput": map[string]any{"command": "go test ./..."}},
					"options": []any{map[string]any{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
						map[string]any{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}})
			}
		case "":
			if string(m.ID) == `"ask-1"` {
				h.mu.Lock()
				h.waiting = false
				h.mu.Unlock()
				changed()
				h.answers <- m.Result
				update(map[string]any{"sessionUpdate": "permission_resolved", "toolCallId": "t2", "outcome": "selected", "chosenOptionId": "allow",
					"resolvedBy": map[string]any{"name": id.Name}})
				update(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Run go test", "kind": "execute", "status": "completed"})
				chunk("tests pass")
			} else if len(m.ID) > 0 {
				select {
				case h.answers <- m.Result:
				default:
				}
			}
		default:
			if len(m.ID) > 0 {
				write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "not here"}})
			}
		}
	}
}

// /api/audit says where each rule it names is in the policy in force.
func TestAuditWhere(t *testing.T) {
	rule := "r1"
	f := writeAudit(t, map[string]any{"time": time.Now(), "decision": "ask", "rule": rule}, map[string]any{"time": time.Now(), "decision": "ask", "rule": "gone"})
	srv := remote.NewServer(remote.Options{Serve: func(context.Context, remote.Conn, remote.Identity) error { return nil }, Auth: auth,
		Page: New(Options{AuditFile: f, RuleAt: func(id string) string {
			if id == rule {
				return "/etc/acp/policy.yaml:3:7"
			}
			return ""
		}}), SignIn: SignIn})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	_, body := get(t, hs.URL+"/api/audit", secret)
	var res AuditPage
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Where) != 1 || res.Where[rule] != "/etc/acp/policy.yaml:3:7" || len(res.Entries) != 2 {
		t.Errorf("where %v, %d entries", res.Where, len(res.Entries))
	}
}
