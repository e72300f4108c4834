package config

import "go.yaml.in/yaml/v3"

// Sessions is the sessions: block (issue 30): what becomes of a session
// when the last client attached to it goes (a router that listens: the
// stdio editor and remote clients share its sessions through the hub).
type Sessions struct {
	// CancelOnLastDetach (on_last_detach: cancel) cancels the session's
	// running turn when its last client goes; the default (finish) lets
	// the turn finish. Either way the session stays loadable and
	// attachable.
	CancelOnLastDetach bool
	Pos                Pos
}

var sessionsKeys = []string{"on_last_detach"}

func (p *parser) sessions(n *yaml.Node) Sessions {
	s := Sessions{Pos: p.pos(n)}
	f := p.fields("sessions", n, sessionsKeys)
	if v := f["on_last_detach"]; v != nil {
		s.CancelOnLastDetach = p.enum("sessions.on_last_detach", v, "finish", "cancel") == "cancel"
	}
	return s
}
