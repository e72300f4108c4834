// Package acp is the wire level of the Agent Client Protocol as acp-router
// speaks it: the newline-delimited JSON stream under sourcegraph/jsonrpc2
// (bounded lines, a per-destination write queue, id edge cases), method
// names, error codes, and the few typed fields the router reads. Everything
// else stays json.RawMessage so that what the router forwards keeps every
// byte of meaning (_meta, unknown fields).
package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/sourcegraph/jsonrpc2"
)

// ProtocolVersion is the ACP version the router speaks (shared/acp/VERSION.txt).
const ProtocolVersion = 1

// Methods handled by the agent (sent by the client). shared/acp/meta.json.
const (
	MethodInitialize      = "initialize"
	MethodAuthenticate    = "authenticate"
	MethodLogout          = "logout"
	MethodSessionNew      = "session/new"
	MethodSessionLoad     = "session/load"
	MethodSessionResume   = "session/resume"
	MethodSessionList     = "session/list"
	MethodSessionDelete   = "session/delete"
	MethodSessionClose    = "session/close"
	MethodSessionFork     = "session/fork" // unstable
	MethodSessionPrompt   = "session/prompt"
	MethodSessionCancel   = "session/cancel"
	MethodSetMode         = "session/set_mode"
	MethodSetConfigOption = "session/set_config_option"
	// MethodSetModel was unstable and removed upstream on 2026-06-01; older
	// clients (JetBrains) still send it.
	MethodSetModel = "session/set_model"
)

// Unstable methods the router routes itself (notes/acp-currency.md rows
// 7-10, 12): shared/acp/schema.unstable.json.
const (
	MethodSessionSetTitle  = "session/set_title"
	MethodSessionStatus    = "session/status"
	MethodSessionArchive   = "session/archive"
	MethodSessionUnarchive = "session/unarchive"
	MethodAuthStatus       = "auth/status"
	// MethodAuthStatusUpdate is the agent's notification.
	MethodAuthStatusUpdate = "auth/status_update"
	// MethodMcpMessage is MCP over ACP, both directions: the agent's
	// request to the server the editor provides, the editor's
	// notifications (and requests) back.
	MethodMcpMessage = "mcp/message"
)

// The inner MCP methods of an mcp/message (MCP 2025-11-25, client to
// server) that act on what the agent names, and that the policy reads:
// tools/call runs a tool with the agent's arguments, resources/read reads
// the resource at a URI.
const (
	McpToolsCall     = "tools/call"
	McpResourcesRead = "resources/read"
)

// Methods handled by the client (sent by the agent).
const (
	MethodSessionUpdate       = "session/update"
	MethodRequestPermission   = "session/request_permission"
	MethodReadTextFile        = "fs/read_text_file"
	MethodWriteTextFile       = "fs/write_text_file"
	MethodTerminalCreate      = "terminal/create"
	MethodTerminalOutput      = "terminal/output"
	MethodTerminalWaitForExit = "terminal/wait_for_exit"
	MethodTerminalKill        = "terminal/kill"
	MethodTerminalRelease     = "terminal/release"
	MethodElicitationCreate   = "elicitation/create"
	MethodElicitationComplete = "elicitation/complete"
)

// Methods of ACP proxy chains (unstable; rfds/proxy-chains, schema
// InitializeProxyRequest, ProxySuccessorRequest/Notification): a conductor
// sends proxy/initialize instead of initialize to a component that has a
// successor, and proxy/successor carries one message to or from that
// successor in either direction.
const (
	MethodProxyInitialize = "proxy/initialize"
	MethodProxySuccessor  = "proxy/successor"
)

// MethodCancelRequest is the protocol-level cancellation notification, sent
// by whichever side issued the request.
const MethodCancelRequest = "$/cancel_request"

// IsExtension reports whether method is an ACP extension method.
func IsExtension(method string) bool { return strings.HasPrefix(method, "_") }

// Error codes (schema ErrorCode).
const (
	CodeParseError       = -32700
	CodeInvalidRequest   = -32600
	CodeMethodNotFound   = -32601
	CodeInvalidParams    = -32602
	CodeInternalError    = -32603
	CodeRequestCancelled = -32800
	CodeAuthRequired     = -32000
	CodeResourceNotFound = -32002
)

// NewError builds a JSON-RPC error; data may be nil.
func NewError(code int64, msg string, data any) *jsonrpc2.Error {
	e := &jsonrpc2.Error{Code: code, Message: msg}
	if data != nil {
		e.SetError(data)
	}
	return e
}

// SessionRef is the sessionId most session-scoped params carry.
type SessionRef struct {
	SessionID string `json:"sessionId"`
}

// ClientCapabilities is the part of the editor's capabilities the router
// checks before letting an agent call the editor.
type ClientCapabilities struct {
	FS struct {
		ReadTextFile  bool `json:"readTextFile"`
		WriteTextFile bool `json:"writeTextFile"`
	} `json:"fs"`
	Terminal    bool `json:"terminal"`
	Elicitation *struct {
		Form json.RawMessage `json:"form"`
		URL  json.RawMessage `json:"url"`
	} `json:"elicitation"`
	Auth struct {
		Terminal bool `json:"terminal"`
	} `json:"auth"`
	Session struct {
		ConfigOptions struct {
			Boolean Marker `json:"boolean"`
		} `json:"configOptions"`
	} `json:"session"`
}

