package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// client is the benchmark's editor: it runs one command (the agent, the
// byte relay or the router) and speaks ACP to it on stdio. The same client
// measures every path, so its own cost is the same in every column.
//
// Its read loop classifies a line by its first bytes: a session/update is
// counted (and, while latency sampling is on, its send time read) without
// being decoded, whatever its size; everything else is decoded.
type client struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser

	wmu sync.Mutex
	w   *bufio.Writer

	nextID  atomic.Int64
	mu      sync.Mutex
	pending map[int64]chan reply
	done    chan struct{} // closed when the read loop ends
	readErr error

	updates     atomic.Int64 // session/update lines received
	updateBytes atomic.Int64

	sampling atomic.Bool
	latMu    sync.Mutex
	lat      []time.Duration // arrival minus the agent's send time

	init json.RawMessage // the initialize result
}

// reply is a response as the read loop saw it.
type reply struct {
	Result, Error json.RawMessage
	At            time.Time // when its line was read
	Updates       int64     // session/update lines read before it
}

var errDied = errors.New("the process closed its output")

// startClient runs argv with its stderr appended to logFile.
func startClient(name string, argv []string, logFile string, env []string) (*client, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = log
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	log.Close() // the child has its own copy
	c := &client{name: name, cmd: cmd, in: in, w: bufio.NewWriterSize(in, 16<<10),
		pending: map[int64]chan reply{}, done: make(chan struct{})}
	go c.readLoop(out)
	return c, nil
}

// Pid is the process the client talks to (the router, the relay or the
// agent itself).
func (c *client) Pid() int { return c.cmd.Process.Pid }

// Close ends the conversation like an editor does (stdin closed) and waits
// for the process; its process group is killed if it lingers. The error
// says whether it exited by itself, successfully.
func (c *client) Close() error {
	c.in.Close()
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("%s: exit after stdin closed: %w", c.name, err)
		}
		return nil
	case <-time.After(5 * time.Second):
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%s: still running 5s after stdin closed: killed", c.name)
	}
}

func (c *client) send(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.w.Write(line)
	return c.w.Flush()
}

// call sends a request and waits for its response. params is raw JSON.
func (c *client) call(method string, params []byte, timeout time.Duration) (reply, time.Time, error) {
	id := c.nextID.Add(1)
	ch := make(chan reply, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	line := make([]byte, 0, 64+len(method)+len(params))
	line = append(line, `{"jsonrpc":"2.0","id":`...)
	line = strconv.AppendInt(line, id, 10)
	line = append(line, `,"method":"`...)
	line = append(line, method...)
	line = append(line, `","params":`...)
	line = append(line, params...)
	line = append(line, "}\n"...)
	sent := time.Now()
	if err := c.send(line); err != nil {
		return reply{}, sent, fmt.Errorf("%s: %s: %w", c.name, method, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.Error != nil {
			return r, sent, fmt.Errorf("%s: %s: %s", c.name, method, r.Error)
		}
		return r, sent, nil
	case <-c.done:
		return reply{}, sent, fmt.Errorf("%s: %s: %w (%v)", c.name, method, errDied, c.readErr)
	case <-t.C:
		return reply{}, sent, fmt.Errorf("%s: %s: no answer in %s", c.name, method, timeout)
	}
}

func (c *client) initialize() error {
	r, _, err := c.call("initialize", []byte(`{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true},"clientInfo":{"name":"acp-router-bench","version":"1"}}`), time.Minute)
	c.init = r.Result
	return err
}

// loadSessionAdvertised reports whether initialize advertised session/load.
func (c *client) loadSessionAdvertised() bool {
	var res struct {
		AgentCapabilities struct {
			LoadSession bool `json:"loadSession"`
		} `json:"agentCapabilities"`
	}
	json.Unmarshal(c.init, &res)
	return res.AgentCapabilities.LoadSession
}

func (c *client) newSession(cwd string) (string, error) {
	p, _ := json.Marshal(map[string]any{"cwd": cwd, "mcpServers": []any{}})
	r, _, err := c.call("session/new", p, time.Minute)
	if err != nil {
		return "", err
	}
	var res struct {
		SessionID string `json:"sessionId"`
	}
	if json.Unmarshal(r.Result, &res) != nil || res.SessionID == "" {
		return "", fmt.Errorf("%s: session/new: no sessionId in %s", c.name, r.Result)
	}
	return res.SessionID, nil
}

// promptParams is session/prompt's params for a text prompt.
func promptParams(sid, text string) []byte {
	p, _ := json.Marshal(map[string]any{"sessionId": sid, "prompt": []any{map[string]string{"type": "text", "text": text}}})
	return p
}

// prompt runs one turn and returns its round trip and the updates that
// arrived during it.
func (c *client) prompt(params []byte, timeout time.Duration) (time.Duration, int64, error) {
	before := c.updates.Load()
	r, sent, err := c.call("session/prompt", params, timeout)
	if err != nil {
		return 0, 0, err
	}
	var res struct {
		StopReason string `json:"stopReason"`
	}
	if json.Unmarshal(r.Result, &res) != nil || res.StopReason != "end_turn" {
		return 0, 0, fmt.Errorf("%s: session/prompt ended with %s", c.name, r.Result)
	}
	return r.At.Sub(sent), r.Updates - before, nil
}

// startSampling collects per-update latencies until takeSamples.
func (c *client) startSampling() {
	c.latMu.Lock()
	c.lat = c.lat[:0]
	c.latMu.Unlock()
	c.sampling.Store(true)
}

func (c *client) takeSamples() []time.Duration {
	c.sampling.Store(false)
	c.latMu.Lock()
	defer c.latMu.Unlock()
	return append([]time.Duration(nil), c.lat...)
}

var (
	updateMethod = []byte(`"method":"session/update"`)
	markBytes    = []byte(latencyMark)
)

// isUpdate looks for the method in the first bytes of a line: every
// encoder on the paths measured writes "jsonrpc" and "method" first.
func isUpdate(first []byte) bool {
	return bytes.Contains(first[:min(len(first), 96)], updateMethod)
}

func (c *client) readLoop(out io.Reader) {
	defer close(c.done)
	r := bufio.NewReaderSize(out, 64<<10)
	var msg []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(chunk) == 0 && err != nil {
			if err != io.EOF {
				c.readErr = err
			}
			return
		}
		at := time.Now()
		if isUpdate(chunk) {
			if c.sampling.Load() {
				c.sample(chunk, at)
			}
			n := len(chunk)
			for err == bufio.ErrBufferFull {
				chunk, err = r.ReadSlice('\n')
				n += len(chunk)
			}
			c.updateBytes.Add(int64(n))
			c.updates.Add(1)
		} else {
			msg = append(msg[:0], chunk...)
			for err == bufio.ErrBufferFull {
				chunk, err = r.ReadSlice('\n')
				msg = append(msg, chunk...)
			}
			c.handle(msg, at)
		}
		if err != nil && err != bufio.ErrBufferFull {
			if err != io.EOF {
				c.readErr = err
			}
			return
		}
	}
}

// sample records the latency of a paced update from the send time the agent
// wrote at the start of its text.
func (c *client) sample(first []byte, at time.Time) {
	i := bytes.Index(first, markBytes)
	if i < 0 {
		return
	}
	digits := first[i+len(markBytes):]
	end := bytes.IndexByte(digits, ';')
	if end < 0 {
		return
	}
	ns, err := strconv.ParseInt(string(digits[:end]), 10, 64)
	if err != nil {
		return
	}
	c.latMu.Lock()
	c.lat = append(c.lat, at.Sub(time.Unix(0, ns)))
	c.latMu.Unlock()
}

func (c *client) handle(line []byte, at time.Time) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(line, &m) != nil {
		return
	}
	switch {
	case m.Method == "session/update":
		c.updateBytes.Add(int64(len(line)))
		c.updates.Add(1)
	case m.Method != "" && m.ID != nil:
		c.answer(m.ID, m.Method, m.Params)
	case m.Method != "":
		// another notification: not measured
	default:
		id, err := strconv.ParseInt(string(m.ID), 10, 64)
		if err != nil {
			return
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- reply{Result: m.Result, Error: m.Error, At: at, Updates: c.updates.Load()}
		}
	}
}

