// Package egress is the network half of the sandbox (issue 29): the
// router-owned proxy through which a confined agent reaches the network,
// and the forwarder that carries the agent's connections to it.
//
// A confined agent runs in a network namespace of its own with only
// loopback up: no address outside it is routable, no resolver is
// reachable. Its watchdog, inside that namespace, listens on 127.0.0.1 (the
// Forwarder) and relays every connection to the router's Proxy, outside,
// over a unix socket (a path in the file system crosses network
// namespaces). The agent is pointed at the forwarder by HTTPS_PROXY,
// HTTP_PROXY and ALL_PROXY. The Proxy speaks HTTP CONNECT and plain-HTTP
// forwarding; it decides each host and port by the agent's profile (deny
// wins; under an allow-list only listed hosts and the agent's model API),
// resolves the name itself, dials, and reports each refusal. So names
// resolve only at the proxy, which sees and decides every host before any
// packet leaves: a DNS query cannot carry data out.
//
// The loopback services the user configured (a local model server, the
// agent's own API on 127.0.0.1) are listened for on the same ports inside
// the namespace and relayed through the proxy too, which lets through to
// the host's loopback exactly those ports.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Verdict is the profile's decision on one destination.
type Verdict struct {
	Allow bool
	// Rule says what decided ("deny rule no-exfil", "the model API of
	// agent claude", "default: deny ..."), for the refusal's message and
	// the log; ID is the rule's id when a rule decided.
	Rule string
	ID   string
}

// Refusal is a connection the proxy refused.
type Refusal struct {
	Host string
	Port int
	// Rule is what refused it (Verdict.Rule, or why the address is not
	// reachable); ID the rule's id when a rule did.
	Rule string
	ID   string
}

// Proxy is the router's end: an HTTP CONNECT and forward proxy that
// decides every destination. Its fields must be set before Serve.
type Proxy struct {
	// Decide rules on a host (as the client named it, lower case) and
	// port. Never nil: a Proxy without it refuses everything.
	Decide func(host string, port int) Verdict
	// Loopback reports whether the client may reach port of the host's
	// loopback (127.0.0.1, ::1, localhost); nil: none. Every other
	// loopback port is refused, whatever Decide says.
	Loopback func(port int) bool
	// Lookup resolves a name; nil: the system's resolver, whose answers
	// are checked: a name that resolves to a loopback or unspecified
	// address is refused (it would reach the router's machine, not the
	// network). A Lookup set here is trusted as it answers (tests map
	// names to test servers).
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Refused is called for each refusal; nil: logged (at debug) only.
	Refused func(Refusal)
	Logger  hclog.Logger
	// DialTimeout bounds a connection to the destination; default 30 s.
	DialTimeout time.Duration

	initOnce sync.Once
	rp       *httputil.ReverseProxy
	mu       sync.Mutex
	srv      *http.Server
}

// ErrRefused wraps every refusal of the proxy.
var ErrRefused = errors.New("refused by the sandbox's network profile")

func (p *Proxy) init() {
	p.initOnce.Do(func() {
		if p.Logger == nil {
			p.Logger = hclog.NewNullLogger()
		}
		if p.DialTimeout == 0 {
			p.DialTimeout = 30 * time.Second
		}
		tr := &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return p.dial(ctx, addr)
			},
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
		}
		p.rp = &httputil.ReverseProxy{
			// The request is in absolute form already: it goes where it
			// says, through dial, which decides.
			Rewrite:   func(*httputil.ProxyRequest) {},
			Transport: tr,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				refuse(w, err)
			},
		}
	})
}

// Serve answers the connections of l until Close (http.ErrServerClosed)
// or l fails.
func (p *Proxy) Serve(l net.Listener) error {
	p.init()
	p.mu.Lock()
	if p.srv == nil {
		p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: p.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	}
	srv := p.srv
	p.mu.Unlock()
	return srv.Serve(l)
}

// Close stops Serve and closes the connections it answers.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		p.srv = &http.Server{}
	}
	return p.srv.Close()
}

