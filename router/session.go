package router

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/store"
	"github.com/acp-router/acp-router/upstream"
)

// Session is a router session: what the editor sees as one session. It
// holds one downstream session per agent it has used and an active agent
// (DESIGN §5).
type Session struct {
	ID      string // the id the editor uses: the first downstream id, unless taken
	Cwd     string
	Enforce bool // routed by a rule with enforce: true: the agent cannot change
	r       *Router
	// newParams are the editor's session/new params, to open the session on
	// more agents with the same cwd, MCP servers and directories.
	newParams json.RawMessage

	// seq keeps the order of what the session's agents send while a
	// decision waits (order.go); a subagent session uses its top-level
	// session's (order()).
	seq sequencer

	// Subagent sessions (subagent.go): parent is the session that
	// announced this one (nil for a top-level session); kids are the
	// children it announced, children the count of all depths (on the
	// top-level session); childCancel: the agent permits session/cancel
	// on this child.
	parent      *Session
	kids        []*Session
	children    int
	childCancel bool

	mu sync.Mutex
	// sandboxValue is the session's acp.sandbox ("" until set).
	sandboxValue string
	active       string                   // the active agent's name
	down         map[string]*downstream   // by agent name
	opening      map[string]chan struct{} // agents a downstream session is being opened on
	open         bool                     // updates may be written to the editor
	held         [][]byte                 // updates waiting for open
	timer        *time.Timer
	turn         *turn   // the running (or draining) prompt turn
	queue        []*turn // prompts waiting for the turn to end
	closed       bool
	title        string // the first title an agent sent: the session's
	// titled: the editor set the title (session/set_title); agents'
	// titles no longer replace it (lifecycle.go).
	titled    bool
	toolIDs   *merge.IDTable     // tool call ids forwarded to the editor, by agent
	msgIDs    *merge.IDTable     // message ids, by agent
	objects   objectIDs          // compaction and plan ids (objects.go)
	history   []merge.TurnRecord // finished turns, for handoff briefs
	histBytes int                // their size, as record counts it
	nextSeq   int                // Seq of the next recorded turn
	// asking: the tool calls (editor ids) the editor has a permission
	// request about, and their updates held meanwhile (asking.go).
	asking       map[string]*askHold
	askHeldBytes int
	// policy is the permission policy's state of the session: evidence,
	// approvals, grants (guard.Session).
	policy *guard.Session
	roots  []string // the session's additional directories: ${roots}
	// stored are the agents a reopened session used before, not
	// re-attached yet (history.go).
	stored map[string]store.Agent
	// lastUse: the last activity in the session; idle ones are evicted
	// from memory (evict.go).
	lastUse time.Time
	// reviving: the session is being brought back from the store; prompts
	// queue meanwhile. ready is closed when that is over (nil: the session
	// never was evicted), reviveErr then says why it failed, if it did.
	reviving  bool
	ready     chan struct{}
	reviveErr error

	// cmp is the last comparison (compare.go), until /pick or the next
	// prompt.
	cmp *comparison
}

// downstream is the session of one agent behind a router session, and what
// the router learned from it.
type downstream struct {
	agent    *upstream.Agent
	inst     *upstream.Instance
	id       string // the agent's session id
	view     merge.AgentView
	commands []json.RawMessage // the agent's last available_commands_update
	cost     *merge.Cost       // its last cumulative cost
	seen     int               // turns before this Seq are known to the agent
	// deny_modes (modes.go): modeReset is closed when a reset of a denied
	// mode ends; modeErr is why the agent is still in a denied mode.
	modeReset chan struct{}
	modeErr   error
	// childDenied: the denied mode a subagent session was last found in
	// and audited (enforceChildModeLocked); "" when it is in none.
	childDenied string
	// systemPrompt: the session's append systemPrompt as text, for the
	// agent's next prompt: the agent does not take it on session/new
	// (adaptSystemPrompt).
	systemPrompt string
	// replaying: the agent may be replaying the session's history in
	// answer to the router's session/load; the editor has it already. It
	// lasts until the router sends the agent a prompt, not until the load
	// answer: Gemini CLI streams its history without awaiting it, so the
	// replay can trail the answer. replayAt is when the last of it (or
	// the answer) came (settleReplay).
	replaying bool
	replayAt  time.Time
	// dirsTold: the agent, which does not take additionalDirectories, has
	// been told the session's directories in a prompt (handoff.go).
	dirsTold bool
}

