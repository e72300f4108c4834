// Package ledger keeps what the agents spent, for the policy's budgets
// (issue 32): one JSON file in the state directory, so per OS user, shared
// by every router on the machine (each update under an exclusive flock(2)
// of a lock file, then written to a temp file renamed over the ledger:
// readers see the old or the new file, never a mix), and by every client
// of a served router (one Router, one Ledger).
//
// Spend is kept per period and agent: per router session, per calendar day,
// ISO week (from Monday) and month, in the machine's local time, so a
// budget "per day" resets at local midnight. A clock set back books spend
// to the earlier period again: spend is only ever added, never lowered.
//
// ACP's usage_update cost is the session's cumulative cost (schema
// UsageUpdate.cost). The ledger keeps the last amount each downstream
// session reported and books only the increase: an agent that reports the
// same total again, a switch back to an agent, or a router restarted on a
// loaded session does not count twice. A decrease, a negative, NaN or
// absurd value is ignored (Add says so): it never lowers spend.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/acp-router/acp-router/internal/atomicfile"
	"github.com/acp-router/acp-router/policy/budget"
)

// FileName is the ledger's file in the state directory.
const FileName = "budget-ledger.json"

// Bounds: what one report may say before it is taken for garbage, and how
// long entries are kept.
const (
	MaxCostReport   = 1e6  // in the currency's unit, per report
	MaxTokensReport = 1e10 // per turn
	maxSessions     = 10000
	maxCumulative   = 10000
)

var keep = map[string]time.Duration{
	budget.PerSession: 35 * 24 * time.Hour,
	budget.PerDay:     62 * 24 * time.Hour,
	budget.PerWeek:    20 * 7 * 24 * time.Hour,
	budget.PerMonth:   400 * 24 * time.Hour,
}

// ErrLockTimeout: another router held the ledger's lock too long.
var ErrLockTimeout = errors.New("ledger: the lock is held by another process")

// Ledger is the spend file of a state directory. Safe for concurrent use,
// and with other processes.
type Ledger struct {
	path, lockPath string
	// LockTimeout bounds the wait for the lock [5s].
	LockTimeout time.Duration
}

// Open returns the ledger of state directory dir (created when missing).
func Open(dir string) (*Ledger, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	p := filepath.Join(dir, FileName)
	return &Ledger{path: p, lockPath: p + ".lock", LockTimeout: 5 * time.Second}, nil
}

// Path is the ledger's file.
func (l *Ledger) Path() string { return l.path }

// Report is one thing an agent said it spent.
type Report struct {
	Agent string
	// Session is the router session (for per: session budgets).
	Session string
	// Downstream is the agent's own session id, which a cumulative cost
	// belongs to.
	Downstream string
	// Cost, when set, is the downstream session's cumulative cost as
	// the agent reported it (usage_update).
	Cost *budget.Money
	// Tokens a turn used (the prompt response's usage).
	Tokens int64
	// Turn: a turn ended; UnknownCost: it ended without any cost report
	// from its agent.
	Turn, UnknownCost bool
}

// file is the ledger on disk.
type file struct {
	Version int `json:"version"`
	// Periods are by period key (PeriodKey), then agent.
	Periods map[string]*period `json:"periods"`
	// Cumulative is the last cumulative cost of each downstream session
	// (router session + "/" + agent + "/" + its session id).
	Cumulative map[string]*cumulative `json:"cumulative"`
}

type period struct {
	At     time.Time                `json:"at"`
	Agents map[string]*budget.Spend `json:"agents"`
}

type cumulative struct {
	Amount   float64   `json:"amount"`
	Currency string    `json:"currency"`
	At       time.Time `json:"at"`
}

// PeriodKey names the period per of time t (local), or of router session
// sid: "day:2026-11-29", "week:2026-W48", "month:2026-11", "session:ID".
func PeriodKey(per string, t time.Time, sid string) string {
	t = t.Local()
	switch per {
	case budget.PerSession:
		return "session:" + sid
	case budget.PerWeek:
		y, w := t.ISOWeek()
		return fmt.Sprintf("week:%d-W%02d", y, w)
	case budget.PerMonth:
		return t.Format("month:2006-01")
	}
	return t.Format("day:2006-01-02")
}

