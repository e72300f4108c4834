// Package guard is the permission policy at run time (DESIGN §2, §6),
// between the pure policy package and the router, which only carries a
// verdict out on the wire.
//
// It owns the policy in force (loaded from the config's permissions: and
// the root-owned org directory, reloaded when they change), the filesystem
// the policy resolves paths against, what each router session has shown of
// its tool calls (evidence), the approvals of the running turn and the
// user's "always" grants, and the audit log. Its own safeguards come on top
// of the rules: a hard link to a denied file is that file (hardlink.go), a
// change to the router's own files is asked (own.go).
//
// The router's side of it is small:
//
//	v := g.Decide(ctx, sess, guard.Request{...})  // policy, grants, approvals
//	... carry v.Effect out: relay, answer, or ask the editor ...
//	err := g.Record(v, choice)                     // audit; approvals and grants
//
// Record fails closed: an allow that cannot be audited becomes a deny
// (v.Effect changes), and the caller acts on v after Record.
package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit"
	"github.com/acp-router/acp-router/internal/owner"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/telemetry"
)

// Options configure a Guard; zero values take the defaults in brackets.
type Options struct {
	// AuditFile is the audit log; required once a policy is in force.
	AuditFile string
	// AuditMaxBytes rotates the audit log [the audit package's default].
	AuditMaxBytes int64
	// FS resolves the paths of requests [OSFS: the real filesystem].
	FS extract.FS
	// Home is ${home} and ~ in rules.
	Home string
	// DecideTimeout bounds one decision, the filesystem it waits on
	// included; a decision that takes longer is denied [5s].
	DecideTimeout time.Duration
	// AuditLockTimeout bounds the wait for the audit log's lock, which
	// other routers share; a record not written by then fails, and the
	// decision it records is denied [audit.DefaultLockTimeout].
	AuditLockTimeout time.Duration
	Logger           hclog.Logger
	// Telemetry receives every audited decision: a span, the decision
	// metrics and the record as an OTLP log record [nil: off].
	Telemetry *telemetry.Telemetry
}

// Guard holds the permission policy in force and the audit log. A reload
// swaps the policy atomically; a decision uses the policy it started with.
// A nil *Guard enforces nothing: every method is safe on it.
type Guard struct {
	opts Options
	log  hclog.Logger
	pol  atomic.Pointer[inForce]
	// kernel is SetKernel's function (*kernelFunc); nil: none.
	kernel atomic.Pointer[kernelFunc]

	// mu guards audit, auditPath and opts.AuditMaxBytes. It is never held
	// across I/O: a record waits for the audit log's lock (another router
	// may hold it, stopped) without it, so that other decisions, a reload
	// and AuditFile never wait behind one (issue 27).
	mu    sync.Mutex
	audit *audit.Log
	// auditPath is the log's file; it changes on a reload that names
	// another one.
	auditPath string
	// openMu serializes opening, moving and closing the log (Set,
	// SetAuditFile, Close), across that I/O; no decision takes it.
	openMu sync.Mutex
	// auditDown: the last write failed. A failure is logged when it
	// starts and when writing works again, not at every decision.
	auditDown atomic.Bool
	// ledger is the budgets' ledger and the usage not yet booked in it
	// (budget.go).
	ledger ledgerState

	// refusals writes the records of requests refused before any decision
	// (RecordRefused) off its caller, an agent's read loop.
	refusals refusals

	agentsMu sync.Mutex
	// infos are the names agents give themselves (SetAgentInfo), by the
	// config's name for them; reported the agent/info pairs logged.
	infos    map[string]string
	reported map[string]bool

	// own are the router's own files (Protect): changing one is asked.
	own atomic.Pointer[OwnFiles]
	// changed is closed when Set replaces the policy in force (Changed);
	// nil until someone asks.
	changedMu sync.Mutex
	changed   chan struct{}
	// stuck counts decisions still running after their timeout (a
	// filesystem call that does not return); past maxStuck, decisions are
	// denied at once rather than pile up goroutines.
	stuck atomic.Int64

	// What the guard runs is stopped and waited for by Close: the policy
	// watchers (Watch, StartWatch) and the decisions (decideBounded),
	// also those left running after their timeout.
	lifeMu    sync.Mutex
	closed    bool
	closing   chan struct{} // closed by Close
	watchers  sync.WaitGroup
	decisions owner.Group
}

