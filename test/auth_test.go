package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeLogin is the fake agent's "terminal login": run with the arguments
// `fake-login CODE` it prints them and exits with CODE, as an agent's own
// login command would after talking to the user.
func fakeLogin(args []string) (int, bool) {
	i := slices.Index(args, "fake-login")
	if i < 0 {
		return 0, false
	}
	fmt.Println("fake login:", strings.Join(args, " "))
	code := 0
	if i+1 < len(args) {
		code, _ = strconv.Atoi(args[i+1])
	}
	return code, true
}

func initResultWithAuth(methods string, logout bool) json.RawMessage {
	auth := `{}`
	if logout {
		auth = `{"logout":{}}`
	}
	return json.RawMessage(fmt.Sprintf(`{"protocolVersion":1,"agentCapabilities":{"auth":%s},"authMethods":%s,"agentInfo":{"name":"fake","version":"1"}}`, auth, methods))
}

func countLines(path, line string) int {
	n := 0
	for _, l := range agentLog(path) {
		if l == line {
			n++
		}
	}
	return n
}

// TestAuthentication pins DESIGN §5/§7 auth: the merged authMethods (routing
// default agent first, ids rewritten only on collision, terminal methods
// re-launching the router's login, hidden agents left out), authenticate
// routed to the owning agent with its own id and replayed after that agent
// restarts, terminal methods refused with -32602, and logout sent to every
// agent that supports it.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	alphaLog, betaLog, gammaLog := filepath.Join(dir, "alpha.log"), filepath.Join(dir, "beta.log"), filepath.Join(dir, "gamma.log")
	cfg := writeConfig(t, routerYAML(t,
		[]string{
			fakeAgentYAML("alpha", fakeOpts{LogFile: alphaLog, InitResult: initResultWithAuth(
				`[{"id":"key","name":"Alpha key"},{"id":"login","type":"terminal","name":"Log in","args":["fake-login","0"],"env":{"X":"1"}}]`, true)}),
			fakeAgentYAML("beta", fakeOpts{LogFile: betaLog, InitResult: initResultWithAuth(`[{"id":"key","name":"Beta key","_meta":{"k":1}}]`, true)}),
			fakeAgentYAML("gamma", fakeOpts{LogFile: gammaLog, InitResult: initResultWithAuth(`[{"id":"secret","name":"Hidden"}]`, false)}, "auth: hide"),
		},
		"default: beta",
		"rules:",
		cwdRule(dir, "alpha"),
	))
	caps := map[string]any{"fs": map[string]bool{"readTextFile": true}, "auth": map[string]bool{"terminal": true}}
	// initialize waits only for the default agent (beta); alpha's methods come
	// live or from its cached result. A first run fills the cache, so that
	// the answer does not depend on which agent is faster.
	warm := StartRouter(t, cfg, nil)
	warm.Initialize(t, caps)
	warm.NewSession(t, dir) // alpha is up, its result cached
	warm.CloseStdin()
	if _, _, ok := warm.Wait(10 * time.Second); !ok {
		t.Fatal("router did not exit")
	}
	for _, log := range []string{alphaLog, betaLog, gammaLog} {
		os.Remove(log)
	}

	e := StartRouter(t, cfg, nil)
	res := e.Initialize(t, caps)
	requireJSON(t, "authMethods", jsonPath(res, "authMethods"), `[
		{"id":"key","name":"Beta key","_meta":{"k":1}},
		{"id":"alpha:key","name":"Alpha key"},
		{"id":"login","type":"terminal","name":"Log in","args":["login","alpha","--","fake-login","0"],"env":{"X":"1"}}]`)
	if got := jsonPath(res, "agentCapabilities", "auth", "logout"); got == nil {
		t.Errorf("logout not advertised though two agents support it: %s", res)
	}

	if _, rpcErr := e.Call(context.Background(), "authenticate", map[string]string{"methodId": "alpha:key"}); rpcErr != nil {
		t.Fatalf("authenticate alpha:key: %v", rpcErr)
	}
	waitAgentLog(t, alphaLog, waitTimeout, "authenticate with alpha's own id", func(l string) bool { return l == "authenticate key" })
	if n := countLines(betaLog, "authenticate key"); n != 0 {
		t.Errorf("beta got authenticate for alpha's method")
	}
	for _, id := range []string{"login", "nope"} {
		_, rpcErr := e.Call(context.Background(), "authenticate", map[string]string{"methodId": id})
		if rpcErr == nil || rpcErr.Code != -32602 {
			t.Errorf("authenticate %q: %v, want -32602", id, rpcErr)
		}
	}

	if _, rpcErr := e.Call(context.Background(), "logout", map[string]any{}); rpcErr != nil {
		t.Fatalf("logout: %v", rpcErr)
	}
	waitAgentLog(t, alphaLog, waitTimeout, "logout", func(l string) bool { return l == "logout" })
	waitAgentLog(t, betaLog, waitTimeout, "logout", func(l string) bool { return l == "logout" })
	if countLines(gammaLog, "logout") != 0 {
		t.Errorf("gamma got logout though it does not advertise it")
	}

	// alpha crashes; its next use restarts it and replays authenticate.
	sid := e.NewSession(t, dir)
	if _, err := e.Prompt(waitTimeout, sid, "crash"); err != nil {
		t.Fatal(err)
	}
	e.NewSession(t, dir)
	if n := countLines(alphaLog, "initialize"); n != 2 {
		t.Fatalf("alpha initialized %d times, want 2 (a restart)", n)
	}
	if n := countLines(alphaLog, "authenticate key"); n != 2 {
		t.Errorf("authenticate replayed %d times after the restart, want once (log:\n%s)", n-1, strings.Join(agentLog(alphaLog), "\n"))
	}
}

