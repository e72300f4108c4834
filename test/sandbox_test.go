//go:build linux

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// End-to-end tests of kernel enforcement (issue 29, DESIGN §6 "Kernel
// enforcement"): the real router starts a fake agent under its profile.

// sandboxYAML is a policy config with one fake agent, sandbox.mode and a
// deny rule on paths; it returns the config and audit file.
func sandboxYAML(t *testing.T, mode string, opts fakeOpts, agentExtra []string, denyPaths ...string) (string, string) {
	t.Helper()
	q := make([]string, len(denyPaths))
	for i, p := range denyPaths {
		q[i] = yamlQuote(p)
	}
	perm := fmt.Sprintf("rules:\n  - id: no-secrets\n    decision: deny\n    when: {paths: [%s]}\n", strings.Join(q, ", "))
	cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", opts, agentExtra...)}, perm)
	data, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, append(data, "sandbox: {mode: "+mode+"}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, auditFile
}

// TestSandboxConfinesAgent: with sandbox.mode enforce, the agent process
// runs in its own mount namespace with the denied file masked (empty), with
// no_new_privs and under Landlock, while the router still reads the file;
// the start is audited with the profile's hash.
func TestSandboxConfinesAgent(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	secret := filepath.Join(cwd, ".env")
	if err := os.WriteFile(secret, []byte("SECRET=1"), 0o600); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	cfg, auditFile := sandboxYAML(t, "enforce", fakeOpts{PidFile: pidFile}, nil, secret)
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	e.NewSession(t, cwd)
	pid := readPidFile(t, pidFile)

	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil || !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Errorf("the agent runs without no_new_privs: %v\n%s", err, status)
	}
	mounts, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if !strings.Contains(string(mounts), " "+secret+" ") {
		t.Errorf("the agent's mounts do not mask %s:\n%s", secret, mounts)
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/root" + secret); err != nil || len(b) != 0 {
		t.Errorf("the agent's view of %s: %q, %v; want it empty", secret, b, err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET=1" {
		t.Errorf("the router's view of %s: %q", secret, b)
	}
	var start *auditRecord
	for _, r := range readAuditAll(t, auditFile) {
		if r.Method == "acp-router/agent_start" {
			start = &r
		}
	}
	if start == nil || start.Agent != "claude" || start.Decision != "allow" || !strings.Contains(string(start.Evidence), `"confined":true`) ||
		!strings.Contains(string(start.Evidence), `"profile":"sha256:`) || !strings.Contains(string(start.Evidence), "hidden by no-secrets") {
		t.Errorf("agent start record: %+v", start)
	}
}

// TestSandboxEnforceRefuses: in enforce mode, an agent whose profile
// cannot hold (here a deny rule on its own state) is not started, the
// editor gets -32603 saying why and how to fix it, and the refusal is
// audited; in best-effort mode the same agent starts unconfined.
func TestSandboxEnforceRefuses(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	state := t.TempDir()
	extra := []string{"state_dirs: [" + yamlQuote(state) + "]"}
	cfg, auditFile := sandboxYAML(t, "enforce", fakeOpts{}, extra, state+"/**")
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, rpcErr := e.Call(ctx, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
	if rpcErr == nil || rpcErr.Code != -32603 || !strings.Contains(rpcErr.Message, "sandbox.mode is enforce") ||
		!strings.Contains(rpcErr.Message, "sandbox.mode: best-effort") {
		t.Fatalf("session/new: %+v, want -32603 naming the sandbox and the fix", rpcErr)
	}
	refused := false
	for _, r := range readAuditAll(t, auditFile) {
		if r.Method == "acp-router/agent_start" && r.Decision == "deny" && r.rule() == "acp-router:sandbox" {
			refused = true
		}
	}
	if !refused {
		t.Errorf("the refused start is not audited: %+v", readAuditAll(t, auditFile))
	}

	pidFile := filepath.Join(t.TempDir(), "pid")
	cfg, _ = sandboxYAML(t, "best-effort", fakeOpts{PidFile: pidFile}, extra, state+"/**")
	e = StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	e.NewSession(t, t.TempDir())
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(readPidFile(t, pidFile)) + "/status")
	if !strings.Contains(string(status), "NoNewPrivs:\t0") {
		t.Errorf("best-effort: the agent should run unconfined:\n%s", status)
	}
}

// TestSandboxCheck: check prints the sandbox mode, whether this kernel can
// enforce it and each agent's profile (hidden by which rule, writable,
// the rules held on the wire only), and fails on a deny rule that names
// an agent's own state.
func TestSandboxCheck(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	extra := []string{"state_dirs: [" + yamlQuote(state) + "]"}
	cfg, _ := sandboxYAML(t, "best-effort", fakeOpts{}, extra, "~/.ssh/**")
	data, _ := os.ReadFile(cfg)
	data = []byte(strings.Replace(string(data), "rules:\n", "rules:\n    - {id: ask-git, decision: deny, when: {title: ['git *'], paths: ['~/.aws/**']}}\n", 1))
	must(t, os.WriteFile(cfg, data, 0o644))
	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("check exit %d: %s%s", code, out, errOut)
	}
	for _, want := range []string{
		"sandbox: best-effort   (config " + cfg + ":",
		"this kernel can enforce it",
		"  agent claude: profile sha256:",
		"    hidden: ~/.ssh/**   (rule no-secrets, user layer)",
		"    writable: ",
		state,
		"    wire only: rule ask-git: its when: also has title, which the kernel cannot see",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	cfg, _ = sandboxYAML(t, "enforce", fakeOpts{}, extra, state+"/**")
	code, _, errOut = runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, `deny rule "no-secrets" hides `+state+` or files in it, the state of agent "claude"`) {
		t.Errorf("check with a rule on the agent's state: exit %d, %s", code, errOut)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSandboxOnTheWire (issue 29 req. 8, the draft ACP RFD "Sandbox
// Capability and Policy"): an editor reads what the router enforces in
// agentCapabilities.sandbox; the acp.sandbox option is listed with the
// agent's own options, which still reach the agent; a client that
// requires a sandbox the router holds gets it, one that requires more
// (network isolation, or any sandbox when the router's is off) gets
// sandbox_policy_unsatisfiable with the capability.
func TestSandboxOnTheWire(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	cwd := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "agent.log")
	own := json.RawMessage(`{"configOptions":[{"id":"mode","name":"Mode","category":"mode","type":"select","currentValue":"ask","options":[{"value":"ask","name":"Ask"},{"value":"yolo","name":"YOLO"}]}]}`)
	cfg, _ := sandboxYAML(t, "enforce", fakeOpts{LogFile: logFile, SessionResult: own}, nil, filepath.Join(cwd, ".env"))
	e := StartRouter(t, cfg, nil)
	res := e.Initialize(t, capsAll)
	var caps struct {
		Sandbox *struct {
			Mode       string
			Guarantees map[string]any
			Meta       map[string]map[string]any `json:"_meta"`
		}
	}
	json.Unmarshal(jsonPath(res, "agentCapabilities"), &caps)
	if caps.Sandbox == nil || caps.Sandbox.Mode != "custom" || fmt.Sprint(caps.Sandbox.Guarantees) != "map[fsIsolation:workspace netIsolation:none processCaps:true]" ||
		caps.Sandbox.Meta["acp-router"]["mode"] != "enforce" {
		t.Fatalf("agentCapabilities.sandbox: %s", jsonPath(res, "agentCapabilities", "sandbox"))
	}

	res = e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	sid := jsonString(res, "sessionId")
	var ids []string
	var list []json.RawMessage
	json.Unmarshal(jsonPath(res, "configOptions"), &list)
	for _, o := range list {
		ids = append(ids, jsonString(o, "id"))
	}
	if fmt.Sprint(ids) != "[agent mode acp.sandbox]" || jsonString(option(t, jsonPath(res, "configOptions"), "acp.sandbox"), "currentValue") != "any" {
		t.Fatalf("options: %s", jsonPath(res, "configOptions"))
	}
	res = e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "acp.sandbox", "value": "sandboxed"})
	if v := jsonString(option(t, jsonPath(res, "configOptions"), "acp.sandbox"), "currentValue"); v != "sandboxed" {
		t.Errorf("acp.sandbox after requiring a sandbox: %q", v)
	}
	res = e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "acp.sandbox",
		"value": map[string]any{"require": "sandboxed", "minFsIsolation": "workspace"}})
	if v := jsonString(option(t, jsonPath(res, "configOptions"), "acp.sandbox"), "currentValue"); v != "sandboxed" {
		t.Errorf("acp.sandbox after requiring a sandbox in the RFD's object form: %q", v)
	}
	// The agent's own option still goes to the agent; acp.sandbox never did.
	e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "yolo"})
	waitAgentLog(t, logFile, waitTimeout, "set_config_option on the agent", func(l string) bool { return l == "session/set_config_option" })
	if n := countLines(logFile, "session/set_config_option"); n != 1 {
		t.Errorf("the agent got %d set_config_option, want 1 (mode only)", n)
	}
	e.MustPrompt(t, sid, "say hi", "end_turn")

	unsatisfiable := func(e *Editor, sid string, value any, mode string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, rpcErr := e.Call(ctx, "session/set_config_option", map[string]any{"sessionId": sid, "configId": "acp.sandbox", "value": value})
		var data struct {
			Code    string
			Sandbox struct{ Mode string }
		}
		if rpcErr != nil {
			json.Unmarshal(rpcErr.Data, &data)
		}
		if rpcErr == nil || rpcErr.Code != -32602 || data.Code != "sandbox_policy_unsatisfiable" || data.Sandbox.Mode != mode {
			t.Errorf("acp.sandbox %v: %v, want sandbox_policy_unsatisfiable with the %s capability", value, rpcErr, mode)
		}
	}
	unsatisfiable(e, sid, map[string]any{"require": "sandboxed", "minNetIsolation": "restricted"}, "custom")
	if reach := fmt.Sprint(caps.Sandbox.Meta["acp-router"]["network"]); !strings.Contains(reach, "claude:every host (the policy names none the kernel holds)") {
		t.Errorf("_meta network without a host rule: %s", reach)
	}

	// A deny rule on a host: the agent runs behind the egress proxy, the
	// network is restricted, and a session that requires it gets it.
	cfg, _ = sandboxYAML(t, "enforce", fakeOpts{}, nil, filepath.Join(cwd, ".env"))
	data, _ := os.ReadFile(cfg)
	data = []byte(strings.Replace(string(data), "rules:\n", "rules:\n    - {id: no-paste, decision: deny, when: {domains: [pastebin.com]}}\n", 1))
	must(t, os.WriteFile(cfg, data, 0o644))
	e = StartRouter(t, cfg, nil)
	res = e.Initialize(t, capsAll)
	caps.Sandbox = nil
	json.Unmarshal(jsonPath(res, "agentCapabilities"), &caps)
	if caps.Sandbox == nil || fmt.Sprint(caps.Sandbox.Guarantees) != "map[fsIsolation:workspace netIsolation:restricted processCaps:true]" ||
		!strings.Contains(fmt.Sprint(caps.Sandbox.Meta["acp-router"]["network"]), "claude:every host but pastebin.com (rule no-paste)") {
		t.Fatalf("agentCapabilities.sandbox with a deny rule on a host: %s", jsonPath(res, "agentCapabilities", "sandbox"))
	}
	res = e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	e.MustCall(t, "session/set_config_option", map[string]any{"sessionId": jsonString(res, "sessionId"), "configId": "acp.sandbox",
		"value": map[string]any{"require": "sandboxed", "minNetIsolation": "restricted"}})

	// The sandbox off: host advertised, no option listed, a requirement
	// refused.
	cfg, _ = sandboxYAML(t, "off", fakeOpts{}, nil, filepath.Join(cwd, ".env"))
	e = StartRouter(t, cfg, nil)
	res = e.Initialize(t, capsAll)
	requireJSON(t, "sandbox off", jsonPath(res, "agentCapabilities", "sandbox"), `{"mode":"host","guarantees":{"fsIsolation":"none","netIsolation":"none","processCaps":false}}`)
	res = e.MustCall(t, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	if strings.Contains(string(jsonPath(res, "configOptions")), "acp.sandbox") {
		t.Errorf("sandbox off: acp.sandbox listed: %s", jsonPath(res, "configOptions"))
	}
	unsatisfiable(e, jsonString(res, "sessionId"), "sandboxed", "host")
}

