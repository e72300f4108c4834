//go:build linux

package test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSandboxNetwork: with a deny rule on a host and sandbox.mode
// enforce, the agent runs in a network namespace of its own, pointed at
// the router's egress proxy by HTTPS_PROXY; the proxy (reached here
// through its socket, which the agent's mounts name) refuses the denied
// host with the rule's name and audits it; check prints what each agent
// reaches and fails on a deny rule that names an agent's model API.
func TestSandboxNetwork(t *testing.T) {
	skipShort(t, "the kernel confines an agent (-short keeps TestSandboxConfinesAgent)")
	t.Parallel()
	pidFile := t.TempDir() + "/pid"
	extra := []string{"network: {model_hosts: [api.example.com], loopback: [11434]}"}
	cfg, auditFile := sandboxYAML(t, "enforce", fakeOpts{PidFile: pidFile}, extra, "~/.ssh/**")
	data, _ := os.ReadFile(cfg)
	data = []byte(strings.Replace(string(data), "rules:\n", "rules:\n    - {id: no-paste, decision: deny, when: {domains: [pastebin.com]}}\n", 1))
	must(t, os.WriteFile(cfg, data, 0o644))

	code, out, errOut := runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "    reachable: every host but pastebin.com (rule no-paste); loopback 127.0.0.1:11434; names resolved by the router") {
		t.Errorf("check: exit %d:\n%s%s", code, out, errOut)
	}

	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	e.NewSession(t, t.TempDir())
	pid := strconv.Itoa(readPidFile(t, pidFile))
	mine, _ := os.Readlink("/proc/self/ns/net")
	theirs, err := os.Readlink("/proc/" + pid + "/ns/net")
	if err != nil || theirs == mine {
		t.Errorf("the agent's network namespace %q (%v) is the router's %q", theirs, err, mine)
	}
	environ, _ := os.ReadFile("/proc/" + pid + "/environ")
	if !strings.Contains(string(environ), "\x00HTTPS_PROXY=http://127.0.0.1:") || !strings.Contains(string(environ), "\x00NODE_USE_ENV_PROXY=1\x00") {
		t.Errorf("the agent is not pointed at its proxy: %q", environ)
	}
	mounts, _ := os.ReadFile("/proc/" + pid + "/mountinfo")
	var sock string
	for _, f := range strings.Fields(string(mounts)) {
		if strings.Contains(f, "/acp-router-egress-") {
			sock = f + "/proxy.sock"
		}
	}
	if sock == "" {
		t.Fatalf("the agent's mounts name no egress socket:\n%s", mounts)
	}
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT pastebin.com:443 HTTP/1.1\r\nHost: pastebin.com:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("CONNECT pastebin.com: %+v, %v", resp, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		found := false
		for _, r := range readAudit(t, auditFile) {
			if r.Method == "acp-router/net_refused" && r.Agent == "claude" && r.Decision == "deny" && r.rule() == "no-paste" &&
				strings.Contains(string(r.Evidence), `"domain":"pastebin.com"`) {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refusal is not audited: %+v", readAudit(t, auditFile))
		}
		time.Sleep(50 * time.Millisecond)
	}

	data = []byte(strings.Replace(string(data), "domains: [pastebin.com]", "domains: [\"*.example.com\"]", 1))
	must(t, os.WriteFile(cfg, data, 0o644))
	code, _, errOut = runRouterCmd(t, nil, "check", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, `deny rule "no-paste" denies api.example.com, the model API of agent "claude"`) {
		t.Errorf("check with a rule on the agent's model API: exit %d, %s", code, errOut)
	}
}
