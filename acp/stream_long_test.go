package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadLongLines: lines longer than the reader's buffer, of changing
// sizes (each buffer is sized like the last long line), arrive whole, each
// in memory of about its own size, and the line limit still applies.
func TestReadLongLines(t *testing.T) {
	sizes := []int{1 << 20, 1 << 20, 100 << 10, 3 << 20, 70 << 10, 10, 2 << 20, 5 << 20 / 2, 1 << 20}
	var in bytes.Buffer
	var want [][]byte
	for i, n := range sizes {
		line := []byte(`{"jsonrpc":"2.0","method":"m","params":{"i":` + string(rune('0'+i)) + `,"t":"` + strings.Repeat("x", n) + `"}}`)
		want = append(want, line)
		in.Write(line)
		if i%2 == 0 {
			in.WriteString("\r\n")
		} else {
			in.WriteString("\n")
		}
	}
	in.WriteString(`{"jsonrpc":"2.0","method":"m","params":{"t":"` + strings.Repeat("y", 5<<20) + `"}}` + "\n") // over the limit
	in.WriteString(`{"jsonrpc":"2.0","method":"last","params":{"t":"` + strings.Repeat("z", 200<<10) + `"}}`)   // no "\n"
	want = append(want, nil, []byte(`{"jsonrpc":"2.0","method":"last","params":{"t":"`+strings.Repeat("z", 200<<10)+`"}}`))
	s := NewStream(io.NopCloser(&in), discardCloser{}, StreamOptions{MaxLine: 4 << 20})
	defer s.Close()
	for i, w := range want {
		line, sh, err := s.readLine()
		if w == nil {
			if !errors.Is(err, ErrLineTooLong) {
				t.Fatalf("line %d: %v, want ErrLineTooLong", i, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(line, w) {
			t.Fatalf("line %d: %d bytes, %v; want %d bytes", i, len(line), err, len(w))
		}
		held := cap(line)
		if sh != nil {
			held = cap(sh.b)
		}
		if held-len(line) > len(line)/8 {
			t.Errorf("line %d: %d bytes held in %d", i, len(line), held)
		}
		if !json.Valid(line) {
			t.Fatalf("line %d is not JSON", i)
		}
		if (sh != nil) != (len(line) > 64<<10 && len(line) <= maxPooled*7/8) {
			t.Errorf("line %d of %d bytes: pooled %v, want pooled past the reader's buffer up to %d bytes", i, len(line), sh != nil, maxPooled)
		}
		if sh != nil {
			sh.Release() // the next long line may reuse it
		}
	}
	if _, _, err := s.readLine(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last line: %v, want EOF", err)
	}
}
