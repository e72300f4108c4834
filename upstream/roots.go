package upstream

// Sessions with different roots (issue 29 point 3). A confined agent
// process may write only below the roots its sandbox profile was derived
// for, and Landlock can narrow a process's rights but never widen them: a
// process started for one project cannot later be let into another. So a
// confined agent runs one process per distinct set of session roots (the
// session's cwd and its additionalDirectories), each started on first use
// with the profile derived for exactly those roots, and each session talks
// to the process of its own roots. The configured agent's own process (its
// cwd:, else the router's) serves the sessions whose roots are that
// directory alone. Unconfined agents keep one process for every session:
// nothing is gained by more.
//
// The processes of one agent share its name, its restart-by-the-user, its
// stop and its remembered authentication; each has its own restart budget,
// idle stop and stderr tail. Their instances' Gen are drawn from one
// counter, so that the router's tables (Name#Gen) never alias two of them.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/acp-router/acp-router/sandbox"
)

// family links the processes of one configured agent.
type family struct {
	// head is the configured agent; nil in the configured agent itself.
	head *Agent

	mu       sync.Mutex
	children map[string]*Agent // by rootsKey
	gens     atomic.Int64      // the Gen of every instance of the family
}

// top is the configured agent of a's family.
func (a *Agent) top() *Agent {
	if a.fam.head != nil {
		return a.fam.head
	}
	return a
}

// nextGen numbers a new instance of a, unique in its family.
func (a *Agent) nextGen() int { return int(a.top().fam.gens.Add(1)) }

// ForRoots returns the agent whose process a session working in cwd, with
// dirs as its additionalDirectories, talks to: the configured agent when
// those are its own roots or when it does not run confined (no sandbox,
// a kernel that cannot, an agent reached through a link); otherwise the
// agent's process for exactly those roots, created here (stopped: Ready
// starts it). cwd and dirs are absolute.
func (a *Agent) ForRoots(cwd string, dirs []string) *Agent {
	h := a.top()
	if h.opts.Confine == nil || h.Config.Command == "" || sandbox.Available() != nil {
		return h
	}
	h.mu.Lock()
	linked, auth := h.connect != nil, h.auth
	h.mu.Unlock()
	if linked {
		return h
	}
	roots := rootSet(cwd, dirs)
	if slices.Equal(roots, h.ownRoots()) {
		return h
	}
	key := strings.Join(roots, "\x00")
	h.fam.mu.Lock()
	defer h.fam.mu.Unlock()
	if c := h.fam.children[key]; c != nil {
		return c
	}
	cfg := h.Config
	cfg.Roots = roots
	if fi, err := os.Stat(roots[0]); err == nil && fi.IsDir() {
		// Else it keeps the agent's: a session's cwd need not exist.
		cfg.Cwd = roots[0]
	}
	c := New(cfg, h.opts)
	c.fam.head = h
	c.log = c.log.With("roots", roots)
	c.auth = auth
	if h.fam.children == nil {
		h.fam.children = map[string]*Agent{}
	}
	h.fam.children[key] = c
	return c
}

// Roots are the directories a's processes work in: its working directory
// first.
func (a *Agent) Roots() []string { return a.ownRoots() }

func (a *Agent) ownRoots() []string {
	if len(a.Config.Roots) > 0 {
		return a.Config.Roots
	}
	cwd := a.Config.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	if abs, err := filepath.Abs(cwd); err == nil {
		cwd = abs
	}
	return []string{filepath.Clean(cwd)}
}

// rootSet is cwd, then the other directories sorted, each once.
func rootSet(cwd string, dirs []string) []string {
	cwd = filepath.Clean(cwd)
	var rest []string
	for _, d := range dirs {
		if d = filepath.Clean(d); d != cwd && !slices.Contains(rest, d) {
			rest = append(rest, d)
		}
	}
	slices.Sort(rest)
	return append([]string{cwd}, rest...)
}

// children are the family's processes besides the configured agent's (none
// for a process of the family itself).
func (a *Agent) children() []*Agent {
	if a.fam.head != nil {
		return nil
	}
	a.fam.mu.Lock()
	defer a.fam.mu.Unlock()
	out := make([]*Agent, 0, len(a.fam.children))
	for _, c := range a.fam.children {
		out = append(out, c)
	}
	return out
}

// Family is every process of a's configured agent: that agent first, then
// those of other session roots, by their roots. The router's views of an
// agent (its state, its gauges, its sign-out) are the family's: a session
// may live on any of them.
func (a *Agent) Family() []*Agent {
	h := a.top()
	rest := h.children()
	slices.SortFunc(rest, func(x, y *Agent) int { return slices.Compare(x.Config.Roots, y.Config.Roots) })
	return append([]*Agent{h}, rest...)
}

// Running is the running instance of each process of a's family, in
// Family's order.
func (a *Agent) Running() []*Instance {
	var out []*Instance
	for _, m := range a.Family() {
		if inst := m.Current(); inst != nil {
			out = append(out, inst)
		}
	}
	return out
}

// stopChildren stops the family's other processes, concurrently.
func (a *Agent) stopChildren() {
	var wg sync.WaitGroup
	for _, c := range a.children() {
		wg.Go(c.Stop)
	}
	wg.Wait()
}

// Plan is the sandbox plan inst's process runs under: nil when it runs
// unconfined. The commands an editor runs for it run under it too
// (sandbox.Plan.Terminal).
func (i *Instance) Plan() *sandbox.Plan {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.plan
}