// tableKey names an agent instance: a restarted agent may hand out the same
// session ids again, and they must not alias its previous process's.
func tableKey(inst *upstream.Instance) string { return string(appendTableKey(nil, inst)) }

func appendTableKey(b []byte, inst *upstream.Instance) []byte {
	return strconv.AppendInt(append(append(b, inst.Agent.Name()...), '#'), int64(inst.Gen), 10)
}

// downKey names downstream session id of inst (r.downs, tombstones).
func downKey(inst *upstream.Instance, id string) string { return string(appendDownKey(nil, inst, id)) }

func appendDownKey(b []byte, inst *upstream.Instance, id string) []byte {
	return append(append(appendTableKey(b, inst), ' '), id...)
}

// downLocked is r.downs[downKey(inst, id)] without making the key a string.
func (r *Router) downLocked(inst *upstream.Instance, id string) *Session {
	var buf [128]byte
	return r.downs[string(appendDownKey(buf[:0], inst, id))]
}

// alive returns d's instance, or an error naming the agent when the process
// the downstream session lived on is gone.
func (d *downstream) alive() (*upstream.Instance, error) {
	if cur := d.agent.Current(); cur == d.inst {
		return cur, nil
	}
	e := d.agent.Error(d.inst, jsonrpc2.ErrClosed)
	e.Message = fmt.Sprintf("%s; this session's conversation with it is gone, please start a new thread", e.Message)
	return nil, e
}

// activeDown returns the active agent's downstream session.
func (s *Session) activeDown() *downstream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down[s.active]
}

// route picks the agent for a new session (DESIGN §4 routing): the first
// rule whose cwd glob matches, else the default.
func (r *Router) route(cwd string) (*upstream.Agent, bool) {
	if r.opts.ForceAgent != "" {
		return r.byName[r.opts.ForceAgent], false
	}
	for i := range r.cfg.Routing.Rules {
		rule := &r.cfg.Routing.Rules[i]
		if rule.Match(cwd) {
			return r.byName[rule.Agent], rule.Enforce
		}
	}
	return r.byName[r.routingDefault()], false
}

// newSession routes session/new. It waits for the agent in a goroutine: the
// editor's read loop must not block.
func (r *Router) newSession(ctx context.Context, req *jsonrpc2.Request) {
	reply := r.replyTo(req)
	p := params(req)
	var np struct {
		Cwd  string   `json:"cwd"`
		Dirs []string `json:"additionalDirectories"`
	}
	if p == nil || json.Unmarshal(p, &np) != nil {
		reply(nil, fail(errParams, "acp-router: session/new needs params with cwd", nil))
		return
	}
	if !filepath.IsAbs(np.Cwd) {
		reply(nil, errRelativeCwd(np.Cwd))
		return
	}
	if e := errRelativeDir(req.Method, np.Dirs); e != nil {
		reply(nil, e)
		return
	}
	cwd := filepath.Clean(np.Cwd)
	roots := cleanDirs(np.Dirs)
	r.spawn(func() {
		held, release := r.hold(ctx, req)
		head, enforce := r.route(cwd)
		// The agent's process for the session's roots: under the sandbox,
		// one per set of roots (upstream/roots.go).
		a := head.ForRoots(cwd, roots)
		inst, err := a.Ready(held)
		if err != nil && held.Err() == nil {
			if fb := r.byName[r.cfg.Routing.Fallback]; fb != nil && fb != head {
				r.log.Warn("agent unavailable; using the fallback", "agent", a.Name(), "fallback", fb.Name(), "error", err)
				fb = fb.ForRoots(cwd, roots)
				if finst, ferr := fb.Ready(held); ferr == nil {
					a, inst, err, enforce = fb, finst, nil, false
				}
			}
		}
		cancelled := held.Err() != nil
		release()
		if cancelled {
			reply(nil, errCancelled)
			return
		}
		if err != nil {
			reply(nil, r.startError(a, err))
			return
		}
		s := &Session{Cwd: cwd, Enforce: enforce, r: r, newParams: p, active: a.Name(), down: map[string]*downstream{}, opening: map[string]chan struct{}{},
			toolIDs: merge.NewIDTable(), msgIDs: merge.NewIDTable(), roots: roots, policy: guard.NewSession(cwd, roots), lastUse: time.Now()}
		res, err := r.openDownstream(ctx, s, inst, acp.RawID(req.ID))
		if err != nil {
			reply(nil, err)
			return
		}
		r.declareMcp(s)
		r.log.Info("session created", "session", s.ID, "agent", a.Name(), "cwd", cwd)
		reply(s.newSessionResult(res), nil)
		s.write(s.commandsLine())
		s.openAfter(r.opts.OpenDelay)
	})
}

