package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/telemetry"
	"github.com/acp-router/acp-router/upstream"
)

// turn is one session/prompt of a router session.
type turn struct {
	req *jsonrpc2.Request
	// agent runs the turn: "" is the active agent when the turn starts; a
	// one-turn command (/NAME TEXT) names its agent.
	agent string
	// prompt replaces the editor's params.prompt when set (a one-turn
	// command's TEXT).
	prompt json.RawMessage
	// command, when set, is a router command: it runs instead of an agent
	// and returns what the router says.
	command func(context.Context) string
	// cmp, when set, is a comparison (/compare, compare.go): it runs on
	// its agents' sessions of its own instead of one agent.
	cmp *comparison
	// pick: /pick, which keeps the session's comparison (startTurn).
	pick bool
	// oneTurn: a one-turn command (/NAME TEXT, a commands: entry with a
	// prompt), which the policy decides (guard.MethodTurn) before agent
	// is asked.
	oneTurn bool
	// blocks is the editor's params.prompt as parseTurn decoded it, for
	// the handoff record (briefAndRecord): the prompt is decoded once.
	blocks []promptBlock
	parsed bool // blocks is set (nil: no prompt array)

	// Guarded by the session's mu.
	d           *downstream        // the downstream session running it
	inst        *upstream.Instance // and its agent instance
	cancelTimer *time.Timer
	cancelled   bool              // cancelled before it reached an agent
	rec         *merge.TurnRecord // what the handoff brief will tell of it
	reply       merge.Capped      // its reply text, bounded
	synthetic   bool              // the router answered "cancelled"; the agent is draining
	done        bool
	tel         *telemetry.Turn // its span; nil with telemetry off
}

var cancelledResult = json.RawMessage(`{"stopReason":"cancelled"}`)
var endTurnResult = json.RawMessage(`{"stopReason":"end_turn"}`)

// prompt handles session/prompt, inline in the editor's read loop. Prompts
// of one session are serialized: one that arrives while a turn runs (or
// drains after a synthetic cancel, or while the session is brought back
// from the store: evict.go) waits its turn, up to maxQueued.
func (r *Router) prompt(ctx context.Context, req *jsonrpc2.Request) {
	p := params(req)
	s, id := r.sessionFor(ctx, p)
	if s == nil {
		r.replyTo(req)(nil, errUnknownSession(id))
		return
	}
	r.promptOn(ctx, s, req)
}

// promptOn runs or queues the prompt req on s, which sessionFor found. A
// session sessionFor registered to bring back from the store may have
// failed to come back since (revive: not in the store): the prompt gets
// that error, as the prompts queued behind the revive did, rather than a
// turn on a session with no agent.
func (r *Router) promptOn(ctx context.Context, s *Session, req *jsonrpc2.Request) {
	s.openNow()
	t := r.parseTurn(s, req)
	s.mu.Lock()
	if err := s.reviveErr; err != nil && !s.reviving {
		s.mu.Unlock()
		r.replyTo(req)(nil, err)
		return
	}
	s.lastUse = time.Now()
	if s.turn != nil || s.reviving {
		if len(s.queue) >= maxQueued {
			s.mu.Unlock()
			r.replyTo(req)(nil, fail(errInternal, fmt.Sprintf("acp-router: %d prompts are waiting in this session already", maxQueued), map[string]string{"sessionId": s.ID}))
			return
		}
		s.queue = append(s.queue, t)
		s.mu.Unlock()
		r.holdFunc(req, func() { r.dequeue(s, t) })
		return
	}
	s.turn = t
	s.mu.Unlock()
	r.startTurn(ctx, s, t)
}

