package acp

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestStreamDrained: Drained is closed only once every line the peer wrote
// before the call has been handed to Intercept (lines read slowly, a line
// half written), at once on an idle stream, and when reading ends; a stream
// that cannot tell (an io.Pipe) says so with nil.
func TestStreamDrained(t *testing.T) {
	pr, pw, err := os.Pipe() // non-blocking, polled: read raw
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	s := NewStream(pr, discardCloser{}, StreamOptions{Intercept: func(m *Message) bool {
		time.Sleep(2 * time.Millisecond) // a slow reader: lines wait in the pipe
		handled.Add(1)
		return true
	}})
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		var v json.RawMessage
		done <- s.ReadObject(&v)
	}()
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		if ch == nil {
			t.Fatalf("%s: a non-blocking pipe's stream cannot tell it is drained", what)
		}
		select {
		case <-ch:
		case <-time.After(waitTimeout):
			t.Fatalf("%s: not drained within %v", what, waitTimeout)
		}
	}
	drained := func(what string) { t.Helper(); wait(what, s.Drained()) }
	line := []byte(`{"jsonrpc":"2.0","method":"x"}` + "\n")

	drained("idle")
	for range 20 {
		pw.Write(line)
	}
	drained("20 lines")
	if n := handled.Load(); n != 20 {
		t.Fatalf("drained with %d of 20 lines handled", n)
	}

	// A line half written: not drained until its rest came and was read.
	// The reader has decided on the half once it took it from the pipe
	// and then found the pipe empty; from then on only the rest, or the
	// end, can make it drained.
	empties := s.drain.empties.Load()
	pw.Write(line[:10])
	for deadline := time.Now().Add(waitTimeout); ; time.Sleep(time.Millisecond) {
		if n, _ := s.drain.readable(); n == 0 && s.drain.empties.Load() > empties {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader did not take the half line")
		}
	}
	half := s.Drained()
	select {
	case <-half:
		t.Fatal("drained with a line half read")
	default:
	}
	pw.Write(line[10:])
	wait("the line's rest", half)
	if n := handled.Load(); n != 21 {
		t.Fatalf("drained with %d of 21 lines handled", n)
	}

	// Lines longer than the reader's buffer, written in pieces.
	big := append([]byte(`{"jsonrpc":"2.0","method":"x","params":{"p":"`), make([]byte, 200<<10)...)
	for i := len(big) - 200<<10; i < len(big); i++ {
		big[i] = 'a'
	}
	big = append(big, "\"}}\n"...)
	// Its start is in the pipe before Drained is asked; the rest is more
	// than the pipe holds: that write waits for the reader.
	pw.Write(big[:4<<10])
	go pw.Write(big[4<<10:])
	drained("a long line")
	if n := handled.Load(); n != 22 {
		t.Fatalf("drained with %d of 22 lines handled", n)
	}

	pw.Close()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("ReadObject: %v", err)
	}
	drained("after the end")

	r, w := io.Pipe()
	defer w.Close()
	if s := NewStream(r, discardCloser{}, StreamOptions{}); s.Drained() != nil {
		t.Error("an io.Pipe's stream claims to know it is drained")
	}
}
