package acp

import "strings"

// The protocol table (issue 15, point 6): every method of the ACP schema
// files the router was checked against (testdata/schema.json,
// schema.unstable.json, methods.derived.json: copies of shared/acp/), both
// directions, and the few it meets that are in no schema file (legacy,
// removed, announced), each with what the router does with it. The
// router's dispatch (router/dispatch.go) is built from it: the treatment,
// the fast path bit and, for a Handled row, the router's code for it.
// TestMethodTableCoversSchema fails when a schema update brings a method
// without a row, so the next update shows its own work list, and
// test/TestMethodTable checks the routing rows through the router binary.

// Side is who handles a method, as the schema's x-side says.
type Side string

const (
	// SideAgent: the editor calls it; the router takes it from the editor.
	SideAgent Side = "agent"
	// SideClient: an agent calls it; the router takes it from an agent.
	SideClient Side = "client"
	// SideProtocol: either side sends it ($/cancel_request).
	SideProtocol Side = "protocol"
	// SideProxy: the conductor's proxy chain methods (rfds/proxy-chains).
	SideProxy Side = "proxy"
)

// Treatment is what the router does with a method it receives.
type Treatment int

const (
	// Handled: the router's own code for the method (Method.Handler
	// names it) decides, answers and forwards.
	Handled Treatment = iota + 1
	// RoutedBySession: forwarded to the active agent of the session
	// params.sessionId names, the id translated to the agent's; a session
	// the router does not know is answered -32602 (router.sessionRequest).
	RoutedBySession
	// Relayed: an agent's call passed to the editor, its session id (and
	// tool call id) translated back, after the editor's capability check
	// and, where it decides, the permission policy (router.agentRequest,
	// agentNotification). A notification that names no session is
	// attributed to its agent (_meta["acp-router"].agent).
	Relayed
	// Refused: the router answers with an error itself (Method.Code); no
	// agent sees it. A notification is dropped.
	Refused
	// Unknown: deliberately forwarded as a method the router does not
	// know (router.forwardUnknown): to the active agent of the session
	// params.sessionId names, id translated, else to the routing default
	// agent; its answer is relayed unchanged.
	Unknown
)

func (t Treatment) String() string {
	switch t {
	case Handled:
		return "handled"
	case RoutedBySession:
		return "routed by sessionId"
	case Relayed:
		return "relayed to the editor"
	case Refused:
		return "refused"
	case Unknown:
		return "forwarded as unknown"
	}
	return "no treatment"
}

// Status is where a method stands in the protocol.
type Status string

const (
	Stable   Status = "stable"   // in schema.json
	Unstable Status = "unstable" // in schema.unstable.json only
	// Announced: in release notes newer than the schema files (acp-currency
	// row 15), not in a schema file here.
	Announced Status = "announced"
	// Removed: in an earlier schema (shared/acp/1.21.0), gone since.
	Removed Status = "removed"
	// Legacy: removed upstream, still sent by editors the router serves.
	Legacy Status = "legacy"
)

// Method is one row of the protocol table.
type Method struct {
	Name   string
	Side   Side
	Status Status
	// Request, Notification: how it is sent (both for proxy/successor).
	Request, Notification bool
	Treatment             Treatment
	// Fast: taken in the stream's read path (issue 16), before the
	// jsonrpc2.Conn would decode its params into a map and encode them
	// again: the messages of a turn. The router's dispatch reads it for
	// both paths (router/dispatch.go).
	Fast bool
	// Handler names the code of a Handled method, and of a Relayed one
	// that has a path of its own.
	Handler string
	// Code answers a Refused request.
	Code int64
	// Why says why this treatment.
	Why string
}

