package router

import (
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/acp"
)

// Bounds (DESIGN §7): nothing an agent or the editor sends can make the
// router's memory grow without bound. Every table, queue and parking place
// has a bound; what is dropped is counted and logged once (drops).
//
// The tables of Router and Session and what bounds them:
//   - parked (updates for session ids not bound yet): maxUnbound updates
//     per id, maxUnboundIDs ids and maxUnboundBytes per agent instance;
//     gone with the instance.
//   - tombs (downstream sessions closed or evicted): maxTombstones keys.
//   - sessions, downs: sessions idle for Options.EvictIdle, or beyond
//     Options.MaxSessions, are evicted from memory (evict.go).
//   - Session.toolIDs, msgIDs: retired when finished (maxDoneTools,
//     maxToolIDs, maxMsgIDs; turn end); Session.objects: maxPlanIDs,
//     maxCompactionIDs (objects.go).
//   - Session.queue: maxQueued prompts.
//   - Session.seq (an agent's traffic behind a session's pending
//     decision): maxSequenced items and maxSequencedBytes; past them the
//     agent's read path waits (order.go), counted by seqWaits.
//   - forwards: one per editor request in flight at an agent: prompts (one
//     running per session, the rest queued) and at most maxForwards others.
//   - held: one per editor request the router holds while an agent starts
//     (bounded by its startup_timeout) or a prompt is queued (maxQueued).
//   - toEditor, pending: maxPending per agent instance (agentcalls.go).
//   - terminals: maxTerminals per agent; gone with the agent's instance.
//   - elicits: maxElicits URL elicitations waiting for their completion.
//   - watched: one per agent instance with a turn, gone when it exits.
//   - modeCache, cmdCache, byName, auth: one entry per configured agent
//     (auth: per advertised method, from initialize).
//   - Session.held (updates before a new session is open): held for
//     Options.OpenDelay (50 ms) only.
//   - Session.asking (tool call updates held while the editor has a
//     permission request about the tool call): maxAskHeld updates and
//     maxAskHeldBytes per session (asking.go).
//   - Session.history: bounded by the handoff brief (handoff.go record;
//     a loaded session's too, fillFromStore),
//     a running turn's record by maxBriefTools; Session.policy by guard
//     (per session and turn).
const (
	// maxUnbound: updates parked per session id not bound yet (an agent
	// may announce a session before answering session/new).
	maxUnbound = 256
	// maxUnboundIDs: session ids with parked updates per agent instance.
	// An agent announces at most the few sessions it is opening.
	maxUnboundIDs = 64
	// maxUnboundBytes: bytes parked per agent instance.
	maxUnboundBytes = 8 << 20
	// maxTombstones: downstream sessions closed (or evicted) recently,
	// whose late updates are dropped at once instead of parked. One that
	// fell out of the set has its updates parked, within the bounds above.
	maxTombstones = 4096
	// maxDoneTools: tool calls of a running turn kept after they finished,
	// for the updates that may follow (agents send content or raw output
	// after "completed"); the rest are retired at turn end.
	maxDoneTools = 256
	// maxToolIDs: tool calls a session keeps ids for, finished or not;
	// past it the oldest are retired (a flood of tool calls never marked
	// finished).
	maxToolIDs = 1024
	// maxMsgIDs: message ids a session keeps between turn ends.
	maxMsgIDs = 1024
	// maxQueued: prompts waiting for a session's running turn.
	maxQueued = 64
	// maxTerminals: terminals an agent may have open at once.
	maxTerminals = 256
	// maxElicits: URL elicitations waiting for elicitation/complete.
	maxElicits = 1024
	// maxForwards: editor requests other than prompts in flight at the
	// agents.
	maxForwards = 4096
	// dropLogEvery: at most one line per bound this often after the first.
	dropLogEvery = time.Minute
)

// drops counts what one bound drops and logs it once: a line at the first
// drop, then at most one per dropLogEvery with the count since, and the
// total at the end (flush).
type drops struct {
	log   hclog.Logger
	level hclog.Level
	msg   string
	args  []any
	key   string // what is counted: "dropped", unless newWaits

	mu      sync.Mutex
	total   uint64
	pending uint64 // dropped since the last line
	last    time.Time
}

func newDrops(log hclog.Logger, level hclog.Level, msg string, args ...any) *drops {
	return &drops{log: log, level: level, msg: msg, args: args, key: "dropped"}
}

// newWaits is a drops that counts times a bound made a reader wait (key
// "waits") rather than drop.
func newWaits(log hclog.Logger, level hclog.Level, msg string, args ...any) *drops {
	return &drops{log: log, level: level, msg: msg, args: args, key: "waits"}
}

