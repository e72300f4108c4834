package ledger

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acp-router/acp-router/policy/budget"
)

// The test binary re-executed as a second router process (TestConcurrentProcesses).
func TestMain(m *testing.M) {
	if dir := os.Getenv("LEDGER_TEST_ADD"); dir != "" {
		n, _ := strconv.Atoi(os.Getenv("LEDGER_TEST_N"))
		if err := addMany(dir, os.Getenv("LEDGER_TEST_AGENT"), n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// addMany books n turns of agent, each raising its session's cumulative
// cost by 0.25 USD and using 10 tokens.
func addMany(dir, agent string, n int) error {
	l, err := Open(dir)
	if err != nil {
		return err
	}
	l.LockTimeout = time.Minute
	for i := 1; i <= n; i++ {
		if _, err := l.Add(time.Now(), Report{Agent: agent, Session: "s-" + agent, Downstream: "d-" + agent,
			Cost: &budget.Money{Amount: 0.25 * float64(i), Currency: "USD"}, Tokens: 10, Turn: true}); err != nil {
			return err
		}
	}
	return nil
}

func daySpend(t *testing.T, l *Ledger, agents ...string) budget.Spend {
	t.Helper()
	s, err := l.Read()
	if err != nil {
		t.Fatal(err)
	}
	var a []string
	if len(agents) > 0 {
		a = agents
	}
	return s.Spend(budget.PerDay, time.Now(), "", a)
}

// TestCumulativeCost: ACP's usage_update cost is the session's total; the
// ledger books its increase per downstream session, so a repeated total,
// a second ledger (a restarted router) on the same session, or a total
// that went down never counts twice or lowers spend; garbage is ignored
// and said.
func TestCumulativeCost(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(dir)
	usd := func(v float64) *budget.Money { return &budget.Money{Amount: v, Currency: "USD"} }
	now := time.Now()
	steps := []struct {
		r       Report
		ignored string
	}{
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(0.10)}, ""},
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(0.10)}, ""},
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(0.30), Tokens: 40, Turn: true}, ""},
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(0.20)}, "went down"},
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(math.NaN())}, "ignored"},
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(-1)}, "ignored"},
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(5e9)}, "ignored"},
		{Report{Agent: "claude", Session: "s1", Downstream: "a", Tokens: -5}, "ignored"},
		{Report{Agent: "claude", Session: "s1", Downstream: "b", Cost: usd(1)}, ""},
		// Another router session whose agent session has the same id
		// (another process of the agent): its own total.
		{Report{Agent: "claude", Session: "s2", Downstream: "b", Cost: usd(1)}, ""},
		{Report{Agent: "codex", Session: "s1", Downstream: "c", Tokens: 7, Turn: true, UnknownCost: true}, ""},
	}
	for i, st := range steps {
		ignored, err := l.Add(now, st.r)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(ignored, "\n"); st.ignored == "" && got != "" || !strings.Contains(got, st.ignored) {
			t.Errorf("step %d: ignored %q, want %q", i, got, st.ignored)
		}
	}
	// The total went down to 0.20: counting resumes from there.
	if _, err := l.Add(now, Report{Agent: "claude", Session: "s1", Downstream: "a", Cost: usd(0.25)}); err != nil {
		t.Fatal(err)
	}
	restarted, _ := Open(dir)
	if _, err := restarted.Add(now, Report{Agent: "claude", Session: "s1", Downstream: "b", Cost: usd(1)}); err != nil {
		t.Fatal(err)
	}
	got := daySpend(t, restarted, "claude")
	if c := got.Cost["USD"]; math.Abs(c-2.35) > 1e-9 || got.Tokens != 40 || got.Turns != 1 {
		t.Errorf("claude spent %+v, want 2.35 USD (0.30 + 0.05 + 1 + 1), 40 tokens, 1 turn", got)
	}
	all := daySpend(t, restarted)
	if all.Tokens != 47 || all.UnknownTurns != 1 || all.Turns != 2 {
		t.Errorf("all agents spent %+v, want 47 tokens, 2 turns, 1 unknown", all)
	}
	s, _ := restarted.Read()
	if ss := s.Spend(budget.PerSession, now, "s1", nil); math.Abs(ss.Cost["USD"]-1.35) > 1e-9 {
		t.Errorf("session s1 spent %v, want 1.35 USD", ss.Cost)
	}
}