// InitializeParams is what the router reads of the editor's initialize.
type InitializeParams struct {
	ProtocolVersion    int                `json:"protocolVersion"`
	ClientCapabilities ClientCapabilities `json:"clientCapabilities"`
}

// Marker is an object-valued capability: present ({}) means supported.
type Marker = json.RawMessage

// Supported reports whether a capability marker is set (not absent, not null).
func Supported(m Marker) bool { return len(m) > 0 && string(m) != "null" }

// AgentCapabilities is the part of an agent's capabilities the router
// understands and merges (DESIGN §7, issue: initialize answer).
type AgentCapabilities struct {
	LoadSession        bool `json:"loadSession,omitempty"`
	PromptCapabilities struct {
		Image           bool `json:"image,omitempty"`
		Audio           bool `json:"audio,omitempty"`
		EmbeddedContext bool `json:"embeddedContext,omitempty"`
	} `json:"promptCapabilities"`
	MCPCapabilities struct {
		HTTP bool `json:"http,omitempty"`
		SSE  bool `json:"sse,omitempty"`
		ACP  bool `json:"acp,omitempty"` // unstable
	} `json:"mcpCapabilities"`
	SessionCapabilities struct {
		List                  Marker `json:"list,omitempty"`
		Delete                Marker `json:"delete,omitempty"`
		AdditionalDirectories Marker `json:"additionalDirectories,omitempty"`
		Resume                Marker `json:"resume,omitempty"`
		Close                 Marker `json:"close,omitempty"`
		// Unstable.
		Title   Marker `json:"title,omitempty"`
		Status  Marker `json:"status,omitempty"`
		Archive Marker `json:"archive,omitempty"`
		Fork    Marker `json:"fork,omitempty"`
		// SystemPrompt: {} takes systemPrompt in append mode;
		// {"mode":{"override":{}}} in override mode too.
		SystemPrompt Marker `json:"systemPrompt,omitempty"`
	} `json:"sessionCapabilities"`
	Auth struct {
		Logout Marker `json:"logout,omitempty"`
		Status Marker `json:"status,omitempty"` // unstable
	} `json:"auth"`
}

// InitializeResult is what the router reads of an agent's initialize answer.
type InitializeResult struct {
	ProtocolVersion   int               `json:"protocolVersion"`
	AgentCapabilities AgentCapabilities `json:"agentCapabilities"`
	AuthMethods       []json.RawMessage `json:"authMethods"`
	AgentInfo         *Implementation   `json:"agentInfo,omitempty"`
}

// Implementation names a peer (clientInfo / agentInfo).
type Implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// AuthMethod is the part of an authMethods entry the router reads.
type AuthMethod struct {
	ID   string   `json:"id"`
	Type string   `json:"type,omitempty"` // "" or "agent", "terminal", ...
	Args []string `json:"args,omitempty"` // terminal methods
}

// SetField returns obj (a JSON object) with key set to value, keeping every
// other member. It is how the router rewrites one id in params it otherwise
// forwards untouched: the value of every member named exactly key (as a map
// decode would name it) is replaced in place, or the member is added at the
// end; every other byte of obj is kept, so a large member is copied once and
// never decoded (issue 6). obj is not modified.
func SetField(obj json.RawMessage, key string, value any) (json.RawMessage, error) {
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	var spans [][2]int
	n := 0
	start, end, ok := scanObject(obj, func(k []byte, escaped bool, vStart, vEnd int) {
		n++
		var match bool
		if escaped || !ascii(k) {
			match = memberName(k) == key
		} else {
			match = string(k) == key
		}
		if match {
			spans = append(spans, [2]int{vStart, vEnd})
		}
	})
	if !ok {
		return nil, errNotObject
	}
	if len(spans) == 0 {
		name, _ := json.Marshal(key)
		out := make([]byte, 0, end-start+len(name)+len(v)+2)
		out = bytes.TrimRight(append(out, obj[start:end-1]...), " \t\r\n") // without its '}'
		if n > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, name...), ':'), v...)
		return oneLine(append(out, '}')), nil
	}
	out := make([]byte, 0, end-start+len(spans)*len(v))
	at := start
	for _, sp := range spans {
		out = append(append(out, obj[at:sp[0]]...), v...)
		at = sp[1]
	}
	return oneLine(append(out, obj[at:end]...)), nil
}

// oneLine compacts b if it spans lines (whitespace between tokens): what
// SetField returns may be written as one NDJSON line.
func oneLine(b []byte) []byte {
	if bytes.IndexByte(b, '\n') < 0 {
		return b
	}
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b // cannot happen: b is valid
	}
	return out.Bytes()
}

// errNotObject: SetField was given something other than a JSON object.
var errNotObject = errors.New("set field: not a JSON object")

// SystemPromptMode reports whether an agent's sessionCapabilities.systemPrompt
// takes a systemPrompt of mode: append with the capability, override only
// with mode.override, other modes never (the schema: an agent refuses a mode
// it does not know).
func SystemPromptMode(capability Marker, mode string) bool {
	if !Supported(capability) {
		return false
	}
	switch mode {
	case "append":
		return true
	case "override":
		var c struct {
			Mode struct {
				Override Marker `json:"override"`
			} `json:"mode"`
		}
		return json.Unmarshal(capability, &c) == nil && Supported(c.Mode.Override)
	}
	return false
}
