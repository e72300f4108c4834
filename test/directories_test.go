package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dirsNote is how the router names a session's additional directories to
// an agent that does not take them (merge.DirectoriesNote).
const dirsNote = "[acp-router] Additional directories of this session: "

// TestAdditionalDirectoriesKept pins that the router keeps the
// additionalDirectories capability it advertises for every agent (issue
// 15, merge.capabilityTable): an agent with
// sessionCapabilities.additionalDirectories gets them in session/new and
// is never told them in words; an agent without it does not get them in
// session/new and is told them once, with its first prompt of the
// session: inside the handoff brief after a switch, as a block of its own
// (the first) when there is nothing to brief. A switch back and forth keeps
// both true.
func TestAdditionalDirectoriesKept(t *testing.T) {
	t.Parallel()
	dirX, dirY := t.TempDir(), t.TempDir()
	withDirs := json.RawMessage(`{"protocolVersion":1,"agentCapabilities":{"sessionCapabilities":{"additionalDirectories":{}}},"authMethods":[]}`)
	cfg := writeConfig(t, routerYAML(t, []string{
		fakeAgentYAML("alpha", fakeOpts{SessionPrefix: "a-", InitResult: withDirs}, "title: Alpha"),
		fakeAgentYAML("beta", fakeOpts{SessionPrefix: "b-"}, "title: Beta"),
	}, "default: alpha"))
	e := StartRouter(t, cfg, nil)
	init := e.Initialize(t, capsAll)
	requireJSON(t, "advertised additionalDirectories", jsonPath(init, "agentCapabilities", "sessionCapabilities", "additionalDirectories"), `{}`)
	wantNote := dirsNote + dirX + ", " + dirY + "."

	newSession := func() string {
		t.Helper()
		res := e.MustCall(t, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}, "additionalDirectories": []string{dirX, dirY}})
		return jsonString(res, "sessionId")
	}
	// turn runs script on the session and returns what the agent said, one
	// text per script line.
	turn := func(sid, script string) []string {
		t.Helper()
		n := len(e.Texts(sid))
		e.MustPrompt(t, sid, script, "end_turn")
		return e.Texts(sid)[n:]
	}
	newDirs := func(params string) json.RawMessage { return jsonPath([]byte(params), "additionalDirectories") }

	t.Run("switch", func(t *testing.T) {
		sid := newSession()
		got := turn(sid, "new-params\nprompt-text")
		requireJSON(t, "alpha's session/new additionalDirectories", newDirs(got[0]), mustJSONString([]string{dirX, dirY}))
		if strings.Contains(got[1], dirsNote) {
			t.Errorf("alpha, which takes the directories, was told them in its prompt: %q", got[1])
		}

		e.MustPrompt(t, sid, "/agent beta", "end_turn")
		got = turn(sid, "new-params\nprompt-text")
		if d := newDirs(got[0]); d != nil {
			t.Errorf("beta, which does not take them, got additionalDirectories %s in session/new", d)
		}
		brief, _, _ := strings.Cut(got[1], " | ")
		if !strings.HasPrefix(brief, "[acp-router handoff]") || !strings.Contains(brief, wantNote) {
			t.Errorf("beta's first prompt after the switch: want the brief naming the directories (%q), got %q", wantNote, got[1])
		}
		if got := turn(sid, "prompt-text"); strings.Contains(got[0], dirsNote) {
			t.Errorf("beta was told the directories again on its second prompt: %q", got[0])
		}

		e.MustPrompt(t, sid, "/agent alpha", "end_turn")
		// (The brief quotes beta's replies, which echoed its prompts.)
		got = turn(sid, "prompt-text")
		brief = strings.TrimSuffix(got[0], " | prompt-text")
		if !strings.HasPrefix(brief, "[acp-router handoff]") || strings.HasSuffix(brief, wantNote) {
			t.Errorf("alpha after the switch back: want a brief without the note, got %q", got[0])
		}
	})

	t.Run("first-turn", func(t *testing.T) {
		sid := newSession()
		got := turn(sid, "/beta prompt-text")
		if want := wantNote + " | prompt-text"; len(got) != 1 || got[0] != want {
			t.Errorf("beta's first turn (nothing to brief) got %q, want %q", got, want)
		}
		// An agent echoing its prompt does not show the note as the user's.
		for _, m := range updatesOf(e, sid, "user_message_chunk") {
			if txt := jsonString(m.Params, "update", "content", "text"); strings.HasPrefix(txt, dirsNote) {
				t.Errorf("the note reached the editor as a user message: %q", txt)
			}
		}
	})

	// ACP: "Each path must be absolute". A relative one is refused with a
	// clear error in every request that takes them, before anything is
	// opened or looked up (the session ids below need not exist).
	t.Run("relative", func(t *testing.T) {
		cwd := t.TempDir()
		for _, c := range []struct {
			method string
			params map[string]any
		}{
			{"session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}, "additionalDirectories": []string{dirX, "rel/dir"}}},
			{"session/load", map[string]any{"sessionId": "nope", "cwd": cwd, "mcpServers": []any{}, "additionalDirectories": []string{"rel/dir"}}},
			{"session/resume", map[string]any{"sessionId": "nope", "cwd": cwd, "mcpServers": []any{}, "additionalDirectories": []string{"./rel/dir"}}},
			{"session/fork", map[string]any{"sessionId": "nope", "cwd": cwd, "mcpServers": []any{}, "additionalDirectories": []string{""}}},
		} {
			_, rerr := e.Call(t.Context(), c.method, c.params)
			if rerr == nil || rerr.Code != -32602 || !strings.Contains(rerr.Message, "additionalDirectories must be absolute paths") {
				t.Errorf("%s with a relative additional directory: %v, want -32602 naming additionalDirectories", c.method, rerr)
			}
		}
	})
}

// TestAdditionalDirectoriesRoots pins that a session's additional
// directories are the policy's ${roots} also when its agent does not take
// them in session/new (the router keeps them: merge.capabilityTable): a
// read there is allowed by a rule on ${roots}, one elsewhere falls to the
// default.
func TestAdditionalDirectoriesRoots(t *testing.T) {
	t.Parallel()
	dirX, elsewhere := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dirX, "notes.txt"), []byte("in a root"), 0o644)
	os.WriteFile(filepath.Join(elsewhere, "notes.txt"), []byte("elsewhere"), 0o644)
	cfg, _ := policyYAML(t, []string{fakeAgentYAML("beta", fakeOpts{})}, `default: deny
rules:
  - id: reads-in-roots
    decision: allow
    when: {kind: [read], paths: ["${roots}/**"]}
`)
	e := StartRouter(t, cfg, nil)
	e.Handle("fs/read_text_file", readTextFile)
	e.Initialize(t, capsAll)
	res := e.MustCall(t, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}, "additionalDirectories": []string{dirX}})
	sid := jsonString(res, "sessionId")
	e.MustPrompt(t, sid, "new-params\nread "+dirX+"/notes.txt\nread "+elsewhere+"/notes.txt", "end_turn")
	got := e.Texts(sid)
	if len(got) != 3 || jsonPath([]byte(got[0]), "additionalDirectories") != nil || got[1] != "read: in a root" || !strings.HasPrefix(got[2], "read error: -32603") {
		t.Errorf("agent without the capability said %q; want no directories in session/new, the read in the root allowed, the other denied", got)
	}
}

func mustJSONString(v any) string { return string(mustJSON(v)) }