// add counts n drops. detail (key/value pairs) goes with the first line.
// It logs, so call it without holding the router's locks.
func (d *drops) add(n int, detail ...any) {
	if n <= 0 {
		return
	}
	d.mu.Lock()
	first := d.total == 0
	d.total += uint64(n)
	d.pending += uint64(n)
	now := time.Now()
	if !first && now.Sub(d.last) < dropLogEvery {
		d.mu.Unlock()
		return
	}
	dropped, total := d.pending, d.total
	d.pending, d.last = 0, now
	d.mu.Unlock()
	args := append(append([]any{}, d.args...), d.key, dropped, "total", total)
	if first {
		args = append(args, detail...)
	}
	d.log.Log(d.level, d.msg, args...)
}

// flush logs the drops not logged yet, with the total.
func (d *drops) flush() {
	d.mu.Lock()
	dropped, total := d.pending, d.total
	d.pending = 0
	d.mu.Unlock()
	if dropped > 0 {
		d.log.Log(d.level, d.msg, append(append([]any{}, d.args...), d.key, dropped, "total", total, "final", true)...)
	}
}

// parking holds one agent instance's updates for session ids the router
// has not bound yet, oldest id first, within maxUnbound, maxUnboundIDs and
// maxUnboundBytes. Guarded by Router.mu.
type parking struct {
	ids   map[string][]*acp.Message
	order []string // ids in the order they were first parked; may hold taken ones
	bytes int
	drops *drops
}

// park holds m, an update for session id, and returns how many updates it
// dropped to stay within the bounds: the oldest id's when there are too
// many ids, the id's oldest when it has too many, the oldest overall when
// there are too many bytes. The newest are kept: a session about to be
// bound is the one an agent announced last.
func (p *parking) park(id string, m *acp.Message) int {
	dropped := 0
	list, known := p.ids[id]
	if !known {
		for len(p.ids) >= maxUnboundIDs {
			dropped += p.dropOldestID()
		}
		if len(p.order) >= 2*maxUnboundIDs {
			p.compact()
		}
		p.order = append(p.order, id)
	}
	if len(list) >= maxUnbound {
		p.bytes -= len(list[0].Raw)
		list[0] = nil
		list = list[1:]
		dropped++
	}
	p.ids[id] = append(list, m)
	p.bytes += len(m.Raw)
	for p.bytes > maxUnboundBytes && len(p.ids) > 0 {
		dropped += p.dropOldestUpdate()
	}
	return dropped
}

// take returns and forgets the updates parked for id.
func (p *parking) take(id string) []*acp.Message {
	list := p.ids[id]
	delete(p.ids, id)
	for _, m := range list {
		p.bytes -= len(m.Raw)
	}
	return list
}

// oldest returns the oldest id that still has updates.
func (p *parking) oldest() string {
	for len(p.order) > 0 {
		id := p.order[0]
		if _, ok := p.ids[id]; ok {
			return id
		}
		p.order = p.order[1:]
	}
	return ""
}

func (p *parking) dropOldestID() int {
	return len(p.take(p.oldest()))
}

func (p *parking) dropOldestUpdate() int {
	id := p.oldest()
	list := p.ids[id]
	if len(list) <= 1 {
		return len(p.take(id))
	}
	p.bytes -= len(list[0].Raw)
	list[0] = nil
	p.ids[id] = list[1:]
	return 1
}

func (p *parking) compact() {
	live := make([]string, 0, len(p.ids))
	for _, id := range p.order {
		if _, ok := p.ids[id]; ok {
			live = append(live, id)
		}
	}
	p.order = live
}

// count is the number of updates parked.
func (p *parking) count() int {
	n := 0
	for _, list := range p.ids {
		n += len(list)
	}
	return n
}

// tombstones remembers the downKeys of downstream sessions recently closed
// or evicted: their late updates (the rest of a turn cancelled by
// session/close) are dropped at once, not parked as unknown. At most
// maxTombstones, oldest forgotten first. Guarded by Router.mu.
type tombstones struct {
	set  map[string]uint64 // key → its entry's seq in ring
	ring []tomb            // oldest first
	seq  uint64
}

type tomb struct {
	key string
	seq uint64
}

func (t *tombstones) add(key string) {
	if t.set == nil {
		t.set = map[string]uint64{}
	}
	t.seq++
	t.set[key] = t.seq
	t.ring = append(t.ring, tomb{key, t.seq})
	for len(t.ring) > maxTombstones {
		old := t.ring[0]
		t.ring[0] = tomb{}
		t.ring = t.ring[1:]
		if t.set[old.key] == old.seq {
			delete(t.set, old.key)
		}
	}
}

func (t *tombstones) has(key string) bool {
	_, ok := t.set[key]
	return ok
}

// remove forgets key: the session is bound again (reopened on the same
// agent process, which kept its id).
func (t *tombstones) remove(key string) { delete(t.set, key) }

// removePrefix forgets the keys of an agent instance that is gone.
func (t *tombstones) removePrefix(prefix string) {
	for key := range t.set {
		if strings.HasPrefix(key, prefix) {
			delete(t.set, key)
		}
	}
}
