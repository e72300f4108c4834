package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// Network is an agent's network: block (issue 29): what its sandbox lets
// it reach besides what the policy allows.
type Network struct {
	// ModelHosts are the hosts of the agent's model API (host or
	// *.host), reachable whatever allow-list the policy has; a deny rule
	// still wins. nil: the built-in defaults for known agents
	// (sandbox.DefaultModelHosts); an empty list declares none.
	ModelHosts []string
	// Loopback are ports of this machine's loopback the agent may reach
	// (a local model server): forwarded into its network namespace.
	Loopback []int
	Pos      Pos
}

var networkKeys = []string{"model_hosts", "loopback"}

// hostName is what model_hosts accepts: a host name or *.host, in ASCII
// (write an IDN in its xn-- form).
var hostName = regexp.MustCompile(`^(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$`)

func (p *parser) network(path string, n *yaml.Node) Network {
	nw := Network{Pos: p.pos(n)}
	f := p.fields(path, n, networkKeys)
	if v := f["model_hosts"]; v != nil {
		nw.ModelHosts = []string{}
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, path+".model_hosts", "expected a list of host names, got %s", yamlpos.Describe(v))
		} else {
			for i, item := range v.Content {
				item = yamlpos.Deref(item)
				key := fmt.Sprintf("%s.model_hosts[%d]", path, i)
				s, ok := p.str(key, item)
				if !ok {
					continue
				}
				h := strings.ToLower(strings.TrimSuffix(s, "."))
				if !hostName.MatchString(h) {
					p.errorf(item, key, "invalid host %q: write a host name (api.example.com) or *.example.com, no scheme, port or path", s)
					continue
				}
				if !slices.Contains(nw.ModelHosts, h) {
					nw.ModelHosts = append(nw.ModelHosts, h)
				}
			}
		}
	}
	if v := f["loopback"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, path+".loopback", "expected a list of ports, got %s", yamlpos.Describe(v))
		} else {
			for i, item := range v.Content {
				item = yamlpos.Deref(item)
				key := fmt.Sprintf("%s.loopback[%d]", path, i)
				port, ok := p.integer(key, item)
				switch {
				case !ok:
				case port < 1 || port > 65535:
					p.errorf(item, key, "invalid port %d: a port of this machine's loopback, 1 to 65535", port)
				case !slices.Contains(nw.Loopback, port):
					nw.Loopback = append(nw.Loopback, port)
				}
			}
		}
	}
	return nw
}
