package test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOrderingInterleaved pins DESIGN §5 "Ordering" under stress: two agents
// stream to two sessions at once, each turn ends with a 1 MiB update right
// before the prompt response, and the editor reads slowly so every queue
// backs up. Per session, updates keep their order, none is lost, and all
// precede the prompt response. Session updates for a new session (sent by
// the agent in the same write as the session/new response) reach the editor
// only after that response, and are not dropped.
//
// Run it many times: go test -race -count=200 -run TestOrdering ./test/
func TestOrderingInterleaved(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	cfg := writeConfig(t, routerYAML(t,
		[]string{
			fakeAgentYAML("alpha", fakeOpts{UpdateWithNew: true}),
			fakeAgentYAML("beta", fakeOpts{UpdateWithNew: true}),
		},
		"default: alpha",
		"rules:",
		cwdRule(dirB, "beta"),
	))
	e := StartRouter(t, cfg, nil, withSlowRead(200*time.Microsecond))
	e.Initialize(t, capsAll)

	// Both sessions are created at once, so that the agents' session/new
	// responses and first updates interleave.
	type newResult struct {
		agent string
		resp  *Msg
		err   error
	}
	results := make([]newResult, 2)
	var wg sync.WaitGroup
	for i, s := range []struct{ agent, cwd string }{{"alpha", dirA}, {"beta", dirB}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			m, err := e.Request(ctx, "session/new", map[string]any{"cwd": s.cwd, "mcpServers": []any{}})
			results[i] = newResult{s.agent, m, err}
		}()
	}
	wg.Wait()
	sids := map[string]string{} // editor session id -> agent
	for _, r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.Error != nil {
			t.Fatalf("session/new on %s: %v", r.agent, r.resp.Error)
		}
		sid := jsonString(r.resp.Result, "sessionId")
		if sid == "" || sids[sid] != "" {
			t.Fatalf("session/new ids %s: empty or not distinct", sids)
		}
		sids[sid] = r.agent
		// Zed drops updates that arrive before the session/new response.
		for _, m := range e.Rec.All() {
			if m.Method == "session/update" && m.SessionID() == sid && m.Seq < r.resp.Seq {
				t.Errorf("update for %s (#%d) before its session/new response (#%d): %s", sid, m.Seq, r.resp.Seq, m)
			}
		}
		// The agent's own command, sent on the line right after the
		// response, must not be lost.
		e.Rec.WaitFor(t, waitTimeout, "available_commands_update with fake-cmd for "+sid, func(m *Msg) bool {
			return m.Update() == "available_commands_update" && m.SessionID() == sid &&
				strings.Contains(string(m.Params), `"fake-cmd"`)
		})
	}

	const (
		nSmall    = 150
		smallSize = 600
		bigSize   = 1 << 20
	)
	script := fmt.Sprintf("whoami\nupdates %d %d\nupdates 1 %d", nSmall, smallSize, bigSize)
	type promptResult struct {
		resp *Msg
		err  error
	}
	done := map[string]*promptResult{}
	for sid := range sids {
		done[sid] = &promptResult{}
	}
	for sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := e.Prompt(waitTimeout, sid, script)
			done[sid].resp, done[sid].err = m, err
		}()
	}
	wg.Wait()

	for sid, agent := range sids {
		r := done[sid]
		if r.err != nil {
			t.Fatalf("prompt on %s (%s): %v", sid, agent, r.err)
		}
		requireStop(t, r.resp, "end_turn")
		var texts []*Msg
		for _, m := range e.Rec.All() {
			if _, ok := m.ChunkText(sid); ok {
				texts = append(texts, m)
			}
		}
		if len(texts) == 0 {
			t.Fatalf("no updates for %s", sid)
		}
		if first, _ := texts[0].ChunkText(sid); first != agent {
			t.Errorf("session %s: first chunk %q, want %q (routed to the wrong agent?)", sid, first, agent)
		}
		next := 0
		for _, m := range texts[1:] {
			txt, _ := m.ChunkText(sid)
			if m.Seq > r.resp.Seq {
				t.Errorf("session %s: update %q (#%d) after the prompt response (#%d)", sid, truncate(txt, 8), m.Seq, r.resp.Seq)
				continue
			}
			n, err := strconv.Atoi(strings.TrimPrefix(txt[:min(7, len(txt))], "#"))
			if err != nil || !strings.HasPrefix(txt, "#") {
				t.Fatalf("session %s: unexpected chunk %q", sid, truncate(txt, 40))
			}
			if n != next {
				t.Fatalf("session %s: update #%06d where #%06d was expected (reordered or lost)", sid, n, next)
			}
			wantSize := smallSize
			if n == nSmall {
				wantSize = bigSize
			}
			if len(txt) != wantSize {
				t.Errorf("session %s: update #%06d is %d bytes, want %d", sid, n, len(txt), wantSize)
			}
			next++
		}
		if next != nSmall+1 {
			t.Errorf("session %s: %d updates before the response, want %d", sid, next, nSmall+1)
		}
	}
}