// TestAuthRequired pins that -32000 from an agent reaches the editor as
// -32000 (so Zed offers sign-in) with a message naming the agent and how to
// log in.
func TestAuthRequired(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{FailSessionNew: json.RawMessage(`{"code":-32000,"message":"Authentication required","data":{"hint":"log in"}}`)}, "title: Alpha Agent"),
	}))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, capsAll)
	_, rpcErr := e.Call(context.Background(), "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}})
	if rpcErr == nil || rpcErr.Code != -32000 {
		t.Fatalf("session/new: %v, want -32000", rpcErr)
	}
	requireJSON(t, "error data", rpcErr.Data, `{"hint":"log in"}`)
	for _, want := range []string{"Alpha Agent", "Authentication required", "acp-router login alpha"} {
		if !strings.Contains(rpcErr.Message, want) {
			t.Errorf("message %q does not contain %q", rpcErr.Message, want)
		}
	}
}

// TestLoginCommand pins `acp-router login`: the editor's terminal-auth
// re-launch (`login AGENT -- ARGS`) runs the agent's own command with ARGS
// and exits with its status; `login AGENT` finds the agent's terminal
// method itself; a successful login makes the running router restart the
// agent on its next use.
func TestLoginCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	alphaLog := filepath.Join(dir, "alpha.log")
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{LogFile: alphaLog, InitResult: initResultWithAuth(
			`[{"id":"login","type":"terminal","name":"Log in","args":["fake-login","0"]}]`, false)}),
	}))
	e := StartRouter(t, cfg, nil)
	e.Initialize(t, map[string]any{"auth": map[string]bool{"terminal": true}})
	sid := e.NewSession(t, dir)
	e.MustPrompt(t, sid, "say before", "end_turn")

	login := func(args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		cmd := exec.Command(routerBin, append([]string{"--config", cfg, "login", "alpha"}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	}
	if code, out := login("--", "fake-login", "3"); code != 3 || !strings.Contains(out, "fake login: fake-login 3") {
		t.Fatalf("failed login: exit %d, output %q; want exit 3 and the agent's output", code, out)
	}
	time.Sleep(20 * time.Millisecond) // a marker mtime must be after the agent start
	e.NewSession(t, dir)
	if n := countLines(alphaLog, "initialize"); n != 1 {
		t.Fatalf("a failed login restarted the agent (%d initializes)", n)
	}
	if code, out := login(); code != 0 || !strings.Contains(out, "fake login: fake-login 0") {
		t.Fatalf("login from the terminal method: exit %d, output %q", code, out)
	}
	sid = e.NewSession(t, dir)
	if n := countLines(alphaLog, "initialize"); n != 2 {
		t.Fatalf("after a successful login the agent was initialized %d times, want 2 (restarted)", n)
	}
	e.MustPrompt(t, sid, "say after", "end_turn")
}
