package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// Comparing agents on one prompt (issue 32, part 1).
//
// /compare A B [...] PROMPT (or /compare PROMPT with compare.default) sends
// PROMPT to each agent at once, each in a downstream session of its own:
// a new one, apart from the session's own downstream session on that
// agent, briefed on the session's turns as a switch would brief it. The
// turn ends when every agent has ended its own, with the most severe stop
// reason (stopSeverity); session/cancel cancels every one. /pick A then
// makes A's comparison session the session's downstream on A and A the
// active agent; the other comparison sessions are closed then, or when
// the next prompt that is not /pick starts (a comparison is kept until
// then, not longer: its agents' sessions hold processes' memory).
//
// How the answers read in the editor. The answers stream as they come,
// and two agents' text never shares a message: what the editor is sent is
// a run of sections, each one agent's, each opened by a heading chunk
// naming the agent (**Title**) under a messageId of its own, which the
// section's message chunks carry too. One agent at a time holds the floor
// and streams live; the others' updates wait, whole, until the floor
// passes: when the holder's message ends (it starts a tool call, or its
// turn ends), when it has been silent for compareFloorIdle while another
// has something to say, or when what waits passes compareHeldMax. This
// was chosen over the alternatives after what the editors do
// (shared/notes/editors.md): a label in every chunk breaks Markdown across
// chunks; distinct messageIds alone keep agents apart in Zed (a new id
// starts a new block) but CodeCompanion and agent-shell append every chunk
// to one buffer, so interleaved chunks would mix there; buffering each
// agent's whole answer reads well everywhere but shows nothing until an
// agent is done. Sections with a heading read right in all four: Zed
// draws each as its own block, the others read the heading in the text,
// and one agent is always streaming. Tool calls of every agent are
// decided by the policy with that agent's name, as any; their titles (and
// those of permission requests) read "[agent] title", and their ids are
// translated per agent like every agent's (merge.IDTable), so two agents'
// "call-1" never collide. What the editor was sent is what the store
// records, so session/load replays the comparison as it was shown. The
// budgets hold per agent, as for any prompt (budgetLeg, bookLeg): an
// agent past its budget is not asked, and what each spends is booked.

// compareFloorIdle: an agent holding the floor that has sent nothing for
// this long yields it to one that has something to say (a model thinking
// must not hold up another's answer).
const compareFloorIdle = 500 * time.Millisecond

// compareHeldMax bounds what one agent's waiting updates may hold: past
// it the floor passes at once (the holder's message is cut into two
// sections, each headed).
const compareHeldMax = 1 << 20

// stopSeverity orders the stop reasons of a comparison's agents: the
// turn ends with the most severe. A refusal is what the user must see
// first; an answer cut short (max_tokens, max_turn_requests) is worse than
// one the user cancelled; end_turn is the normal end. A reason this table
// does not know (ACP enums are open) counts as end_turn.
var stopSeverity = map[string]int{"end_turn": 0, "cancelled": 1, "max_tokens": 2, "max_turn_requests": 2, "refusal": 3}

// mostSevere is the stop reason a comparison ends with: the most severe
// of its agents' (stopSeverity), the first of equals.
func mostSevere(stops []string) string {
	stop, worst := "", -1
	for _, s := range stops {
		if sev := stopSeverity[s]; sev > worst {
			stop, worst = s, sev
		}
	}
	return stop
}

// comparison is one /compare: its agents' legs, and who holds the floor.
// Guarded by the session's mu.
type comparison struct {
	prompt json.RawMessage // the prompt each agent gets: the editor's, /compare A B taken out
	legs   []*leg
	// floor is the leg that streams live (nil: the next to speak takes
	// it); last is the leg whose line was written last, floorAt when.
	floor, last *leg
	floorAt     time.Time
	cancelled   bool
	over        bool // the turn ended: what the agents still send is dropped
	turnSeq     int  // the history Seq of the first leg's record
}

// leg is one agent of a comparison.
type leg struct {
	agent *upstream.Agent
	name  string
	d     *downstream // its own downstream session; nil until opened
	t     *turn       // its record for the brief (briefAndRecord, recordLocked): not the turn that runs
	sent  bool        // the prompt went to the agent
	// refused says why the budgets kept the prompt from this agent.
	refused string
	done    bool
	stop    string // its stop reason, once done without error
	err     error
	timer   *time.Timer // the cancel timeout
	// What waits for the floor: lines for the editor, built already.
	held      [][]byte
	heldBytes int
	// msgID is the messageId its message chunks carry now; head the one
	// of the heading of its waiting section. rotate: its next message
	// chunk starts a new message, headed (after its tool call).
	msgID, head string
	rotate      bool
}

