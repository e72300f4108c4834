package test

// Peers that speak the newer protocol (issue 15, points 5 and 7): a small
// agent and a small client on @agentclientprotocol/sdk 2.4.0, kept in
// test/peers/sdk24 (the SDK ships no examples since 2.0). scripts/test.sh
// installs the versions test/peers/sdk24/package.json pins into the ignored
// .peers/sdk24. The agent sends notices, compaction, plan_update with a
// planId and named tool calls; the client sends session/new with a
// systemPrompt; both put W3C trace context in _meta of every message and log
// every message they send and receive. The client validates what it receives
// with the SDK's own schema, so a shape the router mangles fails the test.
//
// CI never skips these tests. Without Node.js and npm, a developer's run
// skips them (CI unset); ACP_E2E_SDK24 names another install prefix.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sdk24Peers is the install of the sdk24 peers' packages and how to run them.
type sdk24Peers struct {
	node, prefix, dir string // node binary; npm prefix; test/peers/sdk24
}

// needSDK24 checks the install against test/peers/sdk24/package.json.
func needSDK24(t testing.TB) sdk24Peers {
	t.Helper()
	skipShort(t, "runs the TypeScript SDK peers from npm")
	p := sdk24Peers{dir: filepath.Join(moduleRoot, "test", "peers", "sdk24"), prefix: os.Getenv("ACP_E2E_SDK24")}
	if p.prefix == "" {
		p.prefix = filepath.Join(moduleRoot, ".peers", "sdk24")
	}
	install := "scripts/test.sh (or, from the repository root: npm install --no-audit --no-fund --ignore-scripts --prefix .peers/sdk24 " +
		strings.Join(sdk24Deps(t, p.dir), " ") + ")"
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no Node.js here (%v): the sdk24 peers cannot run; CI runs them", err)
		}
		t.Fatalf("the sdk24 peers need Node.js: %v", err)
	}
	p.node = node
	for _, spec := range sdk24Deps(t, p.dir) {
		i := strings.LastIndex(spec, "@")
		if err := checkPackage(filepath.Join(p.prefix, "node_modules", filepath.FromSlash(spec[:i])), spec[:i], spec[i+1:]); err != nil {
			if _, npmErr := exec.LookPath("npm"); npmErr != nil && os.Getenv("CI") == "" {
				t.Skipf("the sdk24 peers are not installed (%v) and npm is missing: CI runs them", err)
			}
			t.Fatalf("the sdk24 peers need %s: %v\nInstall them as CI does, with %s.\n(ACP_E2E_SDK24 names another install prefix.)", spec, err, install)
		}
	}
	return p
}

// sdk24Deps returns the pinned packages of test/peers/sdk24/package.json as
// NAME@VERSION.
func sdk24Deps(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct{ Dependencies map[string]string }
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatalf("test/peers/sdk24/package.json: %v", err)
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(pkg.Dependencies)) {
		out = append(out, name+"@"+pkg.Dependencies[name])
	}
	return out
}

// agentYAML is the router's agents: entry for the sdk24 agent, logging
// what it receives to log.
func (p sdk24Peers) agentYAML(name, log string) string {
	return peerAgent{
		name: name, title: "sdk24 agent",
		argv: []string{p.node, filepath.Join(p.dir, "agent.mjs")},
		env:  map[string]string{"ACP_SDK24_DIR": p.prefix, "ACP_SDK24_LOG": log},
	}.yaml()
}

// sdk24Summary is the client's one line of output.
type sdk24Summary struct {
	SDK                 string          `json:"sdk"`
	Errors              []string        `json:"errors"`
	Rejected            []string        `json:"rejected"`
	Updates             []string        `json:"updates"`
	Texts               []string        `json:"texts"`
	Permissions         int             `json:"permissions"`
	Reads               int             `json:"reads"`
	SessionCapabilities json.RawMessage `json:"sessionCapabilities"`
	SessionID           string          `json:"sessionId"`
	NewSessionMeta      json.RawMessage `json:"newSessionMeta"`
	StopReason          string          `json:"stopReason"`
}

// runClient runs client.mjs with args in front of argv (the agent command)
// and returns its summary and exit code. cwd holds input.txt.
func (p sdk24Peers) runClient(t *testing.T, cwd string, args []string, argv ...string) (sdk24Summary, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	full := append([]string{filepath.Join(p.dir, "client.mjs"), "--cwd", cwd, "--timeout", "60000"}, args...)
	cmd := exec.CommandContext(ctx, p.node, append(append(full, "--"), argv...)...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "ACP_SDK24_DIR="+p.prefix)
	var stdout, stderr tailBuffer
	stdout.max, stderr.max = 1<<20, 1<<20
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("client stdout:\n%s\nclient stderr (with the router's log):\n%s", stdout.String(), truncate(stderr.String(), 20000))
		}
	})
	if ctx.Err() != nil {
		t.Fatalf("the sdk24 client did not finish within %v", peerTimeout)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sdk24 client: %v", err)
	}
	var s sdk24Summary
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout.String())), &s); err != nil {
		t.Fatalf("sdk24 client output is not its summary line: %v", err)
	}
	return s, code
}

