package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// updateParams is what the relay reads of a session/update, decoded once.
type updateParams struct {
	SessionID string       `json:"sessionId"`
	Update    updateFields `json:"update"`
	// raw is the update object as the agent sent it.
	raw json.RawMessage
}

type updateFields struct {
	Kind              string            `json:"sessionUpdate"`
	ToolCallID        string            `json:"toolCallId"`
	MessageID         string            `json:"messageId"`
	Title             *string           `json:"title"`
	HasTitle          bool              `json:"-"` // a title member, null included
	AvailableCommands []json.RawMessage `json:"availableCommands"`
	ConfigOptions     json.RawMessage   `json:"configOptions"`
	CurrentModeID     string            `json:"currentModeId"`
	Cost              *merge.Cost       `json:"cost"`
	Meta              json.RawMessage   `json:"_meta"`
	Content           json.RawMessage   `json:"content"`
	Status            string            `json:"status"`
	// Session ids inside a session_message (subagent.go).
	Sender    *string `json:"senderSessionId"`
	Recipient *string `json:"recipientSessionId"`
	// What the permission policy reads of a tool call (DESIGN §6).
	ToolKind  json.RawMessage `json:"kind"`
	Locations json.RawMessage `json:"locations"`
	RawInput  json.RawMessage `json:"rawInput"`
	ToolName  json.RawMessage `json:"name"` // as sent: the policy reads a malformed one as opaque
	// Agent-chosen ids of compactions and plans (translate.go), and what
	// the handoff brief reads of a compaction.
	CompactionID string          `json:"compactionId"`
	PlanID       string          `json:"planId"` // plan_removed
	Plan         json.RawMessage `json:"plan"`   // plan_update: its planId inside
	Summary      json.RawMessage `json:"summary"`
}

// toolUpdate is what the permission policy reads of a tool call update.
func (up *updateFields) toolUpdate() *guard.ToolUpdate {
	return &guard.ToolUpdate{ID: up.ToolCallID, Kind: up.ToolKind, Title: up.Title, Name: up.ToolName, Locations: up.Locations,
		RawInput: up.RawInput, Content: up.Content, Status: up.Status}
}

// The members decodeUpdate reads, in the order of its out slices.
var (
	updateTop    = []string{"sessionId", "update"}
	updateMember = []string{"sessionUpdate", "toolCallId", "messageId", "currentModeId", "status",
		"title", "availableCommands", "cost", "configOptions", "_meta", "content", "kind", "locations", "rawInput",
		"senderSessionId", "recipientSessionId", "name", "compactionId", "planId", "plan", "summary"}
	// updatePrescan has the agents' streams read these members while they
	// validate a session/update line: one scan of it, not two.
	updatePrescan = &acp.Prescan{Method: acp.MethodSessionUpdate, Names: updateTop, In: 1, InNames: updateMember}
)

// decodeUpdate reads what the relay needs of a session/update the Stream
// classified (so validated: acp.MembersOfValid only finds the ends of
// values), decoding only the small members: the content of a 1 MiB update
// is never decoded or copied, nor scanned byte by byte again. Names match
// exactly, as the editor reads them.
func decodeUpdate(m *acp.Message) (*updateParams, error) {
	u := new(updateParams)
	if err := u.decodeMessage(m); err != nil {
		return nil, err
	}
	return u, nil
}

// decodeMessage is decodeUpdate into u (zero): from what the agent's stream
// read of the params as it validated the line (updatePrescan), or else
// from the params.
func (u *updateParams) decodeMessage(m *acp.Message) error {
	var top [2]json.RawMessage
	var f [21]json.RawMessage
	if m.Prescanned(updatePrescan, top[:], f[:]) {
		return u.fill(&top, &f)
	}
	return u.decode(m.Params)
}

