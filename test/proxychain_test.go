package test

// The router as a proxy in an ACP proxy chain (rfds/proxy-chains; issue 15
// point 4). No conductor is installable here, so the scripted editor plays
// one: it starts the router, sends proxy/initialize instead of initialize,
// and plays the successor behind proxy/successor with the message shapes
// of the schema (ProxySuccessorRequest/Notification: {method, params},
// results and errors unchanged).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// successorDouble is the successor agent as the conductor delivers it: it
// answers the proxy/successor requests the router sends and sends its own
// messages wrapped in proxy/successor.
type successorDouble struct {
	e *Editor

	mu       sync.Mutex
	methods  []string // inner methods received, in order
	sessions int
	outcomes []string // what the router answered to its permission requests
}

func newSuccessorDouble(e *Editor) *successorDouble {
	d := &successorDouble{e: e}
	e.Handle("proxy/successor", d.handle)
	return d
}

func (d *successorDouble) received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.methods...)
}

// handle answers one wrapped request of the router.
func (d *successorDouble) handle(p json.RawMessage) (any, *RPCError) {
	var env struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(p, &env); err != nil || env.Method == "" {
		return nil, &RPCError{Code: -32602, Message: "proxy/successor without method"}
	}
	d.mu.Lock()
	d.methods = append(d.methods, env.Method)
	d.mu.Unlock()
	switch env.Method {
	case "initialize":
		return map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{},
			"agentInfo": map[string]any{"name": "successor-double", "version": "1"}, "authMethods": []any{}}, nil
	case "session/new":
		d.mu.Lock()
		d.sessions++
		n := d.sessions
		d.mu.Unlock()
		return map[string]any{"sessionId": fmt.Sprintf("succ-%d", n)}, nil
	case "session/prompt":
		return d.prompt(env.Params)
	}
	return nil, &RPCError{Code: -32601, Message: "Method not found"}
}

// notify sends a wrapped session/update of the successor.
func (d *successorDouble) notify(sid string, update map[string]any) {
	d.e.Notify("proxy/successor", map[string]any{
		"method": "session/update",
		"params": map[string]any{"sessionId": sid, "update": update},
		"_meta":  map[string]any{"hop": "local"}, // the envelope's own: not delivered
	})
}

