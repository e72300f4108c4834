package acp

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sourcegraph/jsonrpc2"
)

// repeatReader yields line n times.
type repeatReader struct {
	line []byte
	n    int
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	written := 0
	for len(p) > 0 && r.n > 0 {
		c := copy(p, r.line[r.off:])
		p, written, r.off = p[c:], written+c, r.off+c
		if r.off == len(r.line) {
			r.off, r.n = 0, r.n-1
		}
	}
	if written == 0 && r.n == 0 {
		return 0, io.EOF
	}
	return written, nil
}

// updateLine is a session/update notification of about size bytes, shaped
// like an agent_message_chunk.
func updateLine(tb testing.TB, size int) []byte {
	tb.Helper()
	head := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`
	tail := `"}}}}`
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. \\n", size)[:size-len(head)-len(tail)]
	text = strings.TrimSuffix(text, `\`) // never end on half an escape
	line := []byte(head + text + tail)
	if !json.Valid(line) {
		tb.Fatal("benchmark line is not JSON")
	}
	return line
}

// BenchmarkStreamRelay is the router's hot path: an agent's session/update
// lines read by ReadObject and forwarded byte for byte by an Intercept that
// WriteRaw's them to the editor's stream. "discard" measures the stream
// alone; "pipe" writes to an OS pipe drained by another goroutine, as the
// router's stdout is; "lanes/…" is the same with the editor's lanes, as the
// router relays: WriteRawLane into the session's lane, then WaitRoom.
func BenchmarkStreamRelay(b *testing.B) {
	blocking := StreamOptions{Blocking: true}
	lanes := StreamOptions{LaneBytes: 2 << 20, QueueBytes: 16 << 20} // the router's
	for _, v := range []struct {
		name string
		opts StreamOptions
	}{{"", blocking}, {"lanes/", lanes}} {
		b.Run(v.name+"discard", func(b *testing.B) { benchRelay(b, discardCloser{}, v.opts) })
		b.Run(v.name+"pipe", func(b *testing.B) {
			r, w, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			drained := make(chan struct{})
			go func() {
				io.Copy(io.Discard, r)
				r.Close()
				close(drained)
			}()
			benchRelay(b, w, v.opts)
			<-drained
		})
	}
}

func benchRelay(b *testing.B, out io.WriteCloser, opts StreamOptions) {
	line := updateLine(b, 4<<10)
	src := &repeatReader{line: append(line, '\n'), n: b.N}
	editor := NewStream(io.NopCloser(strings.NewReader("")), out, opts)
	agent := NewStream(io.NopCloser(src), discardCloser{}, StreamOptions{Intercept: func(m *Message) bool {
		if m.Kind != KindNotification || m.Method != MethodSessionUpdate {
			b.Fatalf("unexpected %s %q", m.Kind, m.Method)
		}
		if opts.LaneBytes == 0 {
			if err := editor.WriteRaw(m.Raw); err != nil {
				b.Fatal(err)
			}
			return true
		}
		const sid = "0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90" // the router knows it: no LaneOf
		if err := editor.WriteRawLane(sid, m.Raw); err != nil {
			b.Fatal(err)
		}
		if err := editor.WaitRoom(sid); err != nil {
			b.Fatal(err)
		}
		return true
	}})
	b.ReportAllocs()
	b.SetBytes(int64(len(line) + 1))
	b.ResetTimer()
	var v json.RawMessage
	if err := agent.ReadObject(&v); !errors.Is(err, io.EOF) {
		b.Fatalf("ReadObject: %v", err)
	}
	editor.Close()
	<-editor.Done()
	b.StopTimer()
	agent.Close()
	if got, want := editor.Written(), int64(b.N)*int64(len(line)+1); got != want {
		b.Fatalf("relayed %d bytes, want %d", got, want)
	}
}

// BenchmarkClassify isolates the envelope scan of one session/update line
// (validation of the whole line included), and the map decode it replaced
// ("map": classifyMap, the reference of the scanner's tests).
func BenchmarkClassify(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"200B", 200}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		line := updateLine(b, size.n)
		for _, impl := range []struct {
			name     string
			classify func([]byte) (*Message, error)
		}{{"scan", Classify}, {"map", classifyMap}} {
			b.Run(size.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(line)))
				for b.Loop() {
					if _, err := impl.classify(line); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkEncodeLine is what WriteObject costs jsonrpc2's messages: a
// session/prompt request the router forwards (4 KiB of params), encoded by
// the library and checked once ("line"), or encoded and compacted again by
// json.Marshal ("marshal", as before).
func BenchmarkEncodeLine(b *testing.B) {
	line := updateLine(b, 4<<10)
	m, err := Classify(line)
	if err != nil {
		b.Fatal(err)
	}
	req := &jsonrpc2.Request{Method: MethodSessionPrompt, Params: &m.Params, ID: jsonrpc2.ID{Num: 12}}
	for _, impl := range []struct {
		name   string
		encode func(any) ([]byte, error)
	}{{"line", encodeLine}, {"marshal", json.Marshal}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if _, err := impl.encode(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUpdateMembers is reading what a relay needs of a session/update
// (its sessionId, and the update's kind, ids and content span) from a
// classified line: with Members, or with json.Unmarshal into a struct
// ("struct", which also copies the content). The router's decodeUpdate does
// the latter today.
func BenchmarkUpdateMembers(b *testing.B) {
	var (
		paramNames  = []string{"sessionId", "update"}
		updateNames = []string{"sessionUpdate", "toolCallId", "messageId", "_meta", "content"}
	)
	for _, size := range []struct {
		name string
		n    int
	}{{"200B", 200}, {"1MiB", 1 << 20}} {
		m, err := Classify(updateLine(b, size.n))
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range []struct {
			name    string
			members func(json.RawMessage, []string, []json.RawMessage) error
		}{{"members", Members}, {"valid", MembersOfValid}} {
			b.Run(size.name+"/"+v.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(m.Raw)))
				var p [2]json.RawMessage
				var u [5]json.RawMessage
				for b.Loop() {
					var sid, kind string
					if v.members(m.Params, paramNames, p[:]) != nil || json.Unmarshal(p[0], &sid) != nil ||
						v.members(p[1], updateNames, u[:]) != nil || json.Unmarshal(u[0], &kind) != nil || u[4] == nil {
						b.Fatal("cannot read the update")
					}
				}
			})
		}
		b.Run(size.name+"/struct", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(m.Raw)))
			for b.Loop() {
				var v struct {
					SessionID string `json:"sessionId"`
					Update    struct {
						Kind       string          `json:"sessionUpdate"`
						ToolCallID string          `json:"toolCallId"`
						MessageID  string          `json:"messageId"`
						Meta       json.RawMessage `json:"_meta"`
						Content    json.RawMessage `json:"content"`
					} `json:"update"`
				}
				if json.Unmarshal(m.Params, &v) != nil || v.Update.Content == nil {
					b.Fatal("cannot read the update")
				}
			}
		})
	}
}

// BenchmarkScanString is the scan of one long JSON string (what a big
// update's text costs the validating pass): prose with an escape every 12
// bytes (the benchmark agent's filler), code with a line break every 40,
// and text with none.
func BenchmarkScanString(b *testing.B) {
	for _, v := range []struct{ name, unit string }{
		{"prose", `The quick brown fox jumps over the lazy dog; \"quoted\" text.\n`},
		{"code", `\tif err := f(x); err != nil { return fmt.Errorf(\"f: %w\", err) }\n`},
		{"plain", `The quick brown fox jumps over the lazy dog, again and again. `},
		{"smartquotes", `The model’s answer — “quoted” — then plain text for a while, as LLM prose has it. `},
		{"cjk", `快速的棕色狐狸跳过了懒狗，一次又一次。`},
	} {
		s := []byte(`"` + strings.Repeat(v.unit, (1<<20)/len(v.unit)) + `"`)
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				if end, _, ok := scanString(s, 0); !ok || end != len(s) {
					b.Fatal("scan failed")
				}
			}
		})
	}
}
