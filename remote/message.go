package remote

import (
	"bytes"
	"encoding/json"
)

// message is what the transport reads of a JSON-RPC message to route it.
type message struct {
	method  string
	id      string // the id's JSON text, compacted: a map key ("" = none)
	hasID   bool
	isReply bool   // a response: no method, an id
	session string // params.sessionId when it is a string
}

// envelope decodes the members routing needs; params and result stay
// raw and only their sessionId is read.
type envelope struct {
	Method *string          `json:"method"`
	ID     json.RawMessage  `json:"id"`
	Params json.RawMessage  `json:"params"`
	Result *json.RawMessage `json:"result"`
	Error  *json.RawMessage `json:"error"`
}

type withSession struct {
	SessionID any `json:"sessionId"`
}

// kind of a message's first byte: what the transport answers before the
// hub sees it.
type kind int

const (
	kindObject kind = iota
	kindBatch
	kindScalar
	kindInvalid
)

func classify(b []byte) kind {
	if !json.Valid(b) {
		return kindInvalid
	}
	switch bytes.TrimLeft(b, " \t\r\n")[0] {
	case '{':
		return kindObject
	case '[':
		return kindBatch
	}
	return kindScalar
}

// parse reads an object message (classify said kindObject).
func parse(b []byte) message {
	var e envelope
	if json.Unmarshal(b, &e) != nil {
		return message{}
	}
	var m message
	if e.Method != nil {
		m.method = *e.Method
	}
	if len(e.ID) > 0 && !bytes.Equal(bytes.TrimSpace(e.ID), []byte("null")) {
		var c bytes.Buffer
		if json.Compact(&c, e.ID) == nil {
			m.id, m.hasID = c.String(), true
		}
	}
	m.isReply = e.Method == nil && (m.hasID || e.Result != nil || e.Error != nil)
	if len(e.Params) > 0 && e.Params[0] == '{' {
		var p withSession
		if json.Unmarshal(e.Params, &p) == nil {
			if s, ok := p.SessionID.(string); ok {
				m.session = s
			}
		}
	}
	return m
}

// sessionScoped are the methods the SDK sends with Acp-Session-Id
// (protocol.js SESSION_SCOPED_METHODS).
var sessionScoped = map[string]bool{
	"session/cancel": true, "session/close": true, "session/delete": true, "session/fork": true,
	"session/load": true, "session/prompt": true, "session/resume": true,
	"session/set_config_option": true, "session/set_mode": true, "session/set_model": true,
}

// protocolError is a JSON-RPC error response with id null, for what the
// transport refuses before a message has an id it can answer.
func protocolError(code int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	return b
}

// errorReply answers request id (its JSON text) with an error.
func errorReply(id string, code int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "error": map[string]any{"code": code, "message": msg}})
	return b
}

const (
	codeParse          = -32700
	codeInvalidRequest = -32600
)