// TestSandboxCreditsKernel (issue 29 req. 5): an agent's own test run
// (its Bash tool asking first) in a project holding a symlink to a
// secret is asked about with the sandbox off, and allowed without asking
// once the agent runs confined with the secret masked: the audit record
// names what the kernel holds. A command naming the secret is still
// denied by the rule.
func TestSandboxCreditsKernel(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	cwd, secrets := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(secrets, "credentials"), []byte("key"), 0o600))
	must(t, os.Symlink(filepath.Join(secrets, "credentials"), filepath.Join(cwd, "creds")))
	must(t, os.WriteFile(filepath.Join(cwd, "test_app.py"), nil, 0o644))
	perm := fmt.Sprintf(`default: ask
rules:
  - id: no-secrets
    decision: deny
    when: {paths: [%s]}
  - id: project-files
    decision: allow
    when: {paths: ["${roots}/**"]}
  - id: test-runners
    decision: allow
    when: {command: ["pytest **", "cat **"]}
`, yamlQuote(secrets+"/**"))
	pytest := `permission-tool {"kind":"execute","title":"pytest -q","rawInput":{"command":"pytest -q"}}`
	catSecret := `permission-tool {"kind":"execute","title":"cat creds","rawInput":{"command":"cat creds"}}`
	for _, mode := range []string{"off", "enforce"} {
		cfg, auditFile := policyYAML(t, []string{fakeAgentYAML("claude", fakeOpts{})}, perm)
		data, _ := os.ReadFile(cfg)
		must(t, os.WriteFile(cfg, append(data, "sandbox: {mode: "+mode+"}\n"...), 0o644))
		e := StartRouter(t, cfg, nil)
		asks := &permissionCounter{}
		e.Handle("session/request_permission", asks.handler("reject_once"))
		e.Initialize(t, capsAll)
		sid := e.NewSession(t, cwd)
		e.MustPrompt(t, sid, pytest+"\n"+catSecret, "end_turn")
		// The agent's own tool reports a write the sandbox refused.
		e.MustPrompt(t, sid, `update {"sessionUpdate":"tool_call","toolCallId":"w1","kind":"execute","title":"touch /etc/x","status":"in_progress"}`+"\n"+
			`update {"sessionUpdate":"tool_call_update","toolCallId":"w1","status":"failed","content":[{"type":"content","content":{"type":"text","text":"touch: cannot touch '/etc/x': Permission denied"}}]}`, "end_turn")
		wantAsks := map[string]int{"off": 1, "enforce": 0}[mode]
		if asks.count() != wantAsks {
			t.Errorf("sandbox %s: the editor was asked %d times, want %d", mode, asks.count(), wantAsks)
		}
		var pyRec, catRec *auditRecord
		for _, r := range readAudit(t, auditFile) {
			switch {
			case r.Method == "session/request_permission" && strings.Contains(string(r.Evidence), `"command":["pytest","-q"]`):
				pyRec = &r
			case r.Method == "session/request_permission" && strings.Contains(string(r.Evidence), `"command":["cat","creds"]`):
				catRec = &r
			}
		}
		if catRec == nil || catRec.Decision != "deny" || catRec.rule() != "no-secrets" ||
			mode == "enforce" && !strings.Contains(string(catRec.Evidence), `"kernel":[{"rule":"no-secrets","path":"`+cwd+`/creds","decides":true}]`) {
			t.Errorf("sandbox %s: cat creds: %+v, want denied by no-secrets", mode, catRec)
		}
		if mode == "off" {
			// policy explain --sandbox says the same, and which guard holds.
			explain := func(args ...string) string {
				t.Helper()
				code, out, errOut := runRouterCmd(t, nil, append([]string{"policy", "explain", "--config", cfg, "--agent", "claude", "--cwd", cwd}, args...)...)
				if code != 0 {
					t.Fatalf("policy explain %v: exit %d: %s%s", args, code, out, errOut)
				}
				return out
			}
			for _, c := range []struct {
				args []string
				want []string
			}{
				{[]string{"session/request_permission", "execute", "pytest -q"}, []string{"decision: ASK   by no-secrets"}},
				{[]string{"--sandbox", "session/request_permission", "execute", "pytest -q"}, []string{"sandbox:  decided as for agent claude's own tools", "decision: ALLOW",
					"held by the kernel: " + cwd + "/creds -> " + secrets + "/credentials matches no-secrets below this directory"}},
				{[]string{"--sandbox", "session/request_permission", "execute", "cat creds"}, []string{"decision: DENY   by no-secrets", "held by the rule and the kernel"}},
				{[]string{"--sandbox", "terminal/create", "pytest -q"}, []string{"terminal/create is carried out by the editor, outside the agent's sandbox", "decision: ASK   by no-secrets"}},
			} {
				out := explain(c.args...)
				for _, w := range c.want {
					if !strings.Contains(out, w) {
						t.Errorf("policy explain %v lacks %q:\n%s", c.args, w, out)
					}
				}
			}
		}
		var refused *auditRecord
		for deadline := time.Now().Add(10 * time.Second); refused == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for _, r := range readAudit(t, auditFile) {
				if r.Method == "acp-router/sandbox_refused" {
					refused = &r
				}
			}
			if mode == "off" {
				break
			}
		}
		switch {
		case mode == "off" && refused != nil:
			t.Errorf("sandbox off: a refusal noted: %+v", refused)
		case mode == "enforce" && (refused == nil || refused.Session != sid || refused.Agent != "claude" || refused.ToolCallID != "w1" ||
			string(refused.Evidence) != `[{"errno":"EACCES","path":"/etc/x","reported":"tool result"}]`):
			t.Errorf("sandbox enforce: the refused write: %+v", refused)
		}
		if mode == "enforce" && (pyRec == nil || pyRec.Decision != "allow" || !strings.Contains(string(pyRec.Evidence), `"kernel":[{"rule":"no-secrets","path":"`+cwd+`/creds -\u003e `+secrets+`/credentials"}]`)) {
			t.Errorf("sandbox enforce: pytest -q: %+v, want allowed with the kernel's hold recorded", pyRec)
		}
	}
}
