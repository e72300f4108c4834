package remote

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// The stdio editor's Conn: messages one a line; what is not a message is
// answered with id null and the stream goes on.
func TestLineConn(t *testing.T) {
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize"}`,
		``,
		`{"jsonrpc":`,
		`[1]`,
		`{"jsonrpc":"2.0","method":"x","params":{"pad":"` + strings.Repeat("a", 100) + `"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/new"}`,
	}, "\n")
	var out bytes.Buffer
	c := NewLineConn(strings.NewReader(in), &out, 64, 0, nil)
	var got []string
	for {
		msg, err := c.Read(t.Context())
		if err == io.EOF {
			break
		}
		got = append(got, string(msg))
	}
	if len(got) != 2 || !strings.Contains(got[0], `"id":1`) || !strings.Contains(got[1], `"id":2`) {
		t.Errorf("read %q", got)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"-32700", "-32600", "64-byte limit"}
	if len(lines) != len(want) {
		t.Fatalf("answers %q", lines)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) || !strings.Contains(lines[i], `"id":null`) {
			t.Errorf("answer %d = %s, want %s", i, lines[i], w)
		}
	}
}
