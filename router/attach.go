package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/store"
)

// markMethod is the notification SessionHistory writes into a session's
// stream (hub.MarkMethod: the hub consumes it, no client sees it).
const markMethod = "_acp-router/mark"

// markPrefix starts every mark line (markLine writes them so), which lets
// the replay skip them without decoding any line.
var markPrefix = []byte(`{"jsonrpc":"2.0","method":"` + markMethod + `"`)

func markLine(id, mark string) []byte {
	b := append([]byte(nil), markPrefix...)
	b = append(b, `,"params":{"sessionId":`...)
	b = acp.AppendString(b, id)
	b = append(b, `,"mark":`...)
	b = acp.AppendString(b, mark)
	return append(b, `}}`...)
}

// isMark reports whether a stored line is a mark.
func isMark(line []byte) bool { return bytes.HasPrefix(line, markPrefix) }

// SessionHistory is session/attach's history (hub.History, issue 30): the
// stored updates of session id, oldest first, as session/load replays
// them. When the session is live here, mark is written into the session's
// stream to the editor (the hub) and recorded in its history at one point,
// under the session's lock (the one that orders recording and writing):
// the returned lines stop there, so the hub knows exactly which live lines
// the history already holds. Lines not part of the history (notices, the
// commands sent on a load) may fall on either side and are then not seen
// by the attaching client; a subagent's line, recorded under its own lock,
// may be seen twice if it is written at the same instant.
func (r *Router) SessionHistory(ctx context.Context, id, mark string) (lines [][]byte, marked bool, err error) {
	r.mu.Lock()
	s := r.sessions[id]
	r.mu.Unlock()
	var ml []byte
	if s != nil {
		ml = markLine(id, mark)
		s.mu.Lock()
		if !s.closed {
			s.recordLineLocked(ml)
			s.writeLiveLocked(ml)
			marked = true
		}
		s.mu.Unlock()
	}
	if r.opts.Store == nil {
		if !marked {
			return nil, false, fmt.Errorf("no session %q is kept", id)
		}
		return nil, true, nil
	}
	h, err := r.opts.Store.Load(ctx, id)
	if errors.Is(err, store.ErrNotFound) && marked {
		return nil, true, nil // not recorded (yet): nothing to replay
	}
	if err != nil {
		return nil, false, err
	}
	for _, line := range h.Updates {
		if isMark(line) {
			if marked && bytes.Equal(line, ml) {
				break
			}
			continue
		}
		lines = append(lines, line)
	}
	return lines, marked, nil
}

// withoutMarks is lines without the marks SessionHistory recorded, the same
// slice when there is none.
func withoutMarks(lines [][]byte) [][]byte {
	for i, line := range lines {
		if isMark(line) {
			out := append([][]byte(nil), lines[:i]...)
			for _, l := range lines[i+1:] {
				if !isMark(l) {
					out = append(out, l)
				}
			}
			return out
		}
	}
	return lines
}
