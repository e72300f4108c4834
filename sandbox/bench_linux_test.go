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

// BenchmarkWorkload measures a file-heavy workload in a project, unconfined
// and confined (issue 29: at most 5% slower), started as the router starts
// an agent (the watchdog, Handoff): go build of this module's router from
// the warm build cache (it stats and reads thousands of files and writes a
// 20 MB binary), and npm install of two packages (1,000 files) from npm's
// local cache, offline, into a fresh folder. The confined runs use the
// fixture's policy over this machine's home (its caches are writable).
// The figures of docs/performance.md come from
//
//	go test -run '^$' -bench BenchmarkWorkload -benchtime 5x -count 6 ./sandbox/ | benchstat -col /run -
func BenchmarkWorkload(b *testing.B) {
	if err := Available(); err != nil {
		b.Skipf("this kernel cannot confine: %v", err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		b.Skip("no home directory")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		b.Fatal(err)
	}
	proj := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-workload-%d", os.Getpid()))
	os.MkdirAll(proj, 0o755)
	b.Cleanup(func() { os.RemoveAll(proj) })
	prof, _ := Derive(compile(&testing.T{}, fixturePolicy), config.Agent{Name: "x"}, Env{Home: home, TempDir: os.TempDir(), Roots: []string{proj}})
	plan, err := Resolve(prof, ResolveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	goBin, errGo := exec.LookPath("go")
	npmBin, errNpm := exec.LookPath("npm")
	for _, w := range []struct {
		name string
		skip error
		dir  string
		argv []string
	}{
		{"go-build", errGo, repo, []string{goBin, "build", "-o", filepath.Join(proj, "acp-router"), "./cmd/acp-router"}},
		{"npm-install", errNpm, proj, []string{npmBin, "install", "--offline", "--ignore-scripts", "--no-audit", "--no-fund",
			"--prefix", filepath.Join(proj, "npm"), "@agentclientprotocol/sdk@2.4.0", "zod@4.6.7"}},
	} {
		if w.skip == nil {
			// Once first: the build cache holds this module's packages
			// and npm's cache its packages before anything is timed.
			cmd := exec.Command(w.argv[0], w.argv[1:]...)
			cmd.Dir = w.dir
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
		for _, run := range []struct {
			name    string
			confine bool
		}{{"unconfined", false}, {"confined", true}} {
			b.Run("workload="+w.name+"/run="+run.name, func(b *testing.B) {
				if w.skip != nil {
					b.Skip(w.skip)
				}
				for b.Loop() {
					b.StopTimer()
					os.RemoveAll(filepath.Join(proj, "npm"))
					cmd := exec.Command(os.Args[0], w.argv...)
					cmd.Env = append(os.Environ(), envMiniWatchdog+"=1")
					cmd.Dir = w.dir
					if run.confine {
						if err := plan.Handoff(cmd); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("%v: %s", err, out)
					}
				}
			})
		}
	}
}