// legOfLocked is the leg of c whose downstream session is id on inst.
func (c *comparison) legOfLocked(inst *upstream.Instance, id string) *leg {
	if c == nil {
		return nil
	}
	for _, l := range c.legs {
		if l.d != nil && l.d.inst == inst && l.d.id == id {
			return l
		}
	}
	return nil
}

func (c *comparison) names() []string {
	out := make([]string, len(c.legs))
	for i, l := range c.legs {
		out[i] = l.name
	}
	return out
}

// parseCompare reads /compare's arguments: the agent names that lead rest,
// then the prompt. It returns the agents, or what to tell the user when
// the command cannot run (nothing is sent then).
func (r *Router) parseCompare(rest string) ([]string, string, string) {
	usage := fmt.Sprintf("Usage: /compare AGENT AGENT [...] PROMPT asks each agent at once, each answer shown apart; /pick AGENT then continues with one (agents: %s).", strings.Join(r.agentNames(), ", "))
	var names []string
	text := rest
	for {
		text = strings.TrimLeft(text, " \t")
		end := strings.IndexAny(text, " \t\r\n")
		if end < 0 {
			end = len(text)
		}
		word, after := text[:end], text[end:]
		if r.byName[word] == nil {
			// A word that is not an agent, followed by one that is: a
			// misspelt agent when it is nearly one's name, or when only
			// one agent came before it (one agent alone cannot be
			// compared); else the prompt's first word ("ask alpha ...").
			next := strings.Fields(after)
			if len(next) > 0 && r.byName[next[0]] != nil && (len(names) == 1 || r.nearAgent(word)) {
				return nil, "", fmt.Sprintf("No agent %q (agents: %s); nothing was sent.", word, strings.Join(r.agentNames(), ", "))
			}
			break
		}
		if slices.Contains(names, word) {
			return nil, "", fmt.Sprintf("%s is named twice: a comparison asks each agent once; nothing was sent.", word)
		}
		names = append(names, word)
		text = text[len(word):]
	}
	prompt := strings.TrimSpace(text)
	max := r.cfg.Compare.Max()
	switch {
	case len(names) == 0 && len(r.cfg.Compare.Default) == 0:
		return nil, "", usage + " Set compare.default in the config to compare with /compare PROMPT alone."
	case len(names) == 0:
		names = r.cfg.Compare.Default
	case len(names) == 1:
		return nil, "", fmt.Sprintf("A comparison needs at least two agents, got only %s; nothing was sent. %s", names[0], usage)
	case len(names) > max:
		return nil, "", fmt.Sprintf("At most %d agents may be compared at once (compare.max_agents), got %d; nothing was sent.", max, len(names))
	}
	if prompt == "" {
		return nil, "", usage
	}
	return names, prompt, ""
}