// sdk24Workspace is a session cwd with the file the agent reads.
func sdk24Workspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "input.txt"), []byte("hello from the editor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sdk24TurnUpdates are the session/update kinds of the agent's turn, in order.
var sdk24TurnUpdates = []string{
	"agent_message_chunk", "notice", "compaction_update", "compaction_summary_chunk", "compaction_update",
	"plan_update", "tool_call", "tool_call_update", "tool_call", "tool_call_update", "plan_update", "agent_message_chunk",
}

// checkSDK24Turn checks a whole turn: every update arrived, in order, and
// passed the SDK's schema; the file was read, the permission answered, and
// the system prompt reached the agent whole.
func checkSDK24Turn(t *testing.T, s sdk24Summary, code int, choice, systemPrompt string) {
	t.Helper()
	if code != 0 || len(s.Errors) > 0 || len(s.Rejected) > 0 {
		t.Fatalf("client exit %d, errors %q, rejected by the SDK %q", code, s.Errors, s.Rejected)
	}
	if s.SDK != "2.4.0" {
		t.Errorf("client ran SDK %q", s.SDK)
	}
	if s.StopReason != "end_turn" {
		t.Errorf("stopReason %q", s.StopReason)
	}
	// The router announces its own slash commands first.
	if !slices.Equal(slices.DeleteFunc(slices.Clone(s.Updates), func(u string) bool { return u == "available_commands_update" }), sdk24TurnUpdates) {
		t.Errorf("updates %q, want %q", s.Updates, sdk24TurnUpdates)
	}
	if s.Permissions != 1 || s.Reads != 1 {
		t.Errorf("%d permission requests, %d reads; want 1 each", s.Permissions, s.Reads)
	}
	sum := sha256.Sum256([]byte(systemPrompt))
	wantSP := fmt.Sprintf(`{"mode":"append","chars":%d,"sha256":%q}`, len(systemPrompt), hex.EncodeToString(sum[:]))
	if len(s.Texts) != 2 {
		t.Fatalf("texts %q", s.Texts)
	}
	var said struct {
		Read, Permission string
		SystemPrompt     json.RawMessage
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(s.Texts[1], "sdk24 agent: ")), &said); err != nil {
		t.Fatalf("last text %q: %v", s.Texts[1], err)
	}
	if said.Read != "hello from the editor\n" || said.Permission != choice {
		t.Errorf("agent read %q and got permission %q; want the file and %q", said.Read, said.Permission, choice)
	}
	requireJSON(t, "the system prompt the agent received", said.SystemPrompt, wantSP)
}

// sdk24DefaultSystemPrompt is client.mjs's default --system-prompt.
const sdk24DefaultSystemPrompt = "You are the sdk24 test agent. Answer briefly."

// TestSDK24PeersDirect checks the sdk24 peers without the router, so that a
// failure through the router points at the router.
func TestSDK24PeersDirect(t *testing.T) {
	t.Parallel()
	p := needSDK24(t)
	dir := sdk24Workspace(t)
	s, code := p.runClient(t, dir, nil, "env", "ACP_SDK24_DIR="+p.prefix, p.node, filepath.Join(p.dir, "agent.mjs"))
	checkSDK24Turn(t, s, code, "allow", sdk24DefaultSystemPrompt)
	requireJSON(t, "sessionCapabilities", s.SessionCapabilities, `{"systemPrompt":{"mode":{"override":{}}},"title":{},"additionalDirectories":{},"close":{}}`)
}

// TestSDK24PeersThroughRouter: the sdk24 client drives the router, which runs
// the sdk24 agent. A whole turn in the newer shapes passes the SDK's schema at
// the client, for both permission answers, and the W3C trace context of every
// message reaches the other side intact, both ways (issue 15, point 5).
func TestSDK24PeersThroughRouter(t *testing.T) {
	t.Parallel()
	p := needSDK24(t)
	router := needRouter(t)
	for _, choice := range []string{"allow", "reject"} {
		t.Run(choice, func(t *testing.T) {
			t.Parallel()
			dir := sdk24Workspace(t)
			logs := t.TempDir()
			agentLog, clientLog := filepath.Join(logs, "agent.jsonl"), filepath.Join(logs, "client.jsonl")
			cfg := writeConfig(t, routerYAML(t, []string{p.agentYAML("sdk24", agentLog)}, "default: sdk24"))
			s, code := p.runClient(t, dir, []string{"--choice", choice, "--log", clientLog}, router, "--config", cfg, "--log-level", "debug")
			checkSDK24Turn(t, s, code, choice, sdk24DefaultSystemPrompt)
			requireTraceContext(t, clientLog, agentLog)
		})
	}
}