// parseTurn recognizes the router's slash commands (DESIGN §5). Editors
// send an advertised command as plain text "/name args" in a prompt.
func (r *Router) parseTurn(s *Session, req *jsonrpc2.Request) *turn {
	t := &turn{req: req}
	// One decode of the prompt (issue 16): the first block's type and text
	// decide a command; all of them make the turn's handoff record.
	var first promptBlock
	if blocks, ok := promptBlocks(params(req)); ok {
		t.blocks, t.parsed = blocks, true
		if len(blocks) == 0 {
			return t
		}
		first = blocks[0]
	}
	if t.parsed && (first.Type != "text" || !strings.HasPrefix(first.Text, "/")) {
		return t
	}
	// A command, or a prompt with a block that does not decode as one
	// (then only the first block counts, as the brief reads each alone).
	var p struct {
		Prompt []json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(params(req), &p) != nil || len(p.Prompt) == 0 {
		return t
	}
	if !t.parsed {
		var f struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(p.Prompt[0], &f) != nil || f.Type != "text" || !strings.HasPrefix(f.Text, "/") {
			return t
		}
		first.Text = f.Text
	}
	name, rest, _ := strings.Cut(first.Text[1:], " ")
	name, rest = strings.TrimSpace(name), strings.TrimSpace(rest)
	oneTurn := func(agent, text string) {
		block, _ := acp.SetField(p.Prompt[0], "text", text)
		t.agent, t.oneTurn = agent, true
		t.prompt, _ = json.Marshal(append([]json.RawMessage{block}, p.Prompt[1:]...))
	}
	if c := r.command(name); c != nil {
		switch {
		case c.Switch:
			t.command = func(ctx context.Context) string { return r.agentCommand(ctx, s, c.Agent) }
		case c.Prompt != "":
			oneTurn(c.Agent, strings.ReplaceAll(c.Prompt, "{{input}}", rest))
		case rest == "":
			t.command = func(context.Context) string { return fmt.Sprintf("Usage: /%s TEXT (%s)", c.Name, c.Description) }
		default:
			oneTurn(c.Agent, rest)
		}
		return t
	}
	switch {
	case name == "agent":
		t.command = func(ctx context.Context) string { return r.agentCommand(ctx, s, rest) }
	case name == "compare":
		r.compareCommand(t, strings.TrimLeft(first.Text[len("/compare"):], " "), p.Prompt)
	case name == "pick":
		t.pick = true
		t.command = func(ctx context.Context) string { return r.pickCommand(ctx, s, rest) }
	case r.byName[name] != nil && rest == "":
		t.command = func(context.Context) string {
			return fmt.Sprintf("Usage: /%s TEXT asks %s for this turn only; /agent %s switches the session to it.", name, r.byName[name].Title(), name)
		}
	case r.byName[name] != nil:
		oneTurn(name, rest)
	}
	return t
}

// command returns the `commands:` entry called name, or nil.
func (r *Router) command(name string) *config.Command {
	for i := range r.cfg.Commands {
		if r.cfg.Commands[i].Name == name {
			return &r.cfg.Commands[i]
		}
	}
	return nil
}

// agentCommand is /agent: with no argument it lists the agents, marks the
// active one and says which failed to start; /agent NAME switches.
func (r *Router) agentCommand(ctx context.Context, s *Session, arg string) string {
	if verb, name, ok := strings.Cut(arg, " "); ok && verb == "restart" {
		return r.restartCommand(ctx, strings.TrimSpace(name))
	}
	if arg != "" {
		if err := r.userSwitch(ctx, s, arg); err != nil {
			return "Cannot switch: " + errorText(err)
		}
		return fmt.Sprintf("Switched this session to %s.", r.byName[arg].Title())
	}
	active := s.activeName()
	var b strings.Builder
	b.WriteString("Agents:\n")
	for _, a := range r.agents {
		mark := " "
		if a.Name() == active {
			mark = "*"
		}
		state := ""
		switch st, err := a.Status(); st {
		case upstream.Failed:
			state = " — failed: " + trimAgentPrefix(err, a.Name())
		case upstream.Starting:
			state = " — starting"
		case upstream.Stopped:
			state = " — not started"
			if errors.Is(err, upstream.ErrIdle) {
				state = " — stopped while idle; starts again on its next use"
			}
		}
		// Under the sandbox the sessions of other roots run on processes
		// of their own (upstream.Agent.Family): said, so that "not
		// started" never hides the ones that run.
		n := len(a.Running())
		if a.Current() != nil {
			n--
		}
		if n > 0 {
			state += fmt.Sprintf("; %d more process(es) running for sessions in other directories", n)
		}
		fmt.Fprintf(&b, "%s %s (%s)%s\n", mark, a.Name(), a.Title(), state)
	}
	b.WriteString("\n/agent NAME switches this session; /NAME TEXT asks one agent for one turn; /agent restart NAME restarts an agent.")
	return b.String()
}

// restartCommand is /agent restart NAME: the agent is restarted now, its
// restart budget forgotten (after a crash loop, this is how the user brings
// it back); its sessions are re-attached on their next prompt.
func (r *Router) restartCommand(ctx context.Context, name string) string {
	a := r.byName[name]
	if a == nil {
		return fmt.Sprintf("No agent %q (agents: %s).", name, strings.Join(r.agentNames(), ", "))
	}
	a.ForgetFailures()
	// Its processes for other session roots (under the sandbox) may run
	// while its own is stopped idle: Restart ends every one that runs.
	if st, _ := a.Status(); st == upstream.Running || st == upstream.Starting || len(a.Running()) > 0 {
		a.Restart(errors.New("restarted by the user (/agent restart)"))
	}
	if _, err := a.Ready(ctx); err != nil {
		return fmt.Sprintf("%s did not start: %s", a.Title(), trimAgentPrefix(err, name))
	}
	r.log.Info("agent restarted by the user", "agent", name)
	return fmt.Sprintf("Restarted %s.", a.Title())
}

func errorText(err error) string {
	if e, ok := err.(*jsonrpc2.Error); ok {
		return strings.TrimPrefix(e.Message, "acp-router: ")
	}
	return err.Error()
}

// dequeue withdraws a waiting prompt the editor cancelled with
// $/cancel_request.
func (r *Router) dequeue(s *Session, t *turn) {
	s.mu.Lock()
	found := false
	for i, q := range s.queue {
		if q == t {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			found = true
			break
		}
	}
	s.mu.Unlock()
	if found {
		r.replyTo(t.req)(nil, errCancelled)
	}
}

// startTurn runs t: a router command in a goroutine; a prompt inline when
// its agent's downstream session exists (so that a following cancel cannot
// overtake it), else once that session is opened.
func (r *Router) startTurn(ctx context.Context, s *Session, t *turn) {
	r.recordTurnStart(s, t)
	r.traceTurnStart(s, t)
	if !t.pick {
		r.dropCompare(ctx, s) // not picked: the session goes on with the agent it had
	}
	if t.cmp != nil {
		r.spawn(func() {
			names := t.cmp.names()
			if err := r.commandGate(ctx, s, guard.MethodCompare, names, "Compare "+strings.Join(names, ", ")+" on this prompt"); err != nil {
				r.refuseTurn(ctx, s, t, "Nothing was compared: "+errorText(err))
				return
			}
			s.mu.Lock()
			cancelled := t.cmp.cancelled // while the user was asked
			s.mu.Unlock()
			if cancelled {
				r.endTurn(ctx, s, t, cancelledResult, nil)
				return
			}
			r.runCompare(ctx, s, t)
		})
		return
	}
	if t.command != nil {
		r.spawn(func() {
			text := t.command(ctx)
			s.mu.Lock()
			s.writeLocked(s.sayLocked(text))
			s.mu.Unlock()
			r.endTurn(ctx, s, t, endTurnResult, nil)
		})
		return
	}
	if t.oneTurn && r.opts.Guard.DecidesCommand(guard.MethodTurn) {
		// Decided off the editor's read loop: the policy may ask. A
		// cancel meanwhile ends the turn where it would start
		// (t.cancelled).
		s.mu.Lock()
		if t.agent == "" { // a commands: entry without agent: the active one
			t.agent = s.active
		}
		s.mu.Unlock()
		r.spawn(func() {
			what := "Ask " + r.byName[t.agent].Title() + " for this turn"
			if err := r.commandGate(ctx, s, guard.MethodTurn, []string{t.agent}, what); err != nil {
				r.refuseTurn(ctx, s, t, fmt.Sprintf("Nothing was sent to %s: %s", t.agent, errorText(err)))
				return
			}
			r.startPromptTurn(ctx, s, t)
		})
		return
	}
	r.startPromptTurn(ctx, s, t)
}

// startPromptTurn runs t, a prompt to an agent, once the budgets let it
// (startTurn).
func (r *Router) startPromptTurn(ctx context.Context, s *Session, t *turn) {
	if r.opts.Guard.HasBudgets() {
		// The budgets are decided before the turn reaches an agent
		// (budget.go), off the editor's read loop: they read the ledger
		// and may ask the user.
		s.mu.Lock()
		if t.agent == "" {
			t.agent = s.active
		}
		s.mu.Unlock()
		r.spawn(func() {
			if r.budgetGate(ctx, s, t) {
				r.startAgentTurn(ctx, s, t)
			}
		})
		return
	}
	r.startAgentTurn(ctx, s, t)
}

// startAgentTurn runs t, a prompt to an agent (startTurn).
func (r *Router) startAgentTurn(ctx context.Context, s *Session, t *turn) {
	s.mu.Lock()
	if t.agent == "" {
		t.agent = s.active
	}
	d := s.down[t.agent]
	resetting := d != nil && d.modeReset != nil
	s.mu.Unlock()
	if d != nil && !resetting {
		if _, err := d.alive(); err == nil {
			r.dispatch(ctx, s, t, d)
			return
		}
		r.log.Info("agent restarted; opening a new session on it", "session", s.ID, "agent", t.agent)
	}
	r.spawn(func() {
		d, err := r.ensureDownstream(ctx, s, r.byName[t.agent])
		if err != nil {
			r.endTurn(ctx, s, t, nil, err)
			return
		}
		r.waitMode(ctx, s, d)
		r.dispatch(ctx, s, t, d)
	})
}

// dispatch sends the prompt to the downstream session d.
func (r *Router) dispatch(ctx context.Context, s *Session, t *turn, d *downstream) {
	inst, err := d.alive()
	if err != nil {
		r.endTurn(ctx, s, t, nil, err)
		return
	}
	s.mu.Lock()
	replaying := d.replaying
	s.mu.Unlock()
	if replaying {
		r.settleReplay(ctx, s, d, inst)
	}
	s.mu.Lock() // the relay reads them in the agent's read loop
	t.d, t.inst = d, inst
	d.replaying = false // what the agent sends from now on is this turn
	cancelled := t.cancelled
	modeErr := d.modeErr
	s.mu.Unlock()
	s.policy.EndTurn() // a new turn: approvals and tool call evidence are per turn
	if cancelled {
		r.endTurn(ctx, s, t, cancelledResult, nil)
		return
	}
	if modeErr != nil {
		r.endTurn(ctx, s, t, nil, modeErr)
		return
	}
	p := params(t.req)
	if t.prompt != nil {
		p, _ = acp.SetField(p, "prompt", t.prompt)
	}
	p = r.briefAndRecord(s, t, d, p)
	p = carrySystemPrompt(s, d, p)
	p = rewriteSessionID(p, s.ID, d.id)
	p = adaptPrompt(p, agentCaps(inst), inst.Agent.Title())
	p = r.traceDispatch(s, t, d, p)
	editorID := acp.RawID(t.req.ID)
	key := acp.IDKey(editorID)
	// The turn ends in the agent's read path, when its answer arrives (no
	// goroutine waits for it: two thread hand-offs less per prompt), or
	// when the connection closes first (watchInstance).
	fw := &forward{inst: inst, editorID: editorID}
	fw.end = func(res json.RawMessage, err error) {
		if err != nil {
			err = r.authError(inst.Agent, inst.Agent.Error(inst, err))
		}
		r.endTurn(ctx, s, t, res, err)
	}
	answered := func(m *acp.Message) {
		if !r.takeForward(key, fw) {
			return
		}
		var res json.RawMessage
		var err error
		if m.Error != nil {
			rpcErr := new(jsonrpc2.Error)
			if json.Unmarshal(m.Error, rpcErr) != nil {
				rpcErr = fail(errInternal, "acp-router: the agent answered with a malformed error", nil)
			}
			err = rpcErr
		} else {
			res = m.Result
		}
		// After every update the agent sent before it (order.go).
		if s.order().busy() {
			s.order().do(r, len(res), func() { fw.end(res, err) })
		} else {
			fw.end(res, err)
		}
	}
	r.watchInstance(inst)
	// The params as they are (issue 16): built from the editor's bytes by
	// splicing, so one line of valid JSON unless a step re-encoded them
	// with a newline (then the Conn encodes them).
	var agentID json.RawMessage
	if p != nil && bytes.IndexByte(p, '\n') < 0 {
		agentID, _, err = inst.Peer().CallRaw(acp.MethodSessionPrompt, p, editorID, answered)
	} else {
		var c *acp.Call
		if c, err = inst.Peer().Call(ctx, acp.MethodSessionPrompt, paramsAny(p), editorID, answered); err == nil {
			agentID = c.ID
		}
	}
	if err != nil {
		r.endTurn(ctx, s, t, nil, inst.Agent.Error(inst, err))
		return
	}
	r.mu.Lock()
	if !fw.done { // else answered already
		fw.agentID = agentID
		r.forwards[key] = fw
	}
	r.mu.Unlock()
	select {
	case <-inst.Peer().Done(): // closed before fw was there to be failed
		if r.takeForward(key, fw) {
			go fw.end(nil, jsonrpc2.ErrClosed)
		}
	default:
	}
}

// takeForward marks fw ended and removes it from the table; false when it
// had ended already.
func (r *Router) takeForward(key string, fw *forward) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fw.done {
		return false
	}
	fw.done = true
	if r.forwards[key] == fw {
		delete(r.forwards, key)
	}
	return true
}