// nearAgent: word is within a few edits of an agent's name (a third of
// its length, at least one), as a typo of it would be.
func (r *Router) nearAgent(word string) bool {
	for _, a := range r.agents {
		if name := a.Name(); editDistance(word, name) <= (len(name)+2)/3 {
			return true
		}
	}
	return false
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// compareCommand makes t the comparison /compare rest asks for, or a
// router command saying why it cannot be.
func (r *Router) compareCommand(t *turn, rest string, blocks []json.RawMessage) {
	names, prompt, msg := r.parseCompare(rest)
	if msg != "" {
		t.command = func(context.Context) string { return msg }
		return
	}
	first, _ := acp.SetField(blocks[0], "text", prompt)
	c := &comparison{}
	c.prompt, _ = json.Marshal(append([]json.RawMessage{first}, blocks[1:]...))
	for _, name := range names {
		c.legs = append(c.legs, &leg{agent: r.byName[name], name: name, t: &turn{req: t.req, prompt: c.prompt}})
	}
	t.cmp = c
}

// runCompare runs comparison turn t: each leg opened and prompted on a
// goroutine of its own; the turn ends with the last leg (endLeg).
func (r *Router) runCompare(ctx context.Context, s *Session, t *turn) {
	c := t.cmp
	s.mu.Lock()
	c.turnSeq = s.nextSeq
	s.cmp = c
	s.mu.Unlock()
	r.opts.Guard.RecordCompare(s.ID, c.names(), c.turnSeq, "")
	r.log.Info("comparison started", "session", s.ID, "agents", strings.Join(c.names(), ","))
	for _, l := range c.legs {
		r.spawn(func() { r.runLeg(ctx, s, t, l) })
	}
}

// runLeg opens l's downstream session, sends it the briefed prompt and
// ends l with the agent's answer.
func (r *Router) runLeg(ctx context.Context, s *Session, t *turn, l *leg) {
	c := t.cmp
	if why := r.budgetLeg(ctx, s, l); why != "" {
		s.mu.Lock()
		l.refused = why
		s.mu.Unlock()
		r.endLeg(ctx, s, t, l, nil, errLegRefused)
		return
	}
	d, err := r.openLeg(ctx, s, l)
	if err != nil {
		r.endLeg(ctx, s, t, l, nil, err)
		return
	}
	inst, err := d.alive()
	if err != nil {
		r.endLeg(ctx, s, t, l, nil, err)
		return
	}
	s.mu.Lock()
	cancelled, modeErr := c.cancelled, d.modeErr
	l.sent = !cancelled && modeErr == nil
	s.mu.Unlock()
	switch {
	case cancelled:
		r.endLeg(ctx, s, t, l, cancelledResult, nil)
		return
	case modeErr != nil:
		r.endLeg(ctx, s, t, l, nil, modeErr)
		return
	}
	p, _ := acp.SetField(params(t.req), "prompt", c.prompt)
	p = r.briefAndRecord(s, l.t, d, p)
	p = carrySystemPrompt(s, d, p)
	p = rewriteSessionID(p, s.ID, d.id)
	p = adaptPrompt(p, agentCaps(inst), inst.Agent.Title())
	call, err := inst.Peer().Call(ctx, acp.MethodSessionPrompt, paramsAny(p), nil, nil)
	if err != nil {
		r.endLeg(ctx, s, t, l, nil, inst.Agent.Error(inst, err))
		return
	}
	s.mu.Lock()
	cancelled = c.cancelled
	s.mu.Unlock()
	if cancelled { // while the prompt was on its way: it was not cancelled there
		r.cancelLeg(ctx, s, t, l)
	}
	res, err := call.Wait(ctx)
	if err != nil {
		err = r.authError(inst.Agent, inst.Agent.Error(inst, err))
	}
	if err == nil {
		r.bookLeg(s, l, res)
	}
	// After every update the agent sent before its answer (order.go).
	end := func() { r.endLeg(ctx, s, t, l, res, err) }
	if s.order().busy() {
		s.order().do(r, len(res), end)
	} else {
		end()
	}
}

// errLegRefused ends a leg the budgets refused (leg.refused says why).
var errLegRefused = errors.New("refused by a budget")

// budgetLeg carries out the budgets' verdict on l's agent before anything
// is sent to it, as budgetGate does for a prompt: "" when the prompt may
// go, else why not. A fallback would bring another agent into the
// comparison the user did not name: it refuses instead (recorded so).
func (r *Router) budgetLeg(ctx context.Context, s *Session, l *leg) string {
	g := r.opts.Guard
	if !g.HasBudgets() {
		return ""
	}
	v := g.CheckBudget(s.ID, l.name)
	if v == nil {
		return ""
	}
	for _, w := range v.Warnings {
		r.budgetNotice(s, w)
	}
	switch v.Effect {
	case guard.BudgetNone:
		g.RecordBudget(v, "warn", "")
		return ""
	case guard.BudgetAsk:
		choice := r.budgetAsk(ctx, s, &turn{agent: l.name}, v)
		g.RecordBudget(v, "ask", choice)
		if choice == allowOnce {
			return ""
		}
		return v.Message + " The prompt was not sent."
	}
	g.RecordBudget(v, "refuse", "")
	return v.Message
}

// bookLeg books l's turn at its end, as bookTurn books a prompt's.
func (r *Router) bookLeg(s *Session, l *leg, res json.RawMessage) {
	if !r.opts.Guard.HasBudgets() {
		return
	}
	s.mu.Lock()
	d, unknown := l.d, l.d.cost == nil
	s.mu.Unlock()
	r.opts.Guard.BookUsage(guard.UsageReport{Agent: d.agent.Name(), Session: s.ID, Downstream: d.id,
		Tokens: turnTokens(res), Turn: true, UnknownCost: unknown})
}

// openLeg opens l's own downstream session, as openDownstream opens one,
// but bound to the leg rather than to s.down: the session's own
// downstream session on that agent (if any) stays as it is.
func (r *Router) openLeg(ctx context.Context, s *Session, l *leg) (*downstream, error) {
	a := l.agent.ForRoots(s.Cwd, s.roots)
	inst, err := a.Ready(ctx)
	if err != nil {
		return nil, r.startError(a, err)
	}
	if err := r.admit(inst); err != nil {
		return nil, err
	}
	p, carried, err := adaptSystemPrompt(adaptNewSession(s.newParams, agentCaps(inst), inst.Agent.Name(), r.log), agentCaps(inst), inst.Agent.Name())
	if err != nil {
		return nil, err
	}
	var d *downstream
	bind := func(m *acp.Message) { d = r.bindLeg(s, l, inst, m) }
	call, err := inst.Peer().Call(ctx, acp.MethodSessionNew, paramsAny(p), nil, bind)
	if err != nil {
		return nil, inst.Agent.Error(inst, err)
	}
	res, err := call.Wait(ctx)
	if err != nil {
		return nil, r.authError(inst.Agent, inst.Agent.Error(inst, err))
	}
	if d == nil {
		return nil, fail(errInternal, fmt.Sprintf("acp-router: agent %q answered session/new without a sessionId", inst.Agent.Name()), map[string]string{"agent": inst.Agent.Name()})
	}
	r.learnModes(inst.Agent.Name(), res)
	s.mu.Lock()
	d.systemPrompt = carried
	s.mu.Unlock()
	r.waitMode(ctx, s, d) // deny_modes hold for a comparison's sessions too
	return d, nil
}

// bindLeg is bind for a leg's session/new answer, in the agent's read
// path: the agent's next line may be an update for it.
func (r *Router) bindLeg(s *Session, l *leg, inst *upstream.Instance, m *acp.Message) *downstream {
	d := newDownstream(inst, m)
	if d == nil {
		return nil
	}
	r.mu.Lock()
	r.bindDownLocked(downKey(inst, d.id), s)
	var early []*acp.Message
	if p := r.parked[inst]; p != nil {
		early = p.take(d.id)
	}
	r.mu.Unlock()
	s.mu.Lock()
	l.d = d
	r.enforceModeLocked(s, d)
	s.mu.Unlock()
	for _, m := range early {
		if u, err := decodeUpdate(m); err == nil {
			r.relayCompare(s, l, m, u)
		}
	}
	return d
}

// compareUpdate relays an update of a comparison's leg, if it is one's
// (interceptUpdate): false when it is not.
func (r *Router) compareUpdate(s *Session, l *leg, m *acp.Message, u *updateParams) {
	if s.order().busy() {
		later := *u
		s.order().do(r, len(m.Raw), func() { r.relayCompare(s, l, m, &later) })
		return
	}
	r.relayCompare(s, l, m, u)
}

// relayCompare is relayUpdate for a comparison's leg: its state (commands,
// options, modes, cost) is kept for /pick and never shown meanwhile, its
// content is shown in its sections (emitLocked), its tool calls tracked
// for the policy with its agent's name.
func (r *Router) relayCompare(s *Session, l *leg, m *acp.Message, u *updateParams) {
	up := &u.Update
	name := l.name
	s.mu.Lock()
	defer s.mu.Unlock()
	c, d := s.cmpOf(l), l.d
	switch up.Kind {
	case "available_commands_update":
		d.commands = up.AvailableCommands
		r.learnCommands(name, up.AvailableCommands)
		return
	case "config_option_update":
		d.view.Options = up.ConfigOptions
		r.enforceModeLocked(s, d)
		return
	case "current_mode_update":
		d.setModeLocked(up.CurrentModeID)
		r.enforceModeLocked(s, d)
		return
	case "usage_update":
		d.cost = up.Cost
		r.bookCostLocked(s, d, up.Cost) // a comparison's spend is the user's too
		return
	case "notice":
		s.writeLiveLocked(s.agentLine(d, m, nil))
		return
	case "session_info_update", "user_message_chunk", "subagent_update", "session_message",
		"plan", "plan_update", "plan_removed":
		// Not a comparison's: the title is the session's, the prompt
		// the editor shows already; a plan panel shows one plan, and
		// two agents' plans would replace each other there.
		return
	}
	if c == nil || c.over || l.done {
		r.closedDrops.add(1, "agent", name, "session", d.id)
		return
	}
	var build func() []byte
	switch up.Kind {
	case "tool_call", "tool_call_update":
		id, seen := s.toolIDs.Lookup(name, up.ToolCallID)
		if up.Kind == "tool_call" {
			id, seen = s.toolIDs.Out(name, up.ToolCallID), true
		}
		r.trackTool(s, name, up, seen)
		if !seen {
			return
		}
		edits := s.idEdits(name, up.ToolCallID, id, up.MessageID, up.Meta)
		if up.Title != nil {
			edits = append(edits, idEdit{[]string{"update", "title"}, legLabel(name, *up.Title)})
		}
		line := s.agentLine(d, m, edits)
		if up.Status == "completed" || up.Status == "failed" {
			s.toolIDs.Done(id)
			s.toolIDs.RetireDone(maxDoneTools)
		}
		build = func() []byte { return line }
	case "agent_message_chunk":
		build = func() []byte { return s.agentLine(d, m, []idEdit{{[]string{"update", "messageId"}, l.msgID}}) }
	default: // thoughts, compactions, kinds the router does not know
		objEdits, ok := s.objectEdits(name, up)
		if !ok {
			return
		}
		line := s.agentLine(d, m, append(s.idEdits(name, "", "", up.MessageID, up.Meta), objEdits...))
		build = func() []byte { return line }
	}
	l.t.recordLocked(up)
	r.emitLocked(s, c, l, up.Kind, build)
}

// cmpOf is the comparison l belongs to, while it is the session's (nil
// once /pick or the next prompt dropped it).
func (s *Session) cmpOf(l *leg) *comparison {
	if s.cmp != nil && slices.Contains(s.cmp.legs, l) {
		return s.cmp
	}
	return nil
}

// legLabel is a tool call's title as a comparison shows it.
func legLabel(agent, title string) string { return "[" + agent + "] " + title }

// emitLocked writes, or holds for the floor, a line of l's: build makes it
// (a message chunk's messageId is only known then).
func (r *Router) emitLocked(s *Session, c *comparison, l *leg, kind string, build func() []byte) {
	if c.floor != nil && c.floor != l && time.Since(c.floorAt) >= compareFloorIdle {
		r.passFloorLocked(s, c, l)
	}
	if c.floor == nil {
		c.floor = l
	}
	// A message of l's after its tool call starts anew, headed again:
	// Zed starts a new entry after a tool call, unlabelled otherwise.
	newMsg := kind == "agent_message_chunk" && l.rotate
	if c.floor == l {
		if c.last != l || newMsg {
			l.startSection(s)
			s.writeLocked(r.headingLine(s, l, l.msgID))
		}
		s.writeLocked(build())
		c.last, c.floorAt = l, time.Now()
		if kind == "tool_call" {
			l.rotate = true
			// Its message is over: another agent's waiting answer may
			// be shown now.
			if r.othersHeld(c, l) {
				r.passFloorLocked(s, c, nil)
			}
		}
		return
	}
	switch {
	case len(l.held) == 0:
		l.startSection(s) // shown as a section of its own, headed, when the floor comes
		l.head = l.msgID
	case newMsg:
		l.startSection(s)
		l.held = append(l.held, r.headingLine(s, l, l.msgID))
	}
	line := bytes.Clone(build()) // the agent's buffer goes back to its pool
	l.held = append(l.held, line)
	l.heldBytes += len(line)
	if kind == "tool_call" {
		l.rotate = true
	}
	if l.heldBytes > compareHeldMax {
		r.passFloorLocked(s, c, l)
	}
}

// askingLegLocked: l asks the user about a tool call. What it said before
// is shown first (its waiting lines, its tool call among them), so that
// the question comes after its context, not in another agent's.
func (r *Router) askingLegLocked(s *Session, l *leg) {
	if c := s.cmpOf(l); c != nil && !c.over && len(l.held) > 0 {
		r.passFloorLocked(s, c, l)
	}
}

// startSection gives l's next lines a new message.
func (l *leg) startSection(s *Session) {
	l.msgID, l.rotate = s.newMsgID(), false
}

// othersHeld: a leg other than l has lines waiting.
func (r *Router) othersHeld(c *comparison, l *leg) bool {
	for _, o := range c.legs {
		if o != l && len(o.held) > 0 {
			return true
		}
	}
	return false
}

// passFloorLocked takes the floor from its holder and gives it to prefer
// when it has lines waiting, else to the first leg (in the command's
// order) that has: its waiting lines are written, headed, and it streams
// live from then on. A leg that is done passes it on at once.
func (r *Router) passFloorLocked(s *Session, c *comparison, prefer *leg) {
	c.floor = nil
	order := c.legs
	if prefer != nil {
		order = append([]*leg{prefer}, c.legs...)
	}
	for _, l := range order {
		if len(l.held) == 0 || (c.floor != nil && !c.floor.done) {
			continue
		}
		s.writeLocked(r.headingLine(s, l, l.head))
		for _, line := range l.held {
			s.writeLocked(line)
		}
		l.held, l.heldBytes = nil, 0
		c.floor, c.last, c.floorAt = l, l, time.Now()
	}
	if c.floor != nil && c.floor.done {
		c.floor = nil
	}
}

// headingLine opens a section of l's: a message chunk naming its agent,
// with the section's messageId. It starts with a blank line so that an
// editor that appends every chunk to one text (CodeCompanion, agent-shell)
// still shows it on a line of its own.
func (r *Router) headingLine(s *Session, l *leg, msgID string) []byte {
	title := l.agent.Title()
	if title != l.name {
		title += " (" + l.name + ")"
	}
	return s.updateLine(map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": msgID,
		"content": map[string]string{"type": "text", "text": "\n\n**" + title + "**\n\n"},
		"_meta":   compareMeta(l.name)})
}

