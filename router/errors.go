package router

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
)

// The errors the router answers with itself are built here: each names one
// kind of failure (a sentinel below), and rpcCodes maps each kind to its
// JSON-RPC code, once. The message says what went wrong and what to do;
// data carries the ids an editor acts on (sessionId, method, agent).

// The kinds of failure.
var (
	// errParams: the params are not what the method needs (-32602).
	errParams = errors.New("invalid params")
	// errNotNow: the request is not allowed in the router's state (-32600).
	errNotNow = errors.New("invalid request")
	// errNoMethod: no one here takes the method, or not without what it
	// needs (the store, an editor capability) (-32601).
	errNoMethod = errors.New("method not found")
	// errNoResource: what the request names is neither run nor kept
	// (-32002, as the schema asks of unknown sessions).
	errNoResource = errors.New("resource not found")
	// errInternal: the router, an agent or the editor could not do it
	// (-32603).
	errInternal = errors.New("internal error")
	// errCancelRequested: $/cancel_request ended it (-32800).
	errCancelRequested = errors.New("request cancelled")
)

// rpcCodes is each kind's JSON-RPC code.
var rpcCodes = map[error]int64{
	errParams:          acp.CodeInvalidParams,
	errNotNow:          acp.CodeInvalidRequest,
	errNoMethod:        acp.CodeMethodNotFound,
	errNoResource:      acp.CodeResourceNotFound,
	errInternal:        acp.CodeInternalError,
	errCancelRequested: acp.CodeRequestCancelled,
}

// fail builds the answer for a failure of kind: its code, msg and data.
func fail(kind error, msg string, data any) *jsonrpc2.Error {
	code, ok := rpcCodes[kind]
	if !ok {
		panic("router: no JSON-RPC code for the failure " + kind.Error())
	}
	return acp.NewError(code, msg, data)
}

// errNoParams: a message that needs params has none.
var errNoParams = errors.New("no params")

// decodeParams decodes a message's params into v; a message without
// params is an error too.
func decodeParams(p json.RawMessage, v any) error {
	if p == nil {
		return errNoParams
	}
	return json.Unmarshal(p, v)
}

// dropMalformed logs a notification the router cannot read or rewrite,
// and drops it: a notification has no answer to carry an error.
func (r *Router) dropMalformed(from, method string, err error) {
	r.log.Warn("a malformed notification dropped", "from", from, "method", method, "error", err)
}

// errNoRequestID: a $/cancel_request names no request.
var errNoRequestID = errors.New("params need a requestId")

// errMalformed answers a request whose params do not decode as its method
// needs.
func errMalformed(method string, err error) error {
	return fail(errParams, fmt.Sprintf("acp-router: malformed %s params: %v", method, err), map[string]string{"method": method})
}

// errNeedsStore answers a method that needs the session store (state_dir)
// when the router has none: not advertised, so "method not found".
func errNeedsStore(method string) error {
	return fail(errNoMethod, "acp-router: "+method+" needs the session store (state_dir)", map[string]string{"method": method})
}

// errRefused answers a method the protocol table refuses, with the code
// its row gives.
func errRefused(code int64, method string) error {
	return acp.NewError(code, "acp-router does not support "+method, map[string]string{"method": method})
}

// errRelativeCwd answers a cwd that is not an absolute path.
func errRelativeCwd(cwd string) error {
	return fail(errParams, fmt.Sprintf("acp-router: cwd must be an absolute path, got %q", cwd), nil)
}

// errNeedsSessionID answers a method whose params name no session.
func errNeedsSessionID(method string) error {
	return fail(errParams, "acp-router: "+method+" needs a sessionId", nil)
}

// errMalformedInit answers initialize params that do not decode.
var errMalformedInit = fail(errParams, "acp-router: malformed initialize params", nil)

// errTooManyPending answers an agent's request past maxPending.
func errTooManyPending(agent string) error {
	return fail(errInternal, fmt.Sprintf("acp-router: agent %q has %d requests waiting for the editor already", agent, maxPending), nil)
}

// errCannotLoad answers a session the store cannot give back.
func errCannotLoad(err error, data any) error {
	return fail(errInternal, "acp-router: cannot load the session: "+err.Error(), data)
}

// errNotificationAsRequest answers a request for a method the protocol sends
// only as a notification (acp.NotificationOnly), as an ACP peer answers it.
func errNotificationAsRequest(method string) error {
	return fail(errNoMethod, "Method not found: "+method+" is a notification (sent without an id)", map[string]string{"method": method})
}

// errNoSession answers a request naming a session the router neither runs
// nor keeps: -32002 with the id in data, as the schema asks of
// session/status, set_title, archive and unarchive.
func errNoSession(method, id string) error {
	return fail(errNoResource, fmt.Sprintf("acp-router: %s: unknown session %q", method, id), map[string]string{"sessionId": id})
}

var errCancelled = fail(errCancelRequested, "request cancelled", nil)

// errUnknownSession answers requests naming a session the router does not
// have, or none (no sessionId, or one that is not a string).
func errUnknownSession(id string) error {
	if id == "" {
		return errNoSessionID
	}
	return fail(errParams, fmt.Sprintf("acp-router: unknown session %q", id), map[string]string{"sessionId": id})
}

// errNoSessionID answers a request for one session whose params name none.
var errNoSessionID = fail(errParams, "acp-router: params need a sessionId (a string)", nil)

// errEditorClosed answers an agent's request the editor can no longer
// answer.
var errEditorClosed = fail(errInternal, "acp-router: the editor connection is closed", nil)

// errMcpServer answers an mcp/message naming a server no session declared
// (to that agent).
func errMcpServer(serverID string) error {
	return fail(errParams, fmt.Sprintf("acp-router: mcp/message: no session declared the ACP MCP server %q", serverID), map[string]string{"serverId": serverID})
}

// errNoSuccessor answers proxy/successor requests while no link to the
// successor is up.
var errNoSuccessor = fail(errInternal,
	"acp-router: the successor is not connected (it was stopped or its link ended); its next use reconnects it",
	map[string]string{"agent": config.SuccessorName})
