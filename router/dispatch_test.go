package router

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
)

// TestDispatchFollowsTable ties the dispatch to the protocol table
// (acp.Methods): every method the table says the router handles has the
// router's code in its route, every other method has none (it goes by its
// treatment), on each side; so does a Relayed method the table names code
// for (session/request_permission's path). The proxy chain's methods are
// the editor's side's: an agent's are passed on as any call.
func TestDispatchFollowsTable(t *testing.T) {
	for _, m := range acp.Methods {
		fromAgent := m.Side == acp.SideClient
		rt, ok := lookupRoute(m.Name, fromAgent)
		if !ok {
			t.Errorf("%s (%s): no route", m.Name, m.Side)
			continue
		}
		code := rt.editor != nil || rt.agent != nil
		want := m.Treatment == acp.Handled || m.Treatment == acp.Relayed && m.Handler != ""
		if want != code && m.Side != acp.SideProxy || m.Side == acp.SideProxy && agentRoutes[m.Name].agent != nil {
			t.Errorf("%s (%s): %v, the router's code for it: %v", m.Name, m.Side, m.Treatment, code)
		}
		if m.Side == acp.SideProtocol && (rt.editor == nil || agentRoutes[m.Name].agent == nil) {
			t.Errorf("%s: a method of either side has no code for one of them", m.Name)
		}
	}
}

// TestFastPathFollowsTable pins the fast path's methods, read from the
// table's Fast bit: session/prompt from the editor; session/update and the
// callbacks of a turn from an agent.
func TestFastPathFollowsTable(t *testing.T) {
	fast := func(table map[string]*route, request bool) []string {
		var out []string
		for name, rt := range table {
			if !rt.Fast || !(request && rt.Request || !request && rt.Notification) {
				continue
			}
			if table[name] == agentRoutes[name] && rt.fast == nil {
				t.Errorf("%s: on the agents' fast path, with no code there", name)
			}
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		what  string
		table map[string]*route
		req   bool
		want  []string
	}{
		{"the editor's requests", editorRoutes, true, []string{acp.MethodSessionPrompt}},
		{"the editor's notifications", editorRoutes, false, nil},
		{"the agents' requests", agentRoutes, true, []string{acp.MethodReadTextFile, acp.MethodWriteTextFile, acp.MethodRequestPermission,
			acp.MethodTerminalCreate, acp.MethodTerminalKill, acp.MethodTerminalOutput, acp.MethodTerminalRelease, acp.MethodTerminalWaitForExit}},
		{"the agents' notifications", agentRoutes, false, []string{acp.MethodSessionUpdate}},
	} {
		slices.Sort(tc.want)
		if got := fast(tc.table, tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("%s on the fast path: %v, want %v", tc.what, got, tc.want)
		}
	}
}

// TestBuildRoutesRefusesDisagreement: code for a method the table does not
// say the router handles, a Handled row without code, and code for a method
// the table does not name each stop the program at its start.
func TestBuildRoutesRefusesDisagreement(t *testing.T) {
	noop := func(*Router, context.Context, *jsonrpc2.Request) {}
	for _, tc := range []struct {
		what   string
		change func(map[string]func(*Router, context.Context, *jsonrpc2.Request))
	}{
		{"no code for a Handled row", func(m map[string]func(*Router, context.Context, *jsonrpc2.Request)) {
			delete(m, acp.MethodSessionFork)
		}},
		{"code for a RoutedBySession row", func(m map[string]func(*Router, context.Context, *jsonrpc2.Request)) {
			m[acp.MethodSetModel] = noop
		}},
		{"code for a method the table does not name", func(m map[string]func(*Router, context.Context, *jsonrpc2.Request)) {
			m["_example/method"] = noop
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			methods := maps.Clone(editorMethods)
			tc.change(methods)
			defer func() {
				if recover() == nil {
					t.Error("buildRoutes accepted it")
				}
			}()
			buildRoutes(false, methods, nil, nil)
		})
	}
}