// compareMeta marks the router's lines of a comparison for the store: a
// heading names its agent, the summary none (turnsFrom reads them back).
func compareMeta(agent string) map[string]any {
	m := map[string]any{}
	if agent != "" {
		m["agent"] = agent
	}
	return map[string]any{"acpRouter": m}
}

// newMsgID is a messageId of the router's own (sayLocked).
func (s *Session) newMsgID() string {
	return fmt.Sprintf("acp-router-%s-%s-%d", s.ID, s.r.msgNonce, s.r.msgSeq.Add(1))
}

// endLeg ends l with the agent's answer (res or err); the last leg to end
// ends the turn.
func (r *Router) endLeg(ctx context.Context, s *Session, t *turn, l *leg, res json.RawMessage, err error) {
	c := t.cmp
	s.mu.Lock()
	if l.done {
		s.mu.Unlock()
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	if err == nil {
		var out struct {
			StopReason string `json:"stopReason"`
		}
		if json.Unmarshal(res, &out) != nil || out.StopReason == "" {
			err = fail(errInternal, fmt.Sprintf("acp-router: agent %q answered session/prompt without a stopReason", l.name), map[string]string{"agent": l.name})
		}
		l.stop = out.StopReason
	}
	if err != nil {
		l.err = err
		msg := fmt.Sprintf("*%s failed: %s*", l.agent.Title(), errorText(err))
		if l.refused != "" {
			msg = fmt.Sprintf("*%s was not asked: %s*", l.agent.Title(), l.refused)
		}
		r.emitLocked(s, c, l, "agent_message_chunk", func() []byte {
			return s.updateLine(map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": l.msgID,
				"content": map[string]string{"type": "text", "text": "\n\n" + msg}})
		})
		r.log.Warn("an agent of a comparison failed", "session", s.ID, "agent", l.name, "error", err)
	}
	l.done = true
	if c.floor == l {
		r.passFloorLocked(s, c, nil)
	}
	all := true
	for _, o := range c.legs {
		all = all && o.done
	}
	s.mu.Unlock()
	if all {
		r.finishCompare(ctx, s, t)
	}
}

