package router

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/acp"
)

func capsJSON(t *testing.T, s string) acp.AgentCapabilities {
	t.Helper()
	var c acp.AgentCapabilities
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("invalid JSON %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON differs\n got: %s\nwant: %s", got, want)
	}
}

func TestAdaptPrompt(t *testing.T) {
	const prompt = `{"sessionId":"s","_meta":{"k":1},"prompt":[
		{"type":"text","text":"look"},
		{"type":"image","data":"AAAA","mimeType":"image/png"},
		{"type":"audio","data":"BBBB","mimeType":"audio/wav"},
		{"type":"resource","resource":{"uri":"file:///a.go","text":"package a","mimeType":"text/x-go"}},
		{"type":"resource","resource":{"uri":"file:///b.bin","blob":"CCCC","mimeType":"application/octet-stream"}},
		{"type":"resource_link","uri":"file:///c","name":"c"}]}`
	tests := []struct {
		name string
		caps string
		want string
	}{
		{"agent takes everything: untouched", `{"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true}}`, prompt},
		{"agent takes nothing", `{}`, `{"sessionId":"s","_meta":{"k":1},"prompt":[
			{"type":"text","text":"look"},
			{"type":"text","text":"[image (image/png) omitted: Codex does not accept images]"},
			{"type":"text","text":"[audio (audio/wav) omitted: Codex does not accept audio]"},
			{"type":"text","text":"package a"},
			{"type":"text","text":"[file file:///b.bin (application/octet-stream) omitted: Codex does not accept embedded files]"},
			{"type":"resource_link","uri":"file:///c","name":"c"}]}`},
		{"agent takes images only", `{"promptCapabilities":{"image":true}}`, `{"sessionId":"s","_meta":{"k":1},"prompt":[
			{"type":"text","text":"look"},
			{"type":"image","data":"AAAA","mimeType":"image/png"},
			{"type":"text","text":"[audio (audio/wav) omitted: Codex does not accept audio]"},
			{"type":"text","text":"package a"},
			{"type":"text","text":"[file file:///b.bin (application/octet-stream) omitted: Codex does not accept embedded files]"},
			{"type":"resource_link","uri":"file:///c","name":"c"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := adaptPrompt(json.RawMessage(prompt), capsJSON(t, tt.caps), "Codex")
			jsonEqual(t, string(got), tt.want)
		})
	}
}

func TestAdaptNewSession(t *testing.T) {
	const params = `{"cwd":"/w","additionalDirectories":["/x"],"mcpServers":[
		{"name":"local","command":"mcp","args":[],"env":[]},
		{"type":"http","name":"web","url":"http://127.0.0.1:1","headers":[]},
		{"type":"sse","name":"old","url":"http://127.0.0.1:2","headers":[]}]}`
	tests := []struct {
		name string
		caps string
		want string
	}{
		{"agent supports all", `{"mcpCapabilities":{"http":true,"sse":true},"sessionCapabilities":{"additionalDirectories":{}}}`, params},
		{"stdio only, no extra dirs", `{}`, `{"cwd":"/w","mcpServers":[{"name":"local","command":"mcp","args":[],"env":[]}]}`},
		{"http only", `{"mcpCapabilities":{"http":true},"sessionCapabilities":{"additionalDirectories":{}}}`, `{"cwd":"/w","additionalDirectories":["/x"],"mcpServers":[
			{"name":"local","command":"mcp","args":[],"env":[]},
			{"type":"http","name":"web","url":"http://127.0.0.1:1","headers":[]}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := adaptNewSession(json.RawMessage(params), capsJSON(t, tt.caps), "codex", hclog.NewNullLogger())
			jsonEqual(t, string(got), tt.want)
		})
	}
}

// TestAdaptPromptFastPath: a prompt with nothing the agent lacks is
// returned as it is (not re-encoded); a block type written with escapes is
// still read as the agent would read it.
func TestAdaptPromptFastPath(t *testing.T) {
	text := json.RawMessage(`{"sessionId":"s", "prompt":[{"type":"text","text":"a <b>"},{"type":"resource_link","uri":"file:///c","name":"c"}]}`)
	if got := adaptPrompt(text, capsJSON(t, `{}`), "Codex"); &got[0] != &text[0] || len(got) != len(text) {
		t.Errorf("a text prompt was rewritten: %s", got)
	}
	escaped := json.RawMessage(`{"sessionId":"s","prompt":[{"type":"im\u0061ge","data":"AAAA","mimeType":"image/png"}]}`)
	jsonEqual(t, string(adaptPrompt(escaped, capsJSON(t, `{}`), "Codex")),
		`{"sessionId":"s","prompt":[{"type":"text","text":"[image (image/png) omitted: Codex does not accept images]"}]}`)
}
