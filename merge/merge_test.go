package merge

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/acp"
)

// fixtureResults returns the results of the responses recorded in a real
// agent's wire transcript (testdata/real-agents, copied from
// shared/fixtures), in order.
func fixtureResults(t *testing.T, name string) []json.RawMessage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "real-agents", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Msg struct {
				Result json.RawMessage `json:"result"`
			} `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg.Result != nil {
			out = append(out, line.Msg.Result)
		}
	}
	return out
}

// fixtureInit returns the initialize result in a real agent's transcript.
func fixtureInit(t *testing.T, name string) acp.InitializeResult {
	t.Helper()
	for _, r := range fixtureResults(t, name) {
		var res acp.InitializeResult
		if json.Unmarshal(r, &res) == nil && res.ProtocolVersion == 1 {
			return res
		}
	}
	t.Fatalf("%s: no initialize result", name)
	return acp.InitializeResult{}
}

func TestCapabilitiesFromRealAgents(t *testing.T) {
	claude := fixtureInit(t, "claude-agent-acp-0.23.1.jsonl")
	codex := fixtureInit(t, "codex-acp-0.16.0-mock.jsonl")
	gemini := fixtureInit(t, "gemini-cli-0.61.0-mock.jsonl")
	goExample := fixtureInit(t, "go-example-agent.jsonl")

	tests := []struct {
		name   string
		agents []acp.InitializeResult
		want   string
	}{
		{"go example only: nothing but the router's own session capabilities", []acp.InitializeResult{goExample},
			`{"promptCapabilities":{},"mcpCapabilities":{},"sessionCapabilities":{"additionalDirectories":{},"close":{},"title":{},"status":{}},"auth":{}}`},
		{"claude + go example: union of prompt and MCP; claude's fork", []acp.InitializeResult{claude, goExample},
			`{"promptCapabilities":{"image":true,"embeddedContext":true},"mcpCapabilities":{"http":true,"sse":true},"sessionCapabilities":{"additionalDirectories":{},"close":{},"title":{},"status":{},"fork":{}},"auth":{}}`},
		{"codex brings logout, gemini audio", []acp.InitializeResult{codex, gemini},
			`{"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true},"mcpCapabilities":{"http":true,"sse":true},"sessionCapabilities":{"additionalDirectories":{},"close":{},"title":{},"status":{}},"auth":{"logout":{}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var caps []acp.AgentCapabilities
			for _, a := range tt.agents {
				caps = append(caps, a.AgentCapabilities)
			}
			got, err := json.Marshal(Capabilities(caps, Own{}))
			if err != nil {
				t.Fatal(err)
			}
			assertJSONEqual(t, got, []byte(tt.want))
		})
	}
}

func TestCapabilitiesNeverPromisesLoadOrList(t *testing.T) {
	// claude advertises loadSession, list, resume, fork: without its store
	// the router cannot honour them across agents, so they must not reach
	// the editor; with it, the router honours them for every agent.
	claude := fixtureInit(t, "agentclientprotocol-claude-agent-acp-0.100.0.jsonl")
	got := Capabilities([]acp.AgentCapabilities{claude.AgentCapabilities}, Own{})
	if got.LoadSession || got.SessionCapabilities.List != nil || got.SessionCapabilities.Resume != nil || got.SessionCapabilities.Delete != nil {
		t.Fatalf("router advertises session capabilities it does not honour: %+v", got)
	}
	got = Capabilities(nil, Own{Store: true})
	if !got.LoadSession || got.SessionCapabilities.List == nil || got.SessionCapabilities.Resume == nil || got.SessionCapabilities.Delete == nil {
		t.Fatalf("with its store the router honours load, list, resume and delete for every agent: %+v", got)
	}
}

