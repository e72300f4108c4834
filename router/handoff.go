package router

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/merge"
)

// The handoff brief (DESIGN §5): an agent that handles a turn of a session
// gets, as one text block at the start of its prompt, what happened on the
// other agents since it last took part.

// briefAndRecord starts t's record and returns the prompt params for d,
// with the brief prepended when d has missed turns.
//
// An agent that does not take additionalDirectories in session/new
// (adaptNewSession leaves them out) is told them in words instead, with
// the first prompt of its downstream session: inside the brief when there
// is one, else as a block of its own (the capability is routerOwn:
// merge.capabilityTable).
func (r *Router) briefAndRecord(s *Session, t *turn, d *downstream, p json.RawMessage) json.RawMessage {
	s.mu.Lock()
	var dirs string
	if !d.dirsTold && !acp.Supported(agentCaps(d.inst).SessionCapabilities.AdditionalDirectories) {
		dirs = merge.DirectoriesNote(s.roots)
	}
	d.dirsTold = true
	s.mu.Unlock()
	h := r.cfg.Handoff
	if h.Disabled {
		return prependText(p, dirs)
	}
	blocks := t.blocks
	if !t.parsed || t.prompt != nil { // not the editor's prompt as parsed
		blocks = decodeBlocks(p)
	}
	var user []string
	for _, blk := range blocks {
		switch blk.Type {
		case "text":
			user = append(user, blk.Text)
		case "resource_link":
			if r.hiddenURI(s, d.agent.Name(), blk.URI) {
				user = append(user, hiddenNote)
			} else {
				user = append(user, "["+blk.Name+" "+blk.URI+"]")
			}
		}
	}
	text := merge.Capped{Max: h.MaxBytes}
	text.WriteString(strings.Join(user, "\n"))

	s.mu.Lock()
	brief := merge.Brief(s.history, d.seen, h.MaxBytes)
	t.rec = &merge.TurnRecord{Seq: s.nextSeq, Agent: d.agent.Name(), Title: d.agent.Title(), User: text.String()}
	t.reply = merge.Capped{Max: h.MaxBytes}
	s.nextSeq++
	d.seen = s.nextSeq
	s.mu.Unlock()
	if brief != "" {
		r.log.Debug("handoff brief", "session", s.ID, "agent", d.agent.Name(), "bytes", len(brief))
		if dirs != "" {
			brief += "\n\n" + dirs
		}
		return prependText(p, brief)
	}
	return prependText(p, dirs)
}

// promptBlock is what the router reads of a prompt's content block (names
// matched as encoding/json matches them, regardless of case).
type promptBlock struct {
	Type, Text, Name, URI string
}

// blockMembers are the members of a content block promptBlock holds.
var blockMembers = []string{"type", "text", "name", "uri"}

// promptBlocks reads the blocks of a prompt's params p (validated JSON) as
// the agent reads them, members matched by their exact names, without a
// decoder; ok is false when p.prompt is not an array of blocks (an element
// that is not an object or null, a member of promptBlock that is not a
// string or null), as a decode into []promptBlock fails.
func promptBlocks(p json.RawMessage) (blocks []promptBlock, ok bool) {
	var prompt [1]json.RawMessage
	if acp.MembersOfValid(p, promptMember, prompt[:]) != nil {
		return nil, false
	}
	if prompt[0] == nil {
		return nil, true
	}
	ok = true
	err := acp.EachElementOfValid(prompt[0], func(elem json.RawMessage) bool {
		var b promptBlock
		if string(elem) != "null" {
			var f [4]json.RawMessage
			ok = len(elem) > 0 && elem[0] == '{' && acp.MembersOfValid(elem, blockMembers, f[:]) == nil &&
				rawString(f[0], &b.Type) == nil && rawString(f[1], &b.Text) == nil &&
				rawString(f[2], &b.Name) == nil && rawString(f[3], &b.URI) == nil
		}
		blocks = append(blocks, b)
		return ok
	})
	if err != nil || !ok {
		return nil, false
	}
	return blocks, true
}

