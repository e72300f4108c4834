package acp

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// TestRawReader: a non-blocking pipe is read with raw system calls: what
// is written arrives (after a wait in the poller when the pipe was empty),
// the writer's close is io.EOF, and closing the file while a read waits
// ends that read with an error instead of leaving it blocked.
func TestRawReader(t *testing.T) {
	pr, pw, err := os.Pipe() // both ends non-blocking, polled
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	raw, d := newRawReader(pr)
	r, ok := raw.(*rawReader)
	if !ok || d == nil {
		t.Fatal("a non-blocking pipe is not read raw")
	}
	go func() {
		time.Sleep(20 * time.Millisecond) // the first read waits in the poller
		pw.Write([]byte("hello\n"))
		pw.Write([]byte("world\n"))
		pw.Close()
	}()
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "hello\nworld\n" {
		t.Fatalf("read %q, %v", got, err)
	}

	pr2, pw2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw2.Close()
	r2, _ := newRawReader(pr2)
	errc := make(chan error, 1)
	go func() {
		_, err := r2.Read(make([]byte, 10))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	pr2.Close()
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("read after close: %v, want the close's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting on a closed file did not return")
	}

	// A blocking descriptor is not read raw (it would block the thread).
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r, d := newRawReader(f); d != nil {
		t.Error("/dev/null (blocking) is read raw")
	} else if _, raw := r.(*rawReader); raw {
		t.Error("/dev/null (blocking) is read raw")
	}
}
