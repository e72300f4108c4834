//go:build !unix

package main

import "os"

// editorStdio returns stdin and stdout as they are.
func editorStdio() (in, out *os.File, restore func()) {
	return os.Stdin, os.Stdout, func() {}
}
