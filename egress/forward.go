package egress

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Forwarder is the agent's end, inside its network namespace: it relays
// connections made to 127.0.0.1 to the Proxy's unix socket.
type Forwarder struct {
	// Socket is the path of the Proxy's unix socket.
	Socket string

	mu        sync.Mutex
	listeners []net.Listener
}

// ListenProxy listens on addr (127.0.0.1:0 for any port) for the agent's
// proxy connections, relayed as they are, and returns the address it
// listens on (what HTTPS_PROXY names).
func (f *Forwarder) ListenProxy(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("egress: listen for the agent's proxy connections: %w", err)
	}
	f.add(l)
	go f.serve(l, "")
	return l.Addr().String(), nil
}

// ListenLoopback listens on 127.0.0.1:port, the port of a loopback
// service the user configured, and tunnels each connection to the same
// port of the host's loopback through the proxy. It listens on [::1]:port
// too where IPv6 is up: "localhost" may resolve to ::1 first.
func (f *Forwarder) ListenLoopback(port int) error {
	dst := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", dst)
	if err != nil {
		return fmt.Errorf("egress: listen for loopback port %d: %w", port, err)
	}
	f.add(l)
	go f.serve(l, dst)
	if l6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(port))); err == nil {
		f.add(l6)
		go f.serve(l6, dst)
	}
	return nil
}

func (f *Forwarder) add(l net.Listener) {
	f.mu.Lock()
	f.listeners = append(f.listeners, l)
	f.mu.Unlock()
}

// Close stops listening; relayed connections run to their end.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, l := range f.listeners {
		errs = append(errs, l.Close())
	}
	f.listeners = nil
	return errors.Join(errs...)
}

// serve relays each connection of l; tunnel, when not "", is the
// destination to CONNECT to first.
func (f *Forwarder) serve(l net.Listener, tunnel string) {
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		go f.relay(c, tunnel)
	}
}

func (f *Forwarder) relay(c net.Conn, tunnel string) {
	up, err := net.Dial("unix", f.Socket)
	if err != nil {
		c.Close()
		return
	}
	if tunnel == "" {
		splice(c, up, c)
		return
	}
	req := &http.Request{Method: http.MethodConnect, Host: tunnel}
	br := bufio.NewReader(up)
	if _, err := fmt.Fprintf(up, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tunnel, tunnel); err != nil {
		c.Close()
		up.Close()
		return
	}
	if err := readConnectReply(br, req); err != nil {
		c.Close()
		up.Close()
		return
	}
	// The proxy says nothing after its 200 before the destination does:
	// br holds nothing yet, but read through it all the same.
	splice(c, &bufConn{Conn: up, r: br}, c)
}

// bufConn reads through a bufio.Reader that may hold bytes read ahead.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}
