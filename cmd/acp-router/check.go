package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/router"
	"github.com/acp-router/acp-router/telemetry"
	"github.com/acp-router/acp-router/upstream"
)

// loadWithPolicy loads the config and the permission policy of every
// layer (its tests run, their failures in the result, not an error). A
// non-empty orgDir (--org-dir) is read instead of orgPolicyDir, its files'
// ownership problems as warnings (lp.Warnings): a user checks org files
// before they are installed, without root or a rebuild.
func loadWithPolicy(g *globals, orgDir string) (*config.Config, *guard.LoadedPolicy, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, nil, err
	}
	if orgDir != "" {
		// A directory named on the command line that is not there is a
		// mistake, not "no org layer" as for the built-in one.
		if fi, err := os.Stat(orgDir); err != nil || !fi.IsDir() {
			return nil, nil, fmt.Errorf("--org-dir %s: not a directory", orgDir)
		}
	}
	opt := guard.LoadOptions{OrgUnowned: orgDir != ""}
	lp, err := guard.LoadPolicyWith(cmp.Or(orgDir, orgPolicyDir), cfg, opt)
	if err != nil {
		return nil, nil, fmt.Errorf("permission policy: %w", err)
	}
	return cfg, lp, nil
}

const checkSynopsis = "acp-router check [--config FILE] [--org-dir DIR]"

var checkHelp = help{
	synopsis: checkSynopsis,
	about: `Loads the config and the permission policy as the router would, without starting any agent, and
prints what is in force: agents, routing, commands, history, each policy layer with its files and
rules (file:line), the org directory read, the audit log, the modes each agent is kept out of, the
policy's tests and telemetry; then the warnings. Exit 1 when the config or the policy does not load
or a policy test fails.`,
	example: `  acp-router check --config ~/.config/acp-router/config.yaml
  acp-router check --org-dir ./policy.d     # org files not installed yet, no root needed
`,
}

func check(g *globals, args []string) (int, error) {
	fs := newFlags("check", g, "warn", checkHelp)
	orgDir := orgDirFlag(fs)
	if done, code := parseFlags(fs, args); done {
		return code, nil
	}
	if fs.NArg() > 0 {
		return 2, errors.New("usage: " + checkSynopsis)
	}
	if *orgDir != "" {
		*orgDir, _ = filepath.Abs(*orgDir)
	}
	cfg, lp, err := loadWithPolicy(g, *orgDir)
	if err != nil {
		return 1, err
	}
	agents := agentIDs(cfg)
	warnings := config.Describe(os.Stdout, cfg, router.Warnings(cfg)...)
	dir := orgDirLine{dir: cmp.Or(*orgDir, orgPolicyDir), flag: *orgDir != ""}
	warnings = append(warnings, describePolicy(os.Stdout, lp, dir, cfg.Audit, agents)...)
	warnings = append(warnings, describeTelemetry(os.Stdout, cfg.EffectiveTelemetry(), os.Getenv)...)
	sbWarnings, sbErrs := describeSandbox(os.Stdout, cfg, lp)
	warnings = append(warnings, sbWarnings...)
	warnings = append(warnings, pendingRestarts(cfg)...)
	describeListening(os.Stdout, cfg)
	config.Warn(os.Stdout, warnings)
	if lp.TestsError() != nil {
		return 1, errors.New("the permission policy's tests fail (acp-router policy test)")
	}
	if len(sbErrs) > 0 {
		return 1, fmt.Errorf("sandbox: %s", strings.Join(sbErrs, "\n  "))
	}
	return 0, nil
}

