//go:build linux

package sandbox

// The network namespace (issue 29): a plan with Net runs the agent in a
// network namespace of its own where only loopback is up. Nothing outside
// it is routable and no resolver is reachable, so every connection to the
// network goes through the forwarder this process starts on 127.0.0.1
// (egress.Forwarder) to the router's egress proxy, which decides it; names
// are resolved there. The ports of the loopback services the user
// configured are listened on inside and tunnelled to the host's loopback
// by the same proxy.
//
// Landlock's TCP rules (ABI 4) are not used: they name ports, not
// addresses, and in a namespace whose only interface is loopback they
// would hold nothing more, while refusing the connections a project's own
// tests make to the servers they start on 127.0.0.1.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acp-router/acp-router/egress"
)

// forwarder is the running forwarder of a process that entered a plan
// with Net: it must outlive the agent (runHelper does not exec then).
var forwarder *egress.Forwarder

// resolverSockets are the unix sockets through which a process resolves
// names without the network (nscd, systemd-resolved's varlink, and the
// system bus, through which resolved answers too): hidden from a
// confined agent, whose names only the egress proxy resolves.
var resolverSockets = []string{"/run/nscd/socket", "/var/run/nscd/socket", "/run/systemd/resolve/io.systemd.Resolve",
	"/run/systemd/resolve/io.systemd.Resolve.Monitor", "/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket"}

// planNet reports whether env carries a plan that confines the network.
func planNet(env []string) bool {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, planEnv+"="); ok {
			var pl struct {
				Net *NetPlan `json:"net"`
			}
			return json.Unmarshal([]byte(v), &pl) == nil && pl.Net != nil
		}
	}
	return false
}

// ProxyEnv are the variables that point an agent at the forwarder at
// addr (host:port): HTTPS_PROXY and its kin in both cases, loopback
// excluded (its configured ports are forwarded as they are), and
// NODE_USE_ENV_PROXY for Node 24 and later, which otherwise ignores them.
func ProxyEnv(addr string) []string {
	u := "http://" + addr
	noProxy := "localhost,127.0.0.1,::1"
	return []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u, "HTTP_PROXY=" + u, "http_proxy=" + u,
		"ALL_PROXY=" + u, "all_proxy=" + u, "NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"NODE_USE_ENV_PROXY=1",
	}
}

// enterNet brings loopback up in this process's new network namespace,
// keeps the proxy's socket from being replaced, starts the forwarder and
// sets the proxy variables every process started from here inherits.
func (pl *Plan) enterNet() error {
	if pl.Net == nil {
		return nil
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("network namespace: bring loopback up: %w", err)
	}
	// The socket's directory, read-only here: the agent, which may write
	// the temp dir, can neither remove the socket nor put its own in its
	// place. A read-only mount does not stop connect(2) to a socket.
	dir := filepath.Dir(pl.Net.Socket)
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	// Unix sockets in the file system cross network namespaces: the
	// resolvers behind them would carry a name (and data in it) out.
	for _, p := range resolverSockets {
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("network namespace: hide %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("network namespace: hide %s: %w", p, err)
		}
	}
	f := &egress.Forwarder{Socket: pl.Net.Socket}
	addr, err := f.ListenProxy("127.0.0.1:0")
	if err != nil {
		return err
	}
	for _, p := range pl.Net.Loopback {
		if err := f.ListenLoopback(p); err != nil {
			f.Close()
			return err
		}
	}
	for _, kv := range ProxyEnv(addr) {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	forwarder = f
	return nil
}

// loopbackUp sets IFF_UP on lo: a new network namespace has it down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// runForwarding runs argv as a child, as the helper would exec it, while
// this process keeps the forwarder going; it relays SIGTERM, SIGINT and
// SIGHUP and exits with the child's status (128+N for signal N).
func runForwarding(argv []string) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// The child's Pdeathsig follows this thread.
	runtime.LockOSThread()
	cmd := &exec.Cmd{Path: argv[0], Args: argv[1:], Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ws.ExitStatus())
	}
	return err
}

// netAvailable says whether this kernel has network namespaces, which a
// profile that holds hosts needs.
func netAvailable() error {
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return errors.New("this kernel has no network namespaces (CONFIG_NET_NS), which the policy's host rules need under the sandbox: enable them, or remove the deny rules on domains")
	}
	return nil
}
