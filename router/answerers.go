package router

import (
	"encoding/json"
	"fmt"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/guard"
)

// Who answers an ask (issue 30, point 4). The policy may say who may
// answer a permission question (answered_by): the router marks the
// question it sends the editor with _meta["acp-router/answerers"] (the
// names allowed; absent when any controller may answer), so that a hub in
// front of it (Options.ClientMeta) puts it only to those clients, and
// reads from the answer _meta["acp-router/answeredBy"] ({"name": token
// name, "editor": bool}), which the hub stamps on the answer of the client
// that gave it. Without a hub the editor is the one answerer: what it
// writes there is ignored (an editor cannot claim to be someone else), and
// an ask only others may answer is refused at once. An answer from anyone
// the policy does not name is taken as a reject (guard.RecordAnswer).

// The _meta keys of who may answer and who answered.
const (
	metaAnswerers  = "acp-router/answerers"
	metaAnsweredBy = "acp-router/answeredBy"
)

// unanswerable says why no client that may answer v's ask can answer it,
// "" when one can (or anyone may).
func (r *Router) unanswerable(v *guard.Verdict) string {
	a := v.Answerers()
	switch {
	case a == nil:
		return ""
	case len(a.Names) == 0:
		return fmt.Sprintf("no one may answer: the %s name no one in common", a.Why())
	case !r.opts.ClientMeta && !a.Allows("", true):
		return fmt.Sprintf("only %s may answer (%s), and the editor is this router's only client (no hub: acp-router serve, or listen: in the config)",
			a, a.Why())
	}
	return ""
}

// answerer is who gave the editor side's answer res: with a hub in front
// (ClientMeta), the client the hub names in its _meta (the zero Answerer
// when it names none); else the editor.
func (r *Router) answerer(res json.RawMessage) guard.Answerer {
	if !r.opts.ClientMeta {
		return guard.EditorAnswerer
	}
	// By exact names, as the hub writes them.
	var by map[string]json.RawMessage
	var a guard.Answerer
	if raw, ok := metaOf(res)[metaAnsweredBy]; !ok || json.Unmarshal(raw, &by) != nil ||
		json.Unmarshal(by["name"], &a.Name) != nil || by["editor"] != nil && json.Unmarshal(by["editor"], &a.Editor) != nil {
		return guard.Answerer{}
	}
	return a
}

// metaOf is obj's _meta object by its members' exact names (a decode into
// a struct would match them in any case: a key the hub does not know as
// its own must not be read as one); nil when there is none.
func metaOf(obj json.RawMessage) map[string]json.RawMessage {
	var v [1]json.RawMessage
	if len(obj) == 0 || acp.Members(obj, []string{"_meta"}, v[:]) != nil || len(v[0]) == 0 || v[0][0] != '{' {
		return nil
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(v[0], &meta) != nil {
		return nil
	}
	return meta
}

// answerersMeta is the _meta the editor is sent with a permission request
// whose params are p: p's own, without an acp-router/answerers the agent
// wrote (only the router says who answers), with names when the policy
// says who may answer (restricted). ok is false when p's _meta needs no
// change.
func answerersMeta(p json.RawMessage, names []string, restricted bool) (json.RawMessage, bool) {
	meta := metaOf(p)
	_, forged := meta[metaAnswerers]
	if !forged && !restricted {
		return nil, false
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	delete(meta, metaAnswerers)
	if restricted {
		meta[metaAnswerers] = mustJSON(names)
	}
	return mustJSON(meta), true
}

// withoutAnsweredBy is an answer as the agent is given it: without the
// name of the client who gave it, which is the router's to audit, not the
// agent's to read.
func withoutAnsweredBy(res json.RawMessage) json.RawMessage {
	meta := metaOf(res)
	if _, ok := meta[metaAnsweredBy]; !ok {
		return res
	}
	delete(meta, metaAnsweredBy)
	if out, err := acp.SetField(res, "_meta", meta); err == nil {
		return out
	}
	return res
}
