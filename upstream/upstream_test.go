package upstream

import (
	"slices"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/config"
)

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"fatal: boom OPENAI_API_KEY=sk-secret123", "fatal: boom OPENAI_API_KEY=[REDACTED]"},
		{`config {"api_key": "abc123", "model": "x"}`, `config {"api_key": "[REDACTED]", "model": "x"}`},
		{"GITHUB_TOKEN: ghp_xyz done", "GITHUB_TOKEN: [REDACTED] done"},
		{"Authorization: Bearer eyJhbGciOi.payload.sig", "Authorization: Bearer [REDACTED]"},
		{"db password=hunter2 host=x", "db password=[REDACTED] host=x"},
		{"nothing secret here: key points", "nothing secret here: key points"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := Redact(tt.in); got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestEnviron(t *testing.T) {
	parent := []string{"PATH=/bin", "HOME=/h", "SECRET=s", "XDG_CONFIG_HOME=/c", "LANG=C", "OVERRIDE=old"}
	tests := []struct {
		name    string
		inherit config.EnvInherit
		env     map[string]string
		want    []string
	}{
		{"all", config.EnvInheritAll, map[string]string{"OVERRIDE": "new", "ADD": "1"},
			[]string{"ADD=1", "HOME=/h", "LANG=C", "OVERRIDE=new", "PATH=/bin", "SECRET=s", "XDG_CONFIG_HOME=/c"}},
		{"minimal drops everything else", config.EnvInheritMinimal, map[string]string{"ADD": "1"},
			[]string{"ADD=1", "HOME=/h", "LANG=C", "PATH=/bin", "XDG_CONFIG_HOME=/c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Environ(config.Agent{EnvInherit: tt.inherit, Env: tt.env}, parent)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Environ = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTailKeepsLastLines(t *testing.T) {
	tl := newTail(3, 10)
	for _, l := range []string{"one", "two", "three", "four", strings.Repeat("x", 20)} {
		tl.add(l)
	}
	if got, want := tl.String(), "three\nfour\nxxxxxxxxxx…"; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
}

func TestTerminalAuthArgs(t *testing.T) {
	got := TerminalAuthArgs("claude", []string{"/login", "--x"})
	if want := []string{"login", "claude", "--", "/login", "--x"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
