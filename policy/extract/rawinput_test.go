package extract

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestPatchFiles(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{"one line", nil},
		{"@@ -1 +1 @@\n-a\n+b\n", nil},
		{"*** Begin Patch\n*** Update File: a.go\n*** Move to: b.go\n  *** Add File: /x/c.go\n*** Delete File: d.go\n*** End Patch", []string{"a.go", "b.go", "/x/c.go", "d.go"}},
		{"--- a/main.go\t2024-01-01\n+++ b/../.bashrc\n@@\n", []string{"a/main.go", "main.go", "b/../.bashrc", "../.bashrc"}},
		{"diff --git a/x b/y\nrename from x\nrename to y\n", []string{"a/x", "x", "b/y", "y"}},
		{"--- /dev/null\n+++ \"b/t\\303\\244.go\"\n", []string{"b/tä.go", "tä.go"}},
	} {
		got := patchFiles(tc.src)
		if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("patchFiles(%q) = %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestClassifyRawKey(t *testing.T) {
	for k, want := range map[string]rawKeyClass{
		"file_path": rawPath, "filePath": rawPath, "File-Path": rawPath, "target_file": rawPath, "to": rawPath,
		"include": rawPath, "move_path": rawPath, "source_dir": rawPath, "urls": rawURL, "endpoint": rawURL,
		"cmd": rawCommand, "argv": rawCommand, "patchText": rawPatch, "input": rawPatch, "unified_diff": rawPatch,
		"content": rawText, "new_string": rawText, "pattern": rawText, "description": rawText, "workdir": rawCwd,
		"cwd": rawCwd, "call_id": rawText, "limit": rawOther, "proposed_execpolicy_amendment": rawOther,
	} {
		if got := classifyRawKey(k); got != want {
			t.Errorf("classifyRawKey(%q) = %d, want %d", k, got, want)
		}
	}
}

// TestShownLeavesMeta: what the policy read from a tool call's _meta is
// evidence (a deny rule sees it) but not shown: an approval of the tool
// call does not cover a direct call only _meta named.
func TestShownLeavesMeta(t *testing.T) {
	ev := Extract(&Request{Method: "session/request_permission", Session: Session{Cwd: "/p"},
		Params: json.RawMessage(`{"sessionId":"s","toolCall":{"toolCallId":"t","kind":"read","locations":[{"path":"/p/a.go"}],"_meta":{"x":{"file_path":"/etc/notes"}}}}`)})
	read := func(p string) *Evidence {
		return Extract(&Request{Method: "fs/read_text_file", Session: Session{Cwd: "/p"}, Params: json.RawMessage(`{"sessionId":"s","path":"` + p + `"}`)})
	}
	if !ev.Covers(read("/etc/notes")) {
		t.Fatalf("the evidence does not hold _meta's path: %v", ev.Items)
	}
	if ev.Shown().Covers(read("/etc/notes")) {
		t.Errorf("Shown covers the path only _meta named")
	}
	if !ev.Shown().Covers(read("/p/a.go")) {
		t.Errorf("Shown does not cover the location the editor shows")
	}
}
