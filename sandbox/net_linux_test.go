//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/egress"
	"github.com/acp-router/acp-router/internal/slowtest"
	"github.com/acp-router/acp-router/policy"
)

// envResolverSocket names, for the confined test processes (this binary
// re-run as the helper or watchdog), one more resolver socket to hide: the
// test's stand-in for nscd's.
const envResolverSocket = "ACP_SANDBOX_TEST_RESOLVER_SOCKET"

func init() {
	if p := os.Getenv(envResolverSocket); p != "" {
		resolverSockets = append(resolverSockets, p)
	}
}

// unixServer answers each connection on a unix socket at path with
// "REACHED:name".
func unixServer(t *testing.T, path, name string) {
	t.Helper()
	l, err := net.Listen("unix", path)
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
			io.WriteString(c, "REACHED:"+name+"\n")
			c.Close()
		}
	}()
}

// netPolicy: an allow-list (default: deny) with one allowed host, and a
// deny rule on another (which the allow-list would refuse anyway: the
// deny rule names itself in the refusal).
const netPolicy = `default: deny
rules:
  - {id: ok-host, decision: allow, when: {domains: [allowed.test]}}
  - {id: no-exfil, decision: deny, when: {domains: [denied.test]}}
  - {id: reads, decision: allow, when: {paths: ["${roots}/**"]}}
`

// netServer answers every HTTP request with "REACHED:name", on addr.
func netServer(t *testing.T, addr, name string) int {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "REACHED:"+name+"\n")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// hostIP is an address of this machine outside loopback, if any.
func hostIP() string {
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return ""
}

// nameserver is the first nameserver of /etc/resolv.conf ("" if none).
func nameserver() string {
	b, _ := os.ReadFile("/etc/resolv.conf")
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			return f[1]
		}
	}
	return ""
}

