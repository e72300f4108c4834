package router

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
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
	if p == nil || json.Unmarshal(p, &in) != nil {
		return nil, acp.NewError(acp.CodeInvalidParams, "acp-router: initialize needs params with protocolVersion", nil)
	}
	// Agents speak v1 with the editor's own capabilities and clientInfo, so
	// they only ever use what the editor has (notes/acp-protocol.md §14).
	agentParams, err := acp.SetField(p, "protocolVersion", acp.ProtocolVersion)
	if err != nil {
		return nil, acp.NewError(acp.CodeInvalidParams, "acp-router: malformed initialize params", nil)
	}
	r.mu.Lock()
	r.initParams, r.clientCaps = agentParams, in.ClientCapabilities
	r.mu.Unlock()

	for _, a := range r.agents {
		if !a.Config.Lazy || a.Name() == r.defaultAgent() {
			if err := a.Start(); err != nil {
				r.log.Warn("agent not started", "agent", a.Name(), "error", err)
			}
		}
	}
	wait, cancel := context.WithTimeout(ctx, r.opts.InitBudget)
	r.byName[r.defaultAgent()].Wait(wait)
	cancel()

	caps, auth := r.agentInits()
	methods, table := merge.AuthMethods(auth, upstream.TerminalAuthArgs)
	r.mu.Lock()
	r.auth = table
	r.mu.Unlock()
	if methods == nil {
		methods = []json.RawMessage{}
	}
	advertised := merge.Capabilities(caps)
	if r.opts.Store != nil { // history.go honours these for every agent
		marker := acp.Marker("{}")
		advertised.LoadSession = true
		advertised.SessionCapabilities.List = marker
		advertised.SessionCapabilities.Resume = marker
		advertised.SessionCapabilities.Delete = marker
	}
	return json.Marshal(map[string]any{
		"protocolVersion":   acp.ProtocolVersion,
		"agentCapabilities": advertised,
		"authMethods":       methods,
		"agentInfo":         acp.Implementation{Name: "acp-router", Title: "ACP Router", Version: r.opts.Version},
	})
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
		if inst := a.Current(); inst != nil {
			res = inst.Init()
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
		return nil, acp.NewError(acp.CodeInvalidParams, "acp-router: authenticate needs a methodId", nil)
	}
	r.mu.Lock()
	m, ok := r.auth[p.MethodID]
	r.mu.Unlock()
	if !ok {
		return nil, acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: unknown auth method %q", p.MethodID), nil)
	}
	if m.Terminal {
		// ACP: authenticate MUST NOT be called with a terminal method.
		return nil, acp.NewError(acp.CodeInvalidParams, fmt.Sprintf("acp-router: %q is a terminal login; run `acp-router login %s` instead of calling authenticate", p.MethodID, m.Agent), nil)
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

// logout goes to every running agent that supports it.
func (r *Router) logout(ctx context.Context, req *jsonrpc2.Request) (json.RawMessage, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, a := range r.agents {
		inst := a.Current()
		if inst == nil || inst.Init() == nil || !acp.Supported(inst.Init().AgentCapabilities.Auth.Logout) {
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
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return json.RawMessage("{}"), nil
}

// callWait sends a request of the router's own to an agent and waits.
func callWait(ctx context.Context, inst *upstream.Instance, method string, p json.RawMessage) (json.RawMessage, error) {
	c, err := inst.Peer().Call(ctx, method, paramsAny(p), nil, nil)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx)
}

// startError explains an agent that could not be started: which agent, why,
// and what to do (DESIGN §7).
func (r *Router) startError(a *upstream.Agent, err error) error {
	file := r.cfg.File
	if file == "" {
		file = "the config file"
	}
	return acp.NewError(acp.CodeInternalError,
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
