package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// echoServer answers each connection with "hello\n" then echoes; it
// serves HTTP GET / with "hello\n" too.
func echoServer(t testing.TB) (net.Listener, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if b, _ := br.Peek(4); string(b) == "GET " {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n")
					_ = req
					return
				}
				io.WriteString(c, "hello\n")
				io.Copy(c, br)
			}()
		}
	}()
	return l, l.Addr().(*net.TCPAddr).Port
}

type fixture struct {
	proxy   *Proxy
	fwd     *Forwarder
	fwdAddr string
	port    int // the echo server's
	mu      sync.Mutex
	refused []Refusal
}

// newFixture: a proxy on a unix socket that allows allowed.test and
// refuses the rest, names resolved to the echo server's loopback, and a
// forwarder to it.
func newFixture(t testing.TB, loopback ...int) *fixture {
	t.Helper()
	_, port := echoServer(t)
	f := &fixture{port: port}
	f.proxy = &Proxy{
		Decide: func(host string, _ int) Verdict {
			if host == "allowed.test" {
				return Verdict{Allow: true, Rule: "rule ok"}
			}
			return Verdict{Rule: "rule no-exfil"}
		},
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Loopback: func(port int) bool { return slices.Contains(loopback, port) },
		Refused: func(r Refusal) {
			f.mu.Lock()
			f.refused = append(f.refused, r)
			f.mu.Unlock()
		},
	}
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go f.proxy.Serve(l)
	t.Cleanup(func() { f.proxy.Close() })
	f.fwd = &Forwarder{Socket: sock}
	if f.fwdAddr, err = f.fwd.ListenProxy("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.fwd.Close() })
	return f
}

// tunnel CONNECTs to dst through the forwarder and reads the server's
// greeting.
func (f *fixture) tunnel(dst string) (string, error) {
	c, err := net.Dial("tcp", f.fwdAddr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
	br := bufio.NewReader(c)
	if err := readConnectReply(br, &http.Request{Method: http.MethodConnect}); err != nil {
		return "", err
	}
	fmt.Fprintf(c, "ping\n")
	a, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	b, err := br.ReadString('\n')
	return a + b, err
}

func TestProxyDecides(t *testing.T) {
	f := newFixture(t, 0)
	p := strconv.Itoa(f.port)
	for _, c := range []struct {
		dst  string
		want string // "" refused
		rule string
	}{
		{"allowed.test:" + p, "hello\nping\n", ""},
		{"ALLOWED.test.:" + p, "hello\nping\n", ""},
		{"denied.test:" + p, "", "rule no-exfil"},
		{"127.0.0.1:" + p, "", "network.loopback"},
		{"localhost:" + p, "", "network.loopback"},
		{"[::1]:" + p, "", "network.loopback"},
		{"0.0.0.0:" + p, "", "network.loopback"},
		{"allowed.test:0", "", "invalid port"},
	} {
		t.Run(c.dst, func(t *testing.T) {
			got, err := f.tunnel(c.dst)
			switch {
			case c.want != "" && (err != nil || got != c.want):
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			case c.want == "" && err == nil:
				t.Errorf("reached %s: %q", c.dst, got)
			case c.want == "" && !strings.Contains(err.Error(), "403") || c.want == "" && !strings.Contains(err.Error(), c.rule):
				t.Errorf("refusal %v does not say 403 and %q", err, c.rule)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.refused) != 6 || f.refused[0].Host != "denied.test" || f.refused[0].Rule != "rule no-exfil" {
		t.Errorf("refusals reported: %+v", f.refused)
	}
}

func TestProxyLoopbackListed(t *testing.T) {
	_, port := echoServer(t)
	f := newFixture(t, port)
	for _, h := range []string{"127.0.0.1", "localhost"} {
		if got, err := f.tunnel(net.JoinHostPort(h, strconv.Itoa(port))); err != nil || got != "hello\nping\n" {
			t.Errorf("%s:%d, a listed loopback port: %q, %v", h, port, got, err)
		}
	}
}

func TestProxyForwardsHTTP(t *testing.T) {
	f := newFixture(t)
	pu, _ := url.Parse("http://" + f.fwdAddr)
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	get := func(host string) (int, string) {
		resp, err := cl.Get(fmt.Sprintf("http://%s:%d/", host, f.port))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("allowed.test"); code != 200 || body != "hello\n" {
		t.Errorf("allowed: %d %q", code, body)
	}
	if code, body := get("denied.test"); code != 403 || !strings.Contains(body, "rule no-exfil") {
		t.Errorf("denied: %d %q", code, body)
	}
}

// TestProxyRefusesRebinding: a name the system resolver maps to this
// machine is refused: it would reach the router's machine, not the network.
func TestProxyRefusesRebinding(t *testing.T) {
	_, port := echoServer(t)
	var got []Refusal
	p := &Proxy{Decide: func(string, int) Verdict { return Verdict{Allow: true} }, Refused: func(r Refusal) { got = append(got, r) }}
	p.init()
	// A name outside the loopback names that resolves to loopback: the
	// machine's own name usually does (/etc/hosts); skip when it does not.
	host, _ := os.Hostname()
	a, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil || len(a) == 0 || !a[0].IsLoopback() {
		t.Skipf("the host name %q does not resolve to loopback here", host)
	}
	if c, err := p.dial(context.Background(), net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
		c.Close()
		t.Fatalf("%s resolves to loopback and was dialled", host)
	}
	if len(got) != 1 || !strings.Contains(got[0].Rule, "this machine") {
		t.Errorf("refusals: %+v", got)
	}
}