// finishCompare ends comparison turn t once its every leg ended: what
// still waits is shown, each leg's turn is recorded for later briefs (the
// agents that took part have seen the comparison's prompt, their own
// answers and nothing else), the user is told how to go on, and the turn
// answered with the most severe stop reason.
func (r *Router) finishCompare(ctx context.Context, s *Session, t *turn) {
	c := t.cmp
	var recs []*merge.TurnRecord
	for _, l := range c.legs {
		if l.t.rec != nil {
			l.t.rec.Reply = l.t.reply.String()
			if len(l.t.rec.Tools) > 0 && r.opts.Guard.Enforcing() {
				r.hideDenied(s, l.t.rec, s.toolEvidenceOf(l.t.rec))
			}
			recs = append(recs, l.t.rec)
		}
	}
	s.mu.Lock()
	for c.floor != nil || r.othersHeld(c, nil) {
		r.passFloorLocked(s, c, nil)
	}
	c.over = true
	// The legs recorded in the order of the command, whichever was
	// prompted first (briefAndRecord gave each the next Seq).
	for i, rec := range recs {
		rec.Seq = c.turnSeq + i
		s.history = append(s.history, *rec)
		s.histBytes += recordSize(rec)
	}
	s.history, s.histBytes = boundHistory(s.history, s.histBytes, r.cfg.Handoff.MaxBytes)
	s.nextSeq = c.turnSeq + len(recs)
	var ok, failed, stops []string
	var firstErr error
	refused := false
	for _, l := range c.legs {
		if l.d != nil && l.sent {
			l.d.seen = s.nextSeq
		}
		if l.err != nil {
			failed = append(failed, l.name)
			if firstErr == nil {
				firstErr = l.err
			}
			refused = refused || l.refused != ""
			continue
		}
		ok = append(ok, l.name)
		stops = append(stops, l.stop)
	}
	stop := mostSevere(stops)
	summary := "Compared " + strings.Join(c.names(), ", ") + "."
	if len(failed) > 0 {
		summary += " Failed: " + strings.Join(failed, ", ") + "."
	}
	if len(ok) > 0 {
		summary += " /pick " + strings.Join(ok, " or /pick ") + " continues this session with that agent's conversation; otherwise the next prompt goes to " + s.active + "."
	}
	s.writeLocked(s.updateLine(map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": s.newMsgID(),
		"content": map[string]string{"type": "text", "text": "\n\n" + summary}, "_meta": compareMeta("")}))
	s.mu.Unlock()
	r.log.Info("comparison ended", "session", s.ID, "stopReason", stop, "failed", strings.Join(failed, ","))
	switch {
	case len(ok) == 0 && refused: // as a prompt the budgets refuse (budgetRefuse)
		r.endTurn(ctx, s, t, refusalResult, nil)
		return
	case len(ok) == 0:
		r.endTurn(ctx, s, t, nil, firstErr)
		return
	}
	r.endTurn(ctx, s, t, mustJSON(map[string]string{"stopReason": stop}), nil)
}