// decode is decodeUpdate into u (zero) from the params of a validated line.
func (u *updateParams) decode(params json.RawMessage) error {
	var top [2]json.RawMessage
	var f [21]json.RawMessage
	// One pass over the params: the update's members are found as the
	// update is stepped over.
	if err := acp.MembersOfValidIn(params, updateTop, top[:], 1, updateMember, f[:]); err != nil {
		return err
	}
	return u.fill(&top, &f)
}

// fill decodes the members decode found (top: updateTop, f: updateMember).
func (u *updateParams) fill(top *[2]json.RawMessage, f *[21]json.RawMessage) error {
	if err := rawString(top[0], &u.SessionID); err != nil {
		return err
	}
	if top[1] == nil || string(top[1]) == "null" {
		return nil
	}
	if top[1][0] != '{' {
		return errors.New("update is not an object")
	}
	u.raw = top[1]
	up := &u.Update
	if err := rawKind(f[0], &up.Kind); err != nil {
		return err
	}
	for i, dst := range [...]*string{&up.ToolCallID, &up.MessageID, &up.CurrentModeID, &up.Status} {
		if err := rawString(f[1+i], dst); err != nil {
			return err
		}
	}
	up.HasTitle = f[5] != nil
	if f[5] != nil && string(f[5]) != "null" {
		up.Title = new(string)
		if err := rawString(f[5], up.Title); err != nil {
			return err
		}
	}
	// Decoded into variables of their own: a pointer into u given to
	// json.Unmarshal would put every u on the heap.
	if f[6] != nil {
		var cmds []json.RawMessage
		if err := json.Unmarshal(f[6], &cmds); err != nil {
			return err
		}
		up.AvailableCommands = cmds
	}
	if f[7] != nil {
		var cost *merge.Cost
		if err := json.Unmarshal(f[7], &cost); err != nil {
			return err
		}
		up.Cost = cost
	}
	up.ConfigOptions, up.Meta, up.Content, up.ToolKind, up.Locations, up.RawInput = f[8], f[9], f[10], f[11], f[12], f[13]
	for i, dst := range [...]**string{&up.Sender, &up.Recipient} {
		if raw := f[14+i]; raw != nil && string(raw) != "null" {
			*dst = new(string)
			if err := rawString(raw, *dst); err != nil {
				return err
			}
		}
	}
	for i, dst := range [...]*string{&up.CompactionID, &up.PlanID} {
		if err := rawString(f[17+i], dst); err != nil {
			return err
		}
	}
	up.ToolName, up.Plan, up.Summary = f[16], f[19], f[20]
	return nil
}

// updateKinds are the sessionUpdate values of the schema: rawKind returns
// these strings instead of a new one per update.
var updateKinds = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call",
		"tool_call_update", "plan", "plan_update", "plan_removed", "available_commands_update", "current_mode_update",
		"config_option_update", "session_info_update", "usage_update", "notice", "subagent_update", "session_message",
		"compaction_update", "compaction_summary_chunk"} {
		m[k] = k
	}
	return m
}()

// rawKind is rawString for the sessionUpdate member.
func rawKind(raw json.RawMessage, out *string) error {
	if len(raw) >= 2 && raw[0] == '"' {
		if k, ok := updateKinds[string(raw[1:len(raw)-1])]; ok { // no copy
			*out = k
			return nil
		}
	}
	return rawString(raw, out)
}

// rawString decodes a JSON string member (absent or null: unchanged). One
// without escapes is sliced, not decoded: the Stream validated it.
func rawString(raw json.RawMessage, out *string) error {
	switch {
	case raw == nil || string(raw) == "null":
		return nil
	case len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0:
		*out = string(raw[1 : len(raw)-1])
		return nil
	}
	return unquote(raw, out)
}

// unquote decodes a JSON string with escapes (out does not escape).
func unquote(raw json.RawMessage, out *string) error {
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	*out = v
	return nil
}

