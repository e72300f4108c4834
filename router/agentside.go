package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// maxPending bounds one agent instance's requests waiting for the editor's
// answer (the other bounds: bounds.go).
const maxPending = 1024

// agentHandler handles one agent instance's requests and notifications, in
// that agent's read loop.
type agentHandler struct {
	r    *Router
	inst *upstream.Instance
}

func (h agentHandler) Handle(ctx context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	defer h.r.survive(h.inst.Agent.Name(), nil)
	ctx = context.WithoutCancel(ctx)
	if !req.Notif && acp.NotificationOnly(req.Method, true) {
		h.r.log.Warn("a notification method sent as a request refused", "agent", h.inst.Agent.Name(), "method", req.Method)
		if err := h.inst.Peer().Reply(ctx, req.ID, nil, errNotificationAsRequest(req.Method)); err != nil {
			h.r.log.Debug("cannot answer the agent", "agent", h.inst.Agent.Name(), "method", req.Method, "error", err)
		}
		return
	}
	if req.Notif && acp.RequestOnly(req.Method, true) && req.Method != acp.MethodMcpMessage {
		// fs/*, terminal/*, session/request_permission, elicitation/create
		// without an id: nothing to decide, audit or answer, and an editor
		// must never get it undecided (agentNotification decides which
		// mcp/message notifications pass).
		h.r.log.Warn("a request method sent as a notification dropped", "agent", h.inst.Agent.Name(), "method", req.Method)
		return
	}
	if req.Notif && isStatusUpdate(req.Method) {
		// Coalesced, never waited for: a flood of them must not hold up
		// the agent's sessions (unstable.go).
		h.r.agentNotification(ctx, h.inst, req)
		return
	}
	switch {
	case req.Method == acp.MethodCancelRequest:
		h.r.agentCancelRequest(ctx, h.inst, req)
	case req.Notif:
		h.r.agentNotification(ctx, h.inst, req)
	default:
		h.r.agentRequest(ctx, h.inst, req)
	}
	// As in the relay: the agent's next message waits for room in the
	// lane of what this one became for the editor.
	h.r.waitEditor(h.r.editorLane(h.inst, req))
}

// editorLane is the lane of the editor's write queue that what the router
// writes for an agent's request or notification goes in: its router
// session (as toEditorSession translates it), else its sessionId as it is
// (extension methods pass it unchanged), else the shared lane.
func (r *Router) editorLane(inst *upstream.Instance, req *jsonrpc2.Request) string {
	id := acp.SessionID(params(req))
	if id == "" {
		return ""
	}
	r.mu.Lock()
	s := r.downLocked(inst, id)
	r.mu.Unlock()
	if s != nil {
		return s.ID
	}
	return id
}

