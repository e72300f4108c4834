package test

// Exchanges written as data: testdata/exchanges/*.txtar, each the router in
// front of fake agents and a script of the messages the editor sends and
// receives. The archive's comment says what the exchange pins; its files:
//
//	agents    one fake agent a line: NAME, then optionally its fakeOpts as JSON
//	routing   (optional) the lines of the config's routing: block
//	exchange  the script, in order: "-> MSG" the editor sends MSG; "<- MSG"
//	          the next message the router sends the editor is MSG (compared
//	          as JSON values). "#" lines and blank lines are comments.
//
// $CWD in a message or a routing line stands for a temporary directory of
// the exchange's own; $VERSION for the router's version in agentInfo (it
// depends on the build).
// Once the script has run, the editor closes its stdin: the router must
// exit 0 without sending anything more.
//
//	go test ./test -run TestExchanges -update
//
// rewrites every "<-" line with what the router sent instead (a line
// nothing answered is dropped, what came in excess is added at the end):
// review the diff, never edit an expected message by hand.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"
)

// envExchanges names another directory of exchanges to run
// (TestExchangesFailWhenWrong).
const envExchanges = "ACP_E2E_EXCHANGES"

var update = flag.Bool("update", false, "rewrite the expected messages of testdata/exchanges with what the router sends")