// Methods is the protocol table, editor-side methods first.
var Methods = []Method{
	// The editor calls them (x-side agent).
	{Name: MethodInitialize, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.initialize",
		Why: "starts the agents, merges their capabilities (merge.Capabilities) and auth methods; the editor's clientCapabilities reach the agents less what the router does not route (routedClientCaps)"},
	{Name: MethodAuthenticate, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.authenticate",
		Why: "the advertised method id leads to its agent (merge.AuthMethods)"},
	{Name: MethodLogout, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.logout",
		Why: "sent to every running agent that advertises auth.logout"},
	{Name: MethodSessionNew, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.newSession",
		Why: "routed by cwd (routing rules), adapted per agent (adaptNewSession: MCP transports, additionalDirectories); systemPrompt forwarded, or carried as text for an agent without it (adaptSystemPrompt)"},
	{Name: MethodSessionLoad, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.loadSession",
		Why: "the router replays its own store and re-attaches each agent; -32601 without a store"},
	{Name: MethodSessionResume, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.loadSession",
		Why: "as session/load, without the replay"},
	{Name: MethodSessionList, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.listSessions",
		Why: "answered from the router's store, every agent's sessions; honouring archived (exclude, include, only)"},
	{Name: MethodSessionDelete, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.deleteSession",
		Why: "the router's record, and each agent's session where the agent supports it"},
	{Name: MethodSessionClose, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.closeSession",
		Why: "the router ends its session and closes the agents' sessions that support it"},
	{Name: MethodSessionPrompt, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Fast: true, Handler: "router.prompt",
		Why: "queued per session, routed to the turn's agent with the handoff brief and adaptPrompt; slash commands are the router's"},
	{Name: MethodSessionCancel, Side: SideAgent, Status: Stable, Notification: true, Treatment: Handled, Handler: "router.cancel",
		Why: "ends the session's running turn on its agent (and a child's, for subagents that permit it)"},
	{Name: MethodSetMode, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.setModeRequest",
		Why: "AGENT:MODE switches agent; deny_modes enforced"},
	{Name: MethodSetConfigOption, Side: SideAgent, Status: Stable, Request: true, Treatment: Handled, Handler: "router.setConfigOption",
		Why: "the router's agent option switches agent; the others go to the active agent"},
	{Name: MethodSetModel, Side: SideAgent, Status: Legacy, Request: true, Treatment: RoutedBySession,
		Why: "removed upstream on 2026-06-01; JetBrains still sends it: the active agent's model"},
	{Name: MethodSessionFork, Side: SideAgent, Status: Unstable, Request: true, Treatment: Handled, Handler: "router.forkSession (router/lifecycle.go)",
		Why: "forwarded only when exactly one agent has served the session and it supports fork (the fork is a new router session bound to that agent); otherwise -32602 naming why; unknown session -32002"},
	{Name: MethodSessionSetTitle, Side: SideAgent, Status: Unstable, Request: true, Treatment: Handled, Handler: "router.setTitle (router/lifecycle.go)",
		Why: "acp-currency row 7: the router keeps the title (memory and store) and forwards it, id translated, to an active agent that supports title; unknown session -32002"},
	{Name: MethodSessionStatus, Side: SideAgent, Status: Unstable, Request: true, Treatment: Handled, Handler: "router.sessionStatus (router/lifecycle.go)",
		Why: "acp-currency row 8: open for live sessions (or the active agent's answer), saved for sessions only the store has, -32002 otherwise; never revives a session"},
	{Name: MethodSessionArchive, Side: SideAgent, Status: Unstable, Request: true, Treatment: Handled, Handler: "router.archiveSession (router/lifecycle.go)",
		Why: "acp-currency row 9: cancels a running turn, does the close work of session/close (agents archive or close), marks the session archived in the store; needs the store"},
	{Name: MethodSessionUnarchive, Side: SideAgent, Status: Unstable, Request: true, Treatment: Handled, Handler: "router.archiveSession (router/lifecycle.go)",
		Why: "as session/archive: unmarks the session and unarchives it at the agents that support archive"},
	{Name: MethodAuthStatus, Side: SideAgent, Status: Unstable, Request: true, Treatment: Handled, Handler: "router.authStatus (router/authstatus.go)",
		Why: "acp-currency row 10: every running agent that supports it is asked; the states are merged, each agent's under _meta.acp-router.agents"},
	{Name: MethodMcpMessage, Side: SideAgent, Status: Unstable, Request: true, Notification: true, Treatment: Handled, Handler: "router.editorMcpMessage (router/mcp.go)",
		Why: "acp-currency row 12 (request and notification both ways since 1.30; the schema files here have the editor's as a notification only): routed by serverId to the agent of the session that declared that ACP MCP server, session id translated; an undeclared server is -32602 (a notification: logged and dropped)"},
	{Name: MethodProvidersList, Side: SideAgent, Status: Unstable, Request: true, Treatment: Unknown,
		Why: "providers/* name no session: they configure the default agent only; providers masked, so a conforming editor does not send them (acp-currency row 14)"},
	{Name: MethodProvidersSet, Side: SideAgent, Status: Unstable, Request: true, Treatment: Unknown, Why: "as providers/list"},
	{Name: MethodProvidersDisable, Side: SideAgent, Status: Unstable, Request: true, Treatment: Unknown, Why: "as providers/list"},
	{Name: MethodSessionOptions, Side: SideAgent, Status: Announced, Request: true, Treatment: Unknown,
		Why: "unstable by 1.32 (acp-currency row 15), not in the schema files here: a new method naming a session goes to its agent by sessionId"},

	// Agents call them (x-side client).
	{Name: MethodSessionUpdate, Side: SideClient, Status: Stable, Notification: true, Treatment: Handled, Fast: true, Handler: "router.relayUpdate",
		Why: "ids translated (session, tool call, message; subagent children), recorded for the brief and the store, policy evidence; ids inside updates (compactionId, planId, session_message) kept apart across agents"},
	{Name: MethodRequestPermission, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true, Handler: "router.permissionRequest (router/permission.go)",
		Why: "the permission policy decides first (guard; enforce.go); the editor is asked only for ask"},
	{Name: MethodReadTextFile, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true,
		Why: "fs.readTextFile checked, absolute paths only, the policy decides"},
	{Name: MethodWriteTextFile, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true,
		Why: "as fs/read_text_file"},
	{Name: MethodTerminalCreate, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true,
		Why: "terminal checked, bounded per agent, the policy decides on the command"},
	{Name: MethodTerminalOutput, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true,
		Why: "only for a terminal the calling agent owns"},
	{Name: MethodTerminalWaitForExit, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true, Why: "as terminal/output"},
	{Name: MethodTerminalKill, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true, Why: "as terminal/output"},
	{Name: MethodTerminalRelease, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed, Fast: true, Why: "as terminal/output"},
	{Name: MethodElicitationCreate, Side: SideClient, Status: Stable, Request: true, Treatment: Relayed,
		Why: "elicitation checked by mode; request-scoped ones mapped onto the editor's request id, URL elicitation ids kept apart per agent"},
	{Name: MethodElicitationComplete, Side: SideClient, Status: Stable, Notification: true, Treatment: Handled, Handler: "router.agentNotification",
		Why: "the elicitation id translated back; dropped for an id the router never forwarded"},
	{Name: MethodAuthStatusUpdate, Side: SideClient, Status: Unstable, Notification: true, Treatment: Relayed,
		Why: "names no session: forwarded attributed to its agent (_meta[\"acp-router\"].agent); coalesced per agent when the editor is slow"},
	{Name: MethodMcpMessage, Side: SideClient, Status: Unstable, Request: true, Treatment: Relayed,
		Why: "the editor hosts the ACP MCP servers: an agent may reach only the servers its own sessions declared"},
	{Name: MethodMCPConnect, Side: SideClient, Status: Removed, Request: true, Treatment: Relayed,
		Why: "removed from the schema (acp-currency row 12): an agent's unknown call goes to the editor like any other"},
	{Name: MethodMCPDisconnect, Side: SideClient, Status: Removed, Request: true, Treatment: Relayed, Why: "as mcp/connect"},

	// Either side.
	{Name: MethodCancelRequest, Side: SideProtocol, Status: Stable, Notification: true, Treatment: Handled, Handler: "router.cancelRequest, router.agentCancelRequest",
		Why: "request ids translated and forwarded; -32800 only for requests the router holds itself (STYLE.md)"},

	// Proxy chains.
	{Name: MethodProxyInitialize, Side: SideProxy, Status: Unstable, Request: true, Treatment: Handled, Handler: "router.proxyInitialize (router/successor.go)",
		Why: "acp-currency row 11: a conductor started the router as a proxy: the router answers as initialize and its successor becomes the agent successor; never passed to a downstream agent; after initialize it is refused (-32600)"},
	{Name: MethodProxySuccessor, Side: SideProxy, Status: Unstable, Request: true, Notification: true, Treatment: Handled, Handler: "router/successor.go: unwrapped in the editor's read loop",
		Why: "carries one message to or from the successor; before proxy/initialize a request is refused (-32601) and a notification dropped with a log line"},
}

