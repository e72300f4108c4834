package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/acp-router/acp-router/internal/otlptest"
)

// sdkVersion is the TypeScript SDK whose dual-version-agent.js is the
// third-party zero-delay agent (notes/real-peers.md, Peer 2).
const (
	sdkVersion = "1.9.0"
	sdkScript  = "node_modules/@agentclientprotocol/sdk/dist/examples/dual-version-agent.js"
)

// variant is one router config. Every variant has the same agent and
// routing; they differ in the features turned on, so that a column with
// features off is one more entry here.
type variant struct {
	name  string // "example" is the router column; others are "router:NAME"
	about string
	yaml  string // appended to the generated config
	// policy appends config.example.yaml's permissions: (the permission
	// policy, read from the repository's file) and an audit log in the
	// temporary directory.
	policy bool
	// otel turns telemetry on, exporting to a loopback OTLP receiver in
	// the benchmark process (otlptest: decodes every export).
	otel bool
}

// Every variant has a state_dir in the temporary directory, so the session
// store is on in all of them: this build has no setting that turns it off
// (and without state_dir it would write to the user's own state directory).
var allVariants = []variant{
	{"example", "config.example.yaml's features: its permission policy (`permissions:`) with the audit log, the session store (state_dir, history defaults), the handoff brief (16 KiB), routing to a default agent, slash commands",
		"handoff: {max_bytes: 16384}\n", true, false},
	{"nopolicy", "the same without the permission policy and audit log (the session store stays on)", "handoff: {max_bytes: 16384}\n", false, false},
	{"bare", "no permission policy, no handoff brief (handoff: none); the session store stays on", "handoff: none\n", false, false},
	{"metaonly", "as bare, and the session store keeps metadata only (history: {content: metadata-only}): no update is written to disk", "handoff: none\nhistory: {content: metadata-only}\n", false, false},
	{"otel", "example's features with telemetry on (traces, metrics, audit logs over OTLP/gRPC to a loopback receiver in the benchmark process)",
		"handoff: {max_bytes: 16384}\n", true, true},
}

// examplePermissions is the top-level permissions: section of the
// repository's config.example.yaml.
func examplePermissions(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "config.example.yaml"))
	if err != nil {
		return "", err
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		top := line != "" && line[0] != ' ' && line[0] != '#'
		switch {
		case top && strings.HasPrefix(line, "permissions:"):
			in = true
		case top:
			in = false
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return "", errors.New("config.example.yaml has no permissions: section")
	}
	return strings.Join(out, "\n") + "\n", nil
}

var variantsByName = func() map[string]variant {
	m := map[string]variant{}
	for _, v := range allVariants {
		m[v.name] = v
	}
	return m
}()

func variantNames() string {
	var names []string
	for _, v := range allVariants {
		names = append(names, v.name)
	}
	return strings.Join(names, ", ")
}

// pathName is the column of a variant.
func pathName(v string) string {
	if v == "example" {
		return "router"
	}
	return "router:" + v
}

// env is what a run needs: binaries, configs, the temporary directory.
type env struct {
	root    string // the repository
	tmp     string
	self    string // this binary: the Go agent and the byte relay
	router  string
	node    string // "" when Node.js is missing
	tsAgent string // dual-version-agent.js, or ""
	tsWhy   string // why the TS agent is missing
	cwd     string // sessions' cwd
	machine []string
	commit  string
	build   string             // how the router was built, when not plainly
	otlp    *otlptest.Receiver // started by the first otel variant
}

// otlpEndpoint is the loopback OTLP receiver of the otel variant, started
// on first use; it lives as long as the benchmark process.
func (e *env) otlpEndpoint() (string, error) {
	if e.otlp == nil {
		r, _, err := otlptest.Listen()
		if err != nil {
			return "", err
		}
		r.Discard()
		e.otlp = r
	}
	return e.otlp.Endpoint, nil
}

func setup(o options) (*env, error) {
	e := &env{}
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	e.root = root
	if e.tmp, err = os.MkdirTemp("", "acp-router-bench-"); err != nil {
		return nil, err
	}
	e.cwd = filepath.Join(e.tmp, "work")
	os.MkdirAll(e.cwd, 0o755)
	if e.self, err = os.Executable(); err != nil {
		return nil, err
	}
	e.router = o.router
	if e.router == "" {
		e.router = filepath.Join(e.tmp, "acp-router")
		status("building acp-router from %s", root)
		cmd := exec.Command("go", "build", "-o", e.router, "./cmd/acp-router")
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if o.experiment != "" {
			cmd.Env = append(os.Environ(), "GOEXPERIMENT="+o.experiment)
			e.build = "GOEXPERIMENT=" + o.experiment
		}
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("build acp-router: %w", err)
		}
	} else {
		if e.router, err = filepath.Abs(e.router); err != nil {
			return nil, err
		}
		e.build = "prebuilt " + e.router
	}
	e.findTS(o)
	e.commit = strings.TrimSpace(output(root, "git", "describe", "--always", "--dirty", "--exclude", "*"))
	e.machine = machine(e.node)
	return e, nil
}