// Resets is when the period per of time t ends (local midnight, the next
// Monday, the first of the next month); the zero time for per: session.
func Resets(per string, t time.Time) time.Time {
	t = t.Local()
	midnight := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.Local)
	switch per {
	case budget.PerDay:
		return midnight.AddDate(0, 0, 1)
	case budget.PerWeek:
		days := (8 - int(t.Weekday())) % 7
		if days == 0 {
			days = 7
		}
		return midnight.AddDate(0, 0, days)
	case budget.PerMonth:
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.Local)
	}
	return time.Time{}
}

var pers = []string{budget.PerSession, budget.PerDay, budget.PerWeek, budget.PerMonth}

// Add books reports made at time at. What it ignores (values that are
// negative, NaN, absurd, or a cumulative cost below the last one) it
// returns, one line each, for the caller to log; spend is never lowered.
func (l *Ledger) Add(at time.Time, reports ...Report) (ignored []string, err error) {
	err = l.update(func(f *file) {
		for _, r := range reports {
			delta, tokens, why := f.measure(r, at)
			if why != "" {
				ignored = append(ignored, fmt.Sprintf("agent %s session %s: %s", r.Agent, r.Downstream, why))
			}
			if delta == nil && tokens == 0 && !r.Turn {
				continue
			}
			for _, per := range pers {
				if per == budget.PerSession && r.Session == "" {
					continue
				}
				key := PeriodKey(per, at, r.Session)
				p := f.Periods[key]
				if p == nil {
					p = &period{Agents: map[string]*budget.Spend{}}
					f.Periods[key] = p
				}
				p.At = at
				s := p.Agents[r.Agent]
				if s == nil {
					s = &budget.Spend{}
					p.Agents[r.Agent] = s
				}
				if delta != nil {
					if s.Cost == nil {
						s.Cost = map[string]float64{}
					}
					s.Cost[delta.Currency] += delta.Amount
				}
				s.Tokens += tokens
				if r.Turn {
					s.Turns++
					if r.UnknownCost {
						s.UnknownTurns++
					}
				}
			}
		}
		f.prune(at)
	})
	return ignored, err
}

// measure returns what r adds: the increase of its cumulative cost and
// its tokens, and why part of it is ignored.
func (f *file) measure(r Report, at time.Time) (delta *budget.Money, tokens int64, why string) {
	switch {
	case r.Tokens < 0 || r.Tokens > MaxTokensReport:
		why = fmt.Sprintf("tokens %d ignored (negative or absurd)", r.Tokens)
	default:
		tokens = r.Tokens
	}
	c := r.Cost
	if c == nil {
		return nil, tokens, why
	}
	if math.IsNaN(c.Amount) || math.IsInf(c.Amount, 0) || c.Amount < 0 || c.Amount > MaxCostReport || c.Currency == "" {
		return nil, tokens, fmt.Sprintf("cost %v %q ignored (negative, not a number, absurd or without currency)", c.Amount, c.Currency)
	}
	// Keyed by the router session too: two processes of one agent (one
	// per set of session roots, under the sandbox) may each name a
	// session "1".
	key := r.Session + "/" + r.Agent + "/" + r.Downstream
	last := f.Cumulative[key]
	prev := 0.0
	if last != nil && last.Currency == c.Currency {
		prev = last.Amount
	}
	if c.Amount < prev {
		// The total went down: a restart of the agent's session under
		// the same id, or garbage. Spend is never lowered; counting
		// resumes from the new total.
		why = fmt.Sprintf("cumulative cost went down from %v to %v %s: ignored", prev, c.Amount, c.Currency)
		f.Cumulative[key] = &cumulative{c.Amount, c.Currency, at}
		return nil, tokens, why
	}
	if c.Amount-prev > MaxCostReport {
		return nil, tokens, fmt.Sprintf("cost increase of %v %s ignored (absurd)", c.Amount-prev, c.Currency)
	}
	f.Cumulative[key] = &cumulative{c.Amount, c.Currency, at}
	if c.Amount == prev {
		return nil, tokens, why
	}
	return &budget.Money{Amount: c.Amount - prev, Currency: c.Currency}, tokens, why
}

