package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
)

// TerminalAuthArgs is how a terminal auth method of agent is rewritten for
// the editor: the editor re-runs the router's own command with these
// arguments appended (ACP terminal auth), which makes the router run the
// agent's login instead of serving ACP.
func TerminalAuthArgs(agent string, args []string) []string {
	return append([]string{"login", agent, "--"}, args...)
}

// loginMarker is touched by a successful login; a running router restarts
// the agent on its next use when the marker is newer than the process.
func loginMarker(stateDir, agent string) string {
	return filepath.Join(stateDir, "login", agent)
}

func (a *Agent) loginSince(t time.Time) bool {
	if a.opts.StateDir == "" {
		return false
	}
	fi, err := os.Stat(loginMarker(a.opts.StateDir, a.Config.Name))
	return err == nil && fi.ModTime().After(t)
}

// ErrNoTerminalLogin: the agent advertises no terminal auth method.
var ErrNoTerminalLogin = errors.New("the agent advertises no terminal login method")

// Login runs the agent's own login interactively on the router's terminal:
// the agent's command and args plus loginArgs, with the agent's
// environment. With loginArgs nil, the args of the agent's first terminal
// auth method are used (from the cached initialize result, else by asking
// the agent). It returns the login's exit code; on success it records a
// marker so that a running router restarts the agent.
func Login(ctx context.Context, cfg config.Agent, stateDir string, loginArgs []string) (int, error) {
	if loginArgs == nil {
		m, err := terminalMethod(ctx, cfg, stateDir)
		if err != nil {
			return 1, err
		}
		loginArgs = m.Args
		for k, v := range m.Env {
			os.Setenv(k, v)
		}
	}
	cmd := exec.CommandContext(ctx, cfg.Command, append(append([]string{}, cfg.Args...), loginArgs...)...)
	cmd.Dir = cfg.Cwd
	cmd.Env = Environ(cfg, os.Environ())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, fmt.Errorf("login %q: %w", cfg.Name, err)
	}
	if stateDir != "" {
		if err := WriteFileAtomic(loginMarker(stateDir, cfg.Name), []byte(time.Now().Format(time.RFC3339))); err != nil {
			return 0, fmt.Errorf("login %q succeeded but the router cannot be told: %w", cfg.Name, err)
		}
	}
	return 0, nil
}

type terminalAuth struct {
	ID   string            `json:"id"`
	Type string            `json:"type"`
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
}

func terminalMethod(ctx context.Context, cfg config.Agent, stateDir string) (*terminalAuth, error) {
	a := New(cfg, Options{StateDir: stateDir, InitParams: func() json.RawMessage {
		return json.RawMessage(`{"protocolVersion":1,"clientCapabilities":{"auth":{"terminal":true}},"clientInfo":{"name":"acp-router","version":"login"}}`)
	}})
	raw := a.CachedInit()
	if raw == nil || !hasTerminalMethod(raw) {
		inst, err := a.Ready(ctx)
		if err != nil {
			return nil, err
		}
		raw = inst.InitRaw()
		a.Stop()
	}
	var res struct {
		AuthMethods []terminalAuth `json:"authMethods"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	for _, m := range res.AuthMethods {
		if m.Type == "terminal" {
			return &m, nil
		}
	}
	return nil, fmt.Errorf("login %q: %w", cfg.Name, ErrNoTerminalLogin)
}

func hasTerminalMethod(raw json.RawMessage) bool {
	var res acp.InitializeResult
	if json.Unmarshal(raw, &res) != nil {
		return false
	}
	for _, m := range res.AuthMethods {
		var am acp.AuthMethod
		if json.Unmarshal(m, &am) == nil && am.Type == "terminal" {
			return true
		}
	}
	return false
}
