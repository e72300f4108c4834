//go:build !linux

package sandbox

// netAvailable: see Available.
func netAvailable() error { return Available() }
