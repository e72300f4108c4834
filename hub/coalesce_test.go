package hub

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/acp"
)

// chunkLine is a session/update line of kind with text content, and the
// extra members of its update (messageId, _meta, ...).
func chunkLine(sid, kind, text, extra string) []byte {
	t, _ := json.Marshal(text)
	return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%q,"update":{"sessionUpdate":%q,"content":{"type":"text","text":%s}%s}}}`, sid, kind, t, extra))
}

// The queue of a client that is behind coalesces streamed text into the
// chunk at its tail only when the two are the same update but for their
// text: never across kinds, sessions, message ids or _meta, never over a
// message of another kind, never for the stdio editor; the text, escapes
// included, is the concatenation.
func TestCoalesceQueue(t *testing.T) {
	h := New(Options{CoalesceAfter: 1})
	lines := [][]byte{
		chunkLine("s1", "agent_message_chunk", "a<", ""),
		chunkLine("s1", "agent_message_chunk", "b\u00e9\n\"\u202e", ""),
		chunkLine("s1", "agent_message_chunk", "\U0001F600", ""),
		chunkLine("s1", "agent_thought_chunk", "c", ""),
		chunkLine("s1", "agent_thought_chunk", "d", ""),
		chunkLine("s1", "agent_message_chunk", "e", ""),
		[]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"x"}}}`),
		chunkLine("s1", "agent_message_chunk", "f", ""),
		chunkLine("s2", "agent_message_chunk", "g", ""),
		chunkLine("s1", "agent_message_chunk", "h", `,"messageId":"m2"`),
		chunkLine("s1", "agent_message_chunk", "i", `,"messageId":"m2"`),
		chunkLine("s1", "agent_message_chunk", "j", `,"_meta":{"k":1}`),
		chunkLine("s1", "agent_message_chunk", "k", `,"_meta":{"k":2}`),
		chunkLine("s1", "user_message_chunk", "l", ""),
		chunkLine("s1", "user_message_chunk", "m", ""),
		// Two content members: a peer reads the last; never merged.
		[]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"n"},"content":{"type":"text","text":"o"}}}}`),
		chunkLine("s1", "agent_message_chunk", "p", ""),
	}
	want := []string{"a<b\u00e9\n\"\u202e\U0001F600", "cd", "e", "tool_call", "f", "g", "hi", "j", "k", "l", "m", "o", "p"}
	for _, editor := range []bool{false, true} {
		c := newClient(h, newPipeConn(), Identity{Name: "phone", Editor: editor})
		for _, l := range lines {
			m, err := acp.Classify(l)
			if err != nil {
				t.Fatal(err)
			}
			c.enqueueChunk(l, chunkOf(m.Raw))
		}
		var got []string
		size := 0
		for _, q := range c.q {
			b := q.bytes()
			size += len(b)
			if len(b) != q.size {
				t.Errorf("a queued message of %d bytes counted as %d", len(b), q.size)
			}
			var v struct {
				Params struct {
					Update struct {
						SessionUpdate string
						Content       struct{ Text string }
					}
				}
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("coalesced line does not decode: %v: %s", err, b)
			}
			u := v.Params.Update
			if u.SessionUpdate == "tool_call" {
				got = append(got, "tool_call")
			} else {
				got = append(got, u.Content.Text)
			}
		}
		if size != c.qbytes {
			t.Errorf("queue of %d bytes counted as %d", size, c.qbytes)
		}
		w := want
		if editor {
			w = []string{"a<", "b\u00e9\n\"\u202e", "\U0001F600", "c", "d", "e", "tool_call", "f", "g", "h", "i", "j", "k", "l", "m", "o", "p"}
		}
		if strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("editor %v: queued %q, want %q", editor, got, w)
		}
	}
}

// A remote client that stops reading while the agent streams 2,000
// chunks, with a queue bound of 50 messages, is not dropped: the chunks
// join the one at its queue's tail, and once it reads again it gets the
// very text the editor got, in far fewer messages.
func TestCoalesceSlowClient(t *testing.T) {
	e := startHub(t, Options{QueueMessages: 50})
	ed, sid := e.editorSession()
	conn := newPipeConn()
	conn.block = make(chan struct{}, 2)
	conn.block <- struct{}{} // initialize's answer
	conn.block <- struct{}{} // attach's
	obs, _ := e.attachedConn(conn, Identity{Name: "phone", Role: RoleObserver, AllSessions: true}, sid, RoleObserver, historyNone)
	ed.mustCall("session/prompt", promptParams(sid, "big 2000 40\nsay end"))
	close(conn.block)
	want := strings.Join(ed.texts(sid), "")
	waitFor(t, "the observer's text", func() bool { return strings.Join(obs.texts(sid), "") == want })
	if n := len(obs.texts(sid)); n > 100 {
		t.Errorf("the slow client got %d messages for 2,001 chunks", n)
	}
	if err := conn.closeReason(); err != nil {
		t.Errorf("the slow client was closed: %v", err)
	}
	t.Logf("2,001 chunks reached the slow client in %d messages", len(obs.texts(sid)))
}

// A client that asked for a chunk interval (MethodWatch chunkIntervalMs)
// gets a stream of chunks at most about once per interval, with the same
// text; a client that did not gets them as fast as it reads (coalesced
// only while it is behind).
func TestChunkInterval(t *testing.T) {
	e := startHub(t, Options{})
	ed, sid := e.editorSession()
	paced, _ := e.attached(Identity{Name: "page", Role: RoleObserver, AllSessions: true}, sid, RoleObserver, historyNone)
	res := paced.mustCall(MethodWatch, map[string]any{"chunkIntervalMs": 100})
	if !strings.Contains(string(res), `"chunkIntervalMs":100`) {
		t.Fatalf("watch answered %s", res)
	}
	plain, _ := e.attached(Identity{Name: "sdk", Role: RoleObserver, AllSessions: true}, sid, RoleObserver, historyNone)
	start := time.Now()
	ed.mustCall("session/prompt", promptParams(sid, "big 500 20\nsleep 150ms\nsay end"))
	want := strings.Join(ed.texts(sid), "")
	for _, c := range []*tclient{paced, plain} {
		waitFor(t, "the text", func() bool { return strings.Join(c.texts(sid), "") == want })
	}
	took := time.Since(start)
	// One message per 100 ms, and one more for the last chunk after the
	// sleep; the loaded machine may stretch the stream.
	if n, most := len(paced.texts(sid)), int(took/(100*time.Millisecond))+2; n > most {
		t.Errorf("the paced client got %d messages in %v, want at most %d", n, took, most)
	}
	t.Logf("501 chunks in %v: %d messages to the paced client, %d to the other", took, len(paced.texts(sid)), len(plain.texts(sid)))
	if r := ed.mustCall(MethodWatch, map[string]any{"chunkIntervalMs": 100}); !strings.Contains(string(r), `"chunkIntervalMs":0`) {
		t.Errorf("the editor's stream was given an interval: %s", r)
	}
}

// attachedConn is attached on a connection of the test's making.
func (e *env) attachedConn(conn *pipeConn, id Identity, sid, role, policy string) (*tclient, json.RawMessage) {
	e.t.Helper()
	c := e.connectConn(conn, id)
	c.initialize()
	return c, c.mustCall(MethodAttach, map[string]any{"sessionId": sid, "role": role, "historyPolicy": policy})
}

// A client attaching with the full history while the agent streams gets
// the live chunks held until its replay is sent: past CoalesceAfter they
// are coalesced there too, so that a long replay under a fast stream does
// not drop the client; it gets the editor's text, once, in order.
func TestCoalesceHeld(t *testing.T) {
	e := startHub(t, Options{QueueMessages: 200})
	ed, sid := e.editorSession()
	ed.mustCall("session/prompt", promptParams(sid, "big 300 10"))
	conn := newPipeConn()
	conn.block = make(chan struct{}, 1)
	conn.block <- struct{}{} // initialize's answer; the replay then waits
	phone := e.connectConn(conn, Identity{Name: "phone", Role: RoleObserver, AllSessions: true})
	phone.start("initialize", map[string]any{"protocolVersion": 1})
	attached := phone.start(MethodAttach, map[string]any{"sessionId": sid, "role": RoleObserver, "historyPolicy": historyFull})
	waitFor(t, "the replay under way", func() bool {
		e.hub.mu.Lock()
		defer e.hub.mu.Unlock()
		mb := phone.member(e.hub, sid)
		return mb != nil && mb.phase == phaseAfterMark
	})
	ed.mustCall("session/prompt", promptParams(sid, "big 2000 10\nsay end"))
	close(conn.block)
	select {
	case m := <-attached:
		if m.Error != nil {
			t.Fatalf("attach: %s", m.Error.Message)
		}
	case <-conn.closed:
		t.Fatalf("the phone was closed: %v", conn.closeReason())
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to the attach")
	}
	want := strings.Join(ed.texts(sid), "")
	waitFor(t, "the phone's text", func() bool { return strings.Join(phone.texts(sid), "") == want })
	if err := conn.closeReason(); err != nil {
		t.Errorf("the phone was closed: %v", err)
	}
	t.Logf("2,301 chunks reached the phone in %d messages", len(phone.texts(sid)))
}

// member is c's membership of session sid (under Hub.mu).
func (c *tclient) member(h *Hub, sid string) *member {
	for cl := range h.clients {
		if cl.conn == Conn(c.conn) {
			return cl.sessions[sid]
		}
	}
	return nil
}