// agentIDs are the config's agents as the built-in table of modes sees
// them: by name, and by the agentInfo name of the initialize result the
// router cached when it last ran them (none before the first run).
func agentIDs(cfg *config.Config) []policy.AgentID {
	var out []policy.AgentID
	for _, a := range cfg.Agents {
		id := policy.AgentID{Name: a.Name}
		if raw := upstream.New(a, upstream.Options{StateDir: cfg.StateDir}).CachedInit(); raw != nil {
			var res acp.InitializeResult
			if json.Unmarshal(raw, &res) == nil && res.AgentInfo != nil {
				id.Info = res.AgentInfo.Name
			}
		}
		out = append(out, id)
	}
	return out
}

// describePolicy writes each layer of the policy with its hash and files,
// the effective default, deny_modes, allow_modes, unknown_agents and the
// file and line of every rule in force (and of those lower_layers_may
// dropped), then the modes of each agent the policy denies and why. It
// returns the policy's warnings for check.
func describePolicy(w io.Writer, lp *guard.LoadedPolicy, orgDir orgDirLine, audit config.Audit, agents []policy.AgentID) []string {
	pol := lp.Policy
	warnings := slices.Clone(lp.Warnings)
	if pol == nil {
		fmt.Fprintf(w, "permission policy: none (no org layer in %s, no permissions: in the config)\n", orgDir.dir)
		fmt.Fprintf(w, "  org directory: %s\n", orgDir)
		fmt.Fprintln(w, "  audit log: none while no policy is in force")
		return warnings
	}
	def, layer := pol.Default()
	fmt.Fprintf(w, "permission policy: %s (default %s, from the %s layer)\n", pol.Hash(), def, layer)
	fmt.Fprintf(w, "  org directory: %s\n", orgDir)
	fmt.Fprintf(w, "  audit log: %s\n", auditLine(audit))
	for _, l := range pol.Layers() {
		files := strings.Join(l.Files, ", ")
		fmt.Fprintf(w, "  %s layer %s  %s\n", l.Name, l.Hash(), files)
		if l.Default != policy.None {
			fmt.Fprintf(w, "    default: %s   (%s)\n", l.Default, l.DefaultPos)
		}
		for _, m := range l.DenyModes {
			fmt.Fprintf(w, "    deny mode %s   (%s)\n", m, m.Pos)
		}
		for _, m := range l.AllowModes {
			if slices.Contains(pol.DroppedModes(), m) {
				fmt.Fprintf(w, "    dropped allow mode %s: the org layer's lower_layers_may does not allow it   (%s)\n", m, m.Pos)
			} else {
				fmt.Fprintf(w, "    allow mode %s   (%s)\n", m, m.Pos)
			}
		}
		if l.UnknownAgents != "" {
			fmt.Fprintf(w, "    unknown agents: %s   (%s)\n", l.UnknownAgents, l.UnknownAgentsPos)
		}
		if l.LowerLayersMay != nil {
			var may []string
			for _, e := range l.LowerLayersMay {
				may = append(may, e.String())
			}
			fmt.Fprintf(w, "    lower layers may: %s\n", strings.Join(may, ", "))
		}
		for _, r := range pol.Rules() {
			if r.Layer == l.Name && len(r.AnsweredBy) > 0 {
				fmt.Fprintf(w, "    %-5s %s, answered by %s   (%s)\n", r.Decision, r.ID, strings.Join(r.AnsweredBy, ", "), r.Pos)
			} else if r.Layer == l.Name {
				fmt.Fprintf(w, "    %-5s %s   (%s)\n", r.Decision, r.ID, r.Pos)
			}
		}
		for _, r := range pol.Dropped() {
			if r.Layer == l.Name {
				fmt.Fprintf(w, "    dropped %s %s: the org layer's lower_layers_may does not allow it   (%s)\n", r.Decision, r.ID, r.Pos)
			}
		}
	}
	fmt.Fprintln(w, "  modes (those of the built-in table that approve by themselves are denied unless allow_modes allows them):")
	for _, a := range agents {
		for l := range strings.Lines(pol.ExplainModes(a)) {
			fmt.Fprint(w, "    "+l)
		}
	}
	passed := len(lp.Results) - len(lp.Failed())
	fmt.Fprintf(w, "  tests: %d of %d passed (acp-router policy test shows them)\n", passed, len(lp.Results))
	for _, n := range testNotes(lp.Results) {
		fmt.Fprintf(w, "    note: %s\n", n)
	}
	warnings = append(warnings, pol.Warnings(agents...)...)
	if len(lp.Failed()) > 0 {
		warnings = append(warnings, fmt.Sprintf("%d policy tests fail: the router refuses to start with this policy", len(lp.Failed())))
	}
	return warnings
}

