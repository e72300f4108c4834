package hub

import (
	"bytes"
	"encoding/json"
	"time"
	"unsafe"

	"github.com/acp-router/acp-router/acp"
)

// Coalescing streamed text (issue 31: an agent that streams 10,000
// updates a second to a phone or a browser tab). A client that does not
// keep up would otherwise get its queue filled with one tiny
// agent_message_chunk after another, be dropped as too slow, or, a browser
// page having no backpressure on a WebSocket, be sent more messages than
// it can parse and fall behind without bound. Instead, a chunk queued for
// a remote client that is behind (Options.CoalesceAfter messages queued),
// or that asked for a chunk interval (MethodWatch), joins the chunk at the
// tail of its queue when the two are the same update but for their text:
// same session, same kind
// (agent_message_chunk or agent_thought_chunk), same message id and
// _meta, every byte of the line equal but the text. The client gets the
// same text in fewer messages; nothing is reordered (only the tail, not
// yet written, grows) and nothing of another kind is ever merged.
//
// The stdio editor's stream is never coalesced: the Router waits for it
// (Hub.waitEditor), so that its queue is bounded by backpressure instead,
// and it sees the very messages it would see without a hub.

// maxCoalesced bounds the text one coalesced message carries; past it the
// next chunk starts a message of its own.
const maxCoalesced = 1 << 20

// chunk is where the text of a streamed-text update is in its line: the
// line is pre + body + post, body the text's JSON string contents (without
// the quotes). Two valid string bodies concatenated are the valid body of
// the concatenated text, so that merging needs no decoding.
type chunk struct {
	pre, body, post []byte
}

// chunkOf returns the text span of a session/update line whose update is
// an agent_message_chunk or agent_thought_chunk with text content; nil for
// anything else, and for a line with an ambiguous member (two members of
// one name: a peer might read the other one).
func chunkOf(line []byte) *chunk {
	var out [2]json.RawMessage
	// From the line itself, so that the spans found are the line's.
	if acp.MembersOfValid(line, []string{"params"}, out[:1]) != nil || out[0] == nil {
		return nil
	}
	if acp.MembersOfValid(out[0], []string{"update"}, out[:1]) != nil || out[0] == nil {
		return nil
	}
	update := out[0]
	if acp.MembersOfValid(update, []string{"sessionUpdate", "content"}, out[:]) != nil || out[1] == nil {
		return nil
	}
	if k := string(out[0]); k != `"agent_message_chunk"` && k != `"agent_thought_chunk"` {
		return nil
	}
	content := out[1]
	if acp.MembersOfValid(content, []string{"type", "text"}, out[:]) != nil || string(out[0]) != `"text"` {
		return nil
	}
	text := out[1]
	if len(text) < 2 || text[0] != '"' || text[len(text)-1] != '"' {
		return nil
	}
	// text aliases line (MembersOfValid returns spans of its input, with
	// their capacity cut): its offset in the line.
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(text))) - uintptr(unsafe.Pointer(unsafe.SliceData(line))))
	if off < 0 || off+len(text) > len(line) || &line[off] != &text[0] {
		return nil
	}
	if _, _, amb := acp.AmbiguousMember(line); amb {
		return nil
	}
	end := off + len(text)
	return &chunk{pre: line[:off+1], body: line[off+1 : end-1], post: line[end-1:]}
}

// queued is one message waiting for a client: a line, or a chunk that
// later chunks of the same update joined (more: their text bodies).
type queued struct {
	line []byte
	ch   *chunk // shared by every client the line went to: read-only
	more [][]byte
	size int // the bytes it will take on the wire
}

// join adds c's text to q when q is a chunk of the same update and the
// result stays under maxCoalesced.
func (q *queued) join(c *chunk) bool {
	if q.ch == nil || c == nil || q.size+len(c.body) > maxCoalesced ||
		!bytes.Equal(q.ch.pre, c.pre) || !bytes.Equal(q.ch.post, c.post) {
		return false
	}
	q.more = append(q.more, c.body)
	q.size += len(c.body)
	return true
}

// bytes is the message to write.
func (q *queued) bytes() []byte {
	if len(q.more) == 0 {
		return q.line
	}
	b := make([]byte, 0, q.size)
	b = append(b, q.ch.pre...)
	b = append(b, q.ch.body...)
	for _, m := range q.more {
		b = append(b, m...)
	}
	return append(b, q.ch.post...)
}

// Bounds of a client's chunk interval (MethodWatch's chunkIntervalMs).
const maxChunkInterval = time.Second