// watchInstance ends the turns running on inst when its connection closes
// (once per instance).
func (r *Router) watchInstance(inst *upstream.Instance) {
	r.mu.Lock()
	if r.watched[inst] {
		r.mu.Unlock()
		return
	}
	r.watched[inst] = true
	r.mu.Unlock()
	r.spawn(func() {
		<-inst.Peer().Done()
		r.mu.Lock()
		delete(r.watched, inst)
		var ends []*forward
		for key, f := range r.forwards {
			if f.inst == inst && f.end != nil && !f.done {
				f.done = true
				delete(r.forwards, key)
				ends = append(ends, f)
			}
		}
		r.mu.Unlock()
		for _, f := range ends {
			f.end(nil, jsonrpc2.ErrClosed)
		}
	})
}

// endTurn relays the turn's answer (unless the router already answered
// "cancelled"), withdraws the router's requests to the editor that are
// still pending for the session, and starts the next waiting prompt.
func (r *Router) endTurn(ctx context.Context, s *Session, t *turn, res json.RawMessage, err error) {
	s.mu.Lock()
	if t.done {
		s.mu.Unlock()
		return
	}
	t.done = true
	if t.cancelTimer != nil {
		t.cancelTimer.Stop()
	}
	synthetic := t.synthetic
	var next *turn
	if len(s.queue) > 0 {
		next = s.queue[0]
		s.queue = s.queue[1:]
	}
	s.turn = next
	s.lastUse = time.Now()
	s.retireTurnIDsLocked()
	s.mu.Unlock()

	if t.rec != nil {
		s.record(t, r.cfg.Handoff.MaxBytes)
	}
	if err == nil && !synthetic {
		r.bookTurn(s, t, res)
	}
	s.policy.EndTurn() // an approval covers the direct calls of its own turn only
	if synthetic {
		r.log.Info("cancelled turn ended", "session", s.ID, "agent", t.agent)
	} else {
		r.replyRaw(t.req, res, err)
	}
	// After the answer: the editor does not wait for the span's end.
	r.traceTurnEnd(s, t, res, err)
	r.recordTurnEnd(s)
	r.withdraw(func(o *outgoing) bool { return o.session == s.ID })
	if next != nil {
		r.unhold(next.req)
		r.startTurn(ctx, s, next)
	}
}