// orgDirLine is the org policy directory `check` read, and why that one.
type orgDirLine struct {
	dir  string
	flag bool // --org-dir, else the one built in
}

func (o orgDirLine) String() string {
	how := "built in"
	if o.flag {
		how = "--org-dir; ownership problems are warnings"
	}
	files, _ := filepath.Glob(filepath.Join(o.dir, "*.yaml"))
	switch fi, err := os.Stat(o.dir); {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s (%s): missing, no org layer", o.dir, how)
	case err == nil && !fi.IsDir():
		return fmt.Sprintf("%s (%s): not a directory", o.dir, how)
	}
	n := fmt.Sprintf("%d .yaml files", len(files))
	if len(files) == 1 {
		n = "1 .yaml file"
	}
	return fmt.Sprintf("%s (%s): %s", o.dir, how, n)
}

// auditLine is where the audit log is written, rotated at what size, and
// where the setting comes from.
func auditLine(a config.Audit) string {
	if a.File == "" {
		return "none: no absolute $XDG_STATE_HOME or home directory, the router refuses to start with a policy (set audit.file)"
	}
	size := "at the default size"
	if a.MaxBytes > 0 {
		size = fmt.Sprintf("at %d bytes", a.MaxBytes)
	}
	from := "default"
	if a.Pos.Line > 0 {
		from = a.Pos.String()
	}
	return fmt.Sprintf("%s, rotated %s   (%s)", a.File, size, from)
}

// pendingRestarts names, for each router running this config file, the
// keys it has not applied: a reload applies the policy and the audit file;
// agents, routing, commands and the rest wait for a restart.
func pendingRestarts(cfg *config.Config) []string {
	if cfg.File == "" {
		return nil
	}
	running, err := config.ReadRunning(cfg.StateDir, cfg.File)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	keys := cfg.Keys()
	for _, r := range running {
		if changed := config.Changed(r.Keys, keys); len(changed) > 0 {
			out = append(out, fmt.Sprintf("the router running as pid %d uses this config: restart to apply: %s", r.PID, strings.Join(changed, ", ")))
		}
	}
	return out
}

// telemetryEnv is the variable each telemetry: key falls back to.
var telemetryEnv = map[string]string{
	"endpoint":     "OTEL_EXPORTER_OTLP_ENDPOINT",
	"protocol":     "OTEL_EXPORTER_OTLP_PROTOCOL",
	"headers":      "OTEL_EXPORTER_OTLP_HEADERS",
	"sampler":      "OTEL_TRACES_SAMPLER",
	"sampler_arg":  "OTEL_TRACES_SAMPLER_ARG",
	"service_name": "OTEL_SERVICE_NAME",
}

