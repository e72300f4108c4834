package guard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// BenchmarkDecideOSFS is the policy package's BenchmarkDecideLatency with
// the real resolver (OSFS) instead of an in-memory filesystem: the
// generated 500-rule policy (policy/testdata/bench-500.yaml) on the
// 10-command pipeline, in a real directory tree with a symlink, as the
// router decides a terminal/create (one cachedOSFS per request, as
// decide does). Reports p50-ns and p99-ns.
func BenchmarkDecideOSFS(b *testing.B) {
	data, err := os.ReadFile("../policy/testdata/bench-500.yaml")
	if err != nil {
		b.Fatal(err)
	}
	l, err := policy.ParseFile("bench-500.yaml", data)
	if err != nil {
		b.Fatal(err)
	}
	pol, err := policy.Compile(l)
	if err != nil {
		b.Fatal(err)
	}
	line, err := os.ReadFile("../policy/testdata/bench-pipeline.txt")
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	home := filepath.Join(root, "home", "user")
	cwd := filepath.Join(home, "project")
	for _, d := range []string{filepath.Join(cwd, "src", "notes"), filepath.Join(root, "srv", "docs")} {
		os.MkdirAll(d, 0o755)
	}
	for _, f := range []string{"README.md", "src/main.go", ".env"} {
		os.WriteFile(filepath.Join(cwd, f), nil, 0o644)
	}
	os.Symlink(filepath.Join(root, "srv", "docs"), filepath.Join(cwd, "docs"))
	params, _ := json.Marshal(map[string]any{"sessionId": "s", "command": strings.TrimSpace(string(line))})
	req := &extract.Request{Method: acp.MethodTerminalCreate, Params: params,
		Session: extract.Session{Agent: "claude", Mode: "default", Cwd: cwd, Home: home}}
	b.ReportAllocs()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		req.FS = requestFS(OSFS{}, nil) // as decide does, per request
		pol.Decide(req)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
