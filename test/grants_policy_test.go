package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Approvals and grants across boundaries: what the user approved in one
// session, turn or tool call is applied to that one only.

// permissionAsked: the editor was asked (by the agent or by the router)
// about a request whose params mention path.
func permissionAsked(asks *permissionCounter, path string) bool {
	asks.mu.Lock()
	defer asks.mu.Unlock()
	for _, p := range asks.params {
		if strings.Contains(string(p), path) {
			return true
		}
	}
	return false
}

// TestPolicyChildToolCallIDsApart: a subagent session's tool call is not
// its parent's tool call of the same id. The guard kept the evidence of a
// top-level session and its children under the agent's tool call id alone:
// a child's tool call "t1" (an edit of ~/.bashrc, shown in the child's
// thread) became evidence of the parent's permission request about its
// own "t1" (an edit of notes.txt), so the user's "allow" on notes.txt
// approved the edit of ~/.bashrc too, and the agent's direct write of it
// in the same turn went through without asking.
func TestPolicyChildToolCallIDsApart(t *testing.T) {
	t.Parallel()
	cwd, home := t.TempDir(), t.TempDir()
	bashrc := filepath.Join(home, ".bashrc")
	notes := filepath.Join(cwd, "notes.txt")
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("alpha", fakeOpts{})}, subagentPolicy)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/read_text_file", readTextFile)
	e.Handle("fs/write_text_file", writeTextFile)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	e.Initialize(t, map[string]any{"fs": map[string]bool{"readTextFile": true, "writeTextFile": true}, "terminal": true, "subagents": map[string]any{}})
	sid := e.NewSession(t, cwd)

	script := strings.Join([]string{
		announce("child-1"),
		fmt.Sprintf(`as child-1 update {"sessionUpdate":"tool_call","toolCallId":"t1","title":"Edit .bashrc","kind":"edit","status":"pending","locations":[{"path":%q}]}`, bashrc),
		fmt.Sprintf(`permission-opts {"toolCall":{"toolCallId":"t1","title":"Edit notes.txt","kind":"edit","locations":[{"path":%q}]},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"},{"optionId":"r","name":"Reject","kind":"reject_once"}]}`, notes),
		"write " + bashrc + " evil",
	}, "\n")
	e.MustPrompt(t, sid, script, "end_turn")
	if !permissionAsked(asks, "wants to write "+bashrc) {
		t.Errorf("the user approved the parent's edit of notes.txt; the write of %s was not asked about (texts %q)", bashrc, e.Texts(sid))
	}
}

func init() {
	// permission-async JSON: session/request_permission with JSON's
	// toolCall and options, not waiting for the answer (the turn goes on,
	// and may end, while the editor has it). The request is written before
	// the script's next line, so before the turn's answer.
	fakeScriptExt["permission-async"] = func(a *fakeAgent, s *fakeSession, rest string) {
		var p map[string]json.RawMessage
		if err := json.Unmarshal([]byte(rest), &p); err != nil {
			a.say(s.id, "bad permission-async: "+err.Error())
			return
		}
		p["sessionId"] = mustJSON(s.id)
		ch := a.send("session/request_permission", p)
		a.mu.Lock()
		s.async = append(s.async, ch)
		a.mu.Unlock()
	}
	// await-async: waits for the answers to the session's permission-async
	// requests, in the order they were sent (in this turn or an earlier
	// one), and says each outcome.
	fakeScriptExt["await-async"] = func(a *fakeAgent, s *fakeSession, _ string) {
		a.mu.Lock()
		chs := s.async
		s.async = nil
		a.mu.Unlock()
		for _, ch := range chs {
			res, rerr := a.await("session/request_permission", ch)
			if rerr != nil {
				a.say(s.id, fmt.Sprintf("async permission error: %d %s", rerr.Code, rerr.Message))
				continue
			}
			var out struct {
				Outcome json.RawMessage `json:"outcome"`
			}
			_ = json.Unmarshal(res, &out)
			a.say(s.id, "async permission: "+string(out.Outcome))
		}
	}
}