// answer replies to an agent's request: permissions are allowed, anything
// else is refused (none of the agents measured calls the client).
func (c *client) answer(id json.RawMessage, method string, params json.RawMessage) {
	var res string
	if method == "session/request_permission" {
		var p struct {
			Options []struct {
				OptionID string `json:"optionId"`
				Kind     string `json:"kind"`
			} `json:"options"`
		}
		json.Unmarshal(params, &p)
		opt := ""
		for _, o := range p.Options {
			if opt == "" || o.Kind == "allow_once" {
				opt = o.OptionID
			}
		}
		q, _ := json.Marshal(opt)
		res = `"result":{"outcome":{"outcome":"selected","optionId":` + string(q) + `}}`
	} else {
		res = `"error":{"code":-32601,"message":"not supported by the benchmark client"}`
	}
	go c.send([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,` + res + "}\n"))
}

// procStatus reads VmRSS and VmHWM of pid, in bytes.
func procStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range bytes.Split(b, []byte{'\n'}) {
		f := bytes.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(string(f[1]), 10, 64)
		switch string(f[0]) {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return rss, hwm, nil
}

// procCPU is the CPU time pid's threads have used so far (their schedstat
// run times: nanosecond resolution, unlike the ticks of /proc/PID/stat).
func procCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		f := bytes.Fields(b)
		if len(f) > 0 {
			ns, _ := strconv.ParseInt(string(f[0]), 10, 64)
			total += time.Duration(ns)
		}
	}
	return total, nil
}

// procSwitches is the number of context switches of pid's threads so far.
func procSwitches(pid int) (int64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, l := range bytes.Split(b, []byte{'\n'}) {
			if k, v, ok := bytes.Cut(l, []byte{':'}); ok && bytes.HasSuffix(k, []byte("ctxt_switches")) {
				n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
				total += n
			}
		}
	}
	return total, nil
}

// machineBusy is the share of CPU time the whole machine spent outside idle
// over d: other work running next to the benchmark makes its figures noisy.
func machineBusy(d time.Duration) float64 {
	read := func() (busy, total int64) {
		b, _ := os.ReadFile("/proc/stat")
		line, _, _ := bytes.Cut(b, []byte{'\n'})
		f := bytes.Fields(line)
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(string(v), 10, 64)
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return busy, total
	}
	b0, t0 := read()
	time.Sleep(d)
	b1, t1 := read()
	if t1 == t0 {
		return 0
	}
	return float64(b1-b0) / float64(t1-t0)
}
