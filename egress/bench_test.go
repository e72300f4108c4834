package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// sourceServer writes without end to each connection, after "hello\n".
func sourceServer(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	buf := make([]byte, 64<<10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "hello\n")
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// dialVia opens a connection to 127.0.0.1:port directly or, with f,
// through the forwarder and the proxy (the path a confined agent's
// connection takes: TCP to the forwarder, the unix socket, the proxy's
// dial), and reads the greeting.
func dialVia(f *fixture, port int) (net.Conn, *bufio.Reader, error) {
	if f == nil {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return nil, nil, err
		}
		io.WriteString(c, "ping\n") // the echo server reads first
		br := bufio.NewReaderSize(c, 64<<10)
		_, err = br.ReadString('\n')
		return c, br, err
	}
	c, err := net.Dial("tcp", f.fwdAddr)
	if err != nil {
		return nil, nil, err
	}
	dst := "allowed.test:" + strconv.Itoa(port)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
	br := bufio.NewReaderSize(c, 64<<10)
	if err := readConnectReply(br, &http.Request{Method: http.MethodConnect}); err != nil {
		c.Close()
		return nil, nil, err
	}
	io.WriteString(c, "ping\n")
	_, err = br.ReadString('\n')
	return c, br, err
}

// BenchmarkEgress measures what the egress path costs a confined agent on
// loopback: a connection's set-up to its first byte (connect), and a
// download's throughput, directly and through the forwarder and the proxy.
//
//	go test -run '^$' -bench BenchmarkEgress -count 10 ./egress/
func BenchmarkEgress(b *testing.B) {
	_, greet := echoServer(b)
	port := sourceServer(b)
	for _, via := range []string{"direct", "proxy"} {
		var f *fixture
		if via == "proxy" {
			f = newFixture(b)
		}
		b.Run("connect/"+via, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, _, err := dialVia(f, greet)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
		b.Run("download/"+via, func(b *testing.B) {
			c, br, err := dialVia(f, port)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			const chunk = 1 << 20
			b.SetBytes(chunk)
			for b.Loop() {
				if _, err := io.CopyN(io.Discard, br, chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
