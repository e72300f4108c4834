package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/egress"
)

// agentEgress is one agent's egress proxy: it lives as long as the
// Confiner (an agent restarted reuses it) and decides by the policy in
// force: a reload applies to the next connection of a running agent (the
// loopback ports forwarded into its namespace stay those of its start).
type agentEgress struct {
	proxy  *egress.Proxy
	net    atomic.Pointer[Network]
	agent  config.Agent
	dir    string
	socket string

	mu       sync.Mutex
	reported map[string]time.Time // host:port -> last report
}

// Refusals of one host and port are logged and reported once per
// reportEvery (an agent retrying in a loop must not flood the log or the
// audit), and at most maxReported destinations are remembered.
const (
	reportEvery = time.Minute
	maxReported = 1024
)

func (e *agentEgress) report(r egress.Refusal) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	now := time.Now()
	if t, ok := e.reported[key]; ok && now.Sub(t) < reportEvery {
		return false
	}
	if e.reported == nil || len(e.reported) >= maxReported {
		e.reported = map[string]time.Time{}
	}
	e.reported[key] = now
	return true
}

// egressFor starts (once) and updates agent's egress proxy for n, and
// returns the plan's network half.
func (c *Confiner) egressFor(a config.Agent, n *Network) (*NetPlan, error) {
	agent := a.Name
	c.egressMu.Lock()
	defer c.egressMu.Unlock()
	if c.egress == nil {
		c.egress = map[string]*agentEgress{}
	}
	e := c.egress[agent]
	if e == nil {
		// A directory of the router's own (0700): no other user reaches
		// the socket. Unix socket paths are short (108 bytes): the temp
		// dir, not the state dir.
		dir, err := os.MkdirTemp("", "acp-router-egress-")
		if err != nil {
			return nil, fmt.Errorf("egress proxy: %w", err)
		}
		e = &agentEgress{dir: dir, socket: filepath.Join(dir, "proxy.sock")}
		l, err := net.Listen("unix", e.socket)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("egress proxy: %w", err)
		}
		log := c.logger().Named("egress").With("agent", agent)
		e.proxy = &egress.Proxy{
			Decide: func(host string, port int) egress.Verdict { return e.network(c).Decide(host, port) },
			Loopback: func(port int) bool {
				return slices.Contains(e.net.Load().Loopback, port)
			},
			Lookup: c.Lookup,
			Logger: log,
			Refused: func(r egress.Refusal) {
				if !e.report(r) {
					return
				}
				log.Warn("network connection refused by the sandbox", "host", r.Host, "port", r.Port, "rule", r.Rule)
				if c.NetRefused != nil {
					c.NetRefused(agent, r)
				}
			},
		}
		go func() {
			if err := e.proxy.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("egress proxy stopped", "error", err)
			}
		}()
		c.egress[agent] = e
	}
	e.agent = a
	e.net.Store(n)
	return &NetPlan{Socket: e.socket, Loopback: slices.Clone(n.Loopback)}, nil
}

// network is the agent's network profile under the policy in force,
// derived again when the policy changed since.
func (e *agentEgress) network(c *Confiner) *Network {
	n := e.net.Load()
	if c.Policy == nil {
		return n
	}
	pol := c.Policy()
	if pol == n.pol {
		return n
	}
	fresh, _ := deriveNetwork(pol, e.agent)
	fresh.Loopback = n.Loopback
	e.net.CompareAndSwap(n, fresh)
	return fresh
}

// Close stops the agents' egress proxies (their agents lose the network)
// and removes their sockets.
func (c *Confiner) Close() error {
	if c == nil {
		return nil
	}
	c.egressMu.Lock()
	defer c.egressMu.Unlock()
	var errs []error
	for name, e := range c.egress {
		errs = append(errs, e.proxy.Close(), os.RemoveAll(e.dir))
		delete(c.egress, name)
	}
	return errors.Join(errs...)
}

// lookupFunc is the Confiner's resolver hook's type.
type lookupFunc = func(ctx context.Context, host string) ([]netip.Addr, error)