// repoRoot finds the acp-router module from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/acp-router/acp-router\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run it inside the acp-router repository (go run ./cmd/acp-router-bench)")
		}
		dir = parent
	}
}

// findTS locates Node.js and the SDK's dual-version agent, installing the
// SDK into the ignored .peers/ folder when allowed.
func (e *env) findTS(o options) {
	node, err := exec.LookPath("node")
	if err != nil {
		e.tsWhy = "Node.js not found in PATH"
		return
	}
	e.node = node
	dir := o.sdkDir
	if dir == "" {
		dir = filepath.Join(e.root, ".peers", "sdk19")
	}
	script := filepath.Join(dir, sdkScript)
	if _, err := os.Stat(script); err != nil && o.install {
		status("installing @agentclientprotocol/sdk@%s into %s", sdkVersion, dir)
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", dir, "@agentclientprotocol/sdk@"+sdkVersion)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			e.tsWhy = fmt.Sprintf("npm install @agentclientprotocol/sdk@%s failed: %v", sdkVersion, err)
			return
		}
	}
	if _, err := os.Stat(script); err != nil {
		e.tsWhy = fmt.Sprintf("%s missing (npm install --prefix %s @agentclientprotocol/sdk@%s)", script, dir, sdkVersion)
		return
	}
	e.tsAgent = script
}

// agentArgv is the command of agent "go" or "ts".
func (e *env) agentArgv(agent string) []string {
	if agent == "ts" {
		return []string{e.node, e.tsAgent}
	}
	return []string{e.self, "agent"}
}

// pathArgv is the command the client runs for a path.
func (e *env) pathArgv(path, agent string) ([]string, error) {
	a := e.agentArgv(agent)
	switch {
	case path == "direct":
		return a, nil
	case path == "relay":
		return append([]string{e.self, "relay"}, a...), nil
	}
	v := variantsByName[strings.TrimPrefix(strings.TrimPrefix(path, "router"), ":")]
	if path == "router" {
		v = variantsByName["example"]
	}
	cfg := filepath.Join(e.tmp, fmt.Sprintf("config-%s-%s.yaml", v.name, agent))
	if _, err := os.Stat(cfg); err != nil {
		var args []string
		for _, s := range a[1:] {
			q, _ := json.Marshal(s)
			args = append(args, string(q))
		}
		q, _ := json.Marshal(a[0])
		state, _ := json.Marshal(filepath.Join(e.tmp, "state-"+v.name))
		extra := v.yaml
		if v.policy {
			perms, err := examplePermissions(e.root)
			if err != nil {
				return nil, err
			}
			audit, _ := json.Marshal(filepath.Join(e.tmp, fmt.Sprintf("audit-%s-%s.jsonl", v.name, agent)))
			extra += perms + fmt.Sprintf("audit: {file: %s}\n", audit)
		}
		if v.otel {
			endpoint, err := e.otlpEndpoint()
			if err != nil {
				return nil, err
			}
			extra += fmt.Sprintf("telemetry: {enabled: true, endpoint: %q}\n", endpoint)
		}
		yaml := fmt.Sprintf("# generated by acp-router-bench: %s\nversion: 1\nstate_dir: %s\nagents:\n  - name: bench\n    title: Benchmark agent (%s)\n    command: %s\n    args: [%s]\nrouting:\n  default: bench\n%s",
			v.about, state, agent, q, strings.Join(args, ", "), extra)
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			return nil, err
		}
	}
	return []string{e.router, "--config", cfg}, nil
}

func output(dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, _ := cmd.Output()
	return string(b)
}

// machine describes the host: CPU, cores, kernel, Go and Node versions.
func machine(node string) []string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	kernel := strings.TrimSpace(output("", "uname", "-r"))
	nodeV := "none"
	if node != "" {
		nodeV = strings.TrimSpace(output("", node, "--version"))
	}
	goV := strings.TrimSpace(strings.TrimPrefix(output("", "go", "version"), "go version "))
	return []string{
		fmt.Sprintf("CPU: %s, %d cores (runtime.NumCPU), Linux %s", cpu, runtime.NumCPU(), kernel),
		fmt.Sprintf("Go: %s; Node.js: %s", goV, nodeV),
	}
}

func status(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "· "+format+"\n", args...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