// TestPolicyLateApprovalNotNextTurn: an approval covers the direct calls
// of the turn its request was made in. The agent asked about an edit of
// a file, then ended its turn without waiting; the router withdrew its
// request ($/cancel_request), but the editor's user answered "allow" on
// the dialog still shown once the next turn had begun. The approval was
// then kept as the new turn's (EndTurn had already run for it), and the
// agent's direct write of the file in that turn went through without
// asking.
func TestPolicyLateApprovalNotNextTurn(t *testing.T) {
	t.Parallel()
	cwd, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "notes.txt")
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/write_text_file", writeTextFile)
	release := make(chan struct{})
	var (
		mu       sync.Mutex
		routerAs int // the router's own asks (the direct write)
	)
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		if strings.Contains(string(p), "wants to write") {
			mu.Lock()
			routerAs++
			mu.Unlock()
			return choosePermission(p, "reject_once")
		}
		<-release // the user answers late: the next turn has begun
		return choosePermission(p, "allow_once")
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, fmt.Sprintf(`permission-async {"toolCall":{"toolCallId":"t1","title":"Edit notes.txt","kind":"edit","locations":[{"path":%q}]},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"},{"optionId":"r","name":"Reject","kind":"reject_once"}]}`, target)+"\nsay turn-1", "end_turn")
	go func() {
		e.WaitText(t, sid, "turn-2")
		close(release)
	}()
	// The write follows the agent's getting the user's late "allow": the
	// router recorded that answer before it relayed it.
	e.MustPrompt(t, sid, "say turn-2\nawait-async\nwrite "+target+" changed", "end_turn")
	texts := e.Texts(sid)
	if !slices.Contains(texts, `async permission: {"optionId":"a","outcome":"selected"}`) {
		t.Fatalf("the agent did not get the user's late allow before its write: texts %q", texts)
	}
	b, _ := os.ReadFile(target)
	mu.Lock()
	defer mu.Unlock()
	if string(b) == "changed" || routerAs != 1 {
		t.Errorf("an approval given after its turn ended covered the next turn's write of %s: content %q, the router asked %d times (texts %q)", target, b, routerAs, texts)
	}
}

// TestPolicyGrantCommandDirectory: the user's "always allow" of a command
// the router asked about in one directory ("claude wants to run: make (in
// DIR)") is not a grant of it in another: make there runs the Makefile it
// finds there. Before, a command's evidence left its directory out of
// what a grant (or an approval) covers, so the agent's terminal/create of
// make in a directory of its choosing ran without asking.
func TestPolicyGrantCommandDirectory(t *testing.T) {
	t.Parallel()
	cwd, elsewhere := t.TempDir(), t.TempDir()
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", func(p json.RawMessage) (any, *RPCError) {
		asks.mu.Lock()
		asks.params = append(asks.params, p)
		first := len(asks.params) == 1
		asks.mu.Unlock()
		if first {
			return choosePermission(p, "allow_always")
		}
		return choosePermission(p, "reject_once")
	})
	e.Handle("terminal/create", func(json.RawMessage) (any, *RPCError) {
		return map[string]any{"terminalId": "term-1"}, nil
	})
	e.Initialize(t, capsAll)
	sid := e.NewSession(t, cwd)
	e.MustPrompt(t, sid, "terminal-cwd "+cwd+" make", "end_turn")
	e.MustPrompt(t, sid, "terminal-cwd "+cwd+" make\nterminal-cwd "+elsewhere+" make", "end_turn")
	if asks.count() != 2 || !permissionAsked(asks, "(in "+elsewhere+")") {
		t.Errorf("the user always allowed make in %s; make in %s was asked %v (asks %d, texts %q)", cwd, elsewhere, permissionAsked(asks, elsewhere), asks.count(), e.Texts(sid))
	}
}