// openDownstream opens s on inst's agent (the first one registers s). The
// new downstream session is bound in the agent's read path, before the
// agent's next message is processed: real agents send the first update for
// a new session on the very next line (STYLE.md). It returns the agent's
// session/new result.
func (r *Router) openDownstream(ctx context.Context, s *Session, inst *upstream.Instance, preferID json.RawMessage) (json.RawMessage, error) {
	if err := r.admit(inst); err != nil {
		return nil, err
	}
	p, carried, err := adaptSystemPrompt(adaptNewSession(s.newParams, agentCaps(inst), inst.Agent.Name(), r.log), agentCaps(inst), inst.Agent.Name())
	if err != nil {
		return nil, err
	}
	bound := false
	bind := func(m *acp.Message) { bound = r.bind(s, inst, m) }
	c, err := inst.Peer().Call(ctx, acp.MethodSessionNew, paramsAny(p), preferID, bind)
	if err != nil {
		return nil, inst.Agent.Error(inst, err)
	}
	key := acp.IDKey(c.ID)
	if preferID != nil {
		key = acp.IDKey(preferID)
		r.mu.Lock()
		r.forwards[key] = &forward{inst: inst, editorID: preferID, agentID: c.ID}
		r.mu.Unlock()
	}
	res, err := c.Wait(ctx)
	if preferID != nil {
		r.mu.Lock()
		delete(r.forwards, key)
		r.mu.Unlock()
	}
	if err != nil {
		return nil, r.authError(inst.Agent, inst.Agent.Error(inst, err))
	}
	if !bound {
		return nil, fail(errInternal, fmt.Sprintf("acp-router: agent %q answered session/new without a sessionId", inst.Agent.Name()), map[string]string{"agent": inst.Agent.Name()})
	}
	r.learnModes(inst.Agent.Name(), res)
	s.mu.Lock()
	d := s.down[inst.Agent.Name()]
	d.systemPrompt = carried
	s.mu.Unlock()
	r.waitMode(ctx, s, d) // the editor's first view of the session shows the mode it will run in
	return res, nil
}

// newDownstream is the downstream session a session/new answer m of inst
// creates (its id and the agent's modes, models and options), nil when m
// is no such answer.
func newDownstream(inst *upstream.Instance, m *acp.Message) *downstream {
	var res struct {
		SessionID     string            `json:"sessionId"`
		Modes         *merge.ModeState  `json:"modes"`
		Models        *merge.ModelState `json:"models"`
		ConfigOptions json.RawMessage   `json:"configOptions"`
	}
	if m.Result == nil || json.Unmarshal(m.Result, &res) != nil || res.SessionID == "" {
		return nil
	}
	return &downstream{agent: inst.Agent, inst: inst, id: res.SessionID,
		view: merge.AgentView{Options: res.ConfigOptions, Modes: res.Modes, Models: res.Models}}
}

// bind registers the downstream session a session/new response creates,
// and the router session itself for its first one. It runs in the agent's
// read path.
func (r *Router) bind(s *Session, inst *upstream.Instance, m *acp.Message) bool {
	d := newDownstream(inst, m)
	if d == nil {
		return false
	}
	key := downKey(inst, d.id)
	r.mu.Lock()
	if s.ID == "" {
		s.ID = d.id
		for n := 1; r.sessions[s.ID] != nil || (r.opts.Store != nil && r.opts.Store.Exists(s.ID)); n++ {
			s.ID = fmt.Sprintf("%s~%s", d.id, inst.Agent.Name())
			if n > 1 {
				s.ID += fmt.Sprintf("~%d", n)
			}
		}
		r.sessions[s.ID] = s
		r.wakeEvictorLocked()
		r.recordCreate(s)
	}
	r.bindDownLocked(key, s)
	var early []*acp.Message
	if p := r.parked[inst]; p != nil {
		early = p.take(d.id)
	}
	r.mu.Unlock()
	s.mu.Lock()
	s.down[inst.Agent.Name()] = d
	r.enforceModeLocked(s, d)
	r.recordMetaLocked(s)
	s.mu.Unlock()
	for _, m := range early {
		if u, err := decodeUpdate(m); err == nil {
			r.relayUpdate(s, d, m, u)
		}
	}
	return true
}

