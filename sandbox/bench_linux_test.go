//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/acp-router/acp-router/config"
)

// BenchmarkStart measures what the sandbox adds to an agent's start (issue
// 29: +50 ms at most): starting /bin/true and waiting for it, unconfined,
// and confined by the fixture's profile (derive, resolve: search the
// project and 3 levels of home, start the helper in new namespaces, mask,
// Landlock, exec). Compare with benchstat:
//
//	go test -run '^$' -bench BenchmarkStart -count 10 ./sandbox/
func BenchmarkStart(b *testing.B) {
	if err := Available(); err != nil {
		b.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-bench-%d", os.Getpid()))
	os.MkdirAll(base, 0o755)
	b.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(&testing.T{}, base)
	pol := compile(&testing.T{}, fixturePolicy)
	agent := config.Agent{Name: "gemini", Command: "gemini"}
	// The router starts agents under its watchdog, a re-run of its own
	// executable (upstream/watchdog.go), which confines itself when handed
	// a plan (Handoff); without a watchdog the helper is re-run (Wrap).
	start := func(b *testing.B, confine func(*Plan, *exec.Cmd) error) {
		cmd := exec.Command(os.Args[0], "/bin/true")
		cmd.Env = append(os.Environ(), envMiniWatchdog+"=1")
		cmd.Dir = proj
		if confine != nil {
			prof, _ := Derive(pol, agent, Env{Home: home, TempDir: os.TempDir(), Roots: []string{proj}})
			plan, err := Resolve(prof, ResolveOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if err := confine(plan, cmd); err != nil {
				b.Fatal(err)
			}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	b.Run("unconfined", func(b *testing.B) {
		for b.Loop() {
			start(b, nil)
		}
	})
	b.Run("watchdog-confined", func(b *testing.B) {
		for b.Loop() {
			start(b, (*Plan).Handoff)
		}
	})
	b.Run("helper-confined", func(b *testing.B) {
		for b.Loop() {
			start(b, (*Plan).Wrap)
		}
	})
}

// BenchmarkResolveHome measures the search of this machine's real home
// directory for a ** glob (HomeDepth levels deep), the part of a start that grows
// with the machine.
func BenchmarkResolveHome(b *testing.B) {
	home, err := os.UserHomeDir()
	if err != nil {
		b.Skip("no home directory")
	}
	prof, _ := Derive(compile(&testing.T{}, fixturePolicy), config.Agent{Name: "x"}, Env{Home: home, TempDir: os.TempDir(), Roots: []string{b.TempDir()}})
	var visited int
	for b.Loop() {
		plan, err := Resolve(prof, ResolveOptions{})
		if err != nil {
			b.Fatal(err)
		}
		visited = plan.Visited
	}
	b.ReportMetric(float64(visited), "entries")
}