// describeTelemetry writes the telemetry setting in force (the org's
// telemetry: blocks and the user's, merged, then the environment) and
// where each key came from: an org file, the config, a variable or the
// default. Header values are never printed. It returns the warnings: the
// user's keys and variables an org lock overrides.
func describeTelemetry(w io.Writer, eff config.EffectiveTelemetry, getenv func(string) string) []string {
	warnings := slices.Clone(eff.Ignored)
	warnings = append(warnings, telemetry.IgnoredEnv(eff.Telemetry, eff.LockPos, getenv)...)
	lock := ""
	if eff.Lock {
		lock = fmt.Sprintf(", locked by the org (%s)", eff.LockPos)
	}
	off, err := telemetry.Disabled(eff.Telemetry, getenv)
	if err != nil {
		fmt.Fprintf(w, "telemetry: invalid environment%s\n", lock)
		return append(warnings, err.Error()+": the router does not start")
	}
	set, err := telemetry.Resolve(eff.Telemetry, getenv)
	if err != nil {
		fmt.Fprintf(w, "telemetry: invalid environment%s\n", lock)
		return append(warnings, err.Error()+": the router does not start")
	}
	state := "on"
	if off {
		state = "off"
	}
	fmt.Fprintf(w, "telemetry: %s%s\n", state, lock)
	// env is a variable as it counts: not at all when the lock overrides it.
	env := func(name string) string {
		if eff.Lock && slices.Contains(telemetry.LockedEnv, name) {
			return ""
		}
		return getenv(name)
	}
	from := func(key string) string {
		if src, ok := eff.From[key]; ok {
			if src.Org {
				return "org " + src.Pos.String()
			}
			return "config " + src.Pos.String()
		}
		if name := telemetryEnv[key]; name != "" && env(name) != "" {
			return name
		}
		return "default"
	}
	enabled := from("enabled")
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		enabled = "OTEL_SDK_DISABLED"
	}
	fmt.Fprintf(w, "  enabled: %t   (%s)\n", !off, enabled)
	endpoint := set.Endpoint
	if endpoint == "" {
		if endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT"); endpoint == "" {
			endpoint = "the OTLP default for the protocol"
		}
	}
	fmt.Fprintf(w, "  endpoint: %s   (%s)\n", endpoint, from("endpoint"))
	fmt.Fprintf(w, "  protocol: %s   (%s)\n", set.Protocol["traces"], from("protocol"))
	var names []string
	for k := range set.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	if src := from("headers"); src == "OTEL_EXPORTER_OTLP_HEADERS" {
		fmt.Fprintf(w, "  headers: from %s   (%s)\n", src, src)
	} else {
		fmt.Fprintf(w, "  headers: %s   (%s)\n", cmp.Or(strings.Join(names, ", "), "none"), src)
	}
	sampler, arg := set.SamplerName, eff.SamplerArg // as Resolve pairs them
	if eff.Sampler == "" {
		arg = env("OTEL_TRACES_SAMPLER_ARG")
	}
	if arg != "" && strings.HasSuffix(sampler, "traceidratio") {
		sampler += " " + arg
	}
	fmt.Fprintf(w, "  sampler: %s   (%s)\n", sampler, from("sampler"))
	service := cmp.Or(eff.ServiceName, getenv("OTEL_SERVICE_NAME"), "acp-router")
	fmt.Fprintf(w, "  service_name: %s   (%s)\n", service, from("service_name"))
	fmt.Fprintf(w, "  export_prompts: %t   (%s)\n", eff.ExportPrompts, from("export_prompts"))
	return warnings
}

// describeListening lists the routers listening on this machine (each
// records its address in the state directory, issue 30), whatever config
// they run, and where this config asks to listen.
func describeListening(w io.Writer, cfg *config.Config) {
	if cfg.Listen.Address != "" {
		tls := "no TLS"
		if cfg.Listen.TLSCert != "" {
			tls = "TLS"
		}
		fmt.Fprintf(w, "listen: %s (%s)   (%s)\n", cfg.Listen.Address, tls, cfg.Listen.Pos)
	}
	ls, err := config.ReadListening(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(w, "listening routers: %v\n", err)
		return
	}
	if len(ls) == 0 {
		return
	}
	fmt.Fprintln(w, "listening routers:")
	for _, l := range ls {
		how := "serve"
		if l.Stdio {
			how = "an editor's, also on stdio"
		}
		file := l.File
		if file == "" {
			file = "no config file"
		}
		fmt.Fprintf(w, "  pid %d  %s  (%s; %s)\n", l.PID, l.URL, how, file)
	}
}