func (d *successorDouble) say(sid, text string) {
	d.notify(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": text}})
}

// prompt: a chunk; with "edit PATH", a tool call and a permission request
// for it (its outcome is said back); then end_turn.
func (d *successorDouble) prompt(p json.RawMessage) (any, *RPCError) {
	var req struct {
		SessionID string `json:"sessionId"`
		Prompt    []struct {
			Text string `json:"text"`
		} `json:"prompt"`
	}
	json.Unmarshal(p, &req)
	sid := req.SessionID
	d.say(sid, "hello from the successor")
	if len(req.Prompt) > 0 {
		if path, ok := strings.CutPrefix(req.Prompt[0].Text, "edit "); ok {
			d.notify(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "tc-1", "title": "Write " + path,
				"kind": "edit", "status": "pending", "locations": []any{map[string]any{"path": path}}})
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			res, rerr := d.e.Call(ctx, "proxy/successor", map[string]any{
				"method": "session/request_permission",
				"params": map[string]any{
					"sessionId": sid,
					"toolCall":  map[string]any{"toolCallId": "tc-1", "title": "Write " + path, "kind": "edit", "locations": []any{map[string]any{"path": path}}},
					"options": []any{
						map[string]any{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
						map[string]any{"optionId": "no", "name": "Reject", "kind": "reject_once"},
					},
				},
			})
			outcome := string(res)
			if rerr != nil {
				outcome = "error: " + rerr.Message
			}
			d.mu.Lock()
			d.outcomes = append(d.outcomes, outcome)
			d.mu.Unlock()
			d.say(sid, "permission: "+outcome)
		}
	}
	return map[string]any{"stopReason": "end_turn"}, nil
}

func proxyInitParams() map[string]any {
	return map[string]any{
		"protocolVersion":    1,
		"clientCapabilities": capsAll,
		"clientInfo":         map[string]any{"name": "conductor-double", "version": "1"},
	}
}

// TestProxyChain: started by a conductor with proxy/initialize, the router
// initializes its successor through proxy/successor before answering;
// sessions go to the successor (the default in a chain), its updates come
// back to the conductor as the router's own, and its permission request is
// decided by the router's policy: denied, the successor gets the reject
// option, the conductor a failed tool call, and the audit log the decision.
// proxy/successor before proxy/initialize is refused, and proxy/initialize
// never reaches an agent.
func TestProxyChain(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, secretsPolicy)
	e := StartRouter(t, cfg, nil)
	d := newSuccessorDouble(e)
	asks := &permissionCounter{}
	e.Handle("session/request_permission", asks.handler("allow_once"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// Before proxy/initialize the router is no proxy.
	_, rerr := e.Call(ctx, "proxy/successor", map[string]any{"method": "session/update", "params": map[string]any{}})
	if rerr == nil || rerr.Code != -32601 || !strings.Contains(rerr.Message, "proxy/initialize") {
		t.Fatalf("proxy/successor before proxy/initialize: %v; want -32601 naming proxy/initialize", rerr)
	}

	initMsg, err := e.Request(ctx, "proxy/initialize", proxyInitParams())
	if err != nil || initMsg.Error != nil {
		t.Fatalf("proxy/initialize: %v %v", err, initMsg.Error)
	}
	var init struct {
		ProtocolVersion int `json:"protocolVersion"`
	}
	if json.Unmarshal(initMsg.Result, &init) != nil || init.ProtocolVersion != 1 {
		t.Fatalf("proxy/initialize result %s", initMsg.Result)
	}
	// The successor was initialized, through the conductor, before the
	// answer (schema InitializeProxyRequest).
	wrapped := e.Rec.Filter(func(m *Msg) bool {
		return m.IsRequest() && m.Method == "proxy/successor" && strings.Contains(string(m.Params), `"method":"initialize"`)
	})
	if len(wrapped) != 1 || wrapped[0].Seq > initMsg.Seq {
		t.Fatalf("wrapped initialize requests %v; want one before the proxy/initialize answer (#%d)", wrapped, initMsg.Seq)
	}
	requireJSON(t, "wrapped initialize params", mustJSON(jsonField(t, wrapped[0].Params, "params")["protocolVersion"]), `1`)

	sid := e.NewSession(t, cwd)
	if sid != "succ-1" {
		t.Fatalf("session id %q: want the successor's succ-1", sid)
	}
	e.MustPrompt(t, sid, "edit "+cwd+"/.env", "end_turn")
	texts := strings.Join(e.Texts(sid), "\n")
	if !strings.Contains(texts, "hello from the successor") {
		t.Errorf("conductor got chunks %q", texts)
	}
	d.mu.Lock()
	outcomes := append([]string(nil), d.outcomes...)
	d.mu.Unlock()
	if len(outcomes) != 1 {
		t.Fatalf("permission outcomes %v", outcomes)
	}
	requireJSON(t, "the successor's permission answer", []byte(outcomes[0]), `{"outcome":{"outcome":"selected","optionId":"no"}}`)
	if n := asks.count(); n != 0 {
		t.Errorf("the conductor was asked %d times; the policy decided", n)
	}
	failed := e.Rec.Filter(func(m *Msg) bool {
		return m.Method == "session/update" && m.Update() == "tool_call_update" && strings.Contains(string(m.Params), `"status":"failed"`)
	})
	if len(failed) != 1 || !strings.Contains(string(failed[0].Params), "no-secrets") {
		t.Errorf("failed tool call updates to the conductor: %v", failed)
	}
	recs := readAudit(t, auditFile)
	if len(recs) != 1 || recs[0].Decision != "deny" || recs[0].rule() != "no-secrets" || recs[0].Agent != "successor" ||
		recs[0].Method != "session/request_permission" || recs[0].Session != sid {
		t.Errorf("audit %+v", recs)
	}

	// Nothing but proxy/successor went to the successor, and no
	// proxy/initialize to anyone; the envelope's _meta stayed on its hop.
	for _, m := range d.received() {
		if strings.HasPrefix(m, "proxy/") {
			t.Errorf("the successor got %s", m)
		}
	}
	for _, m := range e.Rec.Filter((*Msg).IsRequest) {
		if m.Method != "proxy/successor" && m.Method != "session/request_permission" {
			t.Errorf("the router sent the conductor %s", m.Method)
		}
	}
	if strings.Contains(texts, "hop") {
		t.Errorf("the envelope's _meta was delivered: %q", texts)
	}
	// The routed agent stays reachable beside the successor: one turn on
	// claude through its slash command.
	e.MustPrompt(t, sid, "/claude say hi from claude", "end_turn")
	if !strings.Contains(strings.Join(e.Texts(sid), "\n"), "hi from claude") {
		t.Errorf("one-turn command on claude: %q", e.Texts(sid))
	}
}

// TestProxyChainSuccessorGone: a proxy/successor notification while the
// successor is not connected (here: stopped when idle) is dropped with a
// log line; sessions on other agents keep working, and the successor's own
// session reconnects on its next use.
func TestProxyChainSuccessorGone(t *testing.T) {
	skipShort(t, "waits for the successor's idle stop")
	t.Parallel()
	cwd, dirB := t.TempDir(), t.TempDir()
	y := routerYAML(t, []string{"  - name: successor\n    idle_timeout: 500ms\n", fakeAgentYAML("claude", fakeOpts{})},
		"rules:", cwdRule(dirB, "claude"))
	e := StartRouter(t, writeConfig(t, y), nil)
	d := newSuccessorDouble(e)
	e.MustCall(t, "proxy/initialize", proxyInitParams())
	sid := e.NewSession(t, cwd)
	sidB := e.NewSession(t, dirB)
	e.MustPrompt(t, sid, "hi", "end_turn")

	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(e.Stderr(), "agent idle; stopped") {
		if time.Now().After(deadline) {
			t.Fatalf("the successor was not stopped when idle; router log:\n%s", e.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.say(sid, "late")
	for !strings.Contains(e.Stderr(), "proxy/successor notification dropped") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for the dropped notification; router log:\n%s", e.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.MustPrompt(t, sidB, "say still here", "end_turn")
	e.WaitText(t, sidB, "still here")
	e.MustPrompt(t, sid, "again", "end_turn")
	if n := strings.Count(strings.Join(d.received(), ","), "initialize"); n != 2 {
		t.Errorf("successor initialized %d times; want 2 (reconnected): %v", n, d.received())
	}
	for _, txt := range e.Texts(sid) {
		if txt == "late" {
			t.Errorf("the dropped notification reached the conductor")
		}
	}
}

// jsonField decodes the object field name of obj.
func jsonField(t *testing.T, obj json.RawMessage, name string) map[string]any {
	t.Helper()
	var m map[string]json.RawMessage
	var out map[string]any
	if json.Unmarshal(obj, &m) != nil || json.Unmarshal(m[name], &out) != nil {
		t.Fatalf("%s: no object %q", obj, name)
	}
	return out
}
