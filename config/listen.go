package config

import (
	"net"

	"go.yaml.in/yaml/v3"
)

// Listen is the listen: block: the address a router serves ACP's remote
// transport on (issue 30), besides stdio.
type Listen struct {
	// Address is host:port; an empty host means 127.0.0.1, port 0 a free
	// port (recorded in the state directory). "" when there is no block.
	Address string
	// TLSCert and TLSKey are PEM files (absolute, ~ expanded): both or
	// neither. Required with authentication for any address other than
	// loopback (checked at start-up, by remote.Check).
	TLSCert, TLSKey string
	Pos             Pos
}

var (
	listenKeys    = []string{"address", "tls"}
	listenTLSKeys = []string{"cert", "key"}
)

func (p *parser) listen(n *yaml.Node) Listen {
	l := Listen{Pos: p.pos(n)}
	f := p.fields("listen", n, listenKeys)
	p.require("listen", n, f, "address")
	if v := f["address"]; v != nil {
		if s, ok := p.expanded("listen.address", v); ok {
			if _, _, err := net.SplitHostPort(s); err != nil {
				p.errorf(v, "listen.address", "expected host:port (e.g. 127.0.0.1:7420, or 127.0.0.1:0 for a free port), got %q", s)
			}
			l.Address = s
		}
	}
	if v := f["tls"]; v != nil {
		t := p.fields("listen.tls", v, listenTLSKeys)
		p.require("listen.tls", v, t, "cert", "key")
		if c := t["cert"]; c != nil {
			l.TLSCert = p.path("listen.tls.cert", c, true)
		}
		if k := t["key"]; k != nil {
			l.TLSKey = p.path("listen.tls.key", k, true)
		}
	}
	return l
}
