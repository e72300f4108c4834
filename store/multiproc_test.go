package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Two processes write (their own sessions, and one both hold, trimmed by
// both) while a third paginates List with concurrent updates; then every
// session is checked.
func TestProcessesShareTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three processes for several seconds; not in -short")
	}
	exe, err := os.Executable()
	must(t, err)
	dir := t.TempDir()
	stop := filepath.Join(t.TempDir(), "stop")
	st := openT(t, dir, Options{})
	must(t, st.Create(Meta{ID: "shared", Cwd: "/proj/shared"}))
	must(t, st.Close())

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := func(role, name string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+role, envDir+"="+dir, envName+"="+name, envStop+"="+stop)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		must(t, cmd.Start())
		return cmd, &out
	}
	w1, out1 := start("writer", "w1")
	w2, out2 := start("writer", "w2")
	lister, outL := start("lister", "")
	if err := lister.Wait(); err != nil {
		t.Errorf("lister: %v\n%s", err, outL)
	}
	must(t, os.WriteFile(stop, nil, 0o600))
	rounds := map[string]int{}
	for name, w := range map[string]struct {
		cmd *exec.Cmd
		out *bytes.Buffer
	}{"w1": {w1, out1}, "w2": {w2, out2}} {
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, w.out)
		}
		var r int
		if _, err := fmt.Sscanf(w.out.String(), "rounds %d", &r); err != nil {
			t.Fatalf("%s: %q", name, w.out)
		}
		rounds[name] = r
	}
	t.Logf("rounds: %v; lister: %s", rounds, strings.TrimSpace(outL.String()))

	st = openT(t, dir, Options{})
	for name, r := range rounds {
		for k := 0; 5*k < r; k++ {
			id := fmt.Sprintf("%s-%d", name, k)
			h := load(t, st, id)
			var turns []int
			for tn := 5 * k; tn < min(5*(k+3), r); tn++ {
				turns = append(turns, tn)
			}
			if got, want := pairs(t, h.Updates), seq(turns, 2); !slices.Equal(got, want) {
				t.Errorf("%s: %v, want %v", id, got, want)
			}
			if h.Meta.Cwd != "/proj/"+name || !strings.HasPrefix(h.Meta.Title, id+" r") {
				t.Errorf("%s: meta %+v", id, h.Meta)
			}
		}
	}
	h := load(t, st, "shared")
	last := map[string]int{}
	for _, l := range h.Updates {
		u := parseLine(t, l)
		at := 2*u.T + u.I
		if prev, ok := last[u.S]; ok && at <= prev {
			t.Fatalf("shared: %s's updates out of order or repeated at %d.%d", u.S, u.T, u.I)
		}
		last[u.S] = at
	}
	if len(h.Updates) < 10 || !h.Trimmed {
		t.Errorf("shared: %d updates, trimmed %v", len(h.Updates), h.Trimmed)
	}
}

const (
	envName = "ACP_ROUTER_STORE_TEST_NAME"
	envStop = "ACP_ROUTER_STORE_TEST_STOP"
)

// writerChild runs rounds until the stop file exists: every fifth round
// it creates a session, each round it runs a turn on its three newest and
// on the shared session, and renames its newest. It prints the rounds done.
func writerChild() int {
	name := os.Getenv(envName)
	st, err := Open(os.Getenv(envDir), Options{CommitInterval: 5 * time.Millisecond, MaxSessionBytes: 16 << 10, verifyStarts: true})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ctx := context.Background()
	if _, err := st.Load(ctx, "shared"); err != nil {
		fmt.Println(err)
		return 1
	}
	run := func(id string, tn, size int) error {
		err := st.TurnStart(id)
		for i := range 2 {
			line := mkLine(name, tn, i, size)
			if id != "shared" {
				line = mkLine(id, tn, i, size)
			}
			err = errors.Join(err, st.Append(id, line))
		}
		return errors.Join(err, st.TurnEnd(id))
	}
	var own []string
	r := 0
	for ; ; r++ {
		if _, err := os.Stat(os.Getenv(envStop)); err == nil && r >= 20 {
			break
		}
		if r%5 == 0 {
			id := fmt.Sprintf("%s-%d", name, r/5)
			if err := st.Create(Meta{ID: id, Cwd: "/proj/" + name, Title: id}); err != nil {
				fmt.Println(err)
				return 1
			}
			own = append(own, id)
		}
		err := run("shared", r, 300)
		for _, id := range own[max(0, len(own)-3):] {
			err = errors.Join(err, run(id, r, 100))
		}
		newest := own[len(own)-1]
		err = errors.Join(err, st.Update(newest, func(m *Meta) { m.Title = newest + " r" + strconv.Itoa(r) }))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := st.Close(); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Printf("rounds %d\n", r)
	return 0
}

// listerChild paginates while the writers write, twice: every session
// listed before a pagination (which starts more than the slack later) must
// come exactly once, also with a cwd filter.
func listerChild() int {
	st, err := Open(os.Getenv(envDir), Options{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer st.Close()
	// Twice the production slack: under a loaded CI a writer's commit may
	// take longer than usual to reach the disk.
	st.listSlack = 2 * (DefaultTouchInterval + defaultListSlack)
	ctx := context.Background()
	fail := func(format string, args ...any) int {
		fmt.Printf(format+"\n", args...)
		return 1
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p, err := st.List(ctx, ListOptions{Cwd: "/proj/w1"})
		if err != nil {
			return fail("list: %v", err)
		}
		if len(p.Sessions) >= 2 {
			break // both writers are at it
		}
		if time.Now().After(deadline) {
			return fail("the writers did not start")
		}
	}
	pages := 0
	cwds := []string{"", "/proj/w1"}
	for it := range 2 {
		before := make([]Page, len(cwds))
		for k, cwd := range cwds {
			p, err := st.List(ctx, ListOptions{Cwd: cwd})
			if err != nil {
				return fail("list: %v", err)
			}
			before[k] = p
		}
		time.Sleep(st.listSlack + 100*time.Millisecond)
		for k, cwd := range cwds {
			seen := map[string]bool{}
			cur := ""
			for {
				p, err := st.List(ctx, ListOptions{Cwd: cwd, Cursor: cur, Limit: 3})
				if err != nil {
					return fail("list page: %v", err)
				}
				pages++
				for _, m := range p.Sessions {
					if seen[m.ID] {
						return fail("iteration %d cwd %q: %s listed twice", it, cwd, m.ID)
					}
					seen[m.ID] = true
					if cwd != "" && m.Cwd != cwd || m.Title == "" && m.ID != "shared" {
						return fail("iteration %d: %+v", it, m)
					}
				}
				if cur = p.NextCursor; cur == "" {
					break
				}
				time.Sleep(5 * time.Millisecond) // let the writers move things
			}
			for _, m := range before[k].Sessions {
				if !seen[m.ID] {
					return fail("iteration %d cwd %q: %s missed (%d listed before, %d in the pagination)",
						it, cwd, m.ID, len(before[k].Sessions), len(seen))
				}
			}
			if len(before[k].Sessions) < 2 {
				return fail("iteration %d: only %d sessions", it, len(before[k].Sessions))
			}
		}
	}
	fmt.Printf("%d pages\n", pages)
	return 0
}
