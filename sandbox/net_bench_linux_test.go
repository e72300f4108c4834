//go:build linux

package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/egress"
)

// BenchmarkStartNetwork measures what a confined network adds to an
// agent's start: starting /bin/true under its watchdog, confined by the
// fixture's profile, without and with a network namespace (loopback up,
// the forwarder listening, the proxy variables set).
//
//	go test -run '^$' -bench BenchmarkStartNetwork -count 10 ./sandbox/
func BenchmarkStartNetwork(b *testing.B) {
	if err := Available(); err != nil {
		b.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-netbench-%d", os.Getpid()))
	os.MkdirAll(base, 0o755)
	b.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(&testing.T{}, base)
	prof, _ := Derive(compile(&testing.T{}, fixturePolicy), config.Agent{Name: "gemini", Command: "gemini"},
		Env{Home: home, TempDir: os.TempDir(), Roots: []string{proj}})
	plan, err := Resolve(prof, ResolveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sockDir := b.TempDir()
	l, err := net.Listen("unix", sockDir+"/proxy.sock")
	if err != nil {
		b.Fatal(err)
	}
	p := &egress.Proxy{}
	go p.Serve(l)
	b.Cleanup(func() { p.Close() })
	withNet := *plan
	withNet.Net = &NetPlan{Socket: sockDir + "/proxy.sock", Loopback: []int{11434}}
	for _, c := range []struct {
		name string
		plan *Plan
	}{{"confined", plan}, {"confined-network", &withNet}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(os.Args[0], "/bin/true")
				cmd.Env = append(os.Environ(), envMiniWatchdog+"=1")
				cmd.Dir = proj
				if err := c.plan.Handoff(cmd); err != nil {
					b.Fatal(err)
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
}
