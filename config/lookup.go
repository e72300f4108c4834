package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// startHint tells a user without a config file how to get one.
const startHint = "to start, copy config.example.yaml from the acp-router repository to " +
	"~/.config/acp-router/config.yaml, or pass --config FILE"

// Lookup finds the config file (DESIGN.md §3): flagValue (--config) if set,
// else $ACP_ROUTER_CONFIG, else the first of
// $XDG_CONFIG_HOME/acp-router/config.yaml and
// ~/.config/acp-router/config.yaml that exists. A file named by the flag or
// the variable must exist. The error lists every place it looked and how to
// start.
func Lookup(flagValue string, env func(string) (string, bool)) (string, error) {
	if flagValue != "" {
		return explicit(flagValue, "--config")
	}
	if v, _ := env("ACP_ROUTER_CONFIG"); v != "" {
		return explicit(v, "$ACP_ROUTER_CONFIG")
	}
	looked := []string{"--config: not given", "$ACP_ROUTER_CONFIG: not set"}
	var candidates []string
	if dir, _ := env("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		candidates = append(candidates, filepath.Join(dir, "acp-router", "config.yaml"))
	} else {
		looked = append(looked, "$XDG_CONFIG_HOME: not set or not absolute")
	}
	if home, _ := env("HOME"); filepath.IsAbs(home) {
		if c := filepath.Join(home, ".config", "acp-router", "config.yaml"); len(candidates) == 0 || candidates[0] != c {
			candidates = append(candidates, c)
		}
	} else {
		looked = append(looked, "$HOME: not set or not absolute")
	}
	for _, c := range candidates {
		// Any error but "does not exist" (e.g. permission denied) is left
		// for Load to report: the file is there.
		if _, err := os.Stat(c); !errors.Is(err, fs.ErrNotExist) {
			return c, nil
		}
		looked = append(looked, c+": does not exist")
	}
	return "", fmt.Errorf("config: no config file found; looked at:\n  %s\n%s", strings.Join(looked, "\n  "), startHint)
}

func explicit(path, from string) (string, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("config: %s (from %s) does not exist; %s", path, from, startHint)
	}
	return path, nil
}
