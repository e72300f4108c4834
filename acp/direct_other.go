//go:build !linux

package acp

import (
	"errors"
	"io"
)

// directWriter is only implemented on Linux; elsewhere every message goes
// through the writer goroutine.
type directWriter = *struct{}

func newDirectWriter(io.Writer) directWriter { return nil }

func tryWrite(directWriter, []byte) (int, error) { return 0, errors.ErrUnsupported }

func newRawReader(r io.Reader) (io.Reader, *drain) { return r, nil }
