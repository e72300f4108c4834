package router

// Micro-benchmarks of the relay's hot paths (issue 6): an agent's
// session/update through the router's own read path to the editor's write
// queue, and the id translations that run per message. The end-to-end
// figures are cmd/acp-router-bench's (BENCHMARKS.md); these locate the cost.
//
//	go test -run '^$' -bench . -benchmem ./router/
//	go test -run '^$' -bench 'ForwardUpdate/1MiB' -cpuprofile cpu.prof ./router/ && go tool pprof -top cpu.prof

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// benchAgent names the one agent of the fixture.
const benchAgent = "bench"

// relayFixture is a router with one agent instance and one session whose
// turn is running on it, wired as Serve wires it except that the agent's
// instance has no process: the relay never touches it.
type relayFixture struct {
	r    *Router
	inst *upstream.Instance
	s    *Session
	sid  string // the agent's session id
	// lines counts the lines written to the editor; final once done is
	// closed.
	lines int64
	got   atomic.Int64 // lines the editor has read so far (no read func)
	done  chan struct{}
	stop  func()
}

// newRelayFixture builds the fixture on config.example.yaml's features
// (handoff on, 16 KiB). translate makes the router's session id differ from
// the agent's, so that every update is re-encoded. out is where the
// editor's stream writes: a pipe drained and counted by a goroutine, as the
// router's stdout is.
func newRelayFixture(tb testing.TB, translate bool) *relayFixture {
	tb.Helper()
	return newRelayFixtureOpts(tb, translate, Options{})
}

// newRelayFixtureOpts is newRelayFixture with the router's options.
func newRelayFixtureOpts(tb testing.TB, translate bool, opts Options) *relayFixture {
	tb.Helper()
	return newRelayFixtureEditor(tb, translate, opts, nil)
}

// newRelayFixtureEditor is newRelayFixtureOpts whose editor reads what the
// router writes with read (nil: counts the lines), which returns the lines
// it read once the router closes its side.
func newRelayFixtureEditor(tb testing.TB, translate bool, opts Options, read func(io.Reader) int64) *relayFixture {
	tb.Helper()
	sh := "/bin/sh" // never started; the config only needs a command that exists
	yaml := fmt.Sprintf("version: 1\nagents:\n  - name: %s\n    command: %s\nrouting: {default: %s}\nhandoff: {max_bytes: 16384}\nstate_dir: %s\n",
		benchAgent, sh, benchAgent, tb.TempDir())
	cfg, err := config.Parse("bench.yaml", []byte(yaml), os.LookupEnv)
	if err != nil {
		tb.Fatal(err)
	}
	r := New(cfg, opts)
	f := &relayFixture{r: r, sid: "0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90", done: make(chan struct{})}

	pr, pw, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		defer close(f.done)
		if read != nil {
			f.lines = read(pr)
			io.Copy(io.Discard, pr)
			pr.Close()
			return
		}
		buf := make([]byte, 256<<10)
		for {
			n, err := pr.Read(buf)
			f.lines += int64(bytes.Count(buf[:n], []byte{'\n'}))
			f.got.Store(f.lines)
			if err != nil {
				pr.Close()
				return
			}
		}
	}()
	editorIn, editorInW := io.Pipe() // the editor says nothing
	r.editor = acp.NewPeer(context.Background(), editorIn, pw, acp.StreamOptions{LaneBytes: editorLaneBytes, QueueBytes: editorQueueBytes, AnswerInvalid: true}, editorHandler{r})
	r.editorSet()
	f.stop = func() {
		editorInW.Close() // the editor leaves: its stream drains and closes pw
		<-r.editor.Stream().Done()
		<-f.done
	}

	f.inst = &upstream.Instance{Agent: r.byName[benchAgent], Gen: 1}
	if translate {
		r.sessions[f.sid] = &Session{ID: f.sid} // taken: the router's id becomes SID~bench
	}
	f.s = &Session{Cwd: "/", r: r, active: benchAgent, down: map[string]*downstream{},
		toolIDs: merge.NewIDTable(), msgIDs: merge.NewIDTable()}
	res, err := acp.Classify([]byte(`{"jsonrpc":"2.0","id":1,"result":{"sessionId":"` + f.sid + `"}}`))
	if err != nil || !r.bind(f.s, f.inst, res) {
		tb.Fatalf("bind: %v", err)
	}
	if (f.s.ID != f.sid) != translate {
		tb.Fatalf("router session id %q for agent session %q", f.s.ID, f.sid)
	}
	f.s.openNow()
	d := f.s.down[benchAgent]
	t := &turn{agent: benchAgent}
	prompt := json.RawMessage(`{"sessionId":"` + f.s.ID + `","prompt":[{"type":"text","text":"Explain the relay."}]}`)
	r.briefAndRecord(f.s, t, d, prompt) // starts the turn's handoff record, as dispatch does
	f.s.mu.Lock()
	f.s.turn, t.d, t.inst = t, d, f.inst
	f.s.mu.Unlock()
	return f
}

