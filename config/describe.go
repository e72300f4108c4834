package config

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Describe prints what `acp-router check` shows: agents, routes, commands
// and the state directory. It returns the warnings passed in and its own,
// for Warn to print after whatever else check describes.
// Environment values are never printed.
func Describe(w io.Writer, c *Config, warnings ...string) []string {
	fmt.Fprintf(w, "config: %s (version %d)\n", c.File, c.Version)
	fmt.Fprintf(w, "state dir: %s\n", c.StateDir)
	fmt.Fprintln(w, "agents:")
	for _, a := range c.Agents {
		cmd := a.Command
		if path, err := exec.LookPath(a.Command); err == nil {
			cmd = path
		}
		fmt.Fprintf(w, "  %s (%s)  %s\n", a.Name, a.Title, strings.Join(append([]string{cmd}, a.Args...), " "))
		var env []string
		for k := range a.Env {
			env = append(env, k)
		}
		sort.Strings(env)
		details := []string{fmt.Sprintf("env_inherit=%s", a.EnvInherit), fmt.Sprintf("auth=%s", a.Auth),
			fmt.Sprintf("startup_timeout=%s", a.StartupTimeout), fmt.Sprintf("stall_timeout=%s", a.StallTimeout),
			fmt.Sprintf("cancel_timeout=%s", a.CancelTimeout)}
		if a.IdleTimeout > 0 {
			details = append(details, fmt.Sprintf("idle_timeout=%s", a.IdleTimeout))
		}
		if a.Lazy {
			details = append(details, "lazy")
		}
		if len(env) > 0 {
			details = append(details, "env: "+strings.Join(env, ", "))
		}
		if a.Cwd != "" {
			details = append(details, "cwd="+a.Cwd)
		}
		fmt.Fprintf(w, "      %s   (%s)\n", strings.Join(details, " "), a.Pos)
	}
	fmt.Fprintln(w, "routing:")
	fmt.Fprintf(w, "  default: %s\n", c.Routing.Default)
	if c.Routing.Fallback != "" {
		fmt.Fprintf(w, "  fallback: %s\n", c.Routing.Fallback)
	} else {
		warnings = append(warnings, "routing.fallback is not set: sessions routed to an agent that fails to start get an error")
	}
	for i, r := range c.Routing.Rules {
		enforce := ""
		if r.Enforce {
			enforce = " (enforced)"
		}
		fmt.Fprintf(w, "  %d. cwd %s -> %s%s   (%s)\n", i+1, strings.Join(r.Cwd, ", "), r.Agent, enforce, r.Pos)
	}
	if len(c.Commands) > 0 {
		fmt.Fprintln(w, "commands:")
		for _, cmd := range c.Commands {
			what := "one turn on " + cmd.Agent
			if cmd.Switch {
				what = "switches to " + cmd.Agent
			}
			fmt.Fprintf(w, "  /%s: %s (%s)   (%s)\n", cmd.Name, cmd.Description, what, cmd.Pos)
		}
	}
	if c.Handoff.Disabled {
		fmt.Fprintln(w, "handoff: none")
	} else {
		fmt.Fprintf(w, "handoff: at most %d bytes\n", c.Handoff.MaxBytes)
	}
	content := "full"
	if c.History.MetadataOnly {
		content = "metadata-only"
	}
	fmt.Fprintf(w, "history: %s in %s, at most %d bytes, kept %s\n", content, filepath.Join(c.StateDir, "sessions"), c.History.MaxTotalBytes, c.History.MaxAge)
	if err := writable(c.StateDir); err != nil {
		warnings = append(warnings, fmt.Sprintf("state dir %s is not writable (%v): initialize results cannot be cached", c.StateDir, err))
	}
	return warnings
}

// Warn writes the warnings check found, if any.
func Warn(w io.Writer, warnings []string) {
	if len(warnings) > 0 {
		fmt.Fprintln(w, "warnings:")
		for _, m := range warnings {
			fmt.Fprintf(w, "  - %s\n", m)
		}
	}
}

// writable reports whether dir exists (or can be created) and takes files.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
