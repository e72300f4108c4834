package config

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestExampleConfig checks that the config.example.yaml shipped at the
// repository root is valid on a machine where its agents are installed and
// the variables it uses are set.
func TestExampleConfig(t *testing.T) {
	const file = "../config.example.yaml"
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("../config.example.yaml does not exist (yet): nothing to check")
	}
	if err != nil {
		t.Fatal(err)
	}
	var example struct {
		Agents []struct{ Command string }
	}
	if err := yaml.Unmarshal(data, &example); err != nil {
		t.Fatal(err)
	}
	var commands []string
	for _, a := range example.Agents {
		if !strings.ContainsAny(a.Command, "/$") {
			commands = append(commands, a.Command)
		}
	}
	bin := fakeBin(t, commands...)
	env := func(name string) (string, bool) {
		switch name {
		case "PATH":
			return bin, true
		case "HOME":
			return "/home/u", true
		}
		return "value-of-" + name, true
	}
	if _, err := Parse(file, data, env); err != nil {
		t.Errorf("config.example.yaml:\n%v", err)
	}
}