// TestCapabilitiesNewestAgents pins what the router advertises in front of
// the newest agents (claude-agent-acp 0.100.0 as recorded: systemPrompt,
// providers, delete, additionalDirectories, auth.logout, _meta.authStatus
// and steering; codex-acp: mcpCapabilities.acp, auth.logout): only what it
// keeps true whichever of them serves the session (capabilityTable).
func TestCapabilitiesNewestAgents(t *testing.T) {
	claude := fixtureInit(t, "agentclientprotocol-claude-agent-acp-0.100.0.jsonl")
	codex := fixtureInit(t, "codex-acp-0.16.0-mock.jsonl")
	caps := []acp.AgentCapabilities{claude.AgentCapabilities, codex.AgentCapabilities}
	got, err := json.Marshal(Capabilities(caps, Own{Store: true}))
	if err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, got, []byte(`{"loadSession":true,
		"promptCapabilities":{"image":true,"embeddedContext":true},"mcpCapabilities":{"http":true,"sse":true},
		"sessionCapabilities":{"list":{},"delete":{},"additionalDirectories":{},"resume":{},"close":{},"title":{},"status":{},"archive":{},"fork":{},"systemPrompt":{}},
		"auth":{"logout":{}}}`))
}

// TestCapabilitiesUnstableRouted pins the unstable rows the router routes
// (router/lifecycle.go, mcp.go, authstatus.go): title and status always; archive with the store;
// fork, MCP over ACP and auth.status when some agent has them.
func TestCapabilitiesUnstableRouted(t *testing.T) {
	var all acp.AgentCapabilities
	all.SessionCapabilities.Fork = marker
	all.MCPCapabilities.ACP = true
	all.Auth.Status = marker
	for _, tt := range []struct {
		name   string
		agents []acp.AgentCapabilities
		own    Own
		want   string
	}{
		{"no agent, no store", nil, Own{},
			`{"promptCapabilities":{},"mcpCapabilities":{},"sessionCapabilities":{"additionalDirectories":{},"close":{},"title":{},"status":{}},"auth":{}}`},
		{"an agent with fork, acp and auth.status, and the store", []acp.AgentCapabilities{{}, all}, Own{Store: true},
			`{"loadSession":true,"promptCapabilities":{},"mcpCapabilities":{"acp":true},
			"sessionCapabilities":{"list":{},"delete":{},"additionalDirectories":{},"resume":{},"close":{},"title":{},"status":{},"archive":{},"fork":{}},"auth":{"status":{}}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(Capabilities(tt.agents, tt.own))
			if err != nil {
				t.Fatal(err)
			}
			assertJSONEqual(t, got, []byte(tt.want))
		})
	}
}

// capabilitySchema is merge/testdata/agent-capabilities.schema.json: the
// capability names of the ACP schema, by group.
type capabilitySchema map[string][]string

func loadCapabilitySchema(t *testing.T) map[string]capabilitySchema {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "agent-capabilities.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Stable   capabilitySchema `json:"stable"`
		Unstable capabilitySchema `json:"unstable"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return map[string]capabilitySchema{"stable": f.Stable, "unstable": f.Unstable}
}

// tableRow returns the row of capabilityTable that decides path: the row
// of the path or of one above it. The _meta of a group is decided by the
// row of agentCapabilities._meta (see its why).
func tableRow(path string) (capability, bool) {
	if strings.HasPrefix(path, "agentCapabilities.") && strings.HasSuffix(path, "._meta") {
		path = "agentCapabilities._meta"
	}
	for _, c := range capabilityTable {
		if path == c.path || strings.HasPrefix(path, c.path+".") {
			return c, true
		}
	}
	return capability{}, false
}

// TestCapabilityTableCoversSchema: every capability the schema defines, and
// every one a recorded agent advertises, has a row saying whether the
// router advertises it and why.
func TestCapabilityTableCoversSchema(t *testing.T) {
	groups := []string{"promptCapabilities", "mcpCapabilities", "sessionCapabilities", "auth"}
	for version, schema := range loadCapabilitySchema(t) {
		if len(schema["agentCapabilities"]) == 0 {
			t.Fatalf("%s: no capabilities read", version)
		}
		for _, name := range schema["agentCapabilities"] {
			if slices.Contains(groups, name) {
				continue
			}
			if _, ok := tableRow("agentCapabilities." + name); !ok {
				t.Errorf("%s schema: agentCapabilities.%s has no row in capabilityTable", version, name)
			}
		}
		for _, g := range groups {
			for _, name := range schema[g] {
				if _, ok := tableRow("agentCapabilities." + g + "." + name); !ok {
					t.Errorf("%s schema: agentCapabilities.%s.%s has no row in capabilityTable", version, g, name)
				}
			}
		}
	}

	entries, err := os.ReadDir(filepath.Join("..", "testdata", "real-agents"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		for _, res := range fixtureResults(t, e.Name()) {
			var init struct {
				ProtocolVersion int                        `json:"protocolVersion"`
				Caps            map[string]json.RawMessage `json:"agentCapabilities"`
				Meta            map[string]json.RawMessage `json:"_meta"`
			}
			if json.Unmarshal(res, &init) != nil || init.ProtocolVersion == 0 || init.Caps == nil {
				continue
			}
			var paths []string
			for k, v := range init.Caps {
				var sub map[string]json.RawMessage
				if slices.Contains(groups, k) && json.Unmarshal(v, &sub) == nil {
					for kk := range sub {
						paths = append(paths, "agentCapabilities."+k+"."+kk)
					}
					continue
				}
				paths = append(paths, "agentCapabilities."+k)
			}
			for k := range init.Meta {
				paths = append(paths, "_meta."+k)
			}
			for _, p := range paths {
				if _, ok := tableRow(p); !ok {
					t.Errorf("%s advertises %s, which has no row in capabilityTable", e.Name(), p)
				}
			}
		}
	}
}

// TestCapabilityTable checks each row against what Capabilities does: a
// masked capability is never advertised, even when every agent has it; one
// the router implements always is; an adapted one is when some agent has
// it; a store one is with the store. Each row says why.
func TestCapabilityTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range capabilityTable {
		t.Run(c.path, func(t *testing.T) {
			if c.why == "" {
				t.Error("the row does not say why")
			}
			if seen[c.path] {
				t.Error("two rows for one path")
			}
			seen[c.path] = true
			if c.rule != masked && c.set == nil || c.rule == adapted && c.has == nil {
				t.Fatal("the row cannot be applied")
			}
			path := strings.Split(c.path, ".")
			if path[0] != "agentCapabilities" {
				if c.rule != masked {
					t.Errorf("only agentCapabilities are merged; %s can only be masked", c.path)
				}
				return
			}
			var every acp.AgentCapabilities
			for _, r := range capabilityTable {
				if r.set != nil {
					r.set(&every)
				}
			}
			advertised := func(agents []acp.AgentCapabilities, own Own) bool {
				out, err := json.Marshal(Capabilities(agents, own))
				if err != nil {
					t.Fatal(err)
				}
				return jsonAt(out, path[1:]) != nil
			}
			all, none := []acp.AgentCapabilities{every, every}, []acp.AgentCapabilities{{}, {}}
			want := map[capRule][4]bool{ // all agents; some agent; no agent; no agent, with the store
				masked:    {false, false, false, false},
				adapted:   {true, true, false, false},
				routerOwn: {true, true, true, true},
				storeOwn:  {false, false, false, true},
			}[c.rule]
			got := [4]bool{
				advertised(all, Own{}),
				advertised([]acp.AgentCapabilities{{}, every}, Own{}),
				advertised(none, Own{}),
				advertised(none, Own{Store: true}),
			}
			if got != want {
				t.Errorf("advertised with all agents / some agent / none / none and the store: %v, want %v", got, want)
			}
		})
	}
}

// jsonAt is the value at path in a JSON object, nil if absent, false or
// null.
func jsonAt(raw []byte, path []string) json.RawMessage {
	for _, k := range path {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		if raw = m[k]; raw == nil {
			return nil
		}
	}
	if s := string(raw); s == "false" || s == "null" {
		return nil
	}
	return raw
}

func TestAuthMethodsFromRealAgents(t *testing.T) {
	gemini := fixtureInit(t, "gemini-cli-0.61.0-mock.jsonl")
	codex := fixtureInit(t, "codex-acp-0.16.0-mock.jsonl")
	terminal := []json.RawMessage{
		json.RawMessage(`{"id":"gemini-api-key","name":"Other agent's key","_meta":{"x":1}}`),
		json.RawMessage(`{"id":"login","type":"terminal","name":"Log in","args":["--login"],"env":{"A":"1"}}`),
		json.RawMessage(`{"name":"no id"}`),
	}
	got, table := AuthMethods([]AgentAuth{
		{Agent: "gemini", Methods: gemini.AuthMethods},
		{Agent: "codex", Methods: codex.AuthMethods},
		{Agent: "other", Methods: terminal},
	}, func(agent string, args []string) []string {
		return append([]string{"login", agent, "--"}, args...)
	})

	var ids []string
	for _, m := range got {
		var am acp.AuthMethod
		if err := json.Unmarshal(m, &am); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, am.ID)
	}
	wantIDs := []string{"oauth-personal", "gemini-api-key", "vertex-ai", "gateway", "chatgpt", "codex-api-key", "openai-api-key", "other:gemini-api-key", "login"}
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("ids = %q, want %q", ids, wantIDs)
	}
	// The collision was rewritten and maps back; _meta survives.
	assertJSONEqual(t, got[7], []byte(`{"id":"other:gemini-api-key","name":"Other agent's key","_meta":{"x":1}}`))
	if m := table["other:gemini-api-key"]; m != (AuthMethod{Agent: "other", ID: "gemini-api-key"}) {
		t.Errorf("table[other:gemini-api-key] = %+v", m)
	}
	if m := table["gemini-api-key"]; m.Agent != "gemini" {
		t.Errorf("the first agent keeps its id: %+v", m)
	}
	// Terminal methods are rewritten to re-launch the router's login.
	assertJSONEqual(t, got[8], []byte(`{"id":"login","type":"terminal","name":"Log in","args":["login","other","--","--login"],"env":{"A":"1"}}`))
	if m := table["login"]; !m.Terminal || m.Agent != "other" {
		t.Errorf("table[login] = %+v", m)
	}
	// codex's env_var methods (a type the router does not know) pass as sent.
	assertJSONEqual(t, got[5], codex.AuthMethods[1])
}

