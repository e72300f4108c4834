package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRemoteBench measures the remote transport against stdio, in one
// run, with one client (the TypeScript SDK 2.4.0, remote.mjs --bench) and
// the same router and fake agent: the prompt round trip (p50 over
// ACP_REMOTE_BENCH_PROMPTS prompts, default 200) and the update throughput
// (a turn of ACP_REMOTE_BENCH_UPDATES 200-byte chunks, default 20000),
// over stdio, WebSocket and HTTP/SSE, interleaved over
// ACP_REMOTE_BENCH_ROUNDS rounds (default 5), medians printed. Run:
//
//	ACP_REMOTE_BENCH=1 go test -run TestRemoteBench -v ./test
func TestRemoteBench(t *testing.T) {
	if os.Getenv("ACP_REMOTE_BENCH") == "" {
		t.Skip("a benchmark: ACP_REMOTE_BENCH=1 runs it")
	}
	env := func(k string, d int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
			return v
		}
		return d
	}
	rounds, prompts, updates := env("ACP_REMOTE_BENCH_ROUNDS", 5), env("ACP_REMOTE_BENCH_PROMPTS", 200), env("ACP_REMOTE_BENCH_UPDATES", 20000)
	p := needSDK24(t)
	r := newRemoteConfig(t, "")
	startServe(t, r, "--listen", "127.0.0.1:0", "--log-level", "warn")
	url := r.listening(t, 1)[0]
	nodeArgs := []string{}
	if out, _ := exec.Command(p.node, "-e", "process.stdout.write(typeof WebSocket)").Output(); string(out) != "function" {
		nodeArgs = append(nodeArgs, "--experimental-websocket")
	}
	type result struct {
		P50ms, P90ms  float64
		UpdatesPerSec float64
	}
	got := map[string][]result{}
	profiles := []string{"stdio", "ws", "http"}
	for round := range rounds {
		for _, profile := range profiles {
			u := url
			if profile == "stdio" {
				u = needRouter(t) + " --config " + r.cfg + " --log-level warn"
			}
			args := append(append([]string{}, nodeArgs...), filepath.Join(p.dir, "remote.mjs"), "--agent", "router", "--profile", profile,
				"--url", u, "--cwd", t.TempDir(), "--bench", strconv.Itoa(prompts), "--updates", strconv.Itoa(updates), "--timeout", "300000")
			cmd := exec.Command(p.node, args...)
			cmd.Env = append(os.Environ(), "ACP_SDK24_DIR="+p.prefix, "ACP_ROUTER_TOKEN="+r.token)
			out, err := cmd.Output()
			var s struct {
				Errors []string
				Bench  result
			}
			if json.Unmarshal(out, &s) != nil || err != nil || len(s.Errors) > 0 {
				t.Fatalf("%s round %d: %v %s", profile, round, err, out)
			}
			got[profile] = append(got[profile], s.Bench)
			t.Logf("round %d %-5s p50 %.3f ms  p90 %.3f ms  %.0f updates/s", round, profile, s.Bench.P50ms, s.Bench.P90ms, s.Bench.UpdatesPerSec)
		}
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d rounds, %d prompts, %d x 200 B updates; medians (same run):\n", rounds, prompts, updates)
	fmt.Fprintf(&b, "%-6s %10s %10s %14s\n", "", "p50 ms", "p90 ms", "updates/s")
	for _, profile := range profiles {
		var p50, p90, ups []float64
		for _, r := range got[profile] {
			p50, p90, ups = append(p50, r.P50ms), append(p90, r.P90ms), append(ups, r.UpdatesPerSec)
		}
		fmt.Fprintf(&b, "%-6s %10.3f %10.3f %14.0f\n", profile, median(p50), median(p90), median(ups))
	}
	t.Log(b.String())
}