// interceptAgent is the relay's hot path: session/update notifications go
// from the agent's read path straight to the editor's write queue, as the
// agent's own bytes unless an id must be translated.
func (r *Router) interceptAgent(inst *upstream.Instance, m *acp.Message) bool {
	if m.Kind == acp.KindRequest && fastCallback(m.Method) {
		return r.agentCallback(inst, m)
	}
	if m.Kind != acp.KindNotification || m.Method != acp.MethodSessionUpdate {
		return false
	}
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
	s.mu.Unlock()
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

// fastCallback: the agent's requests taken on the fast path (issue 16):
// the callbacks of a turn.
func fastCallback(method string) bool {
	switch method {
	case acp.MethodRequestPermission, acp.MethodReadTextFile, acp.MethodWriteTextFile,
		acp.MethodTerminalCreate, acp.MethodTerminalOutput, acp.MethodTerminalWaitForExit,
		acp.MethodTerminalKill, acp.MethodTerminalRelease:
		return true
	}
	return false
}

// agentCallback handles an agent's request in the agent's read path, before
// the jsonrpc2.Conn would decode its params into a map and encode them
// again, exactly as agentHandler.Handle would at the same point of the
// agent's message order (the Conn reads the next message only once Handle
// has returned): the same checks, the same policy decision on the
// session's sequencer.
func (r *Router) agentCallback(inst *upstream.Instance, m *acp.Message) bool {
	req, ok := jsonrpcRequest(m)
	if !ok {
		return false // the Conn's decoder says what is wrong with it
	}
	defer r.survive(inst.Agent.Name(), nil)
	r.agentRequest(context.Background(), inst, req)
	r.waitEditor(r.editorLane(inst, req))
	return true
}

// parkingLocked returns inst's parking place, made on first use. Those of
// instances whose connection is gone are dropped then, in case an update
// was parked after agentExited ran.
func (r *Router) parkingLocked(inst *upstream.Instance) *parking {
	if p := r.parked[inst]; p != nil {
		return p
	}
	for other := range r.parked {
		if pe := other.Peer(); pe != nil {
			select {
			case <-pe.Done():
				delete(r.parked, other)
			default:
			}
		}
	}
	p := &parking{ids: map[string][]*acp.Message{}, drops: newDrops(r.log, hclog.Warn, "updates for unknown sessions dropped",
		"agent", inst.Agent.Name(), "maxIDs", maxUnboundIDs, "maxPerID", maxUnbound, "maxBytes", maxUnboundBytes)}
	r.parked[inst] = p
	return p
}

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
		if _, _, id, _ := merge.CurrentMode(d.view); id != "" {
			d.view.Options = merge.SetCurrentValue(d.view.Options, id, up.CurrentModeID)
		}
		if d.view.Modes != nil {
			d.view.Modes.CurrentModeID = up.CurrentModeID
		} else {
			// A mode the session/new result did not announce, beside
			// options or not, is still the agent's mode: deny_modes
			// must see it.
			d.view.Modes = &merge.ModeState{CurrentModeID: up.CurrentModeID}
		}
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

// setPath returns obj with the value at path replaced, every other byte of
// meaning kept.
func setPath(obj json.RawMessage, path []string, value any) (json.RawMessage, error) {
	if len(path) == 1 {
		return acp.SetField(obj, path[0], value)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(obj, &fields); err != nil {
		return nil, err
	}
	inner, err := setPath(fields[path[0]], path[1:], value)
	if err != nil {
		return nil, err
	}
	fields[path[0]] = inner
	return json.Marshal(fields)
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
		if p, err = setPath(p, e.path, e.id); err != nil {
			return m.Raw
		}
	}
	// The envelope is written around the params as they are (valid JSON on
	// one line: the agent's, spliced by setPath), not re-encoded.
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

// agentRequest forwards an agent's request to the editor with its session
// id translated, unless the editor lacks the capability it needs, it names
// a terminal the agent did not create, or it breaks ACP's rules on paths.
// The requests the permission policy decides go through it first
// (enforce.go). The answer is relayed back with the agent's id.
func (r *Router) agentRequest(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request) {
	reply := func(res json.RawMessage, err error) {
		if err == nil && len(res) > 0 && bytes.IndexByte(res, '\n') < 0 {
			// The editor's raw result, or one of the router's, one line.
			err = inst.Peer().ReplyRaw(acp.RawID(req.ID), res)
		} else {
			err = inst.Peer().Reply(context.Background(), req.ID, res, err)
		}
		if err != nil {
			r.log.Debug("cannot answer the agent", "agent", inst.Agent.Name(), "method", req.Method, "error", err)
		}
	}
	ctx, reply = r.traceAgentCall(ctx, inst, req, reply)
	p := params(req)
	if err := r.checkAgentCall(inst, req.Method, p); err != nil {
		reply(nil, err)
		return
	}
	if req.Method == acp.MethodMcpMessage {
		r.agentMcpMessage(ctx, inst, req, reply)
		return
	}
	if r.opts.Guard.Decides(req.Method) {
		r.enforce(ctx, inst, req, p, reply)
		return
	}
	if s := r.agentSession(inst, p); s != nil && s.order().busy() {
		s.order().do(r, len(p), func() { r.relayRequest(ctx, inst, req, p, reply, nil) })
		return
	}
	r.relayRequest(ctx, inst, req, p, reply, nil)
}

// agentSession is the router session of an agent's message by its
// params.sessionId, nil if none.
func (r *Router) agentSession(inst *upstream.Instance, p json.RawMessage) *Session {
	id := acp.SessionID(p)
	if id == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.downLocked(inst, id)
}

// relayRequest sends an agent's request to the editor and answers the agent
// with the editor's answer, passed through answer when it is not nil.
func (r *Router) relayRequest(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request, p json.RawMessage,
	reply func(json.RawMessage, error), answer func(json.RawMessage, error) (json.RawMessage, error)) {
	pAgent := p
	sid, p, err := r.toEditorSession(inst, req.Method, p)
	if err != nil {
		reply(nil, err)
		return
	}
	if req.Method == acp.MethodRequestPermission {
		// What the editor shows of the tool call stays what was decided
		// until its user has answered (asking.go).
		if end := r.askingTool(inst, pAgent, p); end != nil {
			inner := reply
			reply = func(res json.RawMessage, err error) {
				end()
				inner(res, err)
			}
		}
	}
	if req.Method == acp.MethodElicitationCreate {
		if p, err = r.translateElicitation(inst, p); err != nil {
			reply(nil, err)
			return
		}
	}
	agentID := acp.RawID(req.ID)
	if answer == nil && p != nil && bytes.IndexByte(p, '\n') < 0 {
		// The fast path: the editor's answer is relayed from the
		// editor's read path, no goroutine waits for it.
		method := req.Method
		err := r.callEditorRaw(inst, agentID, sid, method, p, func(res json.RawMessage, err error) {
			if err == nil {
				r.trackTerminal(inst, method, sid, p, res)
			}
			reply(res, err)
		})
		if err != nil {
			reply(nil, err)
		}
		return
	}
	c, done, err := r.callEditor(ctx, inst, agentID, sid, req.Method, p)
	if err != nil {
		reply(nil, err)
		return
	}
	r.spawn(func() {
		res, err := c.Wait(ctx)
		done()
		if err == jsonrpc2.ErrClosed {
			err = acp.NewError(acp.CodeInternalError, "acp-router: the editor connection is closed", nil)
		}
		if err == nil {
			r.trackTerminal(inst, req.Method, sid, p, res)
		}
		if answer != nil {
			res, err = answer(res, err)
		}
		reply(res, err)
	})
}

// callEditor sends a request on behalf of agent instance inst (its request
// agentID, in router session sid) to the editor, counted against the
// agent's bound on pending requests and registered for withdrawal. done
// must be called once the answer arrived.
func (r *Router) callEditor(ctx context.Context, inst *upstream.Instance, agentID json.RawMessage, sid, method string, p json.RawMessage) (*acp.Call, func(), error) {
	r.mu.Lock()
	full := r.pending[inst] >= maxPending
	if !full {
		r.pending[inst]++
	}
	r.mu.Unlock()
	if full {
		return nil, nil, acp.NewError(acp.CodeInternalError, fmt.Sprintf("acp-router: agent %q has %d requests waiting for the editor already", inst.Agent.Name(), maxPending), nil)
	}
	c, err := r.editor.Call(ctx, method, paramsAny(p), agentID, nil)
	if err != nil {
		r.mu.Lock()
		if r.pending[inst]--; r.pending[inst] == 0 {
			delete(r.pending, inst)
		}
		r.mu.Unlock()
		return nil, nil, acp.NewError(acp.CodeInternalError, "acp-router: the editor connection is closed", nil)
	}
	o := &outgoing{inst: inst, agentID: agentID, editorID: c.ID, session: sid}
	r.mu.Lock()
	r.toEditor[acp.IDKey(c.ID)] = o
	r.mu.Unlock()
	done := func() {
		r.mu.Lock()
		delete(r.toEditor, acp.IDKey(c.ID))
		if r.pending[inst]--; r.pending[inst] == 0 {
			delete(r.pending, inst)
		}
		r.mu.Unlock()
	}
	return c, done, nil
}

// errEditorClosed answers an agent's request the editor can no longer
// answer.
var errEditorClosed = acp.NewError(acp.CodeInternalError, "acp-router: the editor connection is closed", nil)

// callEditorRaw is callEditor on the fast path: p (one line of valid JSON)
// is sent as it is (Peer.CallRaw), and end gets the editor's answer in the
// editor's read path, or errEditorClosed when the connection closes first.
// end is not called when it returns an error.
func (r *Router) callEditorRaw(inst *upstream.Instance, agentID json.RawMessage, sid, method string, p json.RawMessage, end func(json.RawMessage, error)) error {
	r.mu.Lock()
	full := r.pending[inst] >= maxPending
	if !full {
		r.pending[inst]++
	}
	r.mu.Unlock()
	if full {
		return acp.NewError(acp.CodeInternalError, fmt.Sprintf("acp-router: agent %q has %d requests waiting for the editor already", inst.Agent.Name(), maxPending), nil)
	}
	r.watchCalls.Do(func() { r.spawn(r.watchEditorCalls) })
	o := &outgoing{inst: inst, agentID: agentID, session: sid, end: end}
	id, err := r.editor.CallRaw(method, p, agentID, func(m *acp.Message) {
		var res json.RawMessage
		var err error
		if m.Error != nil {
			rpcErr := new(jsonrpc2.Error)
			if json.Unmarshal(m.Error, rpcErr) != nil {
				rpcErr = acp.NewError(acp.CodeInternalError, "acp-router: the editor answered with a malformed error", nil)
			}
			err = rpcErr
		} else {
			res = m.Result
		}
		r.endOutgoing(o, res, err)
	})
	r.mu.Lock()
	if err != nil {
		if r.pending[inst]--; r.pending[inst] == 0 {
			delete(r.pending, inst)
		}
		r.mu.Unlock()
		return errEditorClosed
	}
	if !o.ended { // else answered already
		o.editorID = id
		r.toEditor[acp.IDKey(id)] = o
	}
	r.mu.Unlock()
	select {
	case <-r.editor.Done(): // closed before o was there to be failed
		r.endOutgoing(o, nil, errEditorClosed)
	default:
	}
	return nil
}

// endOutgoing relays the answer of a fast-path request to the editor, once.
func (r *Router) endOutgoing(o *outgoing, res json.RawMessage, err error) {
	r.mu.Lock()
	if o.ended {
		r.mu.Unlock()
		return
	}
	o.ended = true
	if o.editorID != nil && r.toEditor[acp.IDKey(o.editorID)] == o {
		delete(r.toEditor, acp.IDKey(o.editorID))
	}
	if r.pending[o.inst]--; r.pending[o.inst] == 0 {
		delete(r.pending, o.inst)
	}
	r.mu.Unlock()
	o.end(res, err)
}

// watchEditorCalls fails the fast-path requests still waiting for the
// editor when its connection closes (callEditor's waiters get
// jsonrpc2.ErrClosed from the Conn).
func (r *Router) watchEditorCalls() {
	<-r.editor.Done()
	r.mu.Lock()
	var ends []*outgoing
	for _, o := range r.toEditor {
		if o.end != nil && !o.ended {
			ends = append(ends, o)
		}
	}
	r.mu.Unlock()
	for _, o := range ends {
		r.endOutgoing(o, nil, errEditorClosed)
	}
}

// exactString reads the string member name of params (a validated line's)
// by its exact name, as the editor reads it: encoding/json would match
// "PATH" or "Cwd" too, the last of them winning, so that {"cwd": "sub",
// "Cwd": "/abs"} would pass for absolute while the editor runs in sub.
// ok is false when it is absent, null or not a string.
func exactString(params json.RawMessage, name string) (string, bool) {
	var v [1]json.RawMessage
	var s string
	if acp.MembersOfValid(params, []string{name}, v[:]) != nil || len(v[0]) == 0 || v[0][0] != '"' || rawString(v[0], &s) != nil {
		return "", false
	}
	return s, true
}

// checkAgentCall refuses what the editor did not advertise (the router
// answers; the editor never sees it), terminals the agent does not own, and
// relative paths.
func (r *Router) checkAgentCall(inst *upstream.Instance, method string, p json.RawMessage) error {
	caps := r.caps()
	missing := func(cap string) error {
		return acp.NewError(acp.CodeMethodNotFound, fmt.Sprintf("acp-router: the editor does not support %s (clientCapabilities.%s)", method, cap), map[string]string{"method": method})
	}
	switch method {
	case acp.MethodReadTextFile, acp.MethodWriteTextFile:
		if method == acp.MethodReadTextFile && !caps.FS.ReadTextFile {
			return missing("fs.readTextFile")
		}
		if method == acp.MethodWriteTextFile && !caps.FS.WriteTextFile {
			return missing("fs.writeTextFile")
		}
		path, ok := exactString(p, "path")
		if !ok || !filepath.IsAbs(path) {
			return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: %s needs an absolute path, got %q", method, path), nil)
		}
	case acp.MethodTerminalCreate:
		if !caps.Terminal {
			return missing("terminal")
		}
		if cwd, ok := exactString(p, "cwd"); ok && cwd != "" && !filepath.IsAbs(cwd) {
			return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: %s needs an absolute cwd, got %q", method, cwd), nil)
		}
		r.mu.Lock()
		open := 0
		for _, t := range r.terminals {
			if t.agent == inst.Agent.Name() {
				open++
			}
		}
		r.mu.Unlock()
		if open >= maxTerminals {
			return acp.NewError(acp.CodeInternalError, fmt.Sprintf("acp-router: agent %q has %d terminals open already; release some first", inst.Agent.Name(), open), nil)
		}
	case acp.MethodTerminalOutput, acp.MethodTerminalWaitForExit, acp.MethodTerminalKill, acp.MethodTerminalRelease:
		if !caps.Terminal {
			return missing("terminal")
		}
		if err := ambiguousParams(method, p); err != nil {
			return err
		}
		id, _ := exactString(p, "terminalId")
		r.mu.Lock()
		t, ok := r.terminals[id]
		r.mu.Unlock()
		if !ok || t.agent != inst.Agent.Name() {
			return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: unknown terminal %q", id), nil)
		}
	case acp.MethodElicitationCreate:
		if caps.Elicitation == nil {
			return missing("elicitation")
		}
		if err := ambiguousParams(method, p); err != nil {
			return err
		}
		var ep struct {
			Mode string `json:"mode"`
		}
		json.Unmarshal(p, &ep)
		if (ep.Mode == "url" && !acp.Supported(caps.Elicitation.URL)) || (ep.Mode != "url" && !acp.Supported(caps.Elicitation.Form)) {
			return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: the editor does not support %q elicitation", ep.Mode), nil)
		}
	}
	return nil
}

// ambiguousParams refuses the params of a request the router reads ids
// from (the session, the terminal, the elicitation's request) but the
// policy does not decide, when encoding/json and the editor could read
// them differently: two members that name one field ("terminalId" twice,
// or "terminalId" and "TerminalId": a JavaScript editor takes the last,
// serde refuses, encoding/json takes the last of any case), so that the
// terminal whose owner the router checked, or the session it translated,
// would not be the one the editor uses.
func ambiguousParams(method string, p json.RawMessage) error {
	if a, b, ok := acp.AmbiguousMember(p); ok {
		return acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: %s params with members %q and %q, which name one field to some readers", method, a, b), nil)
	}
	return nil
}

// toEditorSession translates params.sessionId from the agent's id to the
// router's. A standard session-scoped call for a session the router does
// not know is refused; extension calls pass unchanged.
func (r *Router) toEditorSession(inst *upstream.Instance, method string, p json.RawMessage) (string, json.RawMessage, error) {
	// By its exact name, as the editor reads it (and rewriteSessionID
	// writes it).
	ref := acp.SessionRef{SessionID: acp.SessionID(p)}
	if ref.SessionID == "" {
		return "", p, nil
	}
	r.mu.Lock()
	s := r.downLocked(inst, ref.SessionID)
	r.mu.Unlock()
	if s == nil {
		if acp.IsExtension(method) {
			return "", p, nil
		}
		return "", nil, errUnknownSession(ref.SessionID)
	}
	p = rewriteSessionID(p, ref.SessionID, s.ID)
	// A tool call id in the request is translated like the updates'; a
	// permission request shows (creates) its tool call in the editor, so
	// later updates for it may be forwarded.
	var tc struct {
		ToolCall struct {
			ToolCallID string `json:"toolCallId"`
		} `json:"toolCall"`
		ToolCallID string `json:"toolCallId"` // elicitation scope
	}
	json.Unmarshal(p, &tc)
	agent := inst.Agent.Name()
	var edit *idEdit
	retired := 0
	s.mu.Lock()
	s.lastUse = time.Now()
	switch {
	case method == acp.MethodRequestPermission && tc.ToolCall.ToolCallID != "":
		if id := s.toolIDs.Out(agent, tc.ToolCall.ToolCallID); id != tc.ToolCall.ToolCallID {
			edit = &idEdit{[]string{"toolCall", "toolCallId"}, id}
		}
		retired = s.toolIDs.Trim(maxToolIDs)
	case tc.ToolCallID != "":
		if id, ok := s.toolIDs.Lookup(agent, tc.ToolCallID); ok && id != tc.ToolCallID {
			edit = &idEdit{[]string{"toolCallId"}, id}
		}
	}
	s.mu.Unlock()
	if retired > 0 {
		r.toolDrops.add(retired, "session", s.ID, "agent", agent)
	}
	if edit != nil {
		if out, err := setPath(p, edit.path, edit.id); err == nil {
			p = out
		}
	}
	return s.ID, p, nil

}

// translateElicitation maps a request-scoped elicitation onto the editor's
// id for that request, and keeps URL elicitation ids of different agents
// apart.
func (r *Router) translateElicitation(inst *upstream.Instance, p json.RawMessage) (json.RawMessage, error) {
	var ep struct {
		RequestID     json.RawMessage `json:"requestId"`
		ElicitationID *string         `json:"elicitationId"`
	}
	if json.Unmarshal(p, &ep) != nil {
		return p, nil
	}
	var err error
	if ep.RequestID != nil {
		editorID := r.editorRequestFor(inst, ep.RequestID)
		if editorID == nil {
			return nil, acp.NewError(acp.CodeInvalidParams, "acp-router: elicitation for an unknown request", nil)
		}
		if p, err = acp.SetField(p, "requestId", editorID); err != nil {
			return nil, err
		}
	}
	if ep.ElicitationID != nil {
		r.mu.Lock()
		id := r.elicits.Out(inst.Agent.Name(), *ep.ElicitationID)
		r.elicits.Trim(maxElicits) // never completed: the editor gave up on them long ago
		r.mu.Unlock()
		if id != *ep.ElicitationID {
			if p, err = acp.SetField(p, "elicitationId", id); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// editorRequestFor finds the editor's id of a request the router forwarded
// to inst as agentID.
func (r *Router) editorRequestFor(inst *upstream.Instance, agentID json.RawMessage) json.RawMessage {
	want := acp.IDKey(agentID)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.forwards {
		if f.inst == inst && acp.IDKey(f.agentID) == want {
			return f.editorID
		}
	}
	return nil
}

// trackTerminal records which agent created a terminal, so that only it
// may use it and it is released when that agent goes away.
func (r *Router) trackTerminal(inst *upstream.Instance, method, sid string, p, res json.RawMessage) {
	var t struct {
		TerminalID string `json:"terminalId"`
	}
	switch method {
	case acp.MethodTerminalCreate:
		if json.Unmarshal(res, &t) == nil && t.TerminalID != "" {
			r.mu.Lock()
			r.terminals[t.TerminalID] = terminal{agent: inst.Agent.Name(), session: sid}
			r.mu.Unlock()
		}
	case acp.MethodTerminalRelease:
		if id, ok := exactString(p, "terminalId"); ok {
			r.mu.Lock()
			delete(r.terminals, id)
			r.mu.Unlock()
		}
	}
}

// agentNotification forwards an agent's notification (other than
// session/update, which the relay handles) with ids translated.
func (r *Router) agentNotification(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request) {
	p := params(req)
	if req.Method == acp.MethodElicitationComplete {
		caps := r.caps()
		if caps.Elicitation == nil || !acp.Supported(caps.Elicitation.URL) {
			return
		}
		var ep struct {
			ElicitationID string `json:"elicitationId"`
		}
		json.Unmarshal(p, &ep)
		r.mu.Lock()
		id, ok := r.elicits.Lookup(inst.Agent.Name(), ep.ElicitationID)
		if ok {
			r.elicits.Remove(id)
		}
		r.mu.Unlock()
		if !ok {
			return
		}
		p, _ = acp.SetField(p, "elicitationId", id)
	} else {
		sid, translated, err := r.toEditorSession(inst, req.Method, p)
		if err != nil {
			r.log.Debug("notification for an unknown session dropped", "agent", inst.Agent.Name(), "method", req.Method)
			return
		}
		p = translated
		if sid == "" {
			// It names no session of the router's (Claude's
			// _auth/status_update, auth/status_update, an
			// extension's): on the editor's one connection it would
			// pass for the router's, or any agent's. It says whose it
			// is (issue 13, part 4).
			if p, err = attribute(p, inst.Agent.Name()); err != nil {
				r.log.Warn("notification dropped: its params cannot say which agent sent it", "agent", inst.Agent.Name(), "method", req.Method, "error", err)
				return
			}
		}
	}
	switch {
	case isStatusUpdate(req.Method):
		r.statusUps.add(inst.Agent.Name(), req.Method, p)
		return
	case req.Method == acp.MethodMcpMessage:
		if serverID, _ := mcpParams(p); r.mcpSession(inst, serverID) == nil {
			r.log.Warn("mcp/message for an ACP MCP server none of the agent's sessions declared dropped", "agent", inst.Agent.Name(), "server", serverID)
			return
		} else if r.opts.Guard.DecidesMcp(p) {
			// A method that acts (tools/call, resources/read, any but
			// those that only list or follow up) sent as a notification:
			// nothing to answer with a refusal or to wait on a question
			// for, and the policy decides what acts (agentMcpMessage).
			r.log.Warn("mcp/message notification the policy would have to decide dropped", "agent", inst.Agent.Name(), "server", serverID)
			return
		}
	}
	if err := r.editor.Notify(ctx, req.Method, paramsAny(p)); err != nil {
		r.log.Debug("cannot forward notification", "method", req.Method, "error", err)
	}
}

// metaKey is the router's key in the _meta of what it forwards:
// {"acp-router": {"agent": NAME}} names the agent a notification that
// belongs to no session came from.
const metaKey = "acp-router"

// attribute returns notification params p with _meta[metaKey].agent set to
// agent, replacing whatever the agent put there (an agent cannot pass for
// another). Params that are not an object (or absent) cannot carry it.
func attribute(p json.RawMessage, agent string) (json.RawMessage, error) {
	tag := map[string]map[string]string{metaKey: {"agent": agent}}
	if len(p) == 0 || string(p) == "null" {
		return mustJSON(map[string]any{"_meta": tag}), nil
	}
	var top [1]json.RawMessage
	if err := acp.Members(p, []string{"_meta"}, top[:]); err != nil {
		return nil, err
	}
	meta := json.RawMessage(mustJSON(tag))
	if top[0] != nil && string(top[0]) != "null" {
		if m, err := acp.SetField(top[0], metaKey, tag[metaKey]); err == nil {
			meta = m
		}
	}
	return acp.SetField(p, "_meta", meta)
}

// agentCancelRequest forwards an agent's $/cancel_request for one of its
// requests the editor still has.
func (r *Router) agentCancelRequest(ctx context.Context, inst *upstream.Instance, req *jsonrpc2.Request) {
	var cp struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if req.Params == nil || json.Unmarshal(*req.Params, &cp) != nil {
		return
	}
	want := acp.IDKey(cp.RequestID)
	r.withdraw(func(o *outgoing) bool { return o.inst == inst && acp.IDKey(o.agentID) == want })
}

// withdraw sends the editor $/cancel_request for the router's pending
// requests that match; the editor's answers are relayed as usual.
func (r *Router) withdraw(match func(*outgoing) bool) {
	r.mu.Lock()
	var ids []json.RawMessage
	for _, o := range r.toEditor {
		if match(o) {
			ids = append(ids, o.editorID)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		msg, _ := json.Marshal(map[string]json.RawMessage{"requestId": id})
		if err := r.editor.Notify(context.Background(), acp.MethodCancelRequest, json.RawMessage(msg)); err != nil {
			r.log.Debug("cannot withdraw request", "error", err)
		}
	}
}

// agentExited cleans up after an agent instance: its requests to the
// editor are withdrawn and its terminals killed and released (DESIGN §7).
func (r *Router) agentExited(inst *upstream.Instance, err error) {
	r.spawn(func() {
		r.withdraw(func(o *outgoing) bool { return o.inst == inst })
		r.mu.Lock()
		parked := r.parked[inst]
		delete(r.parked, inst)
		r.tombs.removePrefix(tableKey(inst) + " ")
		var gone []string
		sessions := map[string]string{}
		for id, t := range r.terminals {
			if t.agent == inst.Agent.Name() {
				gone = append(gone, id)
				sessions[id] = t.session
				delete(r.terminals, id)
			}
		}
		r.mu.Unlock()
		if parked != nil {
			parked.drops.add(parked.count(), "reason", "the agent exited")
			parked.drops.flush()
		}
		if r.editor == nil {
			return
		}
		for _, id := range gone {
			p, _ := json.Marshal(map[string]string{"sessionId": sessions[id], "terminalId": id})
			for _, method := range []string{acp.MethodTerminalKill, acp.MethodTerminalRelease} {
				if c, err := r.editor.Call(context.Background(), method, json.RawMessage(p), nil, nil); err == nil {
					c.Wait(context.Background())
				}
			}
		}
	})
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
