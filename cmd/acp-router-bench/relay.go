package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// relayMain is the byte-for-byte relay (`acp-router-bench relay CMD ARGS...`):
// it runs CMD as its child, like a router runs an agent, and copies lines in
// both directions unchanged. It does what any NDJSON proxy must do at least
// (read a whole line, write it on, flush when its input is drained) and
// nothing else, so it is the limit a proxy can reach on this machine.
func relayMain(argv []string) error {
	if len(argv) == 0 {
		return errors.New("relay: no command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	go func() {
		copyLines(stdin, os.Stdin)
		stdin.Close() // the agent sees our EOF
	}()
	copyLines(os.Stdout, stdout)
	return cmd.Wait()
}

// copyLines copies src to dst one whole line at a time, flushing whenever
// src has nothing more buffered.
func copyLines(dst io.Writer, src io.Reader) error {
	r := bufio.NewReaderSize(src, 64<<10)
	w := bufio.NewWriterSize(dst, 64<<10)
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return werr
			}
		}
		line = line[:0]
		if err != nil {
			w.Flush()
			return err
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}