// cancelCompare is session/cancel during a comparison: every leg's turn is
// cancelled; a leg whose agent does not answer within its cancel timeout
// ends "cancelled" by the router, what it sends later dropped.
func (r *Router) cancelCompare(ctx context.Context, s *Session, t *turn) {
	s.mu.Lock()
	t.cmp.cancelled = true
	legs := slices.Clone(t.cmp.legs)
	s.mu.Unlock()
	for _, l := range legs {
		r.cancelLeg(ctx, s, t, l)
	}
}

func (r *Router) cancelLeg(ctx context.Context, s *Session, t *turn, l *leg) {
	s.mu.Lock()
	d, running := l.d, l.sent && !l.done
	if running && l.timer == nil {
		l.timer = time.AfterFunc(l.agent.Config.CancelTimeout, func() {
			r.log.Warn("agent of a comparison did not answer session/cancel in time; its turn ends cancelled", "session", s.ID, "agent", l.name)
			r.endLeg(context.WithoutCancel(ctx), s, t, l, cancelledResult, nil)
		})
	}
	s.mu.Unlock()
	if !running {
		return
	}
	ref, _ := json.Marshal(acp.SessionRef{SessionID: d.id})
	if err := d.inst.Peer().Notify(ctx, acp.MethodSessionCancel, json.RawMessage(ref)); err != nil {
		r.log.Debug("cannot forward session/cancel", "session", s.ID, "agent", l.name, "error", err)
	}
}

