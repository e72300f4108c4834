package merge

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// BriefHeader starts every handoff brief; the router recognizes an agent's
// echo of it by this prefix.
const BriefHeader = "[acp-router handoff] You are taking over a conversation the user had with other agents in this session. What happened since you last took part, oldest first:"

// DirectoriesHeader starts the note that names a session's additional
// directories to an agent that does not take additionalDirectories in
// session/new (sessionCapabilities.additionalDirectories): the router
// advertises the capability for every agent and keeps it true by telling
// such an agent in words, once per downstream session, with its first
// prompt (inside the handoff brief when there is one). The router
// recognizes an agent's echo of it by this prefix.
const DirectoriesHeader = "[acp-router] Additional directories of this session:"

// DirectoriesNote is that note for dirs; "" when there are none.
func DirectoriesNote(dirs []string) string {
	if len(dirs) == 0 {
		return ""
	}
	return DirectoriesHeader + " " + strings.Join(dirs, ", ") + "."
}

// SystemPromptHeader starts the text block that carries a session's append
// systemPrompt into the first prompt of an agent that cannot take it on
// session/new (acp-currency row 6), ahead of the handoff brief.
const SystemPromptHeader = "[acp-router system prompt] The editor gave this session these instructions; follow them as part of your own:"

// TurnRecord is one finished turn of a session, as the brief tells it: the
// user's prompt and the agent's replies as text, tool call titles and
// outcomes.
type TurnRecord struct {
	Seq   int    // position in the session, from 0
	Agent string // the agent's name
	Title string // the agent's display name
	User  string
	Reply string
	Tools []ToolRecord
	// Compacted: the agent compacted its context during the turn
	// (compaction_update completed); Compaction is its summary, bounded
	// by the caller (AppendCompaction).
	Compacted  bool
	Compaction string
}

// AppendCompaction adds a text block of a compaction summary, keeping at
// most max bytes in all.
func (t *TurnRecord) AppendCompaction(typ, text string, max int) {
	if typ != "text" || text == "" {
		return
	}
	c := Capped{Max: max - len(t.Compaction)}
	c.WriteString(text)
	t.Compaction += c.String()
}

// ToolRecord is a tool call of a turn.
type ToolRecord struct {
	ID, Title, Status string
}

func (t TurnRecord) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n\n--- %s ---\nUser: %s", t.Title, t.User)
	for _, tool := range t.Tools {
		status := tool.Status
		if status == "" {
			status = "pending"
		}
		fmt.Fprintf(&b, "\nTool: %s (%s)", tool.Title, status)
	}
	if t.Reply != "" {
		fmt.Fprintf(&b, "\n%s: %s", t.Title, t.Reply)
	}
	if t.Compacted || t.Compaction != "" {
		// The agent's history was compacted: what it was told before this
		// point is only in its summary, so the next agent is told so.
		fmt.Fprintf(&b, "\n(%s compacted its conversation history here", t.Title)
		if t.Compaction != "" {
			fmt.Fprintf(&b, "; its summary: %s", t.Compaction)
		}
		b.WriteString(")")
	}
	return b.String()
}

// Brief is what an agent's downstream session is told when it handles a
// turn of a session it has not followed (DESIGN §5): the turns from seq
// `since` on (the caller tracks, per downstream session, the first turn it
// has not seen: its own turns are always before that), at most max bytes,
// whole turns dropped oldest first; a newest turn alone over the bound is
// cut at a UTF-8 boundary. "" when there is nothing to tell.
func Brief(turns []TurnRecord, since, max int) string {
	// turns are in Seq order: the ones since are at the end, and a turn of
	// a long session does not walk its whole history.
	first := len(turns)
	for first > 0 && turns[first-1].Seq >= since {
		first--
	}
	var parts []string
	for _, t := range turns[first:] {
		parts = append(parts, t.render())
	}
	if len(parts) == 0 {
		return ""
	}
	size := len(BriefHeader)
	first = len(parts)
	for first > 0 && size+len(parts[first-1]) <= max {
		first--
		size += len(parts[first])
	}
	if first == len(parts) { // the newest turn alone is too long
		return BriefHeader + cutUTF8(parts[len(parts)-1], max-len(BriefHeader)-len("…")) + "…"
	}
	return BriefHeader + strings.Join(parts[first:], "")
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// split a character.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Capped appends to a string builder up to a bound, UTF-8 safe: what a turn
// record keeps of a long reply.
type Capped struct {
	b    strings.Builder
	Max  int
	full bool
}

// WriteString keeps what fits; once something was cut, nothing more.
func (c *Capped) WriteString(s string) {
	if c.full {
		return
	}
	kept := cutUTF8(s, c.Max-c.b.Len())
	c.b.WriteString(kept)
	c.full = len(kept) < len(s)
}

func (c *Capped) String() string { return c.b.String() }

// Full reports whether nothing more will be kept.
func (c *Capped) Full() bool { return c.full || c.b.Len() >= c.Max }
