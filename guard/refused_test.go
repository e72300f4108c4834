package guard

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/audit/audittest"
	"github.com/acp-router/acp-router/policy/extract"
)

type hidesPrefix string

func (h hidesPrefix) Hides(p string) bool { return strings.HasPrefix(p, string(h)) }

// TestNoteToolResult (issue 29 req. 6): a confined agent's tool result
// that reports an operation refused (EACCES, EROFS, EPERM) is audited with
// the agent, session and tool call, the path it names (masked or not) and
// the errno, never the output; nothing is noted for an agent that does not
// run confined, for a result without such an error, or for a running tool.
// In a synctest bubble: the log is read once every record queued has been
// written, so one written late or twice is seen.
func TestNoteToolResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGuard(t, "", Options{})
		text := func(s string) json.RawMessage {
			return mustJSON([]map[string]any{{"type": "content", "content": map[string]string{"type": "text", "text": s}}})
		}
		refused := text("SECRET=hunter2\ntouch: cannot touch '/etc/passwd.new': Permission denied\nbash: line 1: /home/u/.ssh/id_ed25519: Read-only file system\n")
		g.NoteToolResult("s1", "claude", &ToolUpdate{ID: "t1", Status: "failed", Content: refused})
		g.SetKernel(func(agent, method string) extract.KernelGuard {
			if agent != "claude" || method != acp.MethodRequestPermission {
				return nil
			}
			return hidesPrefix("/home/u/.ssh/")
		})
		g.NoteToolResult("s1", "claude", &ToolUpdate{ID: "t2", Status: "in_progress", Content: refused})
		g.NoteToolResult("s1", "claude", &ToolUpdate{ID: "t3", Status: "completed", Content: text("ok")})
		g.NoteToolResult("s1", "codex", &ToolUpdate{ID: "t4", Status: "failed", Content: refused})
		g.NoteToolResult("s1", "claude", &ToolUpdate{ID: "t5", Status: "failed", Content: refused})
		synctest.Wait() // the records queued are written
		recs := audittest.ReadLines(t, g.AuditFile())
		if len(recs) != 1 {
			t.Fatalf("records: %v", recs)
		}
		requireRecord(t, recs[0], `{"session":"s1","agent":"claude","method":"acp-router/sandbox_refused","toolCallId":"t5",
			"evidence":[{"reported":"tool result","errno":"EACCES","path":"/etc/passwd.new"},{"reported":"tool result","errno":"EROFS","path":"/home/u/.ssh/id_ed25519","masked":true}],
			"decision":"deny","rule":"acp-router:sandbox","layer":"builtin","source":"builtin","policyHash":"`+g.Policy().Hash()+`"}`)
		if b, _ := json.Marshal(recs[0]); strings.Contains(string(b), "hunter2") {
			t.Errorf("the record holds the tool's output: %s", b)
		}
	})
}
