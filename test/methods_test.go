package test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/acp-router/acp-router/acp"
)

// TestMethodTable checks the routing rows of the protocol table
// (acp.Methods, issue 15) through the router binary, for every request the
// editor may send whose treatment at this commit is not the router's own
// code: "routed by sessionId" and "forwarded as unknown" reach the agent of
// the session they name (not the default one) with that agent's own
// session id, and an unknown session is refused by the router (routed) or
// the request goes to the default agent (unknown); one that names no
// session goes to the default agent (unknown); "refused" is answered by
// the router with the row's code and reaches no agent.
func TestMethodTable(t *testing.T) {
	t.Parallel()
	dirB := t.TempDir()
	logA, logB := filepath.Join(t.TempDir(), "alpha.log"), filepath.Join(t.TempDir(), "beta.log")
	// Both agents hand out s-1: the router renames beta's session s-1~beta.
	cfg := writeConfig(t, routerYAML(t, []string{
		// The editor sends each method with no more than a session id; the
		// router passes it on as it is (NoSchema).
		fakeAgentYAML("alpha", fakeOpts{LogFile: logA, SessionPrefix: "s-", EchoUnknown: true, NoSchema: true}),
		fakeAgentYAML("beta", fakeOpts{LogFile: logB, SessionPrefix: "s-", EchoUnknown: true, NoSchema: true}),
	}, "default: alpha", "rules:", cwdRule(dirB, "beta")))
	e := StartRouter(t, cfg, nil, withoutResultSchema()) // the agents echo
	e.Initialize(t, capsAll)
	if sid := e.NewSession(t, t.TempDir()); sid != "s-1" {
		t.Fatalf("alpha's session is %q, want s-1", sid)
	}
	sidB := e.NewSession(t, dirB)
	if sidB == "s-1" {
		t.Fatalf("beta's session was not renamed")
	}

	call := func(t *testing.T, method string, params map[string]any) (*Msg, bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		m, err := e.Request(ctx, method, params)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return m, m.Error == nil
	}
	tested := map[acp.Treatment]int{}
	for _, row := range acp.Methods {
		tr := row.Treatment
		if row.Side != acp.SideAgent && row.Side != acp.SideProxy || !row.Request || tr == acp.Handled {
			continue // the router's own code for it has its own tests
		}
		t.Run(row.Name, func(t *testing.T) {
			a0, b0 := countLines(logA, row.Name), countLines(logB, row.Name)
			got := func() (int, int) { return countLines(logA, row.Name) - a0, countLines(logB, row.Name) - b0 }
			switch tr {
			case acp.RoutedBySession, acp.Unknown:
				tested[tr]++
				m, ok := call(t, row.Name, map[string]any{"sessionId": sidB})
				if !ok {
					t.Fatalf("%s (%s) on beta's session failed: %v", row.Name, tr, m.Error)
				}
				if a, b := got(); a != 0 || b != 1 {
					t.Errorf("%s (%s) on beta's session reached alpha %d times, beta %d times; want beta once", row.Name, tr, a, b)
				}
				if p := jsonPath(m.Result, "params"); p != nil && jsonString(p, "sessionId") != "s-1" {
					t.Errorf("%s (%s): beta got params %s, want its own session id s-1", row.Name, tr, p)
				}
				a0, b0 = countLines(logA, row.Name), countLines(logB, row.Name)
				m, ok = call(t, row.Name, map[string]any{"sessionId": "no-such-session"})
				if tr == acp.RoutedBySession {
					if ok || m.Error.Code != acp.CodeInvalidParams {
						t.Errorf("%s (routed) on an unknown session: %s, want -32602", row.Name, m)
					}
					if a, b := got(); a+b != 0 {
						t.Errorf("%s (routed) on an unknown session reached an agent", row.Name)
					}
					return
				}
				if a, b := got(); !ok || a != 1 || b != 0 {
					t.Errorf("%s (unknown) on an unknown session: %s; alpha %d, beta %d; want the default agent alpha", row.Name, m, a, b)
				}
				a0, b0 = countLines(logA, row.Name), countLines(logB, row.Name)
				if m, ok = call(t, row.Name, map[string]any{}); !ok || jsonString(m.Result, "agent") != "alpha" {
					t.Errorf("%s (unknown) naming no session: %s, want alpha's answer", row.Name, m)
				}
			case acp.Refused:
				tested[tr]++
				m, ok := call(t, row.Name, map[string]any{"sessionId": sidB})
				if ok || int64(m.Error.Code) != row.Code {
					t.Errorf("%s (refused): %s, want error %d", row.Name, m, row.Code)
				}
				if a, b := got(); a+b != 0 {
					t.Errorf("%s (refused) reached an agent: alpha %d, beta %d", row.Name, a, b)
				}
			}
		})
	}
	// Every treatment the table gives an editor request is exercised
	// (today no editor request is refused: proxy/* and session/fork are
	// handled).
	for _, row := range acp.Methods {
		tr := row.Treatment
		if (row.Side == acp.SideAgent || row.Side == acp.SideProxy) && row.Request && tr != acp.Handled && tested[tr] == 0 {
			t.Errorf("no editor request is %s: the test checks nothing of it", tr)
		}
	}
	if tested[acp.RoutedBySession] == 0 || tested[acp.Unknown] == 0 {
		t.Errorf("routed %d, unknown %d: the test checks too little", tested[acp.RoutedBySession], tested[acp.Unknown])
	}
}