// prune drops the periods and cumulative totals no budget can ask for any
// more, and bounds their number.
func (f *file) prune(now time.Time) {
	var sessions []string
	for key, p := range f.Periods {
		per, _, _ := cutColon(key)
		if now.Sub(p.At) > keep[per] {
			delete(f.Periods, key)
		} else if per == budget.PerSession {
			sessions = append(sessions, key)
		}
	}
	if len(sessions) > maxSessions {
		slices.SortFunc(sessions, func(a, b string) int { return f.Periods[a].At.Compare(f.Periods[b].At) })
		for _, key := range sessions[:len(sessions)-maxSessions] {
			delete(f.Periods, key)
		}
	}
	var cums []string
	for key, c := range f.Cumulative {
		if now.Sub(c.At) > keep[budget.PerSession] {
			delete(f.Cumulative, key)
		} else {
			cums = append(cums, key)
		}
	}
	if len(cums) > maxCumulative {
		slices.SortFunc(cums, func(a, b string) int { return f.Cumulative[a].At.Compare(f.Cumulative[b].At) })
		for _, key := range cums[:len(cums)-maxCumulative] {
			delete(f.Cumulative, key)
		}
	}
}

func cutColon(key string) (string, string, bool) {
	for i := range len(key) {
		if key[i] == ':' {
			return key[:i], key[i+1:], true
		}
	}
	return key, "", false
}

// Snapshot is the ledger as read at one instant.
type Snapshot struct {
	f *file
}

// Read returns the ledger as it is now.
func (l *Ledger) Read() (*Snapshot, error) {
	lock, err := l.lock()
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	f, err := l.load()
	if err != nil {
		return nil, err
	}
	return &Snapshot{f}, nil
}

// Spend is the spend of agents (nil: every agent) in the period per of
// time at (or of router session sid).
func (s *Snapshot) Spend(per string, at time.Time, sid string, agents []string) budget.Spend {
	var out budget.Spend
	p := s.f.Periods[PeriodKey(per, at, sid)]
	if p == nil {
		return out
	}
	for agent, sp := range p.Agents {
		if agents != nil && !slices.Contains(agents, agent) {
			continue
		}
		for c, v := range sp.Cost {
			if out.Cost == nil {
				out.Cost = map[string]float64{}
			}
			out.Cost[c] += v
		}
		out.Tokens += sp.Tokens
		out.Turns += sp.Turns
		out.UnknownTurns += sp.UnknownTurns
	}
	return out
}

// Period is one period's spend per agent, for `acp-router budget`.
type Period struct {
	Key    string                  `json:"period"`
	Agents map[string]budget.Spend `json:"agents"`
}

// Periods returns every period the ledger holds but sessions', by key.
func (s *Snapshot) Periods() []Period {
	var out []Period
	for key, p := range s.f.Periods {
		if per, _, _ := cutColon(key); per == budget.PerSession {
			continue
		}
		ps := Period{Key: key, Agents: map[string]budget.Spend{}}
		for a, sp := range p.Agents {
			ps.Agents[a] = *sp
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b Period) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out
}

// update changes the ledger under its lock: read, change, write a temp
// file renamed over it.
func (l *Ledger) update(change func(*file)) error {
	lock, err := l.lock()
	if err != nil {
		return err
	}
	defer lock.Close()
	f, err := l.load()
	if err != nil {
		return err
	}
	change(f)
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return l.writeAtomic(data)
}

func (l *Ledger) load() (*file, error) {
	f := &file{Version: 1, Periods: map[string]*period{}, Cumulative: map[string]*cumulative{}}
	data, err := os.ReadFile(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	if err := json.Unmarshal(data, f); err != nil {
		// Fail closed: a ledger that cannot be read is not taken for
		// "nothing spent" (budgets would then never be reached).
		return nil, fmt.Errorf("ledger: %s is corrupt (%v); move it away to start counting again", l.path, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("ledger: %s has version %d; this router reads version 1", l.path, f.Version)
	}
	if f.Periods == nil {
		f.Periods = map[string]*period{}
	}
	if f.Cumulative == nil {
		f.Cumulative = map[string]*cumulative{}
	}
	return f, nil
}

// lock takes the exclusive flock(2) of the lock file, within LockTimeout.
// flock belongs to the open file: two Ledgers in one process exclude each
// other as two processes do.
func (l *Ledger) lock() (*os.File, error) {
	timeout := l.LockTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	f, err := atomicfile.OpenLocked(l.lockPath, time.Now().Add(timeout))
	if errors.Is(err, atomicfile.ErrLockTimeout) {
		return nil, ErrLockTimeout
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: lock: %w", err)
	}
	return f, nil
}

func (l *Ledger) writeAtomic(data []byte) error {
	if err := (atomicfile.Options{Sync: true}).Write(l.path, data); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// FormatAmount prints an amount as the ledger keeps it, without float
// noise.
func FormatAmount(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}
