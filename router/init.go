package router

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/merge"
	"github.com/acp-router/acp-router/upstream"
)

// Version is the router's version: the module version from build info, or
// "(devel)".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// initialize starts the agents and answers once the routing default agent
// is up or the budget is spent, whichever is first, with live answers and
// cached ones for agents still starting (DESIGN §7). One agent never fails
// initialize.
func (r *Router) initialize(ctx context.Context, req *jsonrpc2.Request) (json.RawMessage, error) {
	p := params(req)
	var in acp.InitializeParams
	var version struct{ ProtocolVersion *uint16 }
	if p == nil || json.Unmarshal(p, &in) != nil || json.Unmarshal(p, &version) != nil || version.ProtocolVersion == nil {
		return nil, fail(errParams, "acp-router: initialize needs params with protocolVersion (an integer, 0 to 65535)", nil)
	}
	// Agents speak v1 with the editor's own capabilities and clientInfo, so
	// they only ever use what the editor has (notes/acp-protocol.md §14),
	// less what the router does not route (routedClientCaps).
	agentParams, err := acp.SetField(p, "protocolVersion", acp.ProtocolVersion)
	if err != nil {
		return nil, errMalformedInit
	}
	var raw struct {
		ClientCapabilities json.RawMessage `json:"clientCapabilities"`
	}
	if json.Unmarshal(p, &raw) != nil {
		return nil, errMalformedInit
	}
	if string(raw.ClientCapabilities) == "null" {
		// The schema wants an object: an agent that checks (the TS SDK's)
		// would refuse initialize. None advertised is {}.
		if agentParams, err = acp.SetField(agentParams, "clientCapabilities", json.RawMessage("{}")); err != nil {
			return nil, errMalformedInit
		}
	}
	if caps, masked := routedCaps(raw.ClientCapabilities); masked != nil {
		r.log.Info("client capabilities not passed to agents: the router does not route their traffic", "capabilities", masked)
		if agentParams, err = acp.SetField(agentParams, "clientCapabilities", caps); err != nil {
			return nil, errMalformedInit
		}
	}
	r.mu.Lock()
	r.initParams, r.clientCaps = agentParams, in.ClientCapabilities
	r.mu.Unlock()

	proxy := r.isProxy()
	for _, a := range r.agents {
		if !a.Config.Lazy || a.Name() == r.defaultAgent() || (proxy && a.Name() == config.SuccessorName) {
			if a.Config.Command == "" && !proxy {
				continue // the conductor's successor, outside a chain
			}
			if err := a.Start(); err != nil {
				r.log.Warn("agent not started", "agent", a.Name(), "error", err)
			}
		}
	}
	wait, cancel := context.WithTimeout(ctx, r.opts.InitBudget)
	r.byName[r.defaultAgent()].Wait(wait)
	if proxy {
		// A proxy answers once its successor answered initialize
		// (schema InitializeProxyRequest), within the same budget.
		r.byName[config.SuccessorName].Wait(wait)
	}
	cancel()

	caps, auth := r.agentInits()
	methods, table := merge.AuthMethods(auth, upstream.TerminalAuthArgs)
	r.mu.Lock()
	r.auth = table
	r.mu.Unlock()
	if methods == nil {
		methods = []json.RawMessage{}
	}
	advertised := struct {
		acp.AgentCapabilities
		// What the router enforces for every agent (the draft RFD
		// "Sandbox Capability and Policy"); an agent's own is not
		// passed on: it would speak for that agent only.
		Sandbox *acp.SandboxCapability `json:"sandbox,omitempty"`
	}{AgentCapabilities: merge.Capabilities(caps, merge.Own{Store: r.opts.Store != nil})}
	if r.opts.Sandbox != nil {
		c := r.opts.Sandbox.Capability()
		advertised.Sandbox = &c
	}
	return json.Marshal(map[string]any{
		"protocolVersion":   acp.ProtocolVersion,
		"agentCapabilities": advertised,
		"authMethods":       methods,
		"agentInfo":         acp.Implementation{Name: "acp-router", Title: "ACP Router", Version: r.opts.Version},
	})
}

