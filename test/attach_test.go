package test

// Session attach end to end (issue 30 point 2, RFD #533): a router an
// editor started over stdio that also listens; a second client, another
// process (acp-router connect over WebSocket with a token), attaches to
// the editor's session as controller and answers the agent's permission
// request; the editor is told it was resolved (permission_resolved, and
// its copy withdrawn with $/cancel_request) and the audit names the
// second client's token; the router lives on for the second client after
// the editor closes, and stops when it goes.

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/audit/audittest"
)

func TestAttachEndToEnd(t *testing.T) {
	skipShort(t, "runs a router and a bridge")
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	r := newRemoteConfig(t, "listen: {address: '127.0.0.1:0'}\naudit: {file: "+yamlQuote(auditFile)+"}\npermissions:\n  default: ask\n")
	ed := StartRouter(t, r.cfg, nil)
	ed.Initialize(t, nil)
	sid := ed.NewSession(t, t.TempDir())
	url := r.listening(t, 1)[0]
	phone := StartEditor(t, []string{needRouter(t), "connect", "--token", r.token, url}, withoutResultSchema())
	phone.Initialize(t, nil)
	res := phone.MustCall(t, "session/attach", map[string]any{"sessionId": sid, "role": "controller", "historyPolicy": "none"})
	if !strings.Contains(string(res), `"role":"controller"`) || !strings.Contains(string(res), `"name":"editor"`) {
		t.Errorf("attach answer = %s", res)
	}

	release := make(chan struct{})
	ed.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		<-release // the editor's user is away: the phone answers first
		return AllowFirst(p)
	})
	phone.Handle("session/request_permission", RejectFirst)
	m, err := ed.Prompt(waitTimeout, sid, "permission\nsay after")
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	requireStop(t, m, "end_turn")
	resolved := ed.Rec.WaitFor(t, waitTimeout, "permission_resolved", func(m *Msg) bool { return m.Update() == "permission_resolved" })
	var p struct {
		Update struct {
			ChosenOptionID string `json:"chosenOptionId"`
			ResolvedBy     struct {
				Name string `json:"name"`
			} `json:"resolvedBy"`
		} `json:"update"`
	}
	json.Unmarshal(resolved.Params, &p)
	if p.Update.ResolvedBy.Name != "alice" || p.Update.ChosenOptionID != fakeRejectOption {
		t.Errorf("permission_resolved = %s", resolved.Params)
	}
	ed.Rec.WaitFor(t, waitTimeout, "the editor's copy withdrawn", func(m *Msg) bool { return m.Method == "$/cancel_request" })
	if got := ed.Texts(sid); len(got) != 2 || !strings.Contains(got[0], "reject") {
		t.Errorf("the agent heard %q, want the phone's reject", got)
	}
	// The audit names the token of the client that answered.
	answered := 0
	for _, rec := range audittest.ReadLines(t, auditFile) {
		if rec["answeredBy"] != nil {
			answered++
			if rec["answeredBy"] != "alice" || rec["userChoice"] != "reject_once" {
				t.Errorf("audit record of the answer: %v", rec)
			}
		}
	}
	if answered != 1 {
		t.Errorf("%d audit records name who answered, want 1", answered)
	}
	phone.WaitText(t, sid, "after")
	if got, want := phone.Texts(sid), ed.Texts(sid); !slices.Equal(got, want) {
		t.Errorf("the phone's stream %q, the editor's %q", got, want)
	}

	// The editor closes: the router lives on for the phone.
	ed.CloseStdin()
	time.Sleep(300 * time.Millisecond)
	phone.MustPrompt(t, sid, "say still here", "end_turn")
	if _, _, exited := ed.Wait(0); exited {
		t.Fatal("the router stopped with a remote client still attached")
	}
	phone.CloseStdin()
	if code, _, ok := ed.Wait(20 * time.Second); !ok || code != 0 {
		t.Errorf("the router after its last client went: exited %v, code %d", ok, code)
	}
}

// TestRevokeAttached: a client attached to the editor's session as
// controller, an ask pending at both; `acp-router token revoke alice`
// ends alice's bridge (exit 1, 1008 token revoked) within 2 s, the hub
// detaches her as any client that goes, and the ask stays with the stdio
// editor, who answers it: the turn ends, the audit names the editor, and
// the editor, which holds no token, goes on.
func TestRevokeAttached(t *testing.T) {
	skipShort(t, "runs a router and a bridge")
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	r := newRemoteConfig(t, "listen: {address: '127.0.0.1:0'}\naudit: {file: "+yamlQuote(auditFile)+"}\npermissions:\n  default: ask\n")
	ed := StartRouter(t, r.cfg, nil)
	ed.Initialize(t, nil)
	sid := ed.NewSession(t, t.TempDir())
	url := r.listening(t, 1)[0]
	phone := StartEditor(t, []string{needRouter(t), "connect", "--token", r.token, url}, withoutResultSchema())
	phone.Initialize(t, nil)
	phone.MustCall(t, "session/attach", map[string]any{"sessionId": sid, "role": "controller", "historyPolicy": "none"})

	asked := make(chan struct{}, 2)
	release := make(chan struct{})
	ed.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		asked <- struct{}{}
		<-release // the editor's user answers only once alice is gone
		return AllowFirst(p)
	})
	phone.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		asked <- struct{}{}
		<-t.Context().Done() // alice never answers: her answer is pending when she is revoked
		return nil, nil
	})
	type result struct {
		m   *Msg
		err error
	}
	turn := make(chan result, 1)
	go func() {
		m, err := ed.Prompt(waitTimeout, sid, "permission\nsay after")
		turn <- result{m, err}
	}()
	for range 2 {
		select {
		case <-asked:
		case <-time.After(waitTimeout):
			t.Fatal("the ask did not reach both controllers")
		}
	}
	revoked := time.Now()
	if code, _, errOut := runRouterCmd(t, nil, "token", "revoke", "alice", "--config", r.cfg); code != 0 {
		t.Fatalf("token revoke: exit %d: %s", code, errOut)
	}
	code, _, exited := phone.Wait(2 * time.Second)
	if !exited || code != 1 || !strings.Contains(phone.Stderr(), "1008 token revoked") {
		t.Fatalf("alice's bridge 2 s after the revoke: exited %v, code %d, stderr %q", exited, code, phone.Stderr())
	}
	t.Logf("alice's bridge ended %v after the revoke", time.Since(revoked))
	close(release)
	res := <-turn
	if res.err != nil {
		t.Fatal(res.err)
	}
	requireStop(t, res.m, "end_turn")
	if got := ed.Texts(sid); len(got) != 2 || !strings.Contains(got[0], "allow") {
		t.Errorf("the agent heard %q, want the editor's allow", got)
	}
	answered := 0
	for _, rec := range audittest.ReadLines(t, auditFile) {
		if by := rec["answeredBy"]; by != nil {
			answered++
			if by != "editor" || rec["userChoice"] != "allow_once" {
				t.Errorf("audit record of the answer: %v", rec)
			}
		}
	}
	if answered != 1 {
		t.Errorf("%d audit records name who answered, want the editor's 1", answered)
	}
	ed.MustPrompt(t, sid, "say still here", "end_turn")
}