func TestExchanges(t *testing.T) {
	t.Parallel()
	dir := "testdata/exchanges"
	if d := os.Getenv(envExchanges); d != "" {
		dir = d
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no exchanges in %s (%v)", dir, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			t.Parallel()
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if rewritten := runExchange(t, ar); *update && rewritten != nil {
				if err := os.WriteFile(file, txtar.Format(rewritten), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// exchangeFile returns the content of ar's file name ("" when absent).
func exchangeFile(ar *txtar.Archive, name string) string {
	for _, f := range ar.Files {
		if f.Name == name {
			return string(f.Data)
		}
	}
	return ""
}

// runExchange runs ar's script against a router configured by its agents
// and routing, and fails t where the router differs. Under -update it
// returns ar with the "<-" lines the router sent.
func runExchange(t *testing.T, ar *txtar.Archive) *txtar.Archive {
	t.Helper()
	var agents []string
	for line := range strings.Lines(exchangeFile(ar, "agents")) {
		name, opts, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name == "" {
			continue
		}
		var o fakeOpts
		if opts != "" {
			if err := json.Unmarshal([]byte(opts), &o); err != nil {
				t.Fatalf("agents: %s: %v", name, err)
			}
		}
		agents = append(agents, fakeAgentYAML(name, o))
	}
	if len(agents) == 0 {
		t.Fatal("no agents")
	}
	cwd := t.TempDir()
	routing := strings.Split(strings.TrimRight(strings.ReplaceAll(exchangeFile(ar, "routing"), "$CWD", cwd), "\n"), "\n")
	if routing[0] == "" {
		routing = nil
	}
	cmd := exec.Command(needRouter(t), "--config", writeConfig(t, routerYAML(t, agents, routing...)))
	cmd.Env = append(withoutEnv(withoutEnv(os.Environ(), envFakeAgent), "GORACE"), "GORACE=atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &tailBuffer{max: 64 << 10}
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("router stderr:\n%s", stderr.String())
		}
	})
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		r := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	// next is the router's next message with the exchange's directory
	// written $CWD; ok is false at the end of its output or after timeout.
	next := func(timeout time.Duration) (string, bool) {
		select {
		case line, ok := <-lines:
			if !ok {
				return "", false
			}
			checkSchema(t, line)
			return canonicalJSON(t, strings.ReplaceAll(string(line), cwd, "$CWD")), true
		case <-time.After(timeout):
			return "", false
		}
	}

	script := exchangeFile(ar, "exchange")
	if script == "" {
		t.Fatal("no exchange")
	}
	var out strings.Builder // the script as the router answered it (-update)
	// unanswered are the ids of the editor's requests the router has not
	// answered yet (as JSON).
	unanswered := map[string]bool{}
	for n, line := range strings.Split(strings.TrimRight(script, "\n"), "\n") {
		where := fmt.Sprintf("exchange:%d", n+1)
		switch {
		case strings.HasPrefix(line, "-> "):
			msg := strings.ReplaceAll(strings.TrimPrefix(line, "-> "), "$CWD", cwd)
			if !json.Valid([]byte(msg)) {
				t.Fatalf("%s: not JSON: %s", where, line)
			}
			if id, isRequest := requestID(msg); isRequest {
				unanswered[id] = true
			}
			if _, err := stdin.Write([]byte(msg + "\n")); err != nil {
				t.Fatalf("%s: the router does not read: %v", where, err)
			}
			out.WriteString(line + "\n")
		case strings.HasPrefix(line, "<- "):
			want := strings.TrimPrefix(line, "<- ")
			got, ok := next(waitTimeout)
			switch {
			case *update:
				if ok {
					out.WriteString("<- " + got + "\n")
				}
			case !ok:
				t.Fatalf("%s: want %s\nthe router sent nothing (%s)", where, want, "exited or timed out")
			case !jsonEqual([]byte(got), []byte(want)):
				t.Fatalf("%s: the router sent\n\t%s\nwant\n\t%s", where, got, want)
			}
			if ok {
				delete(unanswered, responseID(got))
			}
		case line == "" || strings.HasPrefix(line, "#"):
			out.WriteString(line + "\n")
		default:
			t.Fatalf("%s: want \"-> \", \"<- \" or \"#\": %q", where, line)
		}
	}
	// The editor waits for the answers to its requests, then leaves: what
	// the router sends meanwhile is not in the script. (Closing at once
	// raced the router's last answer with its EOF: a script that left it
	// out could pass.)
	for len(unanswered) > 0 {
		got, ok := next(waitTimeout)
		if !ok {
			break
		}
		if !*update {
			t.Errorf("after the script the router sent %s", got)
		}
		out.WriteString("<- " + got + "\n")
		delete(unanswered, responseID(got))
	}
	// At the editor's EOF the router ends without a word more.
	stdin.Close()
	for {
		got, ok := next(waitTimeout)
		if !ok {
			break
		}
		if !*update {
			t.Errorf("after the script the router sent %s", got)
		}
		out.WriteString("<- " + got + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the router after the editor's EOF: %v", err)
	}
	// As everywhere in this package, what the router sends the agents is
	// checked against the ACP schema by the fake agents themselves.
	for line := range strings.Lines(stderr.String()) {
		if _, v, ok := strings.Cut(line, "SCHEMA VIOLATION: "); ok {
			t.Errorf("the router sent an agent a message that does not conform to the ACP schema: %s", v)
		}
	}
	if !*update {
		return nil
	}
	rewritten := &txtar.Archive{Comment: ar.Comment}
	for _, f := range ar.Files {
		if f.Name == "exchange" {
			f.Data = []byte(out.String())
		}
		rewritten.Files = append(rewritten.Files, f)
	}
	return rewritten
}

// requestID is the id of msg, a message the editor sends, as compact JSON,
// when it is a request.
func requestID(msg string) (string, bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal([]byte(msg), &m) != nil || m.Method == "" || len(m.ID) == 0 || string(m.ID) == "null" {
		return "", false
	}
	return compactJSON(m.ID), true
}

// responseID is the id of msg, a message the router sends, as compact JSON
// ("" when it is not a response).
func responseID(msg string) string {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal([]byte(msg), &m) != nil || m.Method != "" || len(m.ID) == 0 {
		return ""
	}
	return compactJSON(m.ID)
}

func compactJSON(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

// checkSchema fails t when a request or notification the router sent the
// editor does not conform to the ACP schema (when it is installed, as in CI).
func checkSchema(t *testing.T, line []byte) {
	t.Helper()
	schema := loadSchema(t)
	var m wireMsg
	if schema == nil || json.Unmarshal(line, &m) != nil || m.Method == "" {
		return
	}
	if v := schema.checkMessage(m.Method, hasID(m.ID), m.Params); v != "" {
		t.Errorf("%s params do not conform to the ACP schema: %s: %s", m.Method, v, truncate(string(line), 400))
	}
}

// canonicalJSON renders a message with its members sorted and nothing
// escaped that need not be, so that -update writes the same line for the
// same message, and the router's version written $VERSION.
func canonicalJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("the router sent a line that is not JSON: %q", truncate(s, 200))
	}
	if msg, ok := v.(map[string]any); ok {
		res, _ := msg["result"].(map[string]any)
		if info, ok := res["agentInfo"].(map[string]any); ok && info["name"] == "acp-router" {
			info["version"] = "$VERSION"
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// TestExchangesFailWhenWrong: a script the router does not follow fails
// TestExchanges, saying where: an expected message changed, an expected
// message left out (the router's message then comes after the script).
// TestExchanges runs again in this test binary on edited copies.
func TestExchangesFailWhenWrong(t *testing.T) {
	t.Parallel()
	bin := needRouter(t)
	src, err := os.ReadFile("testdata/exchanges/initialize.txtar")
	if err != nil {
		t.Fatal(err)
	}
	lastExpected := func(s string) string {
		i := strings.LastIndex(s, "\n<- ")
		return s[:i+1]
	}
	for _, c := range []struct {
		name, script, want string
	}{
		{"changed", strings.Replace(string(src), `"text":"hello"`, `"text":"hullo"`, 1), `exchange:8: the router sent`},
		{"left out", lastExpected(string(src)), `after the script the router sent {"id":3,`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.script == string(src) {
				t.Fatal("the edit changed nothing: initialize.txtar is not what this test expects")
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "initialize.txtar"), []byte(c.script), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(testBin, "-test.run=^TestExchanges$", "-test.v")
			cmd.Env = append(os.Environ(), envExchanges+"="+dir, envRouterBin+"="+bin)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Errorf("TestExchanges on a wrong script: %v, want a failure saying %q:\n%s", err, c.want, truncate(string(out), 4000))
			}
		})
	}
}
