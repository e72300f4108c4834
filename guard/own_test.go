package guard

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/acp-router/acp-router/acp"
)

// ownPermissions allow every read and edit anywhere and a few commands:
// only the router's own protection keeps its files asked.
const ownPermissions = `permissions:
  default: ask
  rules:
    - id: home-files
      decision: allow
      when: {kind: [read, edit, delete, move], paths: ["/**"]}
    - id: commands
      decision: allow
      when: {command: ["rm **", "echo **", "mv **", "cp **"]}
`

// TestOwnFiles: a change an agent would make to the router's own files (the
// config, its include files, the audit log and its rotated generations, the
// binary) is asked even where a rule allows it: by a path, through a
// symlink, as a directory removed or moved with its tree, by a command, in
// a permission request. Reads, and files next to them, are decided by the
// rules. Before, a rule allowing edits in the home directory let an agent
// rewrite the config (which the router then reloads) or the audit log.
func TestOwnFiles(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	confDir := filepath.Join(home, ".config", "acp-router")
	state := filepath.Join(home, ".local", "state", "acp-router")
	for _, d := range []string{confDir, state, filepath.Join(home, "project")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(confDir, "config.yaml")
	include := filepath.Join(confDir, "team.yaml")
	for _, f := range []string{config, include} {
		os.WriteFile(f, []byte("x"), 0o600)
	}
	os.Symlink(confDir, filepath.Join(home, "project", "conf"))
	audit := filepath.Join(state, "audit.jsonl")

	g, err := New(loadTestPolicy(t, ownPermissions), Options{AuditFile: audit, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	cwd := filepath.Join(home, "project")
	decide := func(method string, params []byte) *Verdict {
		return g.Decide(t.Context(), NewSession(cwd, nil), Request{Agent: "claude", Method: method, Params: params})
	}
	own := outcome{Ask, "builtin", RuleOwnFiles, "builtin"}
	allowed := outcome{Allow, "rule", "home-files", "user"}

	// Before Protect nothing is the router's own: the rules decide.
	if got := outcomeOf(decide(acp.MethodWriteTextFile, writeParams(config))); got != allowed {
		t.Fatalf("before Protect: %+v", got)
	}
	g.Protect(map[string][]string{confDir: {"config.yaml", "team.yaml"}})

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		method string
		params []byte
		want   outcome
	}{
		{"a write of the config", acp.MethodWriteTextFile, writeParams(config), own},
		{"of an include file", acp.MethodWriteTextFile, writeParams(include), own},
		{"through a symlink", acp.MethodWriteTextFile, writeParams(filepath.Join(cwd, "conf", "config.yaml")), own},
		{"of the audit log", acp.MethodWriteTextFile, writeParams(audit), own},
		{"of a rotated generation", acp.MethodWriteTextFile, writeParams(audit + ".1"), own},
		{"of the binary", acp.MethodWriteTextFile, writeParams(exe), own},
		{"rm -rf of the config's directory", acp.MethodTerminalCreate, terminalParams("rm", "-rf", filepath.Join(home, ".config")), own},
		{"an append to the config", acp.MethodTerminalCreate, terminalParams("sh", "-c", "echo 'default: allow' >> "+config), own},
		{"a move over it", acp.MethodTerminalCreate, terminalParams("mv", filepath.Join(cwd, "x.yaml"), config), own},
		{"a permission request to edit it", acp.MethodRequestPermission, permParams("t1", map[string]any{"kind": "edit", "title": "Edit config",
			"locations": []any{map[string]any{"path": config}}, "rawInput": map[string]any{"file_path": config, "new_string": "x"}}), own},
		{"a read of the config", acp.MethodReadTextFile, readParams(config), allowed},
		{"a file next to it", acp.MethodWriteTextFile, writeParams(filepath.Join(confDir, "notes.md")), allowed},
		{"a file whose name starts like the audit log's", acp.MethodWriteTextFile, writeParams(audit + "x"), allowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := decide(tt.method, tt.params)
			got := outcomeOf(v)
			if got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v", got, v.Message, tt.want)
			}
		})
	}
}
