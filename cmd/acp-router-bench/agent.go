package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// The Go agent of the benchmark (`acp-router-bench agent`): a zero-delay ACP
// v1 agent whose turns are chosen by the prompt text, so that one binary
// serves every scenario:
//
//	anything else            one agent_message_chunk, then end_turn
//	flood N SIZE             N agent_message_chunk updates of SIZE bytes each (the whole line), then end_turn
//	paced N RATE             N updates of about 200 bytes at RATE per second, each carrying its send time, then end_turn
//
// session/load of a session id "replay-N" replays N updates of 200 bytes
// and answers {}; of any other id it answers {} at once, replaying nothing
// (a router re-attaching one of its sessions: only the router's own replay
// is then measured). It advertises loadSession.
//
// It reads one line at a time and flushes its output only when no more input
// is buffered, so that it is never the bottleneck of a concurrent run.

// updateHead/updateTail frame an agent_message_chunk; the text goes between.
const (
	updateHead = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%s,"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`
	updateTail = `"}}}}`
	// latencyMark starts the text of a paced update: the client finds the
	// send time (Unix nanoseconds) right after it.
	latencyMark = `"text":"t=`
	// pacedSize is the size of a paced or replayed update line.
	pacedSize = 200
)

// filler is chunk text: prose with a JSON escape now and then, as real
// agents send (escapes take the slow path of a JSON string decoder).
const filler = `The quick brown fox jumps over the lazy dog; \"quoted\" text.\n`

type benchAgent struct {
	w        *bufio.Writer
	sessions int
}

func agentMain() error {
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	a := &benchAgent{w: bufio.NewWriterSize(os.Stdout, 64<<10)}
	for {
		line, err := readLine(in)
		if len(bytes.TrimSpace(line)) > 0 {
			a.handle(line)
		}
		if err != nil {
			a.w.Flush()
			if err == io.EOF {
				return nil
			}
			return err
		}
		if in.Buffered() == 0 {
			if err := a.w.Flush(); err != nil {
				return err
			}
		}
	}
}

// readLine returns the next line without its "\n" (a fresh slice).
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte{'\n'}), err
	}
}

func (a *benchAgent) handle(line []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil || m.Method == "" {
		return // a response to nothing we asked, or garbage
	}
	var p struct {
		SessionID string `json:"sessionId"`
		Prompt    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"prompt"`
	}
	json.Unmarshal(m.Params, &p)
	switch m.Method {
	case "initialize":
		a.reply(m.ID, `{"protocolVersion":1,"agentCapabilities":{"loadSession":true},"authMethods":[],"agentInfo":{"name":"acp-router-bench-agent","version":"1"}}`)
	case "session/new":
		a.sessions++
		// Unique to this process, as real agents' ids are (UUIDs): a
		// router started on a state_dir an earlier scenario used
		// finds no stored session of that id, so its session id is the
		// agent's and updates are relayed as they are (BENCHMARKS.md,
		// part 4: "bench-1" in every scenario made the floods of a
		// full run measure the path of a translated id).
		a.reply(m.ID, fmt.Sprintf(`{"sessionId":"bench-%d-%d"}`, os.Getpid(), a.sessions))
	case "session/prompt":
		text := ""
		for _, b := range p.Prompt {
			if b.Type == "text" {
				text = b.Text // the last text block: a router may prepend a brief
			}
		}
		a.prompt(p.SessionID, text)
		a.reply(m.ID, `{"stopReason":"end_turn"}`)
	case "session/load":
		// Any other id (a router re-attaching its session "bench-PID-N") is
		// answered at once, with nothing replayed.
		if rest, ok := strings.CutPrefix(p.SessionID, "replay-"); ok {
			n, _ := strconv.Atoi(rest)
			a.replay(p.SessionID, n)
		}
		a.reply(m.ID, `{}`)
	case "session/cancel":
	default:
		if m.ID != nil {
			a.w.WriteString(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"method not found"}}` + "\n")
		}
	}
}

func (a *benchAgent) reply(id json.RawMessage, result string) {
	a.w.WriteString(`{"jsonrpc":"2.0","id":`)
	a.w.Write(id)
	a.w.WriteString(`,"result":`)
	a.w.WriteString(result)
	a.w.WriteString("}\n")
}

func (a *benchAgent) prompt(sid, text string) {
	f := strings.Fields(text)
	arg := func(i, def int) int {
		if i < len(f) {
			if n, err := strconv.Atoi(f[i]); err == nil {
				return n
			}
		}
		return def
	}
	switch {
	case len(f) > 0 && f[0] == "flood":
		line := updateLine(sid, arg(2, pacedSize), "")
		for range arg(1, 1) {
			a.w.Write(line)
		}
	case len(f) > 0 && f[0] == "paced":
		n, rate := arg(1, 1000), arg(2, 1000)
		interval := time.Second / time.Duration(max(rate, 1))
		a.w.Flush()
		start := time.Now()
		for i := range n {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			a.w.Write(updateLine(sid, pacedSize, "t="+strconv.FormatInt(time.Now().UnixNano(), 10)+";"))
			a.w.Flush()
		}
	default:
		a.w.Write(updateLine(sid, 0, "Hello from the Go bench agent."))
	}
}

func (a *benchAgent) replay(sid string, n int) {
	line := updateLine(sid, pacedSize, "")
	for range n {
		a.w.Write(line)
	}
}

// updateLine is an agent_message_chunk for sid whose line (with its "\n")
// is size bytes on the wire, its text starting with prefix and padded with
// filler; size 0 means just the prefix.
func updateLine(sid string, size int, prefix string) []byte {
	q, _ := json.Marshal(sid)
	line := fmt.Appendf(nil, updateHead, q)
	line = append(line, prefix...)
	for pad := size - len(line) - len(updateTail) - 1; pad > 0; {
		n := min(pad, len(filler))
		chunk := filler[:n]
		if chunk[n-1] == '\\' { // never end on half an escape
			chunk = chunk[:n-1] + " "
		}
		line = append(line, chunk...)
		pad -= n
	}
	line = append(line, updateTail...)
	return append(line, '\n')
}