// TestSDK24RejectsMalformed shows that the client's check can fail: the
// agent's plan_update without its planId, forwarded by the router, is
// rejected by the SDK's schema and the client says so.
func TestSDK24RejectsMalformed(t *testing.T) {
	t.Parallel()
	p := needSDK24(t)
	router := needRouter(t)
	cfg := writeConfig(t, routerYAML(t, []string{p.agentYAML("sdk24", filepath.Join(t.TempDir(), "agent.jsonl"))}, "default: sdk24"))
	s, code := p.runClient(t, sdk24Workspace(t), []string{"--prompt", "MALFORMED"}, router, "--config", cfg)
	if code != 1 || len(s.Rejected) != 1 || !strings.Contains(s.Rejected[0], "Invalid params") ||
		!slices.ContainsFunc(s.Errors, func(e string) bool { return strings.Contains(e, "rejected by the SDK's schema") }) {
		t.Fatalf("client exit %d, rejected %q, errors %q: want the malformed plan_update rejected", code, s.Rejected, s.Errors)
	}
}

// traceLabels are the messages that must carry trace context through the
// router, by the label peer.mjs puts in tracestate: the sender's side, then
// what the message is.
var traceLabels = []string{
	// editor → agent: requests, and responses to the agent's requests.
	"client:initialize", "client:session-new", "client:prompt", "client:permission-response", "client:fs-read-response",
	// agent → editor: responses, notifications (params and update), requests.
	"agent:session-new-response", "agent:prompt-response", "agent:permission", "agent:fs-read",
	"agent:chunk-1", "agent:chunk-1/update", "agent:notice", "agent:notice/update",
	"agent:compaction-start", "agent:compaction-start/update", "agent:compaction-chunk/update",
	"agent:plan-1", "agent:plan-1/update", "agent:tool-read", "agent:tool-read/update",
	"agent:tool-edit/update", "agent:tool-edit-done/update", "agent:chunk-2/update",
}

// traceNotForwarded are trace contexts the router does not pass on by
// design: it answers initialize itself from all its agents (extras_test.go
// pins that an agent's initialize _meta stays behind).
var traceNotForwarded = []string{"agent:initialize-response"}

// requireTraceContext compares the trace context each peer sent with what
// the other received (their JSONL logs, written before the SDK parses): every
// traceparent, tracestate and baggage arrives byte for byte, on the message
// it was sent with (the label in tracestate), in params._meta,
// params.update._meta or result._meta.
func requireTraceContext(t *testing.T, clientLog, agentLog string) {
	t.Helper()
	sentC, recvC := traceContexts(t, clientLog)
	sentA, recvA := traceContexts(t, agentLog)
	for _, l := range traceLabels {
		sent := sentC
		if strings.HasPrefix(l, "agent:") {
			sent = sentA
		}
		if _, ok := sent[l]; !ok {
			t.Errorf("the peer sent no message labelled %s", l)
		}
	}
	for _, pair := range []struct {
		from, to   string
		sent, recv map[string]string
	}{{"client", "agent", sentC, recvA}, {"agent", "client", sentA, recvC}} {
		for l, want := range pair.sent {
			if slices.Contains(traceNotForwarded, l) {
				continue
			}
			if got, ok := pair.recv[l]; !ok {
				t.Errorf("%s sent trace context %s; the %s never received it", pair.from, l, pair.to)
			} else if got != want {
				t.Errorf("trace context %s: %s sent %s, %s received %s", l, pair.from, want, pair.to, got)
			}
		}
		for l := range pair.recv {
			if _, ok := pair.sent[l]; !ok {
				t.Errorf("the %s received trace context %s that the %s never sent", pair.to, l, pair.from)
			}
		}
		t.Logf("%d trace contexts from the %s to the %s compared", len(pair.recv), pair.from, pair.to)
	}
}