// decodeBlocks decodes params.prompt of p, block by block: a block that
// does not decode is a zero block, as before parseTurn decoded them.
func decodeBlocks(p json.RawMessage) []promptBlock {
	var fields struct {
		Prompt []json.RawMessage `json:"prompt"`
	}
	if err := json.Unmarshal(p, &fields); err != nil {
		// The brief is told of the turn's blocks only: a prompt the
		// router cannot read (the agent answers it) adds none.
		return nil
	}
	blocks := make([]promptBlock, len(fields.Prompt))
	for i, b := range fields.Prompt {
		if json.Unmarshal(b, &blocks[i]) != nil {
			blocks[i] = promptBlock{} // a kind the brief does not tell
		}
	}
	return blocks
}

// prependText returns prompt params p with a text block first; p itself
// when text is "".
func prependText(p json.RawMessage, text string) json.RawMessage {
	if text == "" {
		return p
	}
	var fields struct {
		Prompt []json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(p, &fields) != nil {
		return p
	}
	block, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	prompt, _ := json.Marshal(append([]json.RawMessage{block}, fields.Prompt...))
	out, err := acp.SetPath(p, []string{"prompt"}, json.RawMessage(prompt))
	if err != nil {
		return p
	}
	return out
}

// recordLocked notes what a turn's update tells the brief: reply text,
// tool calls with their outcome, and a compaction of the agent's context
// with its summary (acp-currency row 3).
func (t *turn) recordLocked(up *updateFields) {
	if t.rec == nil {
		return
	}
	kind, toolID, content, title, status := up.Kind, up.ToolCallID, up.Content, up.Title, up.Status
	switch kind {
	case "compaction_update":
		if status == "completed" {
			t.rec.Compacted = true
		}
		var blocks []struct{ Type, Text string }
		if up.Summary != nil && json.Unmarshal(up.Summary, &blocks) == nil { // a whole new summary
			t.rec.Compaction = ""
			for _, b := range blocks {
				t.rec.AppendCompaction(b.Type, b.Text, maxBriefCompaction)
			}
		}
	case "compaction_summary_chunk":
		var c struct{ Type, Text string }
		if json.Unmarshal(content, &c) == nil {
			t.rec.AppendCompaction(c.Type, c.Text, maxBriefCompaction)
		}
	case "agent_message_chunk":
		if !t.reply.Full() {
			if text, ok := textBlock(content); ok {
				t.reply.WriteString(text)
			}
		}
	case "tool_call":
		if len(t.rec.Tools) >= maxBriefTools {
			return
		}
		tool := merge.ToolRecord{ID: toolID, Status: status}
		if title != nil {
			tool.Title = briefTitle(*title)
		}
		t.rec.Tools = append(t.rec.Tools, tool)
	case "tool_call_update":
		for i := range t.rec.Tools {
			if tool := &t.rec.Tools[i]; tool.ID == toolID {
				if title != nil && *title != "" {
					tool.Title = briefTitle(*title)
				}
				if status != "" {
					tool.Status = status
				}
			}
		}
	}
}

// textBlock returns the text of a text content block (of a validated line).
func textBlock(content json.RawMessage) (string, bool) {
	var f [2]json.RawMessage
	var typ, text string
	if acp.MembersOfValid(content, textBlockMembers, f[:]) != nil || rawString(f[0], &typ) != nil || typ != "text" ||
		len(f[1]) == 0 || f[1][0] != '"' || rawString(f[1], &text) != nil {
		return "", false
	}
	return text, true
}

var textBlockMembers = []string{"type", "text"}

// A turn's record keeps at most maxBriefTools tool calls, titles of at
// most maxBriefTitle bytes: a brief is bounded anyway (handoff.max_bytes),
// and an agent running thousands of tool calls in one turn must not make
// the record, or the search for a call's record, grow with them.
const (
	maxBriefTools = 256
	maxBriefTitle = 256
)

// maxBriefCompaction bounds the summary of a turn's compactions the record
// keeps.
const maxBriefCompaction = 4096

func briefTitle(title string) string {
	c := merge.Capped{Max: maxBriefTitle}
	c.WriteString(title)
	return c.String()
}

// hiddenNote replaces what the brief must not tell: nothing from paths a
// deny rule matches (DESIGN §5).
const hiddenNote = "[hidden by the permission policy]"

// hiddenURI: a file:// resource the agent of the turn may not read.
func (r *Router) hiddenURI(s *Session, agent, uri string) bool {
	path, ok := strings.CutPrefix(uri, "file://")
	if !r.opts.Guard.Enforcing() || !ok {
		return false
	}
	p, _ := json.Marshal(map[string]string{"sessionId": "", "path": path})
	return r.opts.Guard.Denies(context.Background(), s.policy, agent, acp.MethodReadTextFile, p, nil)
}

// hideDenied replaces the title of each of rec's tool calls that is about
// something a deny rule matches.
func (r *Router) hideDenied(s *Session, rec *merge.TurnRecord, evidence map[string][]json.RawMessage) {
	if !r.opts.Guard.Enforcing() {
		return
	}
	for i := range rec.Tools {
		updates := evidence[rec.Tools[i].ID]
		p, _ := json.Marshal(map[string]any{"sessionId": "", "toolCall": map[string]string{"toolCallId": rec.Tools[i].ID}})
		if updates != nil && r.opts.Guard.Denies(context.Background(), s.policy, rec.Agent, acp.MethodRequestPermission, p, updates) {
			rec.Tools[i].Title = hiddenNote
		}
	}
}

// toolEvidenceOf is what the session tracked of rec's tool calls.
func (s *Session) toolEvidenceOf(rec *merge.TurnRecord) map[string][]json.RawMessage {
	ids := make([]string, len(rec.Tools))
	for i, tool := range rec.Tools {
		ids[i] = tool.ID
	}
	return s.policy.Evidence(s.ID, rec.Agent, ids)
}

// record keeps t's record in the session's history. The history holds at
// most about twice the brief bound (a brief never tells more): past it,
// the oldest turns go until it is back under the bound, so trimming costs
// O(1) per turn on average.
func (s *Session) record(t *turn, max int) {
	if len(t.rec.Tools) > 0 && s.r.opts.Guard.Enforcing() {
		s.r.hideDenied(s, t.rec, s.toolEvidenceOf(t.rec))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.rec.Reply = t.reply.String()
	s.history = append(s.history, *t.rec)
	s.histBytes += recordSize(t.rec)
	s.history, s.histBytes = boundHistory(s.history, s.histBytes, max)
}

// boundHistory keeps a session's history (of size bytes, recordSize) at
// most twice the brief bound max: past it, the oldest turns go until it is
// back under max (the newest turn stays), so that trimming costs O(1) per
// turn on average.
func boundHistory(history []merge.TurnRecord, size, max int) ([]merge.TurnRecord, int) {
	if size <= 2*max {
		return history, size
	}
	drop := 0
	for drop < len(history)-1 && size > max {
		size -= recordSize(&history[drop])
		drop++
	}
	return append(history[:0], history[drop:]...), size
}

func recordSize(r *merge.TurnRecord) int {
	return len(r.User) + len(r.Reply) + len(r.Compaction) + 64*len(r.Tools)
}

// carrySystemPrompt prepends the session's append systemPrompt, once, to the
// first prompt d gets when its agent could not take it on session/new, load
// or resume (adaptSystemPrompt): before the brief, so that it reads as the
// session's instructions.
func carrySystemPrompt(s *Session, d *downstream, p json.RawMessage) json.RawMessage {
	s.mu.Lock()
	text := d.systemPrompt
	d.systemPrompt = ""
	s.mu.Unlock()
	if text == "" {
		return p
	}
	var fields struct {
		Prompt []json.RawMessage `json:"prompt"`
	}
	if err := json.Unmarshal(p, &fields); err != nil {
		// Never a prompt of the system prompt alone in place of the
		// editor's: the params go as sent, for the agent to answer.
		s.r.log.Warn("prompt params do not decode; the session's system prompt is not carried", "session", s.ID, "agent", d.agent.Name(), "error", err)
		return p
	}
	block, _ := json.Marshal(map[string]string{"type": "text", "text": merge.SystemPromptHeader + "\n" + text})
	prompt, _ := json.Marshal(append([]json.RawMessage{block}, fields.Prompt...))
	out, err := acp.SetPath(p, []string{"prompt"}, json.RawMessage(prompt))
	if err != nil {
		return p
	}
	return out
}