// bindDownLocked routes the downstream session key to s. Called with r.mu
// held.
func (r *Router) bindDownLocked(key string, s *Session) {
	r.downs[key] = s
	r.tombs.remove(key) // reopened on the agent process that had it
}

// newSessionResult is the editor's session/new answer: the agent's result
// with the router's session id, option list and legacy mode union.
func (s *Session) newSessionResult(agentResult json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(agentResult, &fields) != nil {
		fields = map[string]json.RawMessage{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fields["sessionId"], _ = json.Marshal(s.ID)
	fields["configOptions"], _ = json.Marshal(s.optionsLocked())
	if modes := s.legacyModesLocked(); len(modes.AvailableModes) > 0 {
		fields["modes"], _ = json.Marshal(modes)
	} else {
		delete(fields, "modes")
	}
	out, _ := json.Marshal(fields)
	return out
}

// ensureDownstream returns s's downstream session on agent a, opening it
// first if the session has not used a yet (DESIGN §5: created on demand),
// or if the process it lived on is gone: the restarted agent gets a new
// downstream session, and its first prompt a brief of the history.
// Concurrent callers share one opening.
func (r *Router) ensureDownstream(ctx context.Context, s *Session, a *upstream.Agent) (*downstream, error) {
	name := a.Name()
	for {
		s.mu.Lock()
		if d := s.down[name]; d != nil {
			if _, err := d.alive(); err == nil {
				s.mu.Unlock()
				return d, nil
			}
		}
		if opening := s.opening[name]; opening != nil {
			s.mu.Unlock()
			select {
			case <-opening:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		opening := make(chan struct{})
		s.opening[name] = opening
		s.mu.Unlock()

		d, err := r.openDownstreamOn(ctx, s, a)
		s.mu.Lock()
		delete(s.opening, name)
		close(opening)
		s.mu.Unlock()
		return d, err
	}
}

func (r *Router) openDownstreamOn(ctx context.Context, s *Session, a *upstream.Agent) (*downstream, error) {
	a = a.ForRoots(s.Cwd, s.roots)
	inst, err := a.Ready(ctx)
	if err != nil {
		return nil, r.startError(a, err)
	}
	if err := r.admit(inst); err != nil {
		return nil, err
	}
	// The session it had there before — on the agent's previous process,
	// or before the router restarted — is re-attached if the agent can.
	name := a.Name()
	s.mu.Lock()
	prev, known := s.stored[name]
	dropReplay := s.hasHistory()
	if old := s.down[name]; old != nil && old.inst != inst {
		prev, known = store.Agent{SessionID: old.id, Options: optionValues(old.view.Options), Extra: mustJSON(old.seen)}, true
		prev.Mode, _, _, _ = merge.CurrentMode(old.view)
		dropReplay = true // the editor saw it all
	}
	s.mu.Unlock()
	if known {
		if d, ok := r.reattach(ctx, s, inst, prev, dropReplay); ok {
			s.mu.Lock()
			delete(s.stored, name)
			r.recordMetaLocked(s)
			s.mu.Unlock()
			r.waitMode(ctx, s, d)
			return d, nil
		}
	}
	if _, err := r.openDownstream(ctx, s, inst, nil); err != nil {
		return nil, err
	}
	s.mu.Lock()
	d := s.down[name]
	delete(s.stored, name)
	s.mu.Unlock()
	if known {
		r.restoreChoices(ctx, s, d, prev)
	}
	return d, nil
}

// openAfter opens the session for updates after d.
func (s *Session) openAfter(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open && s.timer == nil {
		s.timer = time.AfterFunc(d, s.openNow)
	}
}

// openNow writes the held updates and lets later ones through. A request
// from the editor that names the session opens it at once: the editor knows
// the session by then.
func (s *Session) openNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		return
	}
	s.open = true
	if s.timer != nil {
		s.timer.Stop()
	}
	for _, line := range s.held {
		s.r.writeEditor(s.ID, line)
	}
	s.held = nil
}

// write sends one update line for the editor, or holds it until the session
// is open.
func (s *Session) write(line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(line)
}

func (s *Session) writeLocked(line []byte) {
	if line != nil && !s.closed {
		s.recordLineLocked(line)
	}
	s.writeLiveLocked(line)
}

// writeRawLocked is writeLocked(m.Raw) for an update of which nothing else
// keeps a piece: when the line is in the agent stream's pooled buffer, the
// editor's queue and the store hold it by reference, and it goes back to
// the pool once both have written it (acp.Shared), instead of being garbage
// the collector has to catch up with during a flood of large updates.
func (s *Session) writeRawLocked(m *acp.Message) {
	if s.closed || !s.open {
		s.writeLocked(m.Raw) // kept (held) or dropped: not claimed
		return
	}
	sh := m.Claim()
	if sh == nil {
		s.writeLocked(m.Raw)
		return
	}
	if st, root := s.r.opts.Store, s.root(); st != nil && root.ID != "" {
		st.AppendShared(root.ID, m.Raw, sh) // ErrDropped: the store notes the gap itself
	}
	if err := s.r.editor.Stream().WriteRawShared(s.ID, m.Raw, sh); err != nil {
		s.r.log.Debug("cannot write to the editor", "error", err)
	}
	sh.Release()
}

// writeLiveLocked writes a line that is not part of the session's history
// (a notice: acp-currency row 2): it is never stored, so a load never
// replays it.
func (s *Session) writeLiveLocked(line []byte) {
	switch {
	case line == nil, s.closed:
	case !s.open:
		s.held = append(s.held, line)
	default:
		s.r.writeEditor(s.ID, line)
	}
}

// writeEditor queues a line of router session sid for the editor, in the
// session's lane. It never waits (the editor's stream has lanes), so it may
// be called holding s.mu; whoever can flood the editor calls waitEditor
// next, holding no lock.
func (r *Router) writeEditor(sid string, line []byte) {
	if _, err := r.sendEditor(acp.Outgoing{Lane: sid, Note: line}); err != nil {
		r.log.Debug("cannot write to the editor", "error", err)
	}
}

// sendEditor is the one way what the router tells the editor of its own
// (a session's line) and what it asks it on an agent's behalf (the fast
// path's requests, their ids and options put in the agent's bytes as they
// are written) reach the editor's connection: whatever the policy decided
// about an agent's permission request, its outcome leaves the router here,
// in one call. It never waits.
func (r *Router) sendEditor(o acp.Outgoing) (acp.Sent, error) {
	return r.editor.Send(o)
}

// waitEditor waits for room in the lane of router session sid ("": the
// shared lane) of the editor's write queue: the backpressure of a slow
// editor on what can flood it (an agent's read path, the history replay).
// Never called holding a lock, nor in the editor's read loop.
func (r *Router) waitEditor(sid string) {
	if err := r.editor.Stream().WaitRoom(sid); err != nil {
		r.log.Trace("no room to wait for in the editor's queue", "session", sid, "error", err)
	}
}

// updateLine encodes a session/update notification from the router.
func (s *Session) updateLine(update any) []byte {
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": acp.MethodSessionUpdate,
		"params": map[string]any{"sessionId": s.ID, "update": update}})
	if err != nil {
		return nil
	}
	return line
}

