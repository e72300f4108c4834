package test

// Helpers shared by the tests: JSON comparison, processes and pid files,
// fake agent logs, config files.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// JSON helpers: always compare structurally.

func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func requireJSON(t testing.TB, what string, got []byte, want string) {
	t.Helper()
	if !jsonEqual(got, []byte(want)) {
		t.Fatalf("%s = %s, want %s", what, truncate(string(got), 2000), want)
	}
}

// jsonPath extracts a value at a path of object keys ("" when missing).
func jsonPath(raw []byte, keys ...string) json.RawMessage {
	cur := json.RawMessage(raw)
	for _, k := range keys {
		var obj map[string]json.RawMessage
		if json.Unmarshal(cur, &obj) != nil {
			return nil
		}
		cur = obj[k]
		if cur == nil {
			return nil
		}
	}
	return cur
}

func jsonString(raw []byte, keys ...string) string {
	var s string
	_ = json.Unmarshal(jsonPath(raw, keys...), &s)
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... (%d bytes)", len(s))
}

// Processes and files.

// processAlive reports whether pid is a live process. A zombie counts as
// dead: it has exited and only waits to be reaped (by a PID 1 that may never
// do so in a container).
// sigIgnored reports whether process pid ignores sig (SigIgn of
// /proc/PID/status, Linux).
func sigIgnored(pid int, sig syscall.Signal) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			if err != nil {
				return false, err
			}
			return mask&(1<<(uint(sig)-1)) != 0, nil
		}
	}
	return false, fmt.Errorf("no SigIgn in /proc/%d/status", pid)
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if rerr != nil {
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		if st := stat[i+2]; st == 'Z' || st == 'X' {
			return false
		}
	}
	return true
}

// waitDead waits up to grace for pid to be gone.
func waitDead(pid int, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for {
		if !processAlive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readPidFile waits for a pid file written by a fake agent.
func readPidFile(t testing.TB, path string) int {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s after %v", path, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agentLog returns the lines of a fake agent's logFile.
func agentLog(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// waitAgentLog waits until a line of the fake agent's log satisfies pred.
func waitAgentLog(t testing.TB, path string, timeout time.Duration, what string, pred func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, l := range agentLog(path) {
			if pred(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake agent log %s: no %s within %v; log:\n%s", path, what, timeout, strings.Join(agentLog(path), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Config files.

// fakeAgentYAML renders one agents: entry running the fake agent with opts,
// plus extra YAML keys (e.g. "stall_timeout: 2s").
func fakeAgentYAML(name string, opts fakeOpts, extra ...string) string {
	if opts.Name == "" {
		opts.Name = name
	}
	if !opts.NoSchema && opts.Schema == "" && schemaInstalled() {
		opts.Schema = schemaPath()
	}
	js := string(mustJSON(opts))
	if strings.Contains(js, "$") {
		panic("fake agent options must not contain $ (the config expands ${ENV}): " + js)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n", name)
	fmt.Fprintf(&b, "    command: %s\n", yamlQuote(testBin))
	fmt.Fprintf(&b, "    env: {%s: %s}\n", envFakeAgent, yamlQuote(js))
	for _, x := range extra {
		fmt.Fprintf(&b, "    %s\n", x)
	}
	return b.String()
}

// yamlQuote single-quotes s for YAML.
func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// routerYAML renders a whole config: the agent entries and the routing block
// (its lines indented by two spaces), with state_dir in a temp dir.
func routerYAML(t testing.TB, agents []string, routing ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\n")
	fmt.Fprintf(&b, "state_dir: %s\n", yamlQuote(t.TempDir()))
	b.WriteString("agents:\n")
	for _, a := range agents {
		b.WriteString(a)
	}
	if len(routing) > 0 {
		b.WriteString("routing:\n")
		for _, r := range routing {
			fmt.Fprintf(&b, "  %s\n", r)
		}
	}
	return b.String()
}

// cwdRule is a routing rule line sending sessions under dir to agent.
func cwdRule(dir, agent string) string {
	return fmt.Sprintf("  - {when: {cwd: [%s]}, agent: %s}", yamlQuote(dir+"/**"), agent)
}

// writeConfig writes a config file in a temp dir and returns its path.
func writeConfig(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeAgentEnv is the environment entry that makes the test binary a fake
// agent, for the harness self-tests that run it directly (no router).
func fakeAgentEnv(opts fakeOpts) string { return envFakeAgent + "=" + string(mustJSON(opts)) }
