//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	// The watchdog without its mask keeper: what the keeper adds.
	b.Run("watchdog-confined-nokeeper", func(b *testing.B) {
		for b.Loop() {
			start(b, func(pl *Plan, cmd *exec.Cmd) error {
				pl.Keeper = nil
				return pl.Handoff(cmd)
			})
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
			keeper  bool
		}{{"unconfined", false, false}, {"confined", true, true}, {"confined-nokeeper", true, false}} {
			b.Run("workload="+w.name+"/run="+run.name, func(b *testing.B) {
				if w.skip != nil {
					b.Skip(w.skip)
				}
				var cpu, keeperCPU time.Duration
				for b.Loop() {
					b.StopTimer()
					os.RemoveAll(filepath.Join(proj, "npm"))
					cmd := exec.Command(os.Args[0], w.argv...)
					cmd.Env = append(os.Environ(), envMiniWatchdog+"=1")
					cmd.Dir = w.dir
					if run.confine {
						plan := *plan
						if !run.keeper {
							plan.Keeper = nil
						}
						if err := plan.Handoff(cmd); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					out, err := cmd.CombinedOutput()
					if err != nil {
						b.Fatalf("%v: %s", err, out)
					}
					cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
					if _, k, ok := strings.Cut(string(out), "KEEPER-CPU "); ok {
						var ms int
						fmt.Sscan(k, &ms)
						keeperCPU += time.Duration(ms) * time.Millisecond
					}
				}
				// The whole tree's CPU, the keeper's included (the
				// watchdog reaps it), and the keeper's alone.
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
				b.ReportMetric(float64(keeperCPU.Milliseconds())/float64(b.N), "keeper-cpu-ms/op")
			})
		}
	}
}

// BenchmarkKeeperTree measures the mask keeper over a large tree: the
// agent's root is ACP_SANDBOX_TREE (read only: nothing is written there),
// searched and watched whole. It reports the agent's start with and
// without the keeper, and the keeper's watches and resident memory:
//
//	ACP_SANDBOX_TREE=$PWD/.peers go test -run '^$' -bench BenchmarkKeeperTree -benchtime 10x ./sandbox/
func BenchmarkKeeperTree(b *testing.B) {
	tree := os.Getenv("ACP_SANDBOX_TREE")
	if tree == "" {
		b.Skip("ACP_SANDBOX_TREE names no tree")
	}
	if err := Available(); err != nil {
		b.Skipf("this kernel cannot confine: %v", err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		b.Skip("no home directory")
	}
	prof, _ := Derive(compile(&testing.T{}, fixturePolicy), config.Agent{Name: "x"}, Env{Home: home, TempDir: os.TempDir(), Roots: []string{tree}})
	plan, err := Resolve(prof, ResolveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	noKeeper := *plan
	noKeeper.Keeper = nil
	for _, run := range []struct {
		name string
		plan *Plan
	}{{"keeper", plan}, {"no-keeper", &noKeeper}} {
		b.Run(run.name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(os.Args[0], "/bin/true")
				cmd.Env = append(os.Environ(), envMiniWatchdog+"=1")
				cmd.Dir = tree
				if err := run.plan.Handoff(cmd); err != nil {
					b.Fatal(err)
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
	// The keeper's footprint, read while an agent runs.
	cmd := exec.Command(os.Args[0], "/bin/sh", "-c", `echo $KEEPER_PID; sleep 3`)
	cmd.Env = append(os.Environ(), envMiniWatchdog+"=1")
	cmd.Dir = tree
	if err := plan.Handoff(cmd); err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	var pid int
	fmt.Fscan(out, &pid)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var rssKB int
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			fmt.Sscan(strings.TrimPrefix(l, "VmRSS:"), &rssKB)
		}
	}
	watches := 0
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fdinfo", pid))
	for _, fd := range fds {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		watches += strings.Count(string(b), "inotify wd:")
	}
	b.Logf("tree %s: %d entries searched, %d masks at the start; keeper pid %d: %d watches, %d KB resident", tree, plan.Visited, len(plan.HideFiles)+len(plan.HideDirs), pid, watches, rssKB)
}
