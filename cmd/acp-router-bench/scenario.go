package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// conn is one path's connection in a scenario, with its sessions.
type conn struct {
	c    *client
	log  string // the process's stderr
	sids []string
	// proxy: the process is a relay or a router, whose CPU time per
	// operation is a figure.
	proxy bool
}

// usage is a proxy's CPU time and context switches so far.
type usage struct {
	cpu      time.Duration
	switches int64
}

func (cn *conn) usage() usage {
	if !cn.proxy {
		return usage{}
	}
	t, _ := procCPU(cn.c.Pid())
	n, _ := procSwitches(cn.c.Pid())
	return usage{t, n}
}

// perOp adds the proxy's CPU time (µs) and context switches per operation
// since before to figs.
func (cn *conn) perOp(figs map[string]float64, before usage, ops int) {
	if !cn.proxy || ops == 0 || before.cpu == 0 {
		return
	}
	after := cn.usage()
	figs["cpu"] = micros(after.cpu-before.cpu) / float64(ops)
	figs["switches"] = float64(after.switches-before.switches) / float64(ops)
}

type trialFunc func(*conn) (map[string]float64, error)

// scenario is one measured situation. Unless custom is set, every path gets
// one long-lived connection (so processes and JIT are warm), a warm-up, and
// then one trial per round, the paths' order rotating from round to round.
type scenario struct {
	name     string
	agent    string // "go" or "ts"
	sessions int
	warm     trialFunc
	trial    trialFunc
	// needsLoad: a path whose initialize does not advertise loadSession is
	// reported as not supporting the scenario.
	needsLoad bool
	custom    func(*bench, *scenario)
}

// bench runs scenarios and collects their figures.
type bench struct {
	o     options
	e     *env
	paths []string // "direct", "relay", then one per router variant
	// res: scenario → figure → path → one value per round.
	res  map[string]map[string]map[string][]float64
	errs map[string]map[string]string // scenario → path → why it has no figures
	logN int
	busy float64 // machine CPU busy before the run, 0..1
}