// ServeHTTP answers one request: CONNECT opens a tunnel, a request in
// absolute form is forwarded; anything else is not for a proxy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.init()
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" || (r.URL.Scheme != "http" && r.URL.Scheme != "ws") {
		http.Error(w, "acp-router egress proxy: send CONNECT host:port, or an http:// URL in absolute form", http.StatusBadRequest)
		return
	}
	r.Header.Del("Proxy-Connection")
	r.Header.Del("Proxy-Authorization")
	p.rp.ServeHTTP(w, r)
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	dst, err := p.dial(r.Context(), r.Host)
	if err != nil {
		refuse(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		dst.Close()
		http.Error(w, "acp-router egress proxy: cannot tunnel here", http.StatusInternalServerError)
		return
	}
	// The tunnel outlives the request: not the request's context.
	src, buf, err := hj.Hijack()
	if err != nil {
		dst.Close()
		return
	}
	if _, err := io.WriteString(src, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		src.Close()
		dst.Close()
		return
	}
	// Bytes the client sent after its CONNECT (a TLS hello) were read
	// ahead into buf.
	var in io.Reader = src
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Reader.Peek(n)
		in = io.MultiReader(strings.NewReader(string(b)), src)
	}
	splice(src, dst, in)
}

// splice copies both ways until both ends are done: each direction's end
// is passed on as a half close, so a client that closes its writing side
// still reads the whole answer.
func splice(a, b net.Conn, aIn io.Reader) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(b, aIn)
		closeWrite(b)
	}()
	io.Copy(a, b)
	closeWrite(a)
	wg.Wait()
	a.Close()
	b.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// refusedError is a refusal, for the client's answer.
type refusedError struct{ r Refusal }

func (e *refusedError) Error() string {
	return fmt.Sprintf("acp-router: %s: %s: %s", net.JoinHostPort(e.r.Host, strconv.Itoa(e.r.Port)), ErrRefused, e.r.Rule)
}
func (e *refusedError) Unwrap() error { return ErrRefused }

func refuse(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrRefused) {
		w.Header().Set("X-Acp-Router-Refused", "1")
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, "acp-router egress proxy: "+err.Error(), http.StatusBadGateway)
}

// dial decides addr ("host:port"), resolves it and connects. Every path
// to the network goes through here.
func (p *Proxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, p.refused(Refusal{Host: addr, Rule: "not host:port"})
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port <= 0 || port > 65535 {
		return nil, p.refused(Refusal{Host: host, Rule: "invalid port " + ps})
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if isLoopbackName(host) {
		if p.Loopback == nil || !p.Loopback(port) {
			return nil, p.refused(Refusal{Host: host, Port: port, Rule: "a loopback port the agent's network.loopback does not list"})
		}
		return p.connectAddrs(ctx, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, port)
	}
	v := Verdict{Rule: "no profile"}
	if p.Decide != nil {
		v = p.Decide(host, port)
	}
	if !v.Allow {
		return nil, p.refused(Refusal{Host: host, Port: port, Rule: v.Rule, ID: v.ID})
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else if p.Lookup != nil {
		if addrs, err = p.Lookup(ctx, host); err != nil {
			return nil, err
		}
	} else {
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, err
		}
	}
	if p.Lookup == nil {
		for _, a := range addrs {
			if a.Unmap().IsLoopback() || a.IsUnspecified() {
				return nil, p.refused(Refusal{Host: host, Port: port, Rule: "it resolves to " + a.String() + ", this machine"})
			}
		}
	}
	return p.connectAddrs(ctx, addrs, port)
}

func (p *Proxy) connectAddrs(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: p.DialTimeout}
	var first error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = errors.New("no address")
	}
	return nil, first
}

func (p *Proxy) refused(r Refusal) error {
	p.Logger.Debug("network connection refused by the sandbox", "host", r.Host, "port", r.Port, "rule", r.Rule)
	if p.Refused != nil {
		p.Refused(r)
	}
	return &refusedError{r}
}

// isLoopbackName: localhost (and its subdomains, RFC 6761) or a loopback
// address.
func isLoopbackName(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil && (a.Unmap().IsLoopback() || a.IsUnspecified())
}

// readConnectReply reads the proxy's answer to a CONNECT: nil for 200.
func readConnectReply(br *bufio.Reader, req *http.Request) error {
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}
