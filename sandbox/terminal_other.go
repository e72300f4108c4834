//go:build !linux

package sandbox

// Terminal fails: see Available.
func (pl *Plan) Terminal(command string, args []string) (string, []string, error) {
	return "", nil, Available()
}