func run(o options) error {
	e, err := setup(o)
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(e.tmp)
	} else {
		status("keeping %s", e.tmp)
	}
	b := &bench{o: o, e: e, paths: []string{"direct", "relay"},
		res: map[string]map[string]map[string][]float64{}, errs: map[string]map[string]string{}}
	for _, v := range o.variants {
		b.paths = append(b.paths, pathName(v))
	}
	status("measuring other load on the machine for 1s")
	b.busy = machineBusy(time.Second)
	start := time.Now()
	for _, sc := range b.scenarios() {
		if o.only != nil && !o.only.MatchString(sc.name) {
			continue
		}
		if sc.agent == "ts" && e.tsAgent == "" {
			b.fail(sc.name, "", "skipped: "+e.tsWhy)
			continue
		}
		status("%s", sc.name)
		if sc.custom != nil {
			sc.custom(b, &sc)
		} else {
			b.run(&sc)
		}
	}
	b.report(os.Stdout, time.Since(start))
	if o.jsonOut != "" {
		out, _ := json.MarshalIndent(map[string]any{"machine": e.machine, "commit": e.commit, "paths": b.paths, "figures": b.res, "errors": b.errs}, "", "  ")
		if err := os.WriteFile(o.jsonOut, out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Updates per flood trial at scale 1: a trial takes well under a second
// through the router.
var floodSizes = []struct {
	name, label string
	size, count int
}{
	{"200B", "200 B", 200, 100000},
	{"4KiB", "4 KiB", 4 << 10, 16000},
	{"1MiB", "1 MiB", 1 << 20, 128},
}

func (b *bench) scenarios() []scenario {
	o := b.o
	var out []scenario
	for _, agent := range []string{"go", "ts"} {
		for _, n := range []int{1, 16} {
			out = append(out, scenario{
				name: fmt.Sprintf("prompt/%s/%d", agent, n), agent: agent, sessions: n,
				warm:  func(c *conn) (map[string]float64, error) { return promptTrial(c, o.warmup) },
				trial: func(c *conn) (map[string]float64, error) { return promptTrial(c, o.trial) },
			})
		}
	}
	for _, f := range floodSizes {
		n := max(1, int(float64(f.count)*o.floodScale))
		out = append(out, scenario{
			name: "flood/" + f.name, agent: "go", sessions: 1,
			warm:  func(c *conn) (map[string]float64, error) { return floodTrial(c, max(1, n/10), f.size) },
			trial: func(c *conn) (map[string]float64, error) { return floodTrial(c, n, f.size) },
		})
	}
	out = append(out, scenario{
		name: "latency", agent: "go", sessions: 1,
		warm:  func(c *conn) (map[string]float64, error) { return pacedTrial(c, max(1, o.rate/10), o.rate) },
		trial: func(c *conn) (map[string]float64, error) { return pacedTrial(c, o.paced, o.rate) },
	})
	out = append(out, scenario{name: "memory", agent: "go", custom: (*bench).memory})
	out = append(out, scenario{
		name: "replay", agent: "go", needsLoad: true, custom: (*bench).replay,
		warm:  func(c *conn) (map[string]float64, error) { return replayTrial(c, b.e.cwd, max(1, o.replay/100)) },
		trial: func(c *conn) (map[string]float64, error) { return replayTrial(c, b.e.cwd, o.replay) },
	})
	return out
}

func (b *bench) fail(sc, path, why string) {
	if b.errs[sc] == nil {
		b.errs[sc] = map[string]string{}
	}
	if _, ok := b.errs[sc][path]; !ok {
		b.errs[sc][path] = why
	}
}

func (b *bench) record(sc, path string, figs map[string]float64) {
	if b.res[sc] == nil {
		b.res[sc] = map[string]map[string][]float64{}
	}
	for k, v := range figs {
		if b.res[sc][k] == nil {
			b.res[sc][k] = map[string][]float64{}
		}
		b.res[sc][k][path] = append(b.res[sc][k][path], v)
	}
	if b.o.verbose {
		var parts []string
		for _, k := range sortedKeys(figs) {
			parts = append(parts, fmt.Sprintf("%s=%.4g", k, figs[k]))
		}
		status("  %-14s %s", path, strings.Join(parts, " "))
	}
}

// open starts a path's process for agent, initializes it and opens n
// sessions.
func (b *bench) open(path, agent string, n int) (*conn, error) {
	argv, err := b.e.pathArgv(path, agent)
	if err != nil {
		return nil, err
	}
	b.logN++
	log := filepath.Join(b.e.tmp, fmt.Sprintf("%03d-%s.log", b.logN, strings.ReplaceAll(path, ":", "-")))
	c, err := startClient(path, argv, log, nil)
	if err != nil {
		return nil, err
	}
	cn := &conn{c: c, log: log, proxy: path != "direct"}
	if err := c.initialize(); err != nil {
		c.Close()
		return nil, withLog(err, log)
	}
	for range n {
		sid, err := c.newSession(b.e.cwd)
		if err != nil {
			c.Close()
			return nil, withLog(err, log)
		}
		cn.sids = append(cn.sids, sid)
	}
	return cn, nil
}

// withLog adds the last lines of a process's stderr to err.
func withLog(err error, log string) error {
	data, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	if len(lines) == 0 || lines[0] == "" {
		return err
	}
	return fmt.Errorf("%w; stderr: %s", err, strings.Join(lines, " | "))
}

// errNoLoad: initialize does not advertise loadSession.
var errNoLoad = errors.New("not supported by this router build (initialize does not advertise loadSession)")

// run gives each path one long-lived connection, warms it up and runs the
// rounds.
func (b *bench) run(sc *scenario) {
	trials := map[string]func() (map[string]float64, error){}
	var paths []string
	for _, p := range b.paths {
		cn, err := b.warmConn(sc, p)
		if err != nil {
			b.fail(sc.name, p, err.Error())
			continue
		}
		defer cn.c.Close()
		trials[p] = func() (map[string]float64, error) { return sc.trial(cn) }
		paths = append(paths, p)
		if b.o.perf && strings.HasPrefix(p, "router") {
			defer b.profile(sc.name, p, cn.c.Pid())()
		}
	}
	b.rounds(sc, paths, trials)
}

// warmConn opens path's long-lived connection for sc and warms it up.
func (b *bench) warmConn(sc *scenario, path string) (*conn, error) {
	cn, err := b.open(path, sc.agent, sc.sessions)
	if err != nil {
		return nil, err
	}
	if sc.needsLoad && !cn.c.loadSessionAdvertised() {
		cn.c.Close()
		return nil, errNoLoad
	}
	if _, err := sc.warm(cn); err != nil {
		cn.c.Close()
		return nil, err
	}
	return cn, nil
}

// rounds runs one trial per round and path, the paths' order rotating from
// round to round; a path whose trial fails is dropped from the later
// rounds.
func (b *bench) rounds(sc *scenario, paths []string, trials map[string]func() (map[string]float64, error)) {
	for r := range b.o.rounds {
		for i := range paths {
			p := paths[(i+r)%len(paths)]
			if trials[p] == nil {
				continue
			}
			figs, err := trials[p]()
			if err != nil {
				b.fail(sc.name, p, err.Error())
				trials[p] = nil
				continue
			}
			b.record(sc.name, p, figs)
		}
	}
}

// promptTrial runs one prompt after another on each session (one worker per
// session) for d.
func promptTrial(cn *conn, d time.Duration) (map[string]float64, error) {
	var mu sync.Mutex
	var lats []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	before := cn.usage()
	start := time.Now()
	deadline := start.Add(d)
	for _, sid := range cn.sids {
		params := promptParams(sid, "Say hello.")
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(deadline) {
				rt, _, err := cn.c.prompt(params, time.Minute)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, rt)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return nil, firstErr
	}
	figs := map[string]float64{
		"prompts/s": float64(len(lats)) / elapsed.Seconds(),
		"p50":       micros(percentile(lats, 0.50)),
		"p99":       micros(percentile(lats, 0.99)),
	}
	cn.perOp(figs, before, len(lats))
	return figs, nil
}

// floodTrial asks for n updates of size bytes in one turn and times the
// turn.
func floodTrial(cn *conn, n, size int) (map[string]float64, error) {
	before := cn.usage()
	rt, got, err := cn.c.prompt(promptParams(cn.sids[0], fmt.Sprintf("flood %d %d", n, size)), 2*time.Minute)
	if err != nil {
		return nil, err
	}
	if got < int64(n) {
		return nil, fmt.Errorf("%s: %d of %d updates arrived before the end of the turn", cn.c.name, got, n)
	}
	s := rt.Seconds()
	figs := map[string]float64{"updates/s": float64(n) / s, "MB/s": float64(n) * float64(size) / s / 1e6}
	cn.perOp(figs, before, n)
	return figs, nil
}

// pacedTrial asks for n updates at rate per second, each stamped with its
// send time, and measures their arrival.
func pacedTrial(cn *conn, n, rate int) (map[string]float64, error) {
	cn.c.startSampling()
	_, _, err := cn.c.prompt(promptParams(cn.sids[0], fmt.Sprintf("paced %d %d", n, rate)), time.Minute+time.Duration(n)*time.Second/time.Duration(max(rate, 1)))
	lats := cn.c.takeSamples()
	if err != nil {
		return nil, err
	}
	if len(lats) < n {
		return nil, fmt.Errorf("%s: %d of %d paced updates arrived", cn.c.name, len(lats), n)
	}
	return map[string]float64{
		"p50": micros(percentile(lats, 0.50)),
		"p99": micros(percentile(lats, 0.99)),
		"max": micros(percentile(lats, 1)),
	}, nil
}

// replayTrial loads the agent's session whose history is n updates.
func replayTrial(cn *conn, cwd string, n int) (map[string]float64, error) {
	return loadTrial(cn, fmt.Sprintf("replay-%d", n), cwd, n, int64(n), false)
}

// loadTrial times session/load of sid from the request to its answer: want
// session/update lines must arrive before the answer (exactly want when
// exact, at least want otherwise); updates/s counts n of them.
func loadTrial(cn *conn, sid, cwd string, n int, want int64, exact bool) (map[string]float64, error) {
	p, _ := json.Marshal(map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	before := cn.c.updates.Load()
	r, sent, err := cn.c.call("session/load", p, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	if got := r.Updates - before; got < want || exact && got != want {
		atLeast := map[bool]string{false: "at least "}[exact]
		return nil, fmt.Errorf("%s: %d session/update lines arrived before the answer to session/load, want %s%d", cn.c.name, got, atLeast, want)
	}
	s := r.At.Sub(sent).Seconds()
	return map[string]float64{"updates/s": float64(n) / s, "seconds": s}, nil
}

// replay measures session/load of an n-update history (o.replay). Direct
// and through the byte relay, the agent replays its session "replay-N" on a
// long-lived connection, as in run. A router answers session/load from its
// own session store, so each router column first records such a session
// (recordReplay: one prompt that floods n updates of the size the agent
// replays), once, before the rounds; each round then starts a fresh router
// on the same config and state_dir and loads that session. The router
// re-attaches the agent with the agent's own session/load, which the Go
// agent answers at once, replaying nothing: only the router's replay is
// timed (and the router drops an agent's replay anyway).
func (b *bench) replay(sc *scenario) {
	n := b.o.replay
	trials := map[string]func() (map[string]float64, error){}
	var paths []string
	for _, p := range b.paths {
		if !strings.HasPrefix(p, "router") {
			cn, err := b.warmConn(sc, p)
			if err != nil {
				b.fail(sc.name, p, err.Error())
				continue
			}
			defer cn.c.Close()
			trials[p] = func() (map[string]float64, error) { return sc.trial(cn) }
			paths = append(paths, p)
			continue
		}
		if v := variantsByName[strings.TrimPrefix(p, "router:")]; p != "router" && strings.Contains(v.yaml, "metadata-only") {
			b.fail(sc.name, p, "not applicable: history: {content: metadata-only} stores no update, so the router replays none (session/load relies on the agent's own)")
			continue
		}
		status("  %s: recording a session of %s updates to load", p, thousands(float64(n)))
		sid, err := b.recordReplay(p, n)
		if err != nil {
			b.fail(sc.name, p, err.Error())
			continue
		}
		trials[p] = func() (map[string]float64, error) { return b.routerLoadTrial(p, sid, n) }
		paths = append(paths, p)
	}
	b.rounds(sc, paths, trials)
}

// recordReplay has a router on path's config create a session and run one
// prompt whose turn is n updates of the replay's size, then stops the
// router (stdin closed, exit awaited: its store syncs on close). It returns
// the session id.
func (b *bench) recordReplay(path string, n int) (string, error) {
	cn, err := b.open(path, "go", 1)
	if err != nil {
		return "", err
	}
	if !cn.c.loadSessionAdvertised() {
		cn.c.Close()
		return "", errNoLoad
	}
	_, got, err := cn.c.prompt(promptParams(cn.sids[0], fmt.Sprintf("flood %d %d", n, pacedSize)), 2*time.Minute)
	if err == nil && got < int64(n) {
		err = fmt.Errorf("%s: %d of %d updates arrived before the end of the turn", cn.c.name, got, n)
	}
	if cerr := cn.c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", withLog(fmt.Errorf("recording the session to replay: %w", err), cn.log)
	}
	return cn.sids[0], nil
}

// routerLoadTrial starts a fresh router on path's config and state_dir and
// times session/load of sid, recorded by recordReplay.
//
// The router replays what it stored for the session, exactly: the
// available_commands_update it sent on session/new, the user's prompt (one
// user_message_chunk it records per prompt block) and the n updates of the
// turn. It then sends the commands of now (not recorded, so every load
// replays the same) and answers. So n+3 session/update lines arrive before
// the answer, no more, no fewer.
func (b *bench) routerLoadTrial(path, sid string, n int) (map[string]float64, error) {
	cn, err := b.open(path, "go", 0)
	if err != nil {
		return nil, err
	}
	if !cn.c.loadSessionAdvertised() {
		cn.c.Close()
		return nil, errNoLoad
	}
	stop := func() {}
	if b.o.perf { // this round's process (the profile of the last round is kept)
		stop = b.profile("replay", path, cn.c.Pid())
	}
	figs, err := loadTrial(cn, sid, b.e.cwd, n, int64(n+3), true)
	stop()
	// The next round counts on what this router stored being synced.
	if cerr := cn.c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, withLog(err, cn.log)
	}
	return figs, nil
}

// memory measures the proxy process (the router, or the byte relay for
// reference) in fresh processes each round: RSS idle with one session, the
// peak (VmHWM) after one 1 MiB update and after a flood of them, and RSS with
// o.memSessions sessions.
func (b *bench) memory(sc *scenario) {
	const flood = 32
	var paths []string
	for _, p := range b.paths {
		if p != "direct" {
			paths = append(paths, p)
		}
	}
	for r := range b.o.rounds {
		for i := range paths {
			p := paths[(i+r)%len(paths)]
			if _, failed := b.errs[sc.name][p]; failed {
				continue
			}
			figs, err := b.memoryTrial(p, flood)
			if err != nil {
				b.fail(sc.name, p, err.Error())
				continue
			}
			b.record(sc.name, p, figs)
		}
	}
}

func (b *bench) memoryTrial(path string, flood int) (map[string]float64, error) {
	const settle = 500 * time.Millisecond // past the router's 50 ms open delay
	cn, err := b.open(path, "go", 1)
	if err != nil {
		return nil, err
	}
	time.Sleep(settle)
	idle, _, err := procStatus(cn.c.Pid())
	if err != nil {
		cn.c.Close()
		return nil, err
	}
	_, err = floodTrial(cn, 1, 1<<20)
	_, one, _ := procStatus(cn.c.Pid())
	if err == nil {
		_, err = floodTrial(cn, flood, 1<<20)
	}
	_, hwm, _ := procStatus(cn.c.Pid())
	cn.c.Close()
	if err != nil {
		return nil, err
	}

	cn, err = b.open(path, "go", b.o.memSessions)
	if err != nil {
		return nil, err
	}
	time.Sleep(settle)
	many, _, err := procStatus(cn.c.Pid())
	cn.c.Close()
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"idle":        float64(idle) / 1e6,
		"sessions":    float64(many) / 1e6,
		"per-session": float64(many-idle) / float64(max(1, b.o.memSessions-1)) / 1e3,
		"one-x":       float64(one-idle) / float64(1<<20),
		"flood-peak":  float64(hwm) / 1e6,
		"flood-x":     float64(hwm-idle) / float64(1<<20),
	}, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// percentile is the nearest-rank percentile (p=1 is the maximum).
func percentile(v []time.Duration, p float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// profile attaches `perf record` to pid until the returned function is
// called.
func (b *bench) profile(sc, path string, pid int) func() {
	out := filepath.Join(b.e.tmp, fmt.Sprintf("perf-%s-%s.data", strings.ReplaceAll(sc, "/", "-"), strings.ReplaceAll(path, ":", "-")))
	cmd := exec.Command("perf", "record", "-g", "-q", "-o", out, "-p", strconv.Itoa(pid))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		status("perf: %v", err)
		return func() {}
	}
	time.Sleep(200 * time.Millisecond) // perf attaches
	return func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		status("profile: perf report -i %s --no-children --sort symbol", out)
	}
}
