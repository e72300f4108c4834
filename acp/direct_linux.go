package acp

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// directWriter writes to a non-blocking file descriptor without waiting.
type directWriter = syscall.RawConn

// newDirectWriter returns w's descriptor when writes to it never block
// (O_NONBLOCK: the pipes os.Pipe makes, as for an agent's stdin), else nil.
// A blocking one (the router's own stdout, as editors start it) is only
// written by the writer goroutine.
func newDirectWriter(w io.Writer) directWriter { return nonblocking(w) }

// nonblocking returns the descriptor of f (a file, a pipe) when it is in
// non-blocking mode, else nil.
func nonblocking(f any) syscall.RawConn {
	sc, ok := f.(syscall.Conn)
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
			// A raw system call: on a non-blocking descriptor it returns at
			// once, so the runtime's bookkeeping of a call that may block
			// (entersyscall, which also wakes sysmon) is cost for nothing.
			r, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
			n, err = int(r), nil
			if errno != 0 {
				n, err = -1, errno
			}
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

// rawReader reads a non-blocking descriptor with raw system calls, waiting
// for it in the runtime's poller (syscall.RawConn.Read) when it has
// nothing: a read that cannot block needs none of the bookkeeping of one
// that can (entersyscall, which wakes sysmon), and a proxy reads a line or
// two per system call.
type rawReader struct {
	r  io.Reader
	rc syscall.RawConn
	d  *drain
}

// newRawReader returns a rawReader for r, and what it knows of how far it
// has read (Stream.Drained), when r is a non-blocking descriptor the
// poller waits for; else r and nil.
func newRawReader(r io.Reader) (io.Reader, *drain) {
	rc := nonblocking(r)
	if rc == nil {
		return r, nil
	}
	raw := &rawReader{r: r, rc: rc}
	raw.d = &drain{readable: raw.readable}
	return raw, raw.d
}

// readable returns the bytes the descriptor holds unread (FIONREAD).
func (r *rawReader) readable() (int, bool) {
	var n int32
	var errno syscall.Errno
	if err := r.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || errno != 0 {
		return 0, false
	}
	return int(n), true
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n uintptr
	var errno syscall.Errno
	if err := r.rc.Read(func(fd uintptr) bool {
		r.d.woke()
		for {
			n, _, errno = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if errno != syscall.EINTR {
				break
			}
		}
		if errno == syscall.EAGAIN {
			r.d.empty()
			return false // wait in the poller
		}
		if errno == 0 && n > 0 {
			r.d.boundary = false
		}
		return true
	}); err != nil {
		return 0, err
	}
	switch {
	case errno != 0:
		name := "pipe"
		if f, ok := r.r.(interface{ Name() string }); ok {
			name = f.Name()
		}
		return 0, &os.PathError{Op: "read", Path: name, Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return int(n), nil
}
