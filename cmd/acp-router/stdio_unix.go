//go:build unix

package main

import (
	"os"
	"syscall"
)

// editorStdio returns stdin and stdout for the editor's connection. When
// they are pipes or sockets (as editors start agents) they are put in
// non-blocking mode and opened again, so that the Go runtime polls them: a
// read or write then parks a goroutine instead of blocking a thread, which
// takes two thread hand-offs per message off the prompt round trip (issue
// 6), and the editor's stream writes small messages directly (acp). A
// terminal or file is left as it is. The files returned are duplicates of
// fds 0 and 1, which stay open: restore puts them back in blocking mode,
// since the open file descriptions may be shared with whoever started the
// router.
func editorStdio() (in, out *os.File, restore func()) {
	var undo []int
	open := func(fd int, f *os.File, name string) *os.File {
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) != nil {
			return f
		}
		if t := uint32(st.Mode) & syscall.S_IFMT; t != syscall.S_IFIFO && t != syscall.S_IFSOCK {
			return f
		}
		flags, err := fcntl(fd, syscall.F_GETFL, 0)
		if err != nil {
			return f
		}
		// A duplicate: closing it leaves fd open for restore (closing fd
		// could let a later open reuse the number).
		dup, err := fcntl(fd, syscall.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return f
		}
		if flags&syscall.O_NONBLOCK == 0 {
			if syscall.SetNonblock(fd, true) != nil {
				syscall.Close(dup)
				return f
			}
			undo = append(undo, fd)
		}
		return os.NewFile(uintptr(dup), name) // non-blocking: polled
	}
	in = open(0, os.Stdin, "/dev/stdin")
	out = open(1, os.Stdout, "/dev/stdout")
	return in, out, func() {
		for _, fd := range undo {
			syscall.SetNonblock(fd, false)
		}
	}
}

func fcntl(fd, cmd, arg int) (int, error) {
	v, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}
