package upstream

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/sandbox"
)

// envProbeAgent makes the test binary an ACP agent that, before it answers
// initialize, tries to write a file in each directory of the
// colon-separated list it holds, and answers initialize with
// _meta.writes: each directory's "ok" or error.
const envProbeAgent = "UPSTREAM_TEST_PROBE_AGENT"

func probeAgent() int {
	writes := map[string]string{}
	for _, d := range strings.Split(os.Getenv(envProbeAgent), ":") {
		f := filepath.Join(d, fmt.Sprintf("probe-%d", os.Getpid()))
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			writes[d] = err.Error()
		} else {
			writes[d] = "ok"
		}
	}
	cwd, _ := os.Getwd()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method != "initialize" {
			continue
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"protocolVersion": 1,
			"agentCapabilities": map[string]any{}, "_meta": map[string]any{"writes": writes, "cwd": cwd}}})
		os.Stdout.Write(append(b, '\n'))
	}
	return 0
}

// TestForRootsConfined: under the sandbox, sessions with different roots
// talk to different processes of one agent, each started with the profile
// of its own roots: it writes there and nowhere else (issue 29 point 3).
// The configured agent's own process keeps its own root; stopping the
// agent stops them all; their instances never share a Gen. It runs as root
// and as nobody: an unprivileged router starts the processes of other roots
// through a user namespace, as it does its agents' own.
func TestForRootsConfined(t *testing.T) {
	if base := os.Getenv(envRootsTestBase); base != "" {
		if err := sandbox.Available(); err != nil {
			t.Fatalf("as uid %d: %v", os.Getuid(), err)
		}
		checkForRoots(t, base)
		return
	}
	if err := sandbox.Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	// Outside /tmp and the home directory, which a profile may write.
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-roots-test-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(base) })
	t.Run("root", func(t *testing.T) { checkForRoots(t, filepath.Join(base, "root")) })
	t.Run("nobody", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to run the checks as nobody (CI runs as root)")
		}
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("needs setpriv (util-linux)")
		}
		dir := filepath.Join(base, "nobody")
		if err := os.MkdirAll(filepath.Join(dir, "home"), 0o755); err != nil {
			t.Fatal(err)
		}
		// The go test binary's directory is root's alone: a copy nobody
		// can run, which is then the agent's command too.
		bin := filepath.Join(dir, "upstream.test")
		copyExe(t, os.Args[0], bin)
		if out, err := exec.Command("chown", "-R", "65534:65534", base).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
		cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", bin,
			"-test.run=^TestForRootsConfined$", "-test.v")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), envRootsTestBase+"="+filepath.Join(dir, "roots"), "HOME="+filepath.Join(dir, "home"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestForRootsConfined") {
			t.Fatalf("as nobody: %v\n%s", err, out)
		}
		if testing.Verbose() {
			t.Logf("as nobody:\n%s", out)
		}
	})
}

// envRootsTestBase runs TestForRootsConfined's checks in that directory
// (the run as nobody).
const envRootsTestBase = "UPSTREAM_TEST_ROOTS_BASE"

func copyExe(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// checkForRoots is TestForRootsConfined's checks, with the projects below
// base.
func checkForRoots(t *testing.T, base string) {
	dirs := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		dirs[n] = filepath.Join(base, n)
		if err := os.MkdirAll(dirs[n], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	conf := &sandbox.Confiner{Mode: config.SandboxEnforce}
	a := New(config.Agent{Name: "prober", Command: exe, Cwd: dirs["a"], StartupTimeout: waitTimeout, StallTimeout: waitTimeout,
		Env: map[string]string{envProbeAgent: dirs["a"] + ":" + dirs["b"] + ":" + dirs["c"], "GORACE": "atexit_sleep_ms=0"}},
		Options{Confine: conf.Confine, KillGrace: waitTimeout})
	t.Cleanup(a.Stop)

	type result struct {
		Meta struct {
			Writes map[string]string `json:"writes"`
			Cwd    string            `json:"cwd"`
		} `json:"_meta"`
	}
	var pids []int
	gens := map[int]bool{}
	for _, tt := range []struct {
		name     string
		cwd      string
		extra    []string
		own      bool // the configured agent's own process
		writable []string
		workIn   string // "": cwd
	}{
		{"own root", dirs["a"], nil, true, []string{"a"}, ""},
		{"other cwd", dirs["b"], nil, false, []string{"b"}, ""},
		{"cwd and an additional directory", dirs["b"], []string{dirs["c"], dirs["c"] + "/"}, false, []string{"b", "c"}, ""},
		// A session's cwd need not exist: its process works in the
		// agent's, and still writes only its own roots.
		{"missing cwd", base + "/gone", []string{dirs["c"]}, false, []string{"c"}, dirs["a"]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ag := a.ForRoots(tt.cwd, tt.extra)
			if (ag == a) != tt.own {
				t.Fatalf("ForRoots(%s, %q) is the configured agent: %v, want %v", tt.cwd, tt.extra, ag == a, tt.own)
			}
			if again := a.ForRoots(tt.cwd, slices.Clone(tt.extra)); again != ag {
				t.Error("the same roots got another process")
			}
			inst, err := ag.Ready(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if gens[inst.Gen] {
				t.Errorf("Gen %d given twice", inst.Gen)
			}
			gens[inst.Gen] = true
			pids = append(pids, inst.pgid)
			var res result
			if err := json.Unmarshal(inst.InitRaw(), &res); err != nil {
				t.Fatal(err)
			}
			if want := cmp.Or(tt.workIn, tt.cwd); res.Meta.Cwd != want {
				t.Errorf("the process works in %s, want %s", res.Meta.Cwd, want)
			}
			for n, d := range dirs {
				got := res.Meta.Writes[d]
				if want := slices.Contains(tt.writable, n); (got == "ok") != want {
					t.Errorf("write in %s: %s; want it allowed: %v", n, got, want)
				}
			}
		})
	}
	a.Stop()
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d still runs after the agent stopped", pid)
		}
	}
}

// TestForRootsUnconfined: without a sandbox every session talks to the
// configured agent's one process.
func TestForRootsUnconfined(t *testing.T) {
	a := New(config.Agent{Name: "plain", Command: "true", Cwd: "/var/tmp"}, Options{})
	if got := a.ForRoots("/srv/other", []string{"/srv/more"}); got != a {
		t.Error("an unconfined agent got a second process")
	}
}

func TestRootSet(t *testing.T) {
	got := rootSet("/p/x/", []string{"/q", "/p/x", "/b/", "/q"})
	if want := []string{"/p/x", "/b", "/q"}; !slices.Equal(got, want) {
		t.Errorf("rootSet = %q, want %q", got, want)
	}
}
