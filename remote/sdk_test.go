package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// The official TypeScript SDK 2.4.0's remote clients (its
// experimental/ws-client and experimental/http-client, the RFD's
// reference peer) drive a session through remote/ to the fake agent:
// initialize, session/new, prompt, a permission request, cancel, and
// session/load from a second connection (test/peers/sdk24/remote.mjs).
// CI never skips it; a developer's run without Node.js or the install
// skips it, saying so.

// secret is the test's token; no log line may contain it.
const secret = "s3cret-token-0123456789abcdef"

// tokenAuth accepts secret as a bearer header, the cookie, or ?token=.
func tokenAuth(r *http.Request) (Identity, error) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if c, err := r.Cookie(TokenCookie); tok == "" && err == nil {
		tok = c.Value
	}
	if tok == "" {
		tok = r.URL.Query().Get("token")
	}
	if tok != secret {
		return Identity{}, errors.New("bad token " + tok) // quoting it: remote/ must not log this
	}
	return Identity{Name: "alice", Role: "controller"}, nil
}

// sdkPeers finds node and the SDK install (scripts/test.sh's
// .peers/sdk24, or ACP_E2E_SDK24).
func sdkPeers(t *testing.T) (node, prefix string, nodeArgs []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the TypeScript SDK from npm (not under -short)")
	}
	prefix = os.Getenv("ACP_E2E_SDK24")
	if prefix == "" {
		prefix, _ = filepath.Abs(filepath.Join("..", ".peers", "sdk24"))
	}
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(prefix, "node_modules", "@agentclientprotocol", "sdk", "dist", "transports", "ws-stream.js"))
	}
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no Node.js or no SDK install (%v): scripts/test.sh installs it; CI runs this test", err)
		}
		t.Fatal(err)
	}
	// Node 20 has WebSocket behind a flag; 22 has it on.
	out, _ := exec.Command(node, "-e", "process.stdout.write(String(typeof WebSocket))").Output()
	if string(out) != "function" {
		nodeArgs = []string{"--experimental-websocket"}
	}
	return node, prefix, nodeArgs
}

// syncBuffer is a log sink the test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer serves opts on a loopback port; logs go to the returned
// buffer at trace level.
func startServer(t *testing.T, opts Options) (*Server, string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	opts.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})
	s := NewServer(opts)
	l, err := Listen(ListenConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, l.URL(), logs
}

func TestSDKClients(t *testing.T) {
	node, prefix, nodeArgs := sdkPeers(t)
	agent := newFakeAgent()
	_, url, logs := startServer(t, Options{Serve: agent.Serve, Auth: tokenAuth})
	for _, profile := range []string{"ws", "http"} {
		t.Run(profile, func(t *testing.T) {
			args := append(append([]string{}, nodeArgs...), filepath.Join("..", "test", "peers", "sdk24", "remote.mjs"),
				"--profile", profile, "--url", url, "--timeout", "30000")
			cmd := exec.CommandContext(t.Context(), node, args...)
			cmd.Env = append(os.Environ(), "ACP_SDK24_DIR="+prefix, "ACP_ROUTER_TOKEN="+secret)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var summary struct {
				Errors []string
				Steps  map[string]json.RawMessage
			}
			if jerr := json.Unmarshal(out, &summary); jerr != nil || err != nil {
				t.Fatalf("client: %v %v\nstdout: %s\nstderr: %s", err, jerr, out, stderr.String())
			}
			for _, step := range []string{"initialize", "new", "prompt", "permission", "cancel", "load"} {
				if summary.Steps[step] == nil {
					t.Errorf("step %s did not run: %s", step, out)
				}
			}
		})
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the token is in the server's log:\n%s", logs.String())
	}
}
