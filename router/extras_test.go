package router

import (
	"slices"
	"testing"
)

// TestRoutedCaps pins which of the editor's client capabilities reach the
// agents (routedClientCaps): what the router routes passes byte for byte,
// the rest is held back and named.
func TestRoutedCaps(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		want       string // "" when passed unchanged
		wantMasked []string
	}{
		{name: "absent", in: ``},
		{name: "zed", in: `{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true,"auth":{"terminal":true},"session":{"configOptions":{"boolean":{}}},"elicitation":{"form":{},"url":{}},"_meta":{"terminal_output":true,"terminal-auth":true}}`},
		{name: "notices, compaction and nulls pass", in: `{"session":{"notices":{},"compaction":{},"_meta":{"x":1}},"subagents":null,"plan":null}`},
		{name: "plan and subagents pass", in: `{"fs":{"readTextFile":true},"subagents":{},"plan":{}}`},
		{name: "unknown capabilities are held back, also inside session",
			in:         `{"terminal":true,"positionEncodings":["utf-16"],"session":{"notices":{},"promptSuggestions":{}}}`,
			want:       `{"terminal":true,"session":{"notices":{}}}`,
			wantMasked: []string{"positionEncodings", "session.promptSuggestions"}},
		{name: "a session that is not an object",
			in:         `{"session":true}`,
			want:       `{}`,
			wantMasked: []string{"session"}},
		{name: "not an object", in: `[1]`, want: `{}`, wantMasked: []string{"clientCapabilities (not an object)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, masked := routedCaps([]byte(tt.in))
			if !slices.Equal(masked, tt.wantMasked) {
				t.Errorf("held back %q, want %q", masked, tt.wantMasked)
			}
			if tt.want == "" {
				if got != nil {
					t.Errorf("rewrote %s to %s, want it passed unchanged", tt.in, got)
				}
				return
			}
			jsonEqual(t, string(got), tt.want)
		})
	}
}

// TestAttribute pins the attribution of a notification that belongs to no
// session: _meta["acp-router"].agent, the agent's own _meta kept, a forged
// one replaced.
func TestAttribute(t *testing.T) {
	tests := []struct {
		name, in, want string
		fails          bool
	}{
		{"claude's _auth/status_update", `{"authStatus":{"kind":"none","label":"Not logged in"}}`,
			`{"authStatus":{"kind":"none","label":"Not logged in"},"_meta":{"acp-router":{"agent":"claude"}}}`, false},
		{"auth/status_update with _meta", `{"state":"unauthenticated","_meta":{"x":1}}`,
			`{"state":"unauthenticated","_meta":{"x":1,"acp-router":{"agent":"claude"}}}`, false},
		{"an agent naming another", `{"_meta":{"acp-router":{"agent":"codex"}}}`,
			`{"_meta":{"acp-router":{"agent":"claude"}}}`, false},
		{"null _meta", `{"_meta":null}`, `{"_meta":{"acp-router":{"agent":"claude"}}}`, false},
		{"a _meta that is not an object", `{"_meta":"x"}`, `{"_meta":{"acp-router":{"agent":"claude"}}}`, false},
		{"no params", ``, `{"_meta":{"acp-router":{"agent":"claude"}}}`, false},
		{"null params", `null`, `{"_meta":{"acp-router":{"agent":"claude"}}}`, false},
		{"array params", `[1,2]`, ``, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := attribute([]byte(tt.in), "claude")
			if tt.fails {
				if err == nil {
					t.Errorf("attributed %s as %s, want an error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, string(got), tt.want)
		})
	}
}