// closeSession handles session/close: each agent closes its downstream
// session when it supports close; otherwise the router cancels the running
// turn itself. The router forgets the session either way, first: what its
// agents still send for it (the rest of a cancelled turn) is dropped at
// once (forget).
func (r *Router) closeSession(ctx context.Context, req *jsonrpc2.Request) {
	id := acp.SessionID(params(req))
	if id == "" {
		r.replyTo(req)(nil, errNoSessionID)
		return
	}
	// Live or evicted (evict.go): a prompt must not bring it back.
	r.mu.Lock()
	r.closedIDs.add(id)
	r.mu.Unlock()
	s := r.sessionOf(params(req))
	if s == nil {
		r.replyTo(req)(json.RawMessage("{}"), nil)
		return
	}
	closeAgents := r.closeWork(s)
	r.spawn(func() {
		if err := closeAgents(ctx, false); err != nil {
			r.replyTo(req)(nil, err)
			return
		}
		r.replyTo(req)(json.RawMessage("{}"), nil)
	})
}

// closeWork ends s in the router at once (forget; the store keeps its
// history) and returns what closes its agents' sessions: each agent closes
// its downstream session when it supports close (archive: session/archive
// first, when it supports that), otherwise the router cancels the running
// turn there. It returns the first agent's error.
func (r *Router) closeWork(s *Session) func(ctx context.Context, archive bool) error {
	r.dropCompare(context.Background(), s) // its agents' comparison sessions closed too
	s.mu.Lock()
	downs := make([]*downstream, 0, len(s.down))
	for _, d := range s.down {
		downs = append(downs, d)
	}
	running := s.turn != nil
	s.mu.Unlock()
	r.forget(s)
	if st := r.opts.Store; st != nil {
		st.Release(s.ID) // the history stays
	}
	return func(ctx context.Context, archive bool) error {
		var first error
		for _, d := range downs {
			inst, err := d.alive()
			if err != nil {
				continue
			}
			ref, _ := json.Marshal(acp.SessionRef{SessionID: d.id})
			caps := agentCaps(inst).SessionCapabilities
			method := ""
			switch {
			case archive && acp.Supported(caps.Archive):
				method = acp.MethodSessionArchive
			case acp.Supported(caps.Close):
				method = acp.MethodSessionClose
			}
			if method != "" {
				if _, err := callWait(ctx, inst, method, ref); err != nil && first == nil {
					first = inst.Agent.Error(inst, err)
				}
			} else if running {
				inst.Peer().Notify(ctx, acp.MethodSessionCancel, json.RawMessage(ref))
			}
		}
		return first
	}
}

