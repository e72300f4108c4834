//go:build !linux

package sandbox

import (
	"errors"
	"os/exec"
)

// RunIfRequested does nothing here: only Linux has the helper.
func RunIfRequested() {}

// Available: confinement is implemented on Linux only (Landlock and mount
// namespaces); on macOS the policy holds on the wire only.
func Available() error {
	return errors.New("the sandbox is implemented on Linux only (Landlock and mount namespaces); on this system the policy holds on the wire only")
}

// Wrap fails: see Available.
func (pl *Plan) Wrap(cmd *exec.Cmd) error { return Available() }

// Namespaces does nothing here.
func Namespaces(env []string, cmd *exec.Cmd) {}

// Handoff fails: see Available.
func (pl *Plan) Handoff(cmd *exec.Cmd) error { return Available() }

// Enter does nothing here: no plan is ever handed over.
func Enter() (bool, error) { return false, nil }

// masks: no plan is ever applied here.
type masks struct{}

func newMasks(*Plan) *masks        { return nil }
func (*masks) hides(p string) bool { return false }

// Keeper is the mask keeper of Linux; none runs here.
type Keeper struct{ Pid int }

// EnterKeeping is Enter: no plan is ever handed over.
func EnterKeeping() (*Keeper, string, bool, error) { return nil, "", false, nil }