// Methods that only the table names.
const (
	MethodSessionOptions   = "session/options"   // announced (1.32)
	MethodMCPConnect       = "mcp/connect"       // removed
	MethodMCPDisconnect    = "mcp/disconnect"    // removed
	MethodProvidersList    = "providers/list"    // unstable
	MethodProvidersSet     = "providers/set"     // unstable
	MethodProvidersDisable = "providers/disable" // unstable
)

// removedPrefixes are method families removed from the v1 schema (NES,
// frozen at 1.25: acp-currency row 14). The editor's calls of them are
// deliberately forwarded as unknown (LookupMethod answers a row for them).
var removedPrefixes = []string{"nes/", "document/"}

// LookupMethod returns the row for a method the router receives from the
// editor (from an agent when fromAgent). ok is false for a method the
// table does not name: extension methods (_…) and anything newer.
func LookupMethod(name string, fromAgent bool) (Method, bool) {
	for _, m := range Methods {
		if m.Name != name {
			continue
		}
		switch m.Side {
		case SideProtocol, SideProxy:
			return m, true
		case SideClient:
			if fromAgent {
				return m, true
			}
		case SideAgent:
			if !fromAgent {
				return m, true
			}
		}
	}
	for _, p := range removedPrefixes {
		if strings.HasPrefix(name, p) {
			m := Method{Name: name, Side: SideAgent, Status: Removed, Request: true, Notification: true, Treatment: Unknown,
				Why: "NES, removed from the v1 schema (frozen at 1.25, acp-currency row 14): a peer that still speaks it gets what it would without the router"}
			if fromAgent {
				m.Side, m.Treatment = SideClient, Relayed
			}
			return m, true
		}
	}
	return Method{}, false
}

// NotificationOnly reports whether the protocol sends method, received from
// the editor (from an agent when fromAgent), only as a notification. Such a
// message with an id is a request for a method that has no request form:
// the router answers it as an ACP peer does (-32601, Method not found) and
// neither carries it out nor passes it on, where before it went unanswered
// (session/cancel, $/cancel_request) or on as a request the other side's
// schema has no room for (session/update).
func NotificationOnly(method string, fromAgent bool) bool {
	m, ok := LookupMethod(method, fromAgent)
	return ok && m.Notification && !m.Request
}

// RequestOnly: method (from an agent when fromAgent, else from the editor)
// is a method of the protocol that is only ever sent as a request. A
// notification for it is dropped, neither carried out nor passed on: the
// router answers, decides and audits requests, and a peer that acts on
// whatever method it reads would carry out an fs/write_text_file or a
// terminal/create that no one decided or recorded.
func RequestOnly(method string, fromAgent bool) bool {
	m, ok := LookupMethod(method, fromAgent)
	return ok && m.Request && !m.Notification
}
