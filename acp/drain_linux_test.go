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
	drained := func(what string, want bool) {
		t.Helper()
		ch := s.Drained()
		if ch == nil {
			t.Fatalf("%s: a non-blocking pipe's stream cannot tell it is drained", what)
		}
		select {
		case <-ch:
			if !want {
				t.Fatalf("%s: drained with a line half read", what)
			}
		case <-time.After(100 * time.Millisecond):
			if want {
				t.Fatalf("%s: not drained", what)
			}
		}
	}
	line := []byte(`{"jsonrpc":"2.0","method":"x"}` + "\n")

	drained("idle", true)
	for range 20 {
		pw.Write(line)
	}
	drained("20 lines", true)
	if n := handled.Load(); n != 20 {
		t.Fatalf("drained with %d of 20 lines handled", n)
	}

	// A line half written: not drained until its rest came and was read.
	pw.Write(line[:10])
	time.Sleep(10 * time.Millisecond) // the reader has the half and waits
	drained("half a line", false)
	pw.Write(line[10:])
	drained("the line's rest", true)
	if n := handled.Load(); n != 21 {
		t.Fatalf("drained with %d of 21 lines handled", n)
	}

	// Lines longer than the reader's buffer, written in pieces.
	big := append([]byte(`{"jsonrpc":"2.0","method":"x","params":{"p":"`), make([]byte, 200<<10)...)
	for i := len(big) - 200<<10; i < len(big); i++ {
		big[i] = 'a'
	}
	big = append(big, "\"}}\n"...)
	go pw.Write(big) // more than the pipe holds: the write waits for the reader
	time.Sleep(5 * time.Millisecond)
	drained("a long line", true)
	if n := handled.Load(); n != 22 {
		t.Fatalf("drained with %d of 22 lines handled", n)
	}

	pw.Close()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("ReadObject: %v", err)
	}
	drained("after the end", true)

	r, w := io.Pipe()
	defer w.Close()
	if s := NewStream(r, discardCloser{}, StreamOptions{}); s.Drained() != nil {
		t.Error("an io.Pipe's stream claims to know it is drained")
	}
}