// TestConcurrentAdd: two routers (here two processes, and in-process
// Ledgers on their own files) booking at once lose nothing: the sum is
// exact.
func TestConcurrentAdd(t *testing.T) {
	dir := t.TempDir()
	const n = 40
	var procs []*exec.Cmd
	for _, agent := range []string{"p1", "p2"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "LEDGER_TEST_ADD="+dir, "LEDGER_TEST_AGENT="+agent, "LEDGER_TEST_N="+strconv.Itoa(n))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, agent := range []string{"g1", "g2"} {
		wg.Go(func() { errs <- addMany(dir, agent, n) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		if err := p.Wait(); err != nil {
			t.Fatalf("router process: %v", err)
		}
	}
	l, _ := Open(dir)
	got := daySpend(t, l)
	// Each of 4 writers: its session's total reached 0.25*n.
	if c := got.Cost["USD"]; math.Abs(c-4*0.25*n) > 1e-9 || got.Tokens != 4*10*n || got.Turns != 4*n {
		t.Errorf("spent %+v, want %v USD, %d tokens, %d turns", got, 4*0.25*n, 4*10*n, 4*n)
	}
}

// TestPeriods: calendar periods in local time, and when each resets.
func TestPeriods(t *testing.T) {
	at := time.Date(2026, 11, 29, 23, 59, 0, 0, time.Local) // a Sunday
	for _, c := range []struct{ per, key, resets string }{
		{budget.PerDay, "day:2026-11-29", "2026-11-30 00:00"},
		{budget.PerWeek, "week:2026-W48", "2026-11-30 00:00"},
		{budget.PerMonth, "month:2026-11", "2026-12-01 00:00"},
	} {
		if got := PeriodKey(c.per, at, ""); got != c.key {
			t.Errorf("PeriodKey(%s) = %s, want %s", c.per, got, c.key)
		}
		if got := Resets(c.per, at).Format("2006-01-02 15:04"); got != c.resets {
			t.Errorf("Resets(%s) = %s, want %s", c.per, got, c.resets)
		}
	}
	if got := Resets(budget.PerWeek, at.AddDate(0, 0, 1)).Format("2006-01-02"); got != "2026-12-07" {
		t.Errorf("a week starting Monday resets %s, want 2026-12-07", got)
	}
}

// TestCorruptFailsClosed: a ledger that cannot be read is an error, not
// "nothing spent".
func TestCorruptFailsClosed(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(dir)
	if err := os.WriteFile(l.Path(), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(); err == nil {
		t.Fatal("a corrupt ledger reads as nothing spent")
	}
}

// TestClockSetBack: a clock set back across midnight books the spend to
// the earlier day again; nothing is lost or counted twice.
func TestClockSetBack(t *testing.T) {
	l, _ := Open(t.TempDir())
	after := time.Date(2026, 11, 30, 0, 5, 0, 0, time.Local)
	before := after.Add(-10 * time.Minute)
	usd := func(v float64) *budget.Money { return &budget.Money{Amount: v, Currency: "USD"} }
	if _, err := l.Add(after, Report{Agent: "a", Session: "s", Downstream: "x", Cost: usd(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Add(before, Report{Agent: "a", Session: "s", Downstream: "x", Cost: usd(1.5)}); err != nil {
		t.Fatal(err)
	}
	s, _ := l.Read()
	d1, d2 := s.Spend(budget.PerDay, before, "", nil), s.Spend(budget.PerDay, after, "", nil)
	if d1.Cost["USD"] != 0.5 || d2.Cost["USD"] != 1 {
		t.Errorf("day before %v, day after %v; want 0.5 and 1 USD", d1.Cost, d2.Cost)
	}
	if m := s.Spend(budget.PerMonth, after, "", nil); m.Cost["USD"] != 1.5 {
		t.Errorf("the month %v, want 1.5 USD: nothing lost, nothing twice", m.Cost)
	}
}