// pickCommand is /pick NAME: the comparison's session of NAME becomes the
// session's downstream session on NAME, and NAME the active agent; the
// comparison's other sessions, and the one NAME's replaces, are closed.
func (r *Router) pickCommand(ctx context.Context, s *Session, name string) string {
	s.mu.Lock()
	c := s.cmp
	if c == nil {
		s.mu.Unlock()
		return "Nothing to pick: /pick AGENT follows a /compare, before the next prompt."
	}
	var l *leg
	for _, o := range c.legs {
		if o.name == name {
			l = o
		}
	}
	if l == nil {
		s.mu.Unlock()
		return fmt.Sprintf("No agent %q in the comparison (%s).", name, strings.Join(c.names(), ", "))
	}
	if l.err != nil || l.d == nil || !l.sent {
		s.mu.Unlock()
		return fmt.Sprintf("%s has no answer in the comparison to continue from.", l.agent.Title())
	}
	if _, err := l.d.alive(); err != nil {
		s.mu.Unlock()
		return "Cannot pick: " + errorText(err)
	}
	if s.Enforce && name != s.active {
		s.mu.Unlock()
		return fmt.Sprintf("Cannot pick: this session must stay on %q (routing rule with enforce: true in %s).", s.active, r.cfg.File)
	}
	switches := s.active != name
	s.mu.Unlock()
	// Decided before anything changes: a /pick of another agent is a
	// switch too, which the rules on switching decide as well. A pick
	// refused keeps the comparison: another agent may be picked.
	title := l.agent.Title()
	if err := r.commandGate(ctx, s, guard.MethodPick, []string{name}, "Continue this session with "+title+"'s answer"); err != nil {
		return "Cannot pick: " + errorText(err)
	}
	if switches {
		if err := r.commandGate(ctx, s, guard.MethodSwitch, []string{name}, "Switch this session to "+title); err != nil {
			return "Cannot pick: " + errorText(err)
		}
	}
	s.mu.Lock()
	if s.cmp != c { // closed meanwhile (the session archived)
		s.mu.Unlock()
		return "Nothing to pick: the comparison was closed."
	}
	old := s.down[name]
	s.down[name] = l.d
	s.cmp = nil
	same := s.active == name
	r.recordMetaLocked(s)
	var drop []*downstream
	if old != nil {
		drop = append(drop, old)
	}
	for _, o := range c.legs {
		if o != l && o.d != nil {
			drop = append(drop, o.d)
		}
	}
	s.mu.Unlock()
	r.dropDowns(ctx, s, drop)
	r.opts.Guard.RecordCompare(s.ID, c.names(), c.turnSeq, name)
	if same {
		// The agent's options and commands are its new session's now.
		s.mu.Lock()
		s.writeLocked(s.optionsLineLocked())
		s.writeLocked(s.commandsLineLocked())
		s.mu.Unlock()
	} else if err := r.switchTo(ctx, s, name); err != nil {
		return "Cannot switch: " + errorText(err)
	}
	r.log.Info("comparison picked", "session", s.ID, "agent", name)
	return fmt.Sprintf("Continuing with %s: its answer is this session's conversation from here.", l.agent.Title())
}

