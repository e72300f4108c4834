package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Kind is what a JSON-RPC message is.
type Kind uint8

const (
	KindInvalid Kind = iota
	KindRequest
	KindNotification
	KindResponse
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	}
	return "invalid"
}

// Message is one decoded line. Its byte slices alias Raw, which the reader
// allocates afresh for every line, so a Message may be retained; they are
// capped at their own length, so an append to one never writes into Raw.
// Messages are read-only.
type Message struct {
	Raw    []byte // the line without its terminator
	Kind   Kind
	ID     json.RawMessage // nil when absent; "null" when null
	Method string
	Params json.RawMessage // nil when absent
	Result json.RawMessage
	Error  json.RawMessage

	shared *Shared  // Raw's pooled buffer, until claimed (Claim)
	pre    *prescan // what the read found of the params (Prescanned)
	// paramsAt is where Params starts in Raw, when Params is Raw's only
	// params member (else -1; 0 in a Message not made by Classify):
	// ReplaceInParams.
	paramsAt int
}

// HasID reports whether the message carries a non-null id.
func (m *Message) HasID() bool { return len(m.ID) > 0 && string(m.ID) != "null" }

// Envelope classification errors. The stream answers them on the editor side
// (-32700 for ErrParse, -32600 for the rest) and drops them on the agent side.
var (
	// ErrParse: the line is not JSON.
	ErrParse = errors.New("parse error")
	// ErrNotRPC: valid JSON but not a JSON-RPC 2.0 message.
	ErrNotRPC = errors.New("not a JSON-RPC 2.0 message")
	// ErrBatch: a JSON array; ACP v1 has no batches.
	ErrBatch = errors.New("batch messages are not supported by ACP v1")
)

// Classify reads the envelope of one line: it validates the whole line as
// encoding/json would, and that its strings are UTF-8 (which encoding/json
// does not ask; the stream repairs a line that fails only that, with
// U+FFFD), and finds the top-level members in one pass, without
// decoding or copying them (ID, Params, Result and Error alias line). On
// ErrNotRPC the returned message still carries the id when one could be
// read, so that the reply can name it.
func Classify(line []byte) (*Message, error) { return ClassifyPrescan(line, nil) }

// ClassifyPrescan is Classify that also reads, in the same pass, the members
// p names of a p.Method message's params (Message.Prescanned), when the
// line gives its method before its params. p may be nil.
func ClassifyPrescan(line []byte, p *Prescan) (*Message, error) {
	trimmed := bytes.TrimLeft(line, " \t")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		m := &Message{Raw: line}
		if !validJSON(line) {
			return m, ErrParse
		}
		return m, ErrBatch
	}
	// Members are matched by their exact names, as a map decode would:
	// encoding/json matches struct fields without regard to case, so
	// {"method":"a","Method":"b"} would read as "b" there and as "a" in
	// jsonrpc2's Request and in the peer the line is relayed to.
	pre := prescan{p: p}
	e, res := scanEnvelope(line, &pre)
	var m *Message
	if pre.ok && res == scanMembers {
		mp := &messagePre{m: Message{Raw: line}, pre: pre}
		m = &mp.m
		m.pre = &mp.pre
	} else {
		m = &Message{Raw: line}
	}
	switch res {
	case scanInvalid:
		return m, ErrParse
	case scanNotObject:
		return m, fmt.Errorf("%w: top level must be an object", ErrNotRPC)
	}
	m.ID, m.Params, m.Result, m.Error = e.id, e.params, e.result, e.error
	m.paramsAt = -1
	if e.params != nil && !e.paramsDup {
		m.paramsAt = e.paramsAt
	}
	// The id first: every later error is answered with m.ID.
	if m.ID != nil && !validID(m.ID) {
		m.ID = nil
		return m, fmt.Errorf("%w: id must be a string, a number or null", ErrNotRPC)
	}
	if e.jsonrpc != nil && string(e.jsonrpc) != `"2.0"` {
		return m, fmt.Errorf(`%w: "jsonrpc" must be "2.0"`, ErrNotRPC)
	}
	if e.folded != "" {
		// jsonrpc2's Response and its request/response sniffing do fold
		// case: such a member would make it read another id or kind.
		return m, fmt.Errorf("%w: member %q is not %q (names are case-sensitive)", ErrNotRPC, e.folded, e.foldedAs)
	}
	hasResult := e.result != nil
	hasError := e.error != nil && string(e.error) != "null"
	switch {
	case e.method != nil:
		if hasResult || hasError {
			return m, fmt.Errorf("%w: a message cannot have both method and result/error", ErrNotRPC)
		}
		method, ok := methodName(e.method)
		if !ok || method == "" {
			return m, fmt.Errorf("%w: method must be a non-empty string", ErrNotRPC)
		}
		m.Method = method
		if m.ID == nil {
			m.Kind = KindNotification
		} else {
			m.Kind = KindRequest
		}
		if m.Params != nil && string(m.Params) != "null" && !isObjectOrArray(m.Params) {
			return m, fmt.Errorf("%w: params must be an object or array", ErrNotRPC)
		}
	case hasResult && hasError:
		return m, fmt.Errorf("%w: a response cannot have both result and error", ErrNotRPC)
	case hasResult || hasError:
		m.Kind = KindResponse
		if hasError && !isObject(e.error) {
			return m, fmt.Errorf("%w: error must be an object", ErrNotRPC)
		}
	default:
		return m, fmt.Errorf("%w: no method, result or error", ErrNotRPC)
	}
	return m, nil
}

