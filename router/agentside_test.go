package router

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/acp"
)

// TestDecodeUpdate: the one-pass decode of session/update reads what a
// struct decode reads, for every update in the real agents' transcripts
// and for edge cases (escapes, nulls, no update), both from what the
// agent's stream read as it validated the line (updatePrescan) and from
// the params; a member of the wrong type is an error.
func TestDecodeUpdate(t *testing.T) {
	files, _ := filepath.Glob("../testdata/real-agents/*.jsonl")
	if len(files) == 0 {
		t.Fatal("no transcripts")
	}
	var lines [][]byte
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var rec struct {
				Msg json.RawMessage `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg != nil {
				lines = append(lines, rec.Msg)
			}
		}
		f.Close()
	}
	lines = append(lines,
		[]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s\u00e9\n","update":{"sessionUpdate":"tool_call","toolCallId":"a\"b","title":null,"status":"pending","kind":"read","locations":[{"path":"/x"}],"rawInput":{"path":"/x"}}}}`),
		[]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":null}}`),
		[]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}}`),
		[]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"usage_update","cost":{"amount":1.5,"currency":"USD"},"title":"t"}}}`),
	)
	n := 0
	for _, line := range lines {
		m, err := acp.ClassifyPrescan(line, updatePrescan)
		if err != nil || m.Method != acp.MethodSessionUpdate {
			continue
		}
		n++
		var top [2]json.RawMessage
		var f [21]json.RawMessage
		if !m.Prescanned(updatePrescan, top[:], f[:]) {
			t.Errorf("not read in the validating pass: %.200s", line)
		}
		want := new(updateParams)
		if err := json.Unmarshal(m.Params, want); err != nil {
			t.Fatalf("struct decode of %s: %v", line, err)
		}
		var members struct{ Update map[string]json.RawMessage }
		json.Unmarshal(m.Params, &members)
		_, want.Update.HasTitle = members.Update["title"]
		plain, _ := acp.Classify(line)
		for _, m := range []*acp.Message{m, plain} {
			got, err := decodeUpdate(m)
			if err != nil {
				t.Fatalf("decodeUpdate(%s): %v", line, err)
			}
			// A struct decode keeps "null" for raw members; so does Members.
			if !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Errorf("decodeUpdate(%.300s)\n got %+v\nwant %+v", line, got.Update, want.Update)
			}
		}
	}
	if n < 60 {
		t.Errorf("only %d updates checked", n)
	}
	for _, bad := range []string{`{"sessionId":1}`, `{"sessionId":"s","update":{"sessionUpdate":2}}`, `{"sessionId":"s","update":{"title":[]}}`, `{"sessionId":"s","update":{"cost":"x"}}`} {
		if _, err := decodeUpdate(&acp.Message{Params: json.RawMessage(bad)}); err == nil {
			t.Errorf("decodeUpdate(%s): no error", bad)
		}
	}
}

// TestAgentStreamsPrescan: the agents' streams read a session/update's
// members as they validate it (one scan of the line).
func TestAgentStreamsPrescan(t *testing.T) {
	f := newRelayFixture(t, false)
	if f.r.uopts.Prescan != updatePrescan {
		t.Fatal("the agents' streams do not read updates in their validating pass")
	}
	if err := updatePrescan.Check(); err != nil {
		t.Fatal(err)
	}
}

// normalize makes raw members comparable: compacted, and empty for null.
func normalize(u *updateParams) updateParams {
	out := *u
	out.raw = nil // the struct decode has no raw update
	for _, r := range []*json.RawMessage{&out.Update.ConfigOptions, &out.Update.Meta, &out.Update.Content, &out.Update.ToolKind, &out.Update.Locations, &out.Update.RawInput} {
		if string(*r) == "null" {
			*r = nil
		}
		if *r != nil {
			*r = append(json.RawMessage{}, *r...)
		}
	}
	var cmds []json.RawMessage
	for _, c := range out.Update.AvailableCommands {
		cmds = append(cmds, append(json.RawMessage{}, c...))
	}
	out.Update.AvailableCommands = cmds
	return out
}

// TestPromptBlocks: the blocks parseTurn reads are those a decode into
// []promptBlock finds, for prompts whose member names are written as the
// schema writes them, and it fails where that decode fails.
func TestPromptBlocks(t *testing.T) {
	for _, p := range []string{
		`{"sessionId":"s","prompt":[{"type":"text","text":"/agent claude"}]}`,
		`{"sessionId":"s","prompt":[{"type":"text","text":"a\"b\u00e9"},{"type":"resource_link","name":"n","uri":"file:///x"},null]}`,
		`{"sessionId":"s","prompt":[{"type":"image","data":"AAAA","mimeType":"image/png"}],"_meta":{}}`,
		`{"sessionId":"s","prompt":[]}`,
		`{"sessionId":"s","prompt":null}`,
		`{"sessionId":"s"}`,
		`null`,
		`{"prompt":[{"type":"text","text":"x","text":"y"}]}`,
		`{"prompt":[{"type":"text","text":5}]}`,
		`{"prompt":[{"type":"text","text":null}]}`,
		`{"prompt":["text"]}`,
		`{"prompt":[[]]}`,
		`{"prompt":{"type":"text"}}`,
		`{"prompt":"x"}`,
		`[1]`,
	} {
		var want struct {
			Prompt []promptBlock `json:"prompt"`
		}
		wantErr := json.Unmarshal([]byte(p), &want)
		got, ok := promptBlocks(json.RawMessage(p))
		if ok != (wantErr == nil) || ok && !reflect.DeepEqual(got, want.Prompt) && !(len(got) == 0 && len(want.Prompt) == 0) {
			t.Errorf("promptBlocks(%s) = %+v, %v; the decode %+v, %v", p, got, ok, want.Prompt, wantErr)
		}
	}
}