// TestConfinedNetwork: a process tree under a profile (curl, python3,
// node, a setsid grandchild) reaches the hosts the policy allows and the
// agent's model API through the router's egress proxy, and its declared
// loopback port; it cannot reach a denied or unlisted host, through the
// proxy or around it (a direct connection, the machine's own address, an
// undeclared loopback port), nor send a DNS query. Unconfined, the same
// direct attempts reach their servers: the checks can fail.
func TestConfinedNetwork(t *testing.T) {
	slowtest.Require(t, "confines a process tree's network with the kernel's namespaces and checks every way out, 14 s")
	if err := Available(); err != nil {
		t.Skipf("this kernel cannot confine: %v", err)
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-net-%d", os.Getpid()))
	must(t, os.MkdirAll(base+"/home/proj", 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	checkNetwork(t, base)
}

// TestConfinedNetworkUnprivileged runs TestConfinedNetwork's checks as
// nobody: the namespaces are then a user namespace's.
func TestConfinedNetworkUnprivileged(t *testing.T) {
	if dir := os.Getenv("ACP_SANDBOX_NET_BASE"); dir != "" {
		if err := Available(); err != nil {
			t.Fatalf("as uid %d: %v", os.Getuid(), err)
		}
		checkNetwork(t, dir)
		return
	}
	slowtest.Require(t, "TestConfinedNetwork again as nobody in a user namespace, 8 s")
	if os.Getuid() != 0 {
		t.Skip("needs root to run the checks as nobody (CI runs as root)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	base := filepath.Join("/var/tmp", fmt.Sprintf("acp-sandbox-net-nobody-%d", os.Getpid()))
	must(t, os.MkdirAll(base+"/home/proj", 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	bin := filepath.Join(base, "sandbox.test")
	copyFile(t, os.Args[0], bin)
	must(t, exec.Command("chown", "-R", "65534:65534", base).Run())
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", bin,
		"-test.run=^TestConfinedNetworkUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), "ACP_SANDBOX_NET_BASE="+base, "HOME="+filepath.Join(base, "home"), "TMPDIR="+base)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestConfinedNetworkUnprivileged") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("as nobody:\n%s", out)
	}
}

func checkNetwork(t *testing.T, base string) {
	home, proj := base+"/home", base+"/home/proj"
	// The network: a server on 127.0.0.2 that every name resolves to (at
	// the proxy: nothing resolves them inside), the declared loopback
	// service, an undeclared one, and one on this machine's own address.
	inet := netServer(t, "127.0.0.2:0", "internet")
	lo := netServer(t, "127.0.0.1:0", "loopback")
	undeclared := netServer(t, "127.0.0.1:0", "undeclared")
	ip := hostIP()
	var hostPort int
	if ip != "" {
		hostPort = netServer(t, net.JoinHostPort(ip, "0"), "hostip")
	}
	resolverSock := base + "/resolver.sock"
	unixServer(t, resolverSock, "resolver")
	must(t, os.Chmod(resolverSock, 0o777))
	t.Setenv(envResolverSocket, resolverSock)
	var mu sync.Mutex
	var refused []egress.Refusal
	c := &Confiner{
		Mode:   config.SandboxEnforce,
		Policy: func() *policy.Policy { return compile(t, netPolicy) },
		Env: func(config.Agent) Env {
			return Env{Home: home, TempDir: os.TempDir(), Roots: []string{proj}}
		},
		Lookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		},
		NetRefused: func(agent string, r egress.Refusal) {
			mu.Lock()
			refused = append(refused, r)
			mu.Unlock()
		},
	}
	t.Cleanup(func() { c.Close() })
	agent := config.Agent{Name: "claude", Command: "claude-agent-acp", Network: config.Network{Loopback: []int{lo}}}
	u := func(host string, port int) string {
		return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/"
	}
	py := func(code string) string { return "python3 -c '" + code + "'" }
	node := func(code string) string { return "node -e '" + code + "'" }
	// through the proxy the agent was pointed at, in node 20 (which
	// ignores the proxy variables): a request in absolute form.
	nodeViaProxy := func(url string) string {
		return node(`const p = new URL(process.env.HTTP_PROXY); require("http").get({host: p.hostname, port: p.port, path: "` + url + `"}, r => { let b = ""; r.on("data", d => b += d); r.on("end", () => console.log(r.statusCode, b)) }).on("error", e => console.log("ERR", e.code))`)
	}
	pyGet := func(url string) string {
		return py(`import urllib.request, urllib.error
try: print(urllib.request.urlopen("` + url + `", timeout=5).read().decode())
except urllib.error.HTTPError as e: print(e.code, e.read().decode())
except Exception as e: print("ERR", e)`)
	}
	pyConnect := func(host string, port int) string {
		return py(`import socket
try: s = socket.create_connection(("` + host + `", ` + strconv.Itoa(port) + `), timeout=3); s.sendall(b"GET / HTTP/1.0\r\n\r\n"); print(s.recv(4096).decode())
except Exception as e: print("ERR", e)`)
	}
	nodeConnect := func(host string, port int) string {
		return node(`const s = require("net").connect(` + strconv.Itoa(port) + `, "` + host + `", () => s.write("GET / HTTP/1.0\r\n\r\n")); s.on("data", d => console.log(String(d))); s.on("error", e => console.log("ERR", e.code)); s.setTimeout(3000, () => { console.log("TIMEOUT"); s.destroy() })`)
	}
	curl := "curl -sS -m 5 "
	direct := curl + "--noproxy '*' "

	// Allowed: an allowed host and the model API through the proxy, plain
	// and tunnelled (CONNECT), and the declared loopback service.
	allowed := map[string]string{
		"curl allowed":          curl + u("allowed.test", inet),
		"curl CONNECT allowed":  curl + "-p " + u("allowed.test", inet),
		"curl model API":        curl + u("api.anthropic.com", inet),
		"python3 allowed":       pyGet(u("allowed.test", inet)),
		"node allowed":          nodeViaProxy(u("allowed.test", inet)),
		"setsid curl allowed":   "setsid -w " + curl + u("allowed.test", inet),
		"curl loopback":         curl + u("127.0.0.1", lo),
		"python3 loopback":      pyConnect("127.0.0.1", lo),
		"node loopback":         nodeConnect("127.0.0.1", lo),
		"curl localhost lo":     curl + u("localhost", lo),
		"curl ::1 lo":           curl + "-g " + u("::1", lo),
		"curl loopback by CONN": curl + "--noproxy '' -p " + u("127.0.0.1", lo),
	}
	// Refused by the proxy: a denied host, an unlisted one, an undeclared
	// loopback port.
	refusedVia := map[string]string{
		"curl denied":             curl + u("denied.test", inet),
		"curl CONNECT denied":     curl + "-p " + u("denied.test", inet),
		"curl unlisted":           curl + u("other.test", inet),
		"python3 denied":          pyGet(u("denied.test", inet)),
		"node denied":             nodeViaProxy(u("denied.test", inet)),
		"curl undeclared via pxy": curl + "--noproxy '' " + u("127.0.0.1", undeclared),
	}
	// Around the proxy: what the namespace stops. Unconfined, each of
	// these reaches its server.
	bypass := map[string]string{
		"curl direct":               direct + "--resolve denied.test:" + strconv.Itoa(inet) + ":127.0.0.2 " + u("denied.test", inet),
		"python3 direct":            pyConnect("127.0.0.2", inet),
		"node direct":               nodeConnect("127.0.0.2", inet),
		"setsid grandchild direct":  "setsid -w sh -c '( " + direct + u("127.0.0.2", inet) + " & ); sleep 1'",
		"curl undeclared loopback":  direct + u("127.0.0.1", undeclared),
		"python3 undeclared lo":     pyConnect("127.0.0.1", undeclared),
		"curl unset proxy variable": "env -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy " + curl + u("127.0.0.2", inet),
	}
	bypass["python3 resolver socket"] = py(`import socket
try: s = socket.socket(socket.AF_UNIX); s.connect("` + resolverSock + `"); print(s.recv(100).decode())
except Exception as e: print("ERR", e)`)
	if ip != "" {
		bypass["curl machine address"] = direct + u(ip, hostPort)
		bypass["python3 machine address"] = pyConnect(ip, hostPort)
	}
	// DNS: no resolver is reachable; a query cannot leave.
	dns := py(`import socket
try: print("RESOLVED", socket.getaddrinfo("allowed.test", 80))
except Exception as e: print("ERR", e)
try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04leak\x04test\x00\x00\x01\x00\x01", ("` + cmpOr(nameserver(), "192.0.2.53") + `", 53)); print("SENT")
except Exception as e: print("ERR", e)`)

	for _, watchdog := range []bool{false, true} {
		name := "helper"
		if watchdog {
			name = "watchdog"
		}
		t.Run(name, func(t *testing.T) {
			plan, err := c.Confine(agent)
			if err != nil || plan == nil || plan.Net == nil {
				t.Fatalf("confine: %+v, %v", plan, err)
			}
			viaWatchdog[plan] = watchdog
			for n, script := range allowed {
				t.Run("allowed/"+n, func(t *testing.T) {
					out := run(t, plan, proj, script)
					if !strings.Contains(out, "REACHED:internet") && !strings.Contains(out, "REACHED:loopback") {
						t.Errorf("%s did not reach its server:\n%s", script, out)
					}
				})
			}
			for n, script := range refusedVia {
				t.Run("refused/"+n, func(t *testing.T) {
					out := run(t, plan, proj, "echo STARTED; "+script)
					if !strings.Contains(out, "STARTED") || strings.Contains(out, "REACHED") {
						t.Errorf("%s reached its server (or did not run):\n%s", script, out)
					}
					if !strings.Contains(out, "403") && !strings.Contains(out, "refused by the sandbox") {
						t.Errorf("%s: no refusal from the proxy:\n%s", script, out)
					}
				})
			}
			for n, script := range bypass {
				t.Run("bypass/"+n, func(t *testing.T) {
					out := run(t, plan, proj, "echo STARTED; "+script)
					t.Logf("%s", out)
					if !strings.Contains(out, "STARTED") || strings.Contains(out, "REACHED") {
						t.Errorf("%s reached its server around the proxy:\n%s", script, out)
					}
				})
			}
			t.Run("dns", func(t *testing.T) {
				out := run(t, plan, proj, "echo STARTED; "+dns)
				t.Logf("%s", out)
				if !strings.Contains(out, "STARTED") || strings.Contains(out, "RESOLVED") || strings.Contains(out, "SENT") {
					t.Errorf("a name resolved or a DNS query left:\n%s", out)
				}
			})
			t.Run("refusal message", func(t *testing.T) {
				count := func() (n int) {
					mu.Lock()
					defer mu.Unlock()
					for _, r := range refused {
						if r.Host == "denied.test" && r.Port == inet {
							n++
							if r.ID != "no-exfil" {
								t.Errorf("refusal reported: %+v", r)
							}
						}
					}
					return n
				}
				before := count()
				out := run(t, plan, proj, curl+u("denied.test", inet)+"; "+curl+u("denied.test", inet))
				if !strings.Contains(out, "deny rule no-exfil") {
					t.Errorf("the refusal does not name the rule: %s", out)
				}
				// Reported at most once a minute for each destination:
				// an agent may retry in a loop.
				if after := count(); after == 0 || after-before > 1 {
					t.Errorf("denied.test reported %d times, then %d after two refusals: %+v", before, after, refused)
				}
			})
		})
	}

	// Unconfined, the attempts around the proxy reach their servers, and
	// a DNS query leaves.
	t.Run("unconfined", func(t *testing.T) {
		for n, script := range bypass {
			if strings.Contains(n, "unset proxy") {
				continue // nothing to unset
			}
			t.Run(n, func(t *testing.T) {
				out, _ := exec.Command("/bin/sh", "-c", script).CombinedOutput()
				if !strings.Contains(string(out), "REACHED") {
					t.Errorf("unconfined, %s did not reach its server: the check cannot fail:\n%s", script, out)
				}
			})
		}
		if out, _ := exec.Command("/bin/sh", "-c", dns).CombinedOutput(); !strings.Contains(string(out), "SENT") {
			t.Errorf("unconfined, the DNS query did not leave: the check cannot fail:\n%s", out)
		}
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