// foldedMember returns the envelope member k differs from only in case, or
// "".
func foldedMember(k string) string {
	for _, name := range [...]string{"jsonrpc", "id", "method", "params", "result", "error"} {
		if k != name && strings.EqualFold(k, name) {
			return name
		}
	}
	return ""
}

func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"', 'n':
		return true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// headID reads what the start of a line too long to read whole says of
// it: its id and its kind, from the top-level members that end within
// head (a serializer writes jsonrpc, id and method before params or
// result). KindInvalid when head does not say: no id seen (a notification,
// or an id after the long member), or no member saying the kind.
func headID(head []byte) (id json.RawMessage, kind Kind) {
	i := skipSpace(head, 0)
	if i >= len(head) || head[i] != '{' {
		return nil, KindInvalid
	}
	var method, result bool
	i = skipSpace(head, i+1)
	for i < len(head) && head[i] == '"' {
		keyEnd, _, ok := scanString(head, i)
		if !ok {
			break
		}
		key := string(head[i+1 : keyEnd-1])
		j := skipSpace(head, keyEnd)
		if j >= len(head) || head[j] != ':' {
			break
		}
		v := skipSpace(head, j+1)
		switch key {
		case "method":
			method = true
		case "result", "error":
			result = true
		}
		end, ok := scanValue(head, v, 1)
		if !ok || skipSpace(head, end) >= len(head) {
			break // the value runs past the head: the long member
		}
		if key == "id" && validID(head[v:end]) && string(head[v:end]) != "null" {
			id = head[v:end:end]
		}
		i = skipSpace(head, end)
		if head[i] != ',' {
			break
		}
		i = skipSpace(head, i+1)
	}
	switch {
	case id == nil:
		return nil, KindInvalid
	case method && !result:
		return id, KindRequest
	case result && !method:
		return id, KindResponse
	}
	return nil, KindInvalid
}

func isObject(b json.RawMessage) bool        { return len(b) > 0 && b[0] == '{' }
func isObjectOrArray(b json.RawMessage) bool { return len(b) > 0 && (b[0] == '{' || b[0] == '[') }

// plainID reports whether sourcegraph/jsonrpc2 v0.2.3 echoes id exactly: a
// string, or a non-negative integer without fraction or exponent that fits
// in an int64 (its Request decoder goes through json.Number.Int64 and then
// stores a uint64, so -1 comes back as 18446744073709551615).
func plainID(id json.RawMessage) bool {
	if id[0] == '"' {
		return true
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	if len(id) > 1 && id[0] == '0' {
		return false
	}
	return len(id) < 19 || (len(id) == 19 && string(id) <= "9223372036854775807")
}

// AppendString appends s to dst as a JSON string. A string that needs no
// escape is copied between quotes; any other is encoded by encoding/json
// (which also escapes <, > and &: the same string to a decoder).
func AppendString(dst []byte, s string) []byte {
	if verbatim([]byte(s)) { // no copy: the conversion does not escape
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

// AppendRequest appends the request {"jsonrpc":"2.0","id":id,"method":
// method,"params":params} to dst, params left out when nil, without
// encoding/json: id (a valid JSON-RPC id, as read) and params (one line of
// valid JSON) are copied as they are, so that the line is one line and
// equal, as JSON, to what encoding the decoded message with this id would
// give (FuzzAppendLines). The fast path's way of giving a request a new id.
func AppendRequest(dst, id json.RawMessage, method string, params json.RawMessage) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"method":`...)
	dst = AppendString(dst, method)
	if params != nil {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// AppendResponse appends the response {"jsonrpc":"2.0","id":id,"result":
// result} to dst, id and result (one line of valid JSON) as they are.
func AppendResponse(dst, id, result json.RawMessage) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}