// routedClientCaps lists, by path in clientCapabilities, the editor's
// capabilities the agents are told about. The rule (issue 13): never pass a
// client capability whose traffic the router does not route. An agent that
// believes the editor can do something the router then refuses or garbles
// fails in the middle of a turn; told nothing, it does without. What is not
// listed is not passed, so a capability the schema adds reaches the agents
// only once someone has checked that the router routes it. The false
// entries say why a capability is held back: flip one when its routing
// lands.
var routedClientCaps = map[string]bool{
	// fs/read_text_file and fs/write_text_file: checked against the
	// editor's capabilities and the policy, relayed with ids translated
	// (agentcalls.go, permission.go, enforce.go).
	"fs": true,
	// terminal/*: relayed; each terminal is usable only by the agent that
	// created it.
	"terminal": true,
	// elicitation/create and elicitation/complete: relayed, request and
	// elicitation ids translated.
	"elicitation": true,
	// auth.terminal: the agents' terminal sign-in methods re-launch the
	// router as `acp-router login AGENT` (merge.AuthMethods).
	"auth": true,
	// The router builds the option list itself, and shows boolean options
	// only to editors with session.configOptions.boolean.
	"session.configOptions": true,
	// notice updates: forwarded, live only (notes/acp-currency.md row 2).
	"session.notices": true,
	// compaction_update and compaction_summary_chunk: forwarded with the
	// turn's content (row 3).
	"session.compaction": true,
	// The editor's session extensions: see _meta.
	"session._meta": true,
	// The editor's extensions (Zed: terminal_output, terminal-auth): the
	// router forwards extension methods and the _meta it does not know.
	"_meta": true,
	// plan_update and plan_removed (row 4): forwarded with the turn's
	// content, planIds kept apart across the session's agents; a switch
	// removes the old agent's plans from the editor's screen (objects.go).
	"plan": true,
	// Subagent sessions: routed (subagent.go): children announced on a
	// routed session are translated, ordered with their parent, and their
	// requests decided with the parent's policy state.
	"subagents": true,
}

// routedCaps returns the editor's clientCapabilities as agents get them
// (routedClientCaps) and the paths held back, sorted; nil when nothing is
// held back. A capability set to null is not advertised anyway and is not
// reported.
func routedCaps(raw json.RawMessage) (json.RawMessage, []string) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	out, masked, ok := filterCaps(raw, "")
	if !ok {
		return json.RawMessage("{}"), []string{"clientCapabilities (not an object)"}
	}
	if masked == nil {
		return nil, nil
	}
	slices.Sort(masked)
	return mustJSON(out), masked
}

func filterCaps(raw json.RawMessage, prefix string) (map[string]json.RawMessage, []string, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil || fields == nil {
		return nil, nil, false
	}
	out := make(map[string]json.RawMessage, len(fields))
	var masked []string
	for k, v := range fields {
		path := prefix + k
		switch {
		case string(v) == "null":
			out[k] = v
		case routedClientCaps[path]:
			out[k] = v
		case routedBelow(path):
			sub, m, ok := filterCaps(v, path+".")
			if !ok {
				masked = append(masked, path)
				continue
			}
			out[k], masked = mustJSON(sub), append(masked, m...)
		default:
			masked = append(masked, path)
		}
	}
	return out, masked, true
}

// routedBelow: some capability under path is routed.
func routedBelow(path string) bool {
	for p, ok := range routedClientCaps {
		if ok && strings.HasPrefix(p, path+".") {
			return true
		}
	}
	return false
}

// agentInits collects each agent's initialize result, live or cached, in
// the order auth methods are shown: routing default first, then config
// order.
func (r *Router) agentInits() ([]acp.AgentCapabilities, []merge.AgentAuth) {
	order := []*upstream.Agent{r.byName[r.defaultAgent()]}
	for _, a := range r.agents {
		if a != order[0] {
			order = append(order, a)
		}
	}
	var caps []acp.AgentCapabilities
	var auth []merge.AgentAuth
	for _, a := range order {
		var res *acp.InitializeResult
		if running := a.Running(); len(running) > 0 {
			res = running[0].Init()
		} else if raw := a.CachedInit(); raw != nil {
			res = new(acp.InitializeResult)
			if json.Unmarshal(raw, res) != nil {
				res = nil
			}
		}
		if res == nil {
			continue
		}
		r.opts.Guard.SetAgentInfo(a.Name(), agentInfoName(res))
		caps = append(caps, res.AgentCapabilities)
		if a.Config.Auth != config.AuthHide {
			auth = append(auth, merge.AgentAuth{Agent: a.Name(), Methods: res.AuthMethods})
		}
	}
	return caps, auth
}