// relayUpdate applies DESIGN §5 "cross-agent state" to one update of
// downstream session d: content (chunks, tool calls, plans) of the turn d
// runs, or of the active agent out of turn, is forwarded; commands, options
// and modes of the active agent are merged with the router's and re-sent,
// those of other agents only remembered; usage is merged; the title is the
// router's (sessionInfoLocked); a tool call update is forwarded only after
// its tool call.
func (r *Router) relayUpdate(s *Session, d *downstream, m *acp.Message, u *updateParams) {
	up := &u.Update
	name := d.agent.Name()
	var retired int // tool call ids retired unfinished, logged unlocked
	defer func() {
		if retired > 0 {
			r.toolDrops.add(retired, "session", s.ID, "agent", name)
		}
	}()
	if up.Kind == "subagent_update" {
		s.mu.Lock()
		replaying := d.replaying
		if replaying {
			d.replayAt = time.Now()
		}
		s.mu.Unlock()
		if replaying {
			return // the editor has it from the router's own replay
		}
		// Learned before s.mu is taken: it registers the child with the
		// router (r.mu).
		child := r.learnChild(d.inst, s, d, u.raw)
		if child == nil {
			return
		}
		edits, _ := r.sessionIDEdits(d.inst, child, up)
		s.mu.Lock()
		s.writeLocked(s.agentLine(d, m, edits))
		s.mu.Unlock()
		return
	}
	var sessionEdits []idEdit
	if up.Sender != nil || up.Recipient != nil {
		var ok bool
		if sessionEdits, ok = r.sessionIDEdits(d.inst, nil, up); !ok {
			r.log.Warn("session_message naming a session the router does not know dropped", "session", s.ID, "agent", name, "kind", up.Kind)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn == nil {
		// Use out of a turn. In one, the session is not idle and the
		// turn's end marks the use (a clock read per update is 3% of the
		// relay's CPU on a virtual machine).
		s.lastUse = time.Now()
	}
	if s.parent != nil {
		r.relayChildLocked(s, d, m, u, sessionEdits)
		return
	}
	t := s.turn
	if t != nil && t.synthetic && t.d == d {
		r.log.Debug("update of a cancelled turn dropped", "session", s.ID)
		return
	}
	if d.replaying && replayed(up.Kind) {
		d.replayAt = time.Now()
		return // the agent replays what the editor has (history.go)
	}
	active := s.active == name
	content := (t != nil && t.d == d) || (active && t == nil)
	var line []byte
	verbatim := false // line is m.Raw and nothing keeps a piece of it
	recycle := false  // line is new and nothing keeps a piece of m
	held := false     // line is held for the editor's answer (asking.go)
	switch up.Kind {
	case "available_commands_update":
		d.commands = up.AvailableCommands
		r.learnCommands(name, up.AvailableCommands)
		if active {
			line = s.commandsLineLocked()
		}
	case "config_option_update":
		d.view.Options = up.ConfigOptions
		r.enforceModeLocked(s, d)
		r.recordMetaLocked(s)
		if active {
			line = s.optionsLineLocked()
		}
	case "current_mode_update":
		d.setModeLocked(up.CurrentModeID)
		r.enforceModeLocked(s, d)
		r.recordMetaLocked(s)
		if active {
			line = s.updateLine(map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": merge.LegacyModeID(name, up.CurrentModeID)})
			if d.view.Options == nil { // the synthesized mode select changed too
				s.writeLocked(line)
				line = s.optionsLineLocked()
			}
		}
	case "usage_update":
		r.bookCostLocked(s, d, up.Cost)
		d.cost = up.Cost
		if content {
			line = s.usageLineLocked(m.Params)
		}
	case "session_info_update":
		line = r.sessionInfoLocked(s, d, m, up, active, content)
	case "tool_call", "tool_call_update":
		// A tool call is forwarded only with its turn's content; an update
		// only for a tool call the editor has seen (Zed draws a red "Tool
		// call not found" card otherwise).
		if !content {
			r.trackTool(s, name, up, false)
			break
		}
		// A finished tool call's id is kept for the updates that may
		// follow, then retired (turn end, or maxDoneTools later); a
		// late update for a retired id is never forwarded.
		id, seen := s.toolIDs.Lookup(name, up.ToolCallID)
		fresh := false
		if up.Kind == "tool_call" {
			fresh = !seen
			id, seen = s.toolIDs.Out(name, up.ToolCallID), true
		}
		r.trackTool(s, name, up, seen)
		if seen {
			line = s.agentLine(d, m, s.idEdits(name, up.ToolCallID, id, up.MessageID, up.Meta))
			held = s.holdAskedLocked(id, line)
			if up.Status == "completed" || up.Status == "failed" {
				s.toolIDs.Done(id)
				s.toolIDs.RetireDone(maxDoneTools)
			}
		}
		if fresh {
			retired = s.toolIDs.Trim(maxToolIDs)
		}
	case "user_message_chunk":
		// An agent echoing its prompt must not show the router's brief
		// (or its note naming the session's directories) as if the user
		// had typed it.
		var c struct{ Text string }
		if content && !(json.Unmarshal(up.Content, &c) == nil && (strings.HasPrefix(c.Text, merge.BriefHeader) || strings.HasPrefix(c.Text, merge.DirectoriesHeader) || strings.HasPrefix(c.Text, merge.SystemPromptHeader))) {
			line = s.agentLine(d, m, s.idEdits(name, "", "", up.MessageID, up.Meta))
		}
	case "notice":
		// Live only, never history (acp-currency row 2): written, not
		// recorded, from whichever agent of the session: it is about the
		// user's session, not a turn's content.
		s.writeLiveLocked(s.agentLine(d, m, nil))
		return
	default: // message chunks, plans, compactions, kinds the router does not know
		if content {
			objEdits, ok := s.objectEdits(name, up)
			if !ok {
				r.log.Warn("plan_removed naming another agent's plan dropped", "session", s.ID, "agent", name)
				break
			}
			edits := append(s.idEdits(name, "", "", up.MessageID, up.Meta), objEdits...)
			line = s.agentLine(d, m, append(edits, sessionEdits...))
			// What these kinds leave in the session's tables and the
			// turn's record is decoded (strings), never a slice of m.
			verbatim = len(line) > 0 && len(line) == len(m.Raw) && &line[0] == &m.Raw[0]
			// Rewritten, it is a new line (agentLine): m's pooled
			// buffer can go back once it is recorded.
			recycle = len(line) > 0 && !verbatim
		}
	}
	if line != nil && t != nil && t.d == d {
		t.recordLocked(up)
	}
	if held {
		return
	}
	if verbatim {
		s.writeRawLocked(m)
		return
	}
	s.writeLocked(line)
	if recycle {
		if sh := m.Claim(); sh != nil {
			sh.Release()
		}
	}
}

// trackTool keeps a tool call update of agent's as the policy's evidence
// (DESIGN §6), saying whether the editor gets it (shown).
func (r *Router) trackTool(s *Session, agent string, up *updateFields, shown bool) {
	if r.opts.Guard.Enforcing() {
		tu := up.toolUpdate()
		tu.Hidden = !shown
		s.policy.Track(s.ID, agent, tu)
		r.opts.Guard.NoteToolResult(s.ID, agent, tu)
	}
}

// sessionInfoLocked applies a session_info_update of d to the router's
// title and returns what the editor gets of it (nil: nothing). The title is
// the router's (DESIGN §5): the first one any agent sends, then each one
// the active agent sends, in its turns or out of them (null or "" clears
// it); a title from another agent, such as a one-turn command's, does not
// rename the thread, and what came with it is dropped. An update without a
// title (Codex sends one with only _meta per state change; updatedAt) is
// forwarded as it is, ids translated, when it is the turn's agent's or the
// active agent's (issue 13, part 4).
func (r *Router) sessionInfoLocked(s *Session, d *downstream, m *acp.Message, up *updateFields, active, content bool) []byte {
	if !up.HasTitle {
		if content || active {
			return s.agentLine(d, m, nil)
		}
		return nil
	}
	title := ""
	if up.Title != nil {
		title = *up.Title
	}
	if !active && (title == "" || s.title != "") {
		return nil
	}
	if s.titled && title != s.title {
		// The editor named the thread (session/set_title): an agent's
		// own title, generated or not, does not rename it.
		return nil
	}
	if title != s.title {
		s.title = title
		r.recordMetaLocked(s)
	}
	return s.agentLine(d, m, nil)
}

// idEdit replaces the id at path (inside params) on the way to the editor.
type idEdit struct {
	path []string
	id   string
}

// sessionIDPath is the path of the session id in params.
var sessionIDPath = []string{"sessionId"}

// metaToolCallIDs are the id-bearing _meta keys editors read that hold a
// tool call id of the same session (DESIGN §5: keep the table in one
// place). Terminal ids need none: the editor makes them.
var metaToolCallIDs = [][]string{
	{"claudeCode", "parentToolUseId"},
}

// idEdits lists the ids of an update from agent that collide with another
// agent's in this session and are rewritten: the tool call id (already
// translated to editorToolID), the messageId, and the _meta table.
func (s *Session) idEdits(agent, toolID, editorToolID, messageID string, meta json.RawMessage) []idEdit {
	var edits []idEdit
	if toolID != editorToolID {
		edits = append(edits, idEdit{[]string{"update", "toolCallId"}, editorToolID})
	}
	if messageID != "" {
		if id := s.msgIDs.Out(agent, messageID); id != messageID {
			edits = append(edits, idEdit{[]string{"update", "messageId"}, id})
		}
		s.msgIDs.Trim(maxMsgIDs) // a message gone on that long is over
	}
	for _, path := range metaToolCallIDs {
		if id, ok := pathString(meta, path); ok && id != "" {
			if out, ok := s.toolIDs.Lookup(agent, id); ok && out != id {
				edits = append(edits, idEdit{append([]string{"update", "_meta"}, path...), out})
			}
		}
	}
	return edits
}

// pathString reads the string at path in obj (a validated line's).
func pathString(obj json.RawMessage, path []string) (string, bool) {
	if obj == nil {
		return "", false
	}
	var v [1]json.RawMessage
	for _, k := range path {
		if acp.MembersOfValid(obj, []string{k}, v[:]) != nil || v[0] == nil {
			return "", false
		}
		obj = v[0]
	}
	var id string
	if len(obj) == 0 || obj[0] != '"' || rawString(obj, &id) != nil {
		return "", false
	}
	return id, true
}

// agentLine is an agent's update as the editor gets it: the agent's own
// bytes, unless the session id or another id must be translated.
func (s *Session) agentLine(d *downstream, m *acp.Message, edits []idEdit) []byte {
	if s.ID == d.id && len(edits) == 0 {
		return m.Raw
	}
	if s.ID != d.id {
		edits = append(edits, idEdit{sessionIDPath, s.ID})
	}
	// The ids written in place, the agent's other bytes kept, in one
	// pass (issue 16); the slow path below for what that cannot do.
	var reps [8]acp.Replacement
	if len(edits) <= len(reps) {
		rs := reps[:0]
		for _, e := range edits {
			rs = append(rs, acp.Replacement{Path: e.path, Value: e.id})
		}
		if line, ok := m.ReplaceInParams(rs); ok {
			return line
		}
	}
	p := m.Params
	for _, e := range edits {
		var err error
		if p, err = acp.SetPath(p, e.path, e.id); err != nil {
			return m.Raw
		}
	}
	// The envelope is written around the params as they are (valid JSON on
	// one line: the agent's, spliced by acp.SetPath), not re-encoded.
	line := make([]byte, 0, len(p)+len(m.Method)+40)
	line = acp.AppendString(append(line, `{"jsonrpc":"2.0","method":`...), m.Method)
	line = append(line, `,"params":`...)
	line = append(line, p...)
	return append(line, '}')
}

// usageLineLocked is a usage_update with used/size of the agent running the
// turn and the cost summed over the session's agents (when the currencies
// match).
func (s *Session) usageLineLocked(p json.RawMessage) []byte {
	var u struct {
		Update map[string]json.RawMessage `json:"update"`
	}
	if json.Unmarshal(p, &u) != nil || u.Update == nil {
		return nil
	}
	var costs []merge.Cost
	for _, d := range s.down {
		if d.cost != nil {
			costs = append(costs, *d.cost)
		}
	}
	if sum := merge.SumCost(costs); sum != nil {
		u.Update["cost"] = mustJSON(sum)
	} else {
		delete(u.Update, "cost")
	}
	return s.updateLine(u.Update)
}

// replayed: a kind of update an agent's session/load replays (everything
// but the session's state: commands, modes, options, title, usage).
func replayed(kind string) bool {
	switch kind {
	case "available_commands_update", "current_mode_update", "config_option_update", "session_info_update", "usage_update":
		return false
	}
	return true
}

// interceptUpdate relays a session/update in the agent's read path (the
// relay's hot path): straight to the editor's write queue, as the agent's
// own bytes unless an id must be translated.
func (r *Router) interceptUpdate(inst *upstream.Instance, m *acp.Message) bool {
	defer r.survive(inst.Agent.Name(), nil)
	var u updateParams // on the stack unless the update waits (below)
	if err := u.decodeMessage(m); err != nil || u.SessionID == "" {
		r.log.Warn("malformed session/update dropped", "agent", inst.Agent.Name(), "error", err)
		return true
	}
	r.mu.Lock()
	s := r.downLocked(inst, u.SessionID)
	if s == nil {
		if r.tombs.has(downKey(inst, u.SessionID)) { // closed or evicted: the rest of its turn
			r.mu.Unlock()
			r.closedDrops.add(1, "agent", inst.Agent.Name(), "session", u.SessionID)
			return true
		}
		// Maybe a session the agent announces before answering
		// session/new (STYLE.md): parked until bind, within bounds.
		p := r.parkingLocked(inst)
		dropped := p.park(u.SessionID, m)
		r.mu.Unlock()
		p.drops.add(dropped, "session", u.SessionID)
		return true
	}
	r.mu.Unlock()
	s.mu.Lock()
	d := s.down[inst.Agent.Name()]
	l := s.cmp.legOfLocked(inst, u.SessionID)
	s.mu.Unlock()
	if l != nil { // a comparison's session (compare.go)
		r.compareUpdate(s, l, m, &u)
		r.waitEditor(s.ID)
		return true
	}
	if d != nil && d.inst == inst {
		if s.order().busy() {
			later := u
			s.order().do(r, len(m.Raw), func() { r.relayUpdate(s, d, m, &later) })
		} else {
			r.relayUpdate(s, d, m, &u)
		}
		// Backpressure from a slow editor, only from this session's
		// backlog, and holding no lock: the editor's read loop
		// (session/cancel) takes s.mu. Then from a disk slower than the
		// agents: the store's queue holds the updates not yet written.
		r.waitEditor(s.ID)
		if st := r.opts.Store; st != nil && st.Full() {
			// What the editor is owed (Cork) must not wait for the disk.
			r.editor.Stream().Flush()
			st.WaitRoom()
		}
	}
	return true
}

// setModeLocked records the agent's current_mode_update in d's view: the
// mode option's value where the agent has one, and its modes (s.mu held).
func (d *downstream) setModeLocked(mode string) {
	if _, _, id, _ := merge.CurrentMode(d.view); id != "" {
		d.view.Options = merge.SetCurrentValue(d.view.Options, id, mode)
	}
	if d.view.Modes != nil {
		d.view.Modes.CurrentModeID = mode
	} else {
		// A mode the session/new result did not announce, beside options
		// or not, is still the agent's mode: deny_modes must see it.
		d.view.Modes = &merge.ModeState{CurrentModeID: mode}
	}
}