// maxStuck bounds the decisions left running after their timeout.
const maxStuck = 64

// closeWait bounds how long Close waits for decisions still waiting for
// the filesystem (past their timeout, denied already): a filesystem that
// never answers does not hold the router's exit.
const closeWait = time.Second

// New returns a guard enforcing p (nil: none until Set). The audit log is
// opened with the first policy: a policy whose decisions cannot be audited
// is refused, not enforced.
func New(p *policy.Policy, opts Options) (*Guard, error) {
	if opts.FS == nil {
		opts.FS = OSFS{}
	}
	if opts.DecideTimeout == 0 {
		opts.DecideTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	g := &Guard{opts: opts, log: opts.Logger, auditPath: opts.AuditFile, closing: make(chan struct{})}
	if err := g.Set(p); err != nil {
		return nil, err
	}
	return g, nil
}

// inForce is a policy and what was learnt from the filesystem when it was
// loaded, swapped together.
type inForce struct {
	p     *policy.Policy
	links *hardLinks // nil: not checked (not the real filesystem)
}

// Policy is the policy in force; nil when none is.
func (g *Guard) Policy() *policy.Policy {
	p, _ := g.inForce()
	return p
}

// inForce is the policy in force and its hard-link set.
func (g *Guard) inForce() (*policy.Policy, *hardLinks) {
	if g == nil {
		return nil, nil
	}
	if f := g.pol.Load(); f != nil {
		return f.p, f.links
	}
	return nil, nil
}

// Enforcing: a policy is in force.
func (g *Guard) Enforcing() bool { return g.Policy() != nil }

// Set replaces the policy in force (reload), opening the audit log first
// if it is not open yet. On a nil *Guard a policy is an error: it would
// not be enforced.
func (g *Guard) Set(p *policy.Policy) error {
	if g == nil {
		if p != nil {
			return errors.New("guard: a nil guard cannot enforce a policy")
		}
		return nil
	}
	if p != nil {
		if err := g.openAudit(); err != nil {
			return err
		}
	}
	f := &inForce{p: p}
	if _, real := g.opts.FS.(OSFS); real && p != nil {
		// The files under the literal deny paths, by identity (bounded):
		// a hard link to one is known under its other name.
		f.links = scanDenyRoots(p.DenyRoots(g.opts.Home), maxDenyFiles, denyWalkBudget)
		if f.links.incomplete != "" {
			g.log.Warn("the files under the denied paths are not all known; reads of files with several names will ask", "reason", f.links.incomplete)
		}
	}
	g.pol.Store(f)
	g.changedMu.Lock()
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	g.changedMu.Unlock()
	return nil
}

// Changed is closed once the policy in force is next replaced (a reload):
// what the router enforces outside of decisions, such as the modes live
// sessions are in, must then be checked against the new policy (issue 27,
// point 1). Take the next channel before acting on a change, so that a
// reload meanwhile is not missed. A nil *Guard never changes.
func (g *Guard) Changed() <-chan struct{} {
	if g == nil {
		return nil
	}
	g.changedMu.Lock()
	defer g.changedMu.Unlock()
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// openAudit opens the audit log if it is not open yet.
func (g *Guard) openAudit() error {
	g.openMu.Lock()
	defer g.openMu.Unlock()
	g.mu.Lock()
	open, path, maxBytes := g.audit != nil, g.auditPath, g.opts.AuditMaxBytes
	g.mu.Unlock()
	if open {
		return nil
	}
	if path == "" {
		return errors.New("audit log: no file (set audit.file, or HOME or XDG_STATE_HOME)")
	}
	l, err := g.openLog(path, maxBytes)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.audit = l
	g.mu.Unlock()
	return nil
}

func (g *Guard) openLog(path string, maxBytes int64) (*audit.Log, error) {
	l, err := audit.Open(path, audit.Options{MaxBytes: maxBytes, LockTimeout: g.opts.AuditLockTimeout})
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return l, nil
}

// SetAuditFile moves the audit log to path (a reload that names another
// file): the new file is opened before the old one is closed, so no
// decision is left without a log.
func (g *Guard) SetAuditFile(path string, maxBytes int64) error {
	if g == nil {
		return nil
	}
	g.openMu.Lock()
	defer g.openMu.Unlock()
	g.mu.Lock()
	if path == g.auditPath && maxBytes == g.opts.AuditMaxBytes {
		g.mu.Unlock()
		return nil
	}
	if g.audit == nil {
		g.auditPath, g.opts.AuditMaxBytes = path, maxBytes
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	l, err := g.openLog(path, maxBytes)
	if err != nil {
		return err
	}
	g.mu.Lock()
	old := g.audit
	g.audit, g.auditPath, g.opts.AuditMaxBytes = l, path, maxBytes
	g.mu.Unlock()
	// A record still being written to the old log is finished first
	// (Close waits for it); one that comes to it after is written to the
	// new one (writeFile).
	return old.Close()
}

// AuditFile is the audit log's file.
func (g *Guard) AuditFile() string {
	if g == nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.auditPath
}

// Close stops the policy watchers and waits for them, waits for the
// decisions still running (at most closeWait for those past their
// timeout) and closes the audit log.
func (g *Guard) Close() error {
	if g == nil {
		return nil
	}
	g.lifeMu.Lock()
	if !g.closed {
		g.closed = true
		close(g.closing)
	}
	g.lifeMu.Unlock()
	g.watchers.Wait()
	g.FlushUsage() // what the agents reported is booked before the router exits
	if n := g.decisions.Wait(closeWait); n > 0 {
		g.log.Warn("decisions still wait for the filesystem as the guard closes", "count", n)
	}
	g.openMu.Lock()
	defer g.openMu.Unlock()
	g.refusals.stop(g)
	g.mu.Lock()
	l := g.audit
	g.audit = nil
	g.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Close()
}

// write appends one record to the audit log and, once it is written,
// hands it to telemetry: its span's parent is the span in ctx, and it
// started at start (the decision and the user's answer).
func (g *Guard) write(ctx context.Context, start time.Time, rec audit.Record) error {
	err := g.writeFile(&rec)
	if err == nil && g.opts.Telemetry.Enabled() {
		g.opts.Telemetry.Decision(ctx, start, &rec, evidenceSummary(rec.Evidence))
	}
	return err
}

// writeFile appends rec to the audit log, setting its DecisionID.
func (g *Guard) writeFile(rec *audit.Record) error {
	var err error
	var path string
	for range 2 {
		g.mu.Lock()
		l := g.audit
		path = g.auditPath
		g.mu.Unlock()
		if l == nil {
			err = errors.New("the audit log is not open")
			break
		}
		rec.DecisionID = l.NewID()
		err = l.Write(*rec)
		// Closed: a reload moved the log while the record waited for the
		// old one; it goes to the new one.
		if !errors.Is(err, audit.ErrClosed) {
			break
		}
	}
	switch {
	case err != nil && g.auditDown.CompareAndSwap(false, true):
		g.log.Error("cannot write the audit log; decisions that would allow are denied until it works again", "file", path, "error", err)
	case err == nil && g.auditDown.Load() && g.auditDown.CompareAndSwap(true, false):
		g.log.Info("the audit log works again", "file", path)
	}
	return err
}

// evidenceSummary is what a decision's span tells of its evidence: the
// types and kinds of its items, never paths, commands or contents.
func evidenceSummary(ev any) telemetry.Evidence {
	items, _ := ev.([]auditItem)
	var s telemetry.Evidence
	s.Items = len(items)
	for _, it := range items {
		if !slices.Contains(s.Types, it.Type) {
			s.Types = append(s.Types, it.Type)
		}
		for _, k := range it.Kinds {
			if !slices.Contains(s.Kinds, string(k)) {
				s.Kinds = append(s.Kinds, string(k))
			}
		}
	}
	if list, ok := ev.([]any); ok {
		s.Items = len(list)
	}
	return s
}

// Decides: the agent requests the policy decides (DESIGN §6), when one is
// in force.
func (g *Guard) Decides(method string) bool {
	if !g.Enforcing() {
		return false
	}
	switch method {
	case acp.MethodRequestPermission, acp.MethodReadTextFile, acp.MethodWriteTextFile, acp.MethodTerminalCreate:
		return true
	}
	return false
}