// agentInitParams is what agents get as initialize params.
func (r *Router) agentInitParams() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initParams
}

func (r *Router) caps() acp.ClientCapabilities {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clientCaps
}

// authenticate routes the call to the agent that advertised the method and
// remembers it, so that it is replayed after that agent restarts.
func (r *Router) authenticate(ctx context.Context, req *jsonrpc2.Request) (json.RawMessage, error) {
	var p struct {
		MethodID string `json:"methodId"`
	}
	if req.Params == nil || json.Unmarshal(*req.Params, &p) != nil {
		return nil, fail(errParams, "acp-router: authenticate needs a methodId", nil)
	}
	r.mu.Lock()
	m, ok := r.auth[p.MethodID]
	r.mu.Unlock()
	if !ok {
		return nil, fail(errParams, fmt.Sprintf("acp-router: unknown auth method %q", p.MethodID), nil)
	}
	if m.Terminal {
		// ACP: authenticate MUST NOT be called with a terminal method.
		return nil, fail(errParams, fmt.Sprintf("acp-router: %q is a terminal login; run `acp-router login %s` instead of calling authenticate", p.MethodID, m.Agent), nil)
	}
	a := r.byName[m.Agent]
	inst, err := a.Ready(ctx)
	if err != nil {
		return nil, r.startError(a, err)
	}
	out, _ := acp.SetField(params(req), "methodId", m.ID)
	res, err := callWait(ctx, inst, acp.MethodAuthenticate, out)
	if err != nil {
		return nil, inst.Agent.Error(inst, err)
	}
	a.SetAuth(m.ID)
	return res, nil
}

// logout goes to every running agent that supports it: to each of its
// processes (under the sandbox, one per set of session roots), each of
// which may hold the sign-in.
func (r *Router) logout(ctx context.Context, req *jsonrpc2.Request) (json.RawMessage, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, a := range r.agents {
		for _, inst := range a.Running() {
			if inst.Init() == nil || !acp.Supported(inst.Init().AgentCapabilities.Auth.Logout) {
				continue
			}
			wg.Go(func() {
				if _, err := callWait(ctx, inst, acp.MethodLogout, params(req)); err != nil {
					mu.Lock()
					if first == nil {
						first = inst.Agent.Error(inst, err)
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return json.RawMessage("{}"), nil
}

// callWait sends a request of the router's own to an agent and waits; a
// call it stops waiting for when ctx ends (auth/status past the init
// budget) is cancelled at the agent, not left pending there.
func callWait(ctx context.Context, inst *upstream.Instance, method string, p json.RawMessage) (json.RawMessage, error) {
	c, err := inst.Peer().Call(ctx, method, paramsAny(p), nil, nil)
	if err != nil {
		return nil, err
	}
	return c.WaitOrCancel(ctx)
}

// startError explains an agent that could not be started: which agent, why,
// and what to do (DESIGN §7).
func (r *Router) startError(a *upstream.Agent, err error) error {
	file := r.cfg.File
	if file == "" {
		file = "the config file"
	}
	if a.Config.Command == "" || r.isProxy() && a.Name() == config.SuccessorName {
		return fail(errInternal,
			fmt.Sprintf("acp-router: agent %q is not available: %v. It is the next component of the ACP proxy chain, reached through the conductor; use another agent (/agent).", a.Name(), trimAgentPrefix(err, a.Name())),
			map[string]string{"agent": a.Name()})
	}
	return fail(errInternal,
		fmt.Sprintf("acp-router: agent %q is not available: %v. Check its entry in %s (run `%s` by hand to see its output), or use another agent.", a.Name(), trimAgentPrefix(err, a.Name()), file, a.Config.Command),
		map[string]string{"agent": a.Name(), "stderrTail": a.StderrTail()})
}

func trimAgentPrefix(err error, name string) string {
	return strings.TrimPrefix(err.Error(), fmt.Sprintf("agent %q: ", name))
}

// authError rewrites an agent's -32000 so that the editor's sign-in prompt
// names the agent and says how to log in.
func (r *Router) authError(a *upstream.Agent, err error) error {
	e, ok := err.(*jsonrpc2.Error)
	if !ok || e.Code != acp.CodeAuthRequired {
		return err
	}
	out := *e
	out.Message = fmt.Sprintf("%s needs you to sign in (%s). Run `acp-router login %s` in a terminal, or choose one of its sign-in methods.", a.Title(), e.Message, a.Name())
	return &out
}
