package acp

import (
	"io"
	"syscall"
)

// directWriter writes to a non-blocking file descriptor without waiting.
type directWriter = syscall.RawConn

// newDirectWriter returns w's descriptor when writes to it never block
// (O_NONBLOCK: the pipes os.Pipe makes, as for an agent's stdin), else nil.
// A blocking one (the router's own stdout, as editors start it) is only
// written by the writer goroutine.
func newDirectWriter(w io.Writer) directWriter {
	sc, ok := w.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	nonblocking := false
	if rc.Control(func(fd uintptr) {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = errno == 0 && flags&syscall.O_NONBLOCK != 0
	}) != nil || !nonblocking {
		return nil
	}
	return rc
}

// tryWrite writes as much of b as the descriptor takes now: 0 bytes and no
// error when it would block.
func tryWrite(rc directWriter, b []byte) (int, error) {
	var n int
	var err error
	if cerr := rc.Write(func(fd uintptr) bool {
		for {
			n, err = syscall.Write(int(fd), b)
			if err != syscall.EINTR {
				return true // never wait for the descriptor to be writable
			}
		}
	}); cerr != nil {
		return 0, cerr
	}
	if err == syscall.EAGAIN {
		return 0, nil
	}
	return max(n, 0), err
}