func TestIDTable(t *testing.T) {
	tab := NewIDTable()
	steps := []struct {
		agent, id, want string
	}{
		{"claude", "sess-1", "sess-1"},        // first use passes through
		{"codex", "sess-1", "sess-1~codex"},   // collision: rewritten
		{"claude", "sess-1", "sess-1"},        // stable
		{"codex", "sess-2", "sess-2"},         // no collision: passes
		{"gemini", "sess-1", "sess-1~gemini"}, // another collision
		{"x", "sess-1~codex", "sess-1~codex~x"},
		{"y", "sess-1~codex", "sess-1~codex~y"},
	}
	for _, s := range steps {
		if got := tab.Out(s.agent, s.id); got != s.want {
			t.Fatalf("Out(%s, %s) = %q, want %q", s.agent, s.id, got, s.want)
		}
	}
	for _, s := range steps {
		agent, id, ok := tab.In(s.want)
		if !ok || agent != s.agent || id != s.id {
			t.Errorf("In(%q) = %s %s %v, want %s %s", s.want, agent, id, ok, s.agent, s.id)
		}
	}
	tab.Remove("sess-1")
	if _, _, ok := tab.In("sess-1"); ok {
		t.Error("removed id still maps back")
	}
	if _, ok := tab.Lookup("claude", "sess-1"); ok {
		t.Error("removed id still maps out")
	}
	if got := tab.Out("codex", "sess-1"); got != "sess-1~codex" {
		t.Errorf("remaining mapping changed: %q", got)
	}
}