// retireTurnIDsLocked retires, at a turn's end, the ids of its messages
// and finished tool calls (merge.IDTable: never handed out again). A tool
// call still running keeps its id, within maxToolIDs; a late update for a
// retired one is not forwarded (relayUpdate).
func (s *Session) retireTurnIDsLocked() {
	s.toolIDs.RetireDone(0)
	s.msgIDs.RetireAll()
}

// cancel forwards session/cancel to the agent running the turn (a one-turn
// command's agent, not necessarily the active one). If that agent has not
// answered within its cancel timeout, the router answers "cancelled" itself
// and the turn drains (DESIGN §7).
func (r *Router) cancel(ctx context.Context, req *jsonrpc2.Request) {
	s := r.sessionOf(params(req))
	if s == nil {
		if child := r.childOf(params(req)); child != nil {
			r.cancelChild(ctx, child)
		}
		return
	}
	r.cancelTurn(ctx, s, params(req))
}

// cancelTurn cancels s's running turn (and its children's) as
// session/cancel with params p does.
func (r *Router) cancelTurn(ctx context.Context, s *Session, p json.RawMessage) {
	r.cancelChildren(ctx, s)
	s.mu.Lock()
	t := s.turn
	d := s.down[s.active]
	if t != nil && t.cmp != nil {
		s.mu.Unlock()
		r.cancelCompare(ctx, s, t)
		return
	}
	if t != nil {
		if t.d == nil { // not at an agent yet: it ends when it would start
			t.cancelled = true
			s.mu.Unlock()
			return
		}
		d = t.d
	}
	s.mu.Unlock()
	if d == nil {
		return
	}
	if err := d.inst.Peer().Notify(ctx, acp.MethodSessionCancel, rewriteSessionID(p, s.ID, d.id)); err != nil {
		r.log.Debug("cannot forward session/cancel", "session", s.ID, "error", err)
	}
	if t == nil {
		return
	}
	s.mu.Lock()
	if !t.done && t.cancelTimer == nil {
		t.cancelTimer = time.AfterFunc(d.agent.Config.CancelTimeout, func() { r.syntheticCancel(s, t) })
	}
	s.mu.Unlock()
}

// syntheticCancel answers a turn whose agent ignored session/cancel. Its
// late updates and late answer never reach the editor; the next prompt
// waits for the real end, and an agent that does not end the turn within
// DrainGrace is restarted.
func (r *Router) syntheticCancel(s *Session, t *turn) {
	s.mu.Lock()
	if t.done || t.synthetic || s.turn != t {
		s.mu.Unlock()
		return
	}
	t.synthetic = true
	inst := t.inst
	s.mu.Unlock()
	r.log.Warn("agent did not answer session/cancel in time; answering cancelled", "session", s.ID, "agent", inst.Agent.Name())
	r.replyRaw(t.req, cancelledResult, nil)
	r.withdraw(func(o *outgoing) bool { return o.session == s.ID })
	time.AfterFunc(r.opts.DrainGrace, func() {
		s.mu.Lock()
		stuck := !t.done
		s.mu.Unlock()
		if stuck {
			inst.Agent.RestartInstance(inst, fmt.Errorf("did not end a cancelled turn within %s", r.opts.DrainGrace+inst.Agent.Config.CancelTimeout))
		}
	})
}