// dropCompare closes the session's comparison's sessions, if it has one:
// the next prompt starts without /pick.
func (r *Router) dropCompare(ctx context.Context, s *Session) {
	s.mu.Lock()
	c := s.cmp
	s.cmp = nil
	s.mu.Unlock()
	if c == nil {
		return
	}
	var drop []*downstream
	for _, l := range c.legs {
		if l.d != nil {
			drop = append(drop, l.d)
		}
	}
	r.dropDowns(ctx, s, drop)
}

// dropDowns forgets downstream sessions of s the router no longer uses
// (what their agents still send for them is dropped) and closes them at
// their agents where the agent supports session/close, else cancels what
// may still run there.
func (r *Router) dropDowns(ctx context.Context, s *Session, downs []*downstream) {
	if len(downs) == 0 {
		return
	}
	keys := make([]string, len(downs))
	for i, d := range downs {
		keys[i] = downKey(d.inst, d.id)
	}
	r.mu.Lock()
	for _, k := range keys {
		if r.downs[k] == s {
			delete(r.downs, k)
		}
		r.tombs.add(k)
	}
	r.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	r.spawn(func() {
		for _, d := range downs {
			inst, err := d.alive()
			if err != nil {
				continue
			}
			ref, _ := json.Marshal(acp.SessionRef{SessionID: d.id})
			if acp.Supported(agentCaps(inst).SessionCapabilities.Close) {
				wctx, cancel := context.WithTimeout(ctx, d.agent.Config.CancelTimeout)
				if _, err := callWait(wctx, inst, acp.MethodSessionClose, ref); err != nil {
					r.log.Debug("cannot close a comparison's session", "session", s.ID, "agent", d.agent.Name(), "error", err)
				}
				cancel()
				continue
			}
			inst.Peer().Notify(ctx, acp.MethodSessionCancel, json.RawMessage(ref))
		}
	})
}
