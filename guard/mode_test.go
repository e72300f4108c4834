package guard

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy"
)

// TestModes: deny_modes as the router asks about them.
func TestModes(t *testing.T) {
	const wildcard = `permissions:
  default: ask
  deny_modes: ["*:yolo", "claude:bypassPermissions"]
`
	g := newTestGuard(t, wildcard, Options{})
	none := newTestGuard(t, "permissions:\n  default: ask\n", Options{})
	tests := []struct {
		name        string
		g           *Guard
		agent, mode string
		denied      bool
	}{
		{"agent's own entry", g, "claude", "bypassPermissions", true},
		{"another agent's entry", g, "gemini", "bypassPermissions", false},
		{"wildcard", g, "gemini", "yolo", true},
		{"an allowed mode", g, "claude", "default", false},
		{"no deny_modes", none, "claude", "yolo", false},
		{"no guard", nil, "claude", "yolo", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.g.ModeDenied(tt.agent, tt.mode); got != tt.denied {
				t.Errorf("ModeDenied = %v, want %v", got, tt.denied)
			}
			if f := tt.g.ModeFilter(tt.agent); f != nil && f(tt.mode) != tt.denied {
				t.Errorf("ModeFilter(%s)(%s) = %v", tt.agent, tt.mode, f(tt.mode))
			}
			err := tt.g.ModeRefusal(tt.agent, tt.mode)
			if (err != nil) != tt.denied {
				t.Fatalf("ModeRefusal = %v", err)
			}
			if err == nil {
				return
			}
			var e *jsonrpc2.Error
			if !errors.As(err, &e) || e.Code != acp.CodeInvalidParams {
				t.Fatalf("ModeRefusal = %#v", err)
			}
			var data map[string]string
			jsonUnmarshal(t, *e.Data, &data)
			if want := map[string]string{"agent": tt.agent, "mode": tt.mode, "rule": policy.RuleDeniedMode}; !reflect.DeepEqual(data, want) {
				t.Errorf("data %v, want %v", data, want)
			}
		})
	}
	t.Run("ModeFilter is nil without deny_modes", func(t *testing.T) {
		if none.ModeFilter("claude") != nil || (*Guard)(nil).ModeFilter("claude") != nil || mustNew(t, nil, Options{}).ModeFilter("claude") != nil {
			t.Error("a filter that filters nothing")
		}
		if g.ModeFilter("claude") == nil {
			t.Error("no filter with deny_modes")
		}
	})
}

// TestRecordModeReset: resetting an agent out of a denied mode is
// audited, with the layer that denies the mode and, when the reset
// failed, why.
func TestRecordModeReset(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	g := newTestGuard(t, "", Options{AuditFile: file})
	g.RecordModeReset("rs", "claude", "yolo", "default", nil)
	g.RecordModeReset("rs", "claude", "yolo", "", errors.New("set_mode: refused"))
	g.RecordModeReset("rs", "gemini", "auto", "default", nil) // no layer denies it
	(*Guard)(nil).RecordModeReset("rs", "claude", "yolo", "default", nil)
	mustNew(t, nil, Options{AuditFile: file}).RecordModeReset("rs", "claude", "yolo", "default", nil)
	recs := readAudit(t, file)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	hash := g.Policy().Hash()
	for i, want := range []string{
		`{"session":"rs","agent":"claude","method":"mode","evidence":[{"mode":"yolo","resetTo":"default"}],"decision":"deny","rule":"acp-router:denied-mode","layer":"user","source":"builtin","policyHash":"` + hash + `"}`,
		`{"session":"rs","agent":"claude","method":"mode","evidence":[{"mode":"yolo","resetTo":"","resetError":"set_mode: refused"}],"decision":"deny","rule":"acp-router:denied-mode","layer":"user","source":"builtin","policyHash":"` + hash + `"}`,
		`{"session":"rs","agent":"gemini","method":"mode","evidence":[{"mode":"auto","resetTo":"default"}],"decision":"deny","rule":"acp-router:denied-mode","layer":"builtin","source":"builtin","policyHash":"` + hash + `"}`,
	} {
		requireRecord(t, recs[i], want)
	}
	t.Run("the log cannot be written", func(t *testing.T) {
		var log syncBuffer
		g := newTestGuard(t, "", Options{Logger: hclogTo(&log)})
		g.Close()
		g.RecordModeReset("rs", "claude", "yolo", "default", nil)
		if !contains(log.String(), "cannot write the audit log") {
			t.Errorf("log: %s", log.String())
		}
	})
}