func assertJSONEqual(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want invalid JSON %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON differs\n got: %s\nwant: %s", got, want)
	}
}

// TestIDTableRetire pins the bounds of an id table: retired ids are
// forgotten but never handed out again for another agent's object (the
// editor may still show them), the single-agent case keeps passing ids
// through, finished ids are retired oldest first past a window, and Trim
// caps the table.
func TestIDTableRetire(t *testing.T) {
	t.Run("single agent passes through", func(t *testing.T) {
		tab := NewIDTable()
		for i := range 3 {
			id := tab.Out("claude", "call-1")
			if id != "call-1" {
				t.Fatalf("round %d: Out = %q", i, id)
			}
			tab.Retire(id)
			if _, ok := tab.Lookup("claude", "call-1"); ok {
				t.Fatalf("round %d: retired id still maps out", i)
			}
		}
		if tab.Len() != 0 {
			t.Errorf("Len = %d after retiring all", tab.Len())
		}
	})
	t.Run("retired ids are not handed out to another agent", func(t *testing.T) {
		tab := NewIDTable()
		tab.Retire(tab.Out("claude", "call-1"))
		steps := []struct{ agent, id, want string }{
			{"codex", "call-1", "call-1~codex"}, // the editor still shows claude's call-1
			{"codex", "call-2", "call-2~codex"}, // it may show any id claude retired
			{"claude", "call-2", "call-2"},      // claude's own pass through
			{"", "acp-router-ask-1", "acp-router-ask-1"},
		}
		for _, s := range steps {
			if got := tab.Out(s.agent, s.id); got != s.want {
				t.Errorf("Out(%s, %s) = %q, want %q", s.agent, s.id, got, s.want)
			}
		}
		// The router's own ids ("") are unique by construction: retiring
		// them changes nothing for the agents.
		tab2 := NewIDTable()
		tab2.Retire(tab2.Out("", "acp-router-ask-1"))
		if got := tab2.Out("codex", "x"); got != "x" {
			t.Errorf("after the router retired its id: Out(codex, x) = %q", got)
		}
	})
	t.Run("done ids retired past the window", func(t *testing.T) {
		tab := NewIDTable()
		for i := range 10 {
			id := tab.Out("a", strconv.Itoa(i))
			tab.Done(id)
			tab.Done(id) // twice: counted once
		}
		if n := tab.RetireDone(3); n != 7 {
			t.Errorf("RetireDone(3) = %d, want 7", n)
		}
		for i := range 10 {
			_, ok := tab.Lookup("a", strconv.Itoa(i))
			if ok != (i >= 7) {
				t.Errorf("id %d kept = %v, want the 3 newest kept", i, ok)
			}
		}
		tab.Remove("8") // removed meanwhile: not counted
		if n := tab.RetireDone(0); n != 2 {
			t.Errorf("RetireDone(0) = %d, want 2", n)
		}
		if tab.Len() != 0 || len(tab.done) != 0 {
			t.Errorf("Len = %d, done = %d", tab.Len(), len(tab.done))
		}
	})
	t.Run("trim oldest first, memory bounded", func(t *testing.T) {
		tab := NewIDTable()
		retired := 0
		for i := range 100000 {
			tab.Out("a", strconv.Itoa(i))
			retired += tab.Trim(100)
		}
		if tab.Len() != 100 || retired != 100000-100 {
			t.Fatalf("Len = %d, retired %d", tab.Len(), retired)
		}
		if _, ok := tab.Lookup("a", "99999"); !ok {
			t.Error("the newest id was trimmed")
		}
		if _, ok := tab.Lookup("a", "99899"); ok {
			t.Error("an old id survived")
		}
		if len(tab.order) > 2*100+64 {
			t.Errorf("order holds %d ids for 100 live", len(tab.order))
		}
		tab.RetireAll()
		if tab.Len() != 0 || len(tab.out) != 0 || len(tab.order) != 0 {
			t.Errorf("after RetireAll: Len %d, out %d, order %d", tab.Len(), len(tab.out), len(tab.order))
		}
		// Ids retired as they finish leave order, too.
		for i := range 100000 {
			tab.Done(tab.Out("a", strconv.Itoa(i)))
			tab.RetireDone(0)
		}
		if tab.Len() != 0 || len(tab.order) > 64 || len(tab.isDone) != 0 {
			t.Errorf("after finished ids: Len %d, order %d, isDone %d", tab.Len(), len(tab.order), len(tab.isDone))
		}
	})
}

// TestIDTableClose: a closed id is never handed out again, to its own
// agent either (Retire lets its agent have it back), within maxClosed.
func TestIDTableClose(t *testing.T) {
	tab := NewIDTable()
	if got := tab.Out("claude", "t1"); got != "t1" {
		t.Fatalf("Out = %q", got)
	}
	tab.Close("t1")
	if _, ok := tab.Lookup("claude", "t1"); ok {
		t.Error("a closed id is still found")
	}
	if got := tab.Out("claude", "t1"); got == "t1" {
		t.Error("a closed id was handed out again to its own agent")
	}
	if got := tab.Out("codex", "t1"); got == "t1" {
		t.Error("a closed id was handed out again to another agent")
	}
	for i := range maxClosed {
		id := "x" + strconv.Itoa(i)
		tab.Out("claude", id)
		tab.Close(id)
	}
	if len(tab.closed) > maxClosed || len(tab.closedOrder) > maxClosed {
		t.Errorf("%d ids kept closed, want at most %d", len(tab.closed), maxClosed)
	}
}