// updateLine is an agent_message_chunk of session sid whose line (without
// "\n") is size bytes: prose with a JSON escape now and then.
func updateLine(tb testing.TB, sid string, size int) []byte {
	tb.Helper()
	head := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + sid + `","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`
	tail := `"}}}}`
	text := strings.Repeat(`The quick brown fox jumps over the lazy dog; \"quoted\" text.\n`, size/60+1)[:size-len(head)-len(tail)]
	if strings.HasSuffix(text, `\`) {
		text = text[:len(text)-1] + " "
	}
	line := []byte(head + text + tail)
	if !json.Valid(line) || len(line) != size {
		tb.Fatalf("benchmark line: valid %v, %d bytes", json.Valid(line), len(line))
	}
	return line
}

// repeatReader yields line n times.
type repeatReader struct {
	line []byte
	n    int
	off  int
	sent atomic.Int64 // lines read whole
}

func (r *repeatReader) Read(p []byte) (int, error) {
	written := 0
	for len(p) > 0 && r.n > 0 {
		c := copy(p, r.line[r.off:])
		p, written, r.off = p[c:], written+c, r.off+c
		if r.off == len(r.line) {
			r.off, r.n = 0, r.n-1
			r.sent.Add(1)
		}
	}
	if written == 0 && r.n == 0 {
		return 0, io.EOF
	}
	return written, nil
}

type discardCloser struct{}

func (discardCloser) Write(p []byte) (int, error) { return len(p), nil }
func (discardCloser) Close() error                { return nil }

var benchSizes = []struct {
	name string
	size int
}{{"200B", 200}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}}

// BenchmarkForwardUpdate is one agent_message_chunk through the router as
// in production: the agent's acp.Stream reads and classifies the line, the
// router's interceptAgent/relayUpdate route it, the editor's stream queues
// it and its writer goroutine writes it to a pipe. "verbatim" is an update
// the router forwards as the agent's own bytes; "translated" one whose
// session id differs on the editor's side (re-encoded).
func BenchmarkForwardUpdate(b *testing.B) {
	for _, size := range benchSizes {
		for _, translate := range []bool{false, true} {
			name := map[bool]string{false: "verbatim", true: "translated"}[translate]
			b.Run(size.name+"/"+name, func(b *testing.B) {
				f := newRelayFixture(b, translate)
				line := updateLine(b, f.sid, size.size)
				src := &repeatReader{line: append(line, '\n'), n: b.N}
				agent := acp.NewStream(io.NopCloser(src), discardCloser{}, acp.StreamOptions{
					Intercept: func(m *acp.Message) bool { return f.r.interceptAgent(f.inst, m) },
					Prescan:   f.r.uopts.Prescan,
				})
				b.ReportAllocs()
				b.SetBytes(int64(len(line) + 1))
				b.ResetTimer()
				var v json.RawMessage
				if err := agent.ReadObject(&v); !errors.Is(err, io.EOF) {
					b.Fatalf("ReadObject: %v (the router let a message through)", err)
				}
				f.stop()
				b.StopTimer()
				agent.Close()
				if f.lines != int64(b.N) {
					b.Fatalf("the editor got %d lines, want %d", f.lines, b.N)
				}
			})
		}
	}
}

// BenchmarkInterceptAgent is the router's share of BenchmarkForwardUpdate:
// interceptAgent on an already classified update, the editor's queue
// drained to a pipe.
func BenchmarkInterceptAgent(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			f := newRelayFixture(b, false)
			m, err := acp.Classify(updateLine(b, f.sid, size.size))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(m.Raw) + 1))
			for b.Loop() {
				if !f.r.interceptAgent(f.inst, m) {
					b.Fatal("update not consumed")
				}
			}
			f.stop()
			if f.lines != int64(b.N) {
				b.Fatalf("the editor got %d lines, want %d", f.lines, b.N)
			}
		})
	}
}

// BenchmarkIDTranslation covers the per-message id work: canonical keys of
// request ids (every forwarded request and response), the id tables that
// keep agents' tool call and message ids apart, the session id rewrite of a
// prompt, and an update whose tool call id collides with another agent's
// (re-encoded with the id replaced).
func BenchmarkIDTranslation(b *testing.B) {
	b.Run("IDKey/number", func(b *testing.B) {
		id := json.RawMessage(`12345`)
		b.ReportAllocs()
		for b.Loop() {
			_ = acp.IDKey(id)
		}
	})
	b.Run("IDKey/string", func(b *testing.B) {
		id := json.RawMessage(`"req-7f1e-7c3b"`)
		b.ReportAllocs()
		for b.Loop() {
			_ = acp.IDKey(id)
		}
	})
	b.Run("IDTable/Out-known", func(b *testing.B) {
		t := merge.NewIDTable()
		t.Out("claude", "toolu_01")
		t.Out("codex", "toolu_01")
		b.ReportAllocs()
		for b.Loop() {
			_ = t.Out("codex", "toolu_01")
		}
	})
	b.Run("IDTable/Lookup", func(b *testing.B) {
		t := merge.NewIDTable()
		t.Out("claude", "toolu_01")
		b.ReportAllocs()
		for b.Loop() {
			_, _ = t.Lookup("claude", "toolu_01")
		}
	})
	b.Run("rewriteSessionID/prompt", func(b *testing.B) {
		p := json.RawMessage(`{"sessionId":"0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90~codex","prompt":[{"type":"text","text":"` + strings.Repeat("Fix the build. ", 20) + `"}]}`)
		b.ReportAllocs()
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			_ = rewriteSessionID(p, "0199a3c2-7f1e-7c3b-9d5e-2f4b8a6c1e90~codex", "sess-2")
		}
	})
	b.Run("agentLine/toolCallId", func(b *testing.B) {
		f := newRelayFixture(b, false)
		defer f.stop()
		s := f.s
		s.toolIDs.Out("other", "call_1") // another agent of the session used it first
		line := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + f.sid + `","update":{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Read file","kind":"read","status":"pending","locations":[{"path":"/src/main.go"}],"rawInput":{"path":"/src/main.go"}}}}`)
		m, err := acp.Classify(line)
		if err != nil {
			b.Fatal(err)
		}
		d := s.down[benchAgent]
		out := s.toolIDs.Out(benchAgent, "call_1")
		b.ReportAllocs()
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			s.mu.Lock()
			edits := s.idEdits(benchAgent, "call_1", out, "", nil)
			s.mu.Unlock()
			if got := s.agentLine(d, m, edits); bytes.Equal(got, line) {
				b.Fatal("tool call id not rewritten")
			}
		}
	})
}

// BenchmarkTurnRecord is what ending a turn costs the handoff brief
// (config.example.yaml's handoff: {max_bytes: 16384}): recording a short
// turn ("Say hello." / one line of reply) in a session with 10 or 100 turns
// of history, and in one whose history has reached its bound (about twice
// max_bytes: some 800 turns this short), where every turn trims it.
func BenchmarkTurnRecord(b *testing.B) {
	const maxBytes = 16384
	record := func(s *Session) {
		t := &turn{rec: &merge.TurnRecord{Seq: len(s.history), Agent: benchAgent, User: "Say hello."}, reply: merge.Capped{Max: maxBytes}}
		t.reply.WriteString("Hello from the Go bench agent.")
		s.record(t, maxBytes)
	}
	for _, history := range []int{10, 100, 0} {
		name := fmt.Sprintf("history=%d", history)
		if history == 0 {
			name = "history=bound"
		}
		b.Run(name, func(b *testing.B) {
			s := &Session{r: &Router{}}
			for range max(history, 2000) {
				record(s)
			}
			if history > 0 {
				s.history = s.history[len(s.history)-history:]
			}
			b.ReportMetric(float64(len(s.history)), "turns")
			b.ReportAllocs()
			for b.Loop() {
				record(s)
				if history > 0 {
					s.history = s.history[1:] // stay at this length
				}
			}
		})
	}
}