// FuzzPromptBlocks: on prompts whose member names are exact, promptBlocks
// reads what the decode reads; on any valid JSON it never panics.
func FuzzPromptBlocks(f *testing.F) {
	f.Add("text", "/agent x", "", "", 2)
	f.Add("resource_link", "", "a\"b", "file:///\u00e9", 1)
	f.Fuzz(func(t *testing.T, typ, text, name, uri string, n int) {
		block, _ := json.Marshal(map[string]string{"type": typ, "text": text, "name": name, "uri": uri})
		var blocks []json.RawMessage
		for range n % 4 {
			blocks = append(blocks, block)
		}
		p, _ := json.Marshal(map[string]any{"sessionId": "s", "prompt": blocks})
		var want struct {
			Prompt []promptBlock `json:"prompt"`
		}
		if err := json.Unmarshal(p, &want); err != nil {
			t.Fatal(err)
		}
		got, ok := promptBlocks(p)
		if !ok || len(got) != len(want.Prompt) || len(got) > 0 && !reflect.DeepEqual(got, want.Prompt) {
			t.Fatalf("promptBlocks(%s) = %+v, %v; the decode %+v", p, got, ok, want.Prompt)
		}
	})
}

// TestDescribeCall: the router's own permission request about a command
// shows its environment, each argument as one shell word and its
// directory: what the user approves is what the editor runs.
func TestDescribeCall(t *testing.T) {
	for _, c := range []struct{ params, title string }{
		{`{"command":"ls","args":["-l"]}`, "A wants to run: ls -l"},
		{`{"command":"git status && rm -rf ~"}`, "A wants to run: git status && rm -rf ~"},
		{`{"command":"echo","args":["a b; rm -rf ~","it's"]}`, `A wants to run: echo 'a b; rm -rf ~' 'it'\''s'`},
		{`{"command":"ls","args":["-l"],"env":[{"name":"LD_PRELOAD","value":"/tmp/x.so"},{"name":"A","value":"1 2"}],"cwd":"/etc"}`,
			"A wants to run: LD_PRELOAD=/tmp/x.so A='1 2' ls -l (in /etc)"},
		{`{"command":"ls","args":[""]}`, "A wants to run: ls ''"},
	} {
		title, kind, tc, err := describeCall("A", "terminal/create", "", json.RawMessage(c.params))
		if err != nil {
			t.Fatalf("%s: %v", c.params, err)
		}
		if title != c.title || kind != "execute" {
			t.Errorf("%s: %q %s, want %q", c.params, title, kind, c.title)
		}
		if in, _ := tc["rawInput"].(map[string]any); strings.Contains(c.params, "env") && in["env"] == nil {
			t.Errorf("%s: rawInput %v without env", c.params, in)
		}
	}
	// Params that do not decode are no command to show the user: the
	// caller refuses them (-32602) rather than ask about zero values.
	for _, p := range []string{`{"command":5}`, `{"command":"ls","args":"-l"}`, `[1]`} {
		if title, _, _, err := describeCall("A", "terminal/create", "", json.RawMessage(p)); err == nil {
			t.Errorf("%s: described as %q, want a decode error", p, title)
		}
	}
	if title, _, _, err := describeCall("A", "mcp/message", "srv", json.RawMessage(`{"method":5}`)); err != nil || !strings.Contains(title, "cannot read") {
		t.Errorf("undecodable mcp/message: %q, %v; want a message the router cannot read", title, err)
	}
}

// checkAgentCall reads a path or cwd by its exact name, as the editor
// does: a member whose name differs only in case (which encoding/json
// would take instead) does not make a relative one look absolute.
func TestCheckAgentCallExactNames(t *testing.T) {
	r := &Router{}
	r.clientCaps.FS.ReadTextFile, r.clientCaps.FS.WriteTextFile, r.clientCaps.Terminal = true, true, true
	for _, c := range []struct {
		method, params string
		ok             bool
	}{
		{"terminal/create", `{"sessionId":"s","command":"ls","cwd":"/abs"}`, true},
		{"terminal/create", `{"sessionId":"s","command":"ls","cwd":""}`, true},
		{"terminal/create", `{"sessionId":"s","command":"ls"}`, true},
		{"terminal/create", `{"sessionId":"s","command":"ls","cwd":"sub"}`, false},
		{"terminal/create", `{"sessionId":"s","command":"ls","cwd":"sub","Cwd":"/abs"}`, false},
		{"terminal/create", `{"sessionId":"s","command":"ls","cwd":"sub","CWD":null}`, false},
		{"fs/read_text_file", `{"sessionId":"s","path":"/abs/a.go"}`, true},
		{"fs/read_text_file", `{"sessionId":"s","path":"a.go"}`, false},
		{"fs/read_text_file", `{"sessionId":"s","path":"a.go","PATH":"/abs/a.go"}`, false},
		{"fs/write_text_file", `{"sessionId":"s","path":"a.go","Path":"/abs/a.go","content":""}`, false},
	} {
		err := r.checkAgentCall(nil, c.method, json.RawMessage(c.params))
		if (err == nil) != c.ok {
			t.Errorf("%s %s: %v, want ok %v", c.method, c.params, err, c.ok)
		}
	}
}