// traceContexts reads a peer's log and returns the trace contexts (the
// three W3C members of a _meta, as JSON) it sent and received, by label.
func traceContexts(t *testing.T, log string) (sent, recv map[string]string) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	sent, recv = map[string]string{}, map[string]string{}
	for line := range strings.Lines(string(b)) {
		var e struct {
			Dir string
			Msg struct {
				Params struct {
					Meta   json.RawMessage `json:"_meta"`
					Update struct {
						Meta json.RawMessage `json:"_meta"`
					} `json:"update"`
				} `json:"params"`
				Result struct {
					Meta json.RawMessage `json:"_meta"`
				} `json:"result"`
			}
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%s: %v", log, err)
		}
		m := sent
		if e.Dir == "recv" {
			m = recv
		}
		for _, raw := range []json.RawMessage{e.Msg.Params.Meta, e.Msg.Params.Update.Meta, e.Msg.Result.Meta} {
			var tc struct {
				Traceparent, Tracestate, Baggage *string
			}
			if len(raw) == 0 || json.Unmarshal(raw, &tc) != nil || tc.Tracestate == nil {
				continue
			}
			label, ok := strings.CutPrefix(strings.Split(*tc.Tracestate, ",")[0], "sdk24=")
			if !ok {
				continue
			}
			if _, dup := m[label]; dup {
				t.Errorf("%s: trace context %s %s twice", log, label, e.Dir)
			}
			m[label] = string(mustJSON(tc))
		}
	}
	return sent, recv
}

// TestSDK24LargeSystemPrompt: a session/new whose systemPrompt is 10 MiB
// (under the router's 64 MiB line bound, acp/stream.go, and the SDK's
// 32 MiB one) reaches the agent whole, and another session of the same
// agent finishes a whole turn meanwhile: no crash, no stall.
func TestSDK24LargeSystemPrompt(t *testing.T) {
	t.Parallel()
	p := needSDK24(t)
	cfg := writeConfig(t, routerYAML(t, []string{p.agentYAML("sdk24", filepath.Join(t.TempDir(), "agent.jsonl"))}, "default: sdk24"))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{"fs": map[string]any{"readTextFile": true}})
	dirA, dirB := sdk24Workspace(t), sdk24Workspace(t)
	sidA := e.NewSession(t, dirA)

	prompt := strings.Repeat("p", 10<<20)
	sum := sha256.Sum256([]byte(prompt))
	type answer struct {
		m   *Msg
		err error
		d   time.Duration
	}
	big := make(chan answer, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		m, err := e.Request(ctx, "session/new", map[string]any{
			"cwd": dirB, "mcpServers": []any{},
			"systemPrompt": map[string]any{"mode": "append", "content": []any{map[string]any{"type": "text", "text": prompt}}},
		})
		big <- answer{m, err, time.Since(start)}
	}()
	m, err := e.Prompt(waitTimeout, sidA, "Hello")
	if err != nil {
		t.Fatalf("session A's turn while a 10 MiB session/new is under way: %v", err)
	}
	requireJSON(t, "session A's prompt result", jsonPath(m.Result, "stopReason"), `"end_turn"`)
	t.Logf("session A's turn took %v", time.Since(start).Round(time.Millisecond))

	a := <-big
	if a.err != nil {
		t.Fatalf("10 MiB session/new: %v", a.err)
	}
	if a.m.Error != nil {
		t.Fatalf("10 MiB session/new refused: %v", a.m.Error)
	}
	t.Logf("10 MiB session/new answered in %v", a.d.Round(time.Millisecond))
	requireJSON(t, "the system prompt the agent received", jsonPath(a.m.Result, "_meta", "sdk24", "systemPrompt"),
		fmt.Sprintf(`{"mode":"append","chars":%d,"sha256":%q}`, len(prompt), hex.EncodeToString(sum[:])))
	sidB := jsonString(a.m.Result, "sessionId")
	m, err = e.Prompt(waitTimeout, sidB, "Hello")
	if err != nil || m.Error != nil {
		t.Fatalf("a turn in the 10 MiB session: %v %v", err, m)
	}
}

// TestGoSDKClientSDK24Agent: the acp-go-sdk v0.13.0 example client (schema
// 0.13, before notices, compaction, plan ids and tool names) drives the
// router in front of the sdk24 agent, and the turn ends normally: the newer
// shapes reach an older client without breaking it. Its cwd has no
// input.txt, so the agent's read fails and the turn goes on.
func TestGoSDKClientSDK24Agent(t *testing.T) {
	t.Parallel()
	p := needSDK24(t)
	_, client := goSDKPeers(t)
	router := needRouter(t)
	cfg := writeConfig(t, routerYAML(t, []string{p.agentYAML("sdk24", filepath.Join(t.TempDir(), "agent.jsonl"))}, "default: sdk24"))
	out := runSDKClient(t, client, "1", router, "--config", cfg)
	for _, want := range []string{`"permission":"allow"`, sdkClientDone} {
		if !strings.Contains(out, want) {
			t.Errorf("client output lacks %q", want)
		}
	}
}
