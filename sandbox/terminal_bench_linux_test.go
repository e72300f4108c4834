//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkTerminal measures what the sandbox adds to a command an editor
// runs for a confined agent (terminal/create): /bin/true started and
// waited for directly, and through the terminal helper (the plan resolved
// again and written, the helper, the sandbox helper in new namespaces,
// masks, Landlock, exec). Compare with benchstat:
//
//	go test -run '^$' -bench BenchmarkTerminal -count 10 ./sandbox/
func BenchmarkTerminal(b *testing.B) {
	if err := Available(); err != nil {
		b.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-tbench-%d", os.Getpid()))
	os.MkdirAll(base, 0o755)
	b.Cleanup(func() { os.RemoveAll(base) })
	home, proj, _ := fixture(&testing.T{}, base)
	plan := confine(&testing.T{}, home, proj)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("helper", func(b *testing.B) {
		for b.Loop() {
			exe, args, err := plan.Terminal("/bin/true", nil)
			if err != nil {
				b.Fatal(err)
			}
			if out, err := exec.Command(exe, args...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}