// downKeysLocked are the keys of s's downstream sessions (Router.downs).
func (s *Session) downKeysLocked() []string {
	keys := make([]string, 0, len(s.down))
	for _, d := range s.down {
		keys = append(keys, downKey(d.inst, d.id))
	}
	if s.cmp != nil { // a comparison's sessions go with the session
		for _, l := range s.cmp.legs {
			if l.d != nil {
				keys = append(keys, downKey(l.d.inst, l.d.id))
			}
		}
	}
	return keys
}

// unregister removes s and its downstream sessions (keys) from the
// router's tables, unless another session took their place since, and
// remembers the downstream sessions as gone (tombstones).
func (r *Router) unregister(s *Session, keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.ID] == s { // not one reopened under its id since
		delete(r.sessions, s.ID)
	}
	r.forgetMcpLocked(s)
	for _, k := range keys {
		if r.downs[k] == s {
			delete(r.downs, k)
		}
		r.tombs.add(k)
	}
}

// forget removes a closed session; prompts still queued end cancelled. Its
// downstream sessions are remembered as closed (tombstones), so that their
// late updates are dropped, not parked as updates for sessions not bound
// yet.
func (r *Router) forget(s *Session) {
	s.mu.Lock()
	s.closed = true
	queued := s.queue
	s.queue = nil
	keys := s.downKeysLocked()
	s.mu.Unlock()
	r.unregister(s, keys)
	r.forgetChildren(s)
	for _, t := range queued {
		r.unhold(t.req)
		r.replyTo(t.req)(cancelledResult, nil)
	}
}

// errRelativeDir is the error for the additionalDirectories of a session
// request (new, load, resume, fork) when one is not an absolute path (ACP:
// "Each path must be absolute"), else nil. Passed on, a relative one would
// be the agent's to resolve against a directory of its choosing, and
// outside the router's ${roots}.
func errRelativeDir(method string, dirs []string) *jsonrpc2.Error {
	for _, dir := range dirs {
		if !filepath.IsAbs(dir) {
			return fail(errParams, fmt.Sprintf("acp-router: %s: additionalDirectories must be absolute paths, got %q", method, dir), nil)
		}
	}
	return nil
}

// cleanDirs is a session's additionalDirectories as its roots: each
// cleaned, relative ones (refused where the editor sends them, possible in
// an old store) left out.
func cleanDirs(dirs []string) []string {
	var roots []string
	for _, dir := range dirs {
		if filepath.IsAbs(dir) {
			roots = append(roots, filepath.Clean(dir))
		}
	}
	return roots
}
