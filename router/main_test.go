package router

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/acp-router/acp-router/sandbox"
)

// envFakeAgent makes the test binary a scripted ACP agent (TestMain), for
// the tests that need a real agent instance (its own read loop) behind an
// in-process router.
const envFakeAgent = "ROUTER_TEST_FAKE_AGENT"

// TestMain runs the test binary as one of the tests' agents when asked:
// fakeAgent (scripted prompts) or testAgent (evict_test.go).
func TestMain(m *testing.M) {
	sandbox.RunIfRequested() // family_test.go confines its agent
	switch {
	case os.Getenv(envFakeAgent) != "":
		os.Exit(fakeAgent())
	case os.Getenv(envTestAgent) != "":
		os.Exit(testAgent())
	}
	os.Exit(m.Run())
}

// fakeAgent speaks ACP on stdin/stdout until EOF. session/new answers
// sessionId "sess-N" in mode "default". session/prompt runs the last text block of its
// prompt as a script, one command a line, on its own goroutine (the agent
// keeps reading meanwhile), then answers end_turn:
//
//	say TEXT   an agent_message_chunk with TEXT
//	read PATH  an fs/read_text_file request; not waited for
//	big N SIZE N agent_message_chunks of SIZE bytes of text ("big I xxx...")
//	wait       waits for the answers to this prompt's reads, and says each
//	           ("read PATH: ok CONTENT" or "read PATH: error MESSAGE")
//	perm CMD   a session/request_permission about running CMD (options ok:
//	           allow_once, always: allow_always, no: reject_once; its _meta
//	           names answerers of its own, which the router must not
//	           relay), waited for: says "perm: selected ID", "perm:
//	           cancelled" or "perm: error MESSAGE", then "perm meta: META"
//	           when the answer has a _meta
//	mode ID    a current_mode_update to ID
//	on-cancel HOW  session/set_mode (else -32601) is answered only once a
//	           $/cancel_request names it: with success (HOW apply: the
//	           mode was set anyway), or -32800 and a current_mode_update
//	           to that mode (HOW refuse-then-report)
//
// Other requests get -32601.
func fakeAgent() int {
	var mu sync.Mutex
	send := func(v any) {
		b, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.Write(append(b, '\n'))
	}
	type answer struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	var (
		pmu     sync.Mutex
		pending = map[string]chan answer{}
		nextID  int
		nextSes int
		// set_mode requests held (on-cancel), by id
		onCancel string
		heldMode = map[string][2]string{} // session id, mode id
	)
	run := func(id json.RawMessage, sid, script string) {
		say := func(text string) {
			send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": sid,
				"update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]string{"type": "text", "text": text}}}})
		}
		type read struct {
			path string
			ch   chan answer
		}
		var reads []read
		for _, line := range strings.Split(script, "\n") {
			cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
			switch cmd {
			case "say":
				say(arg)
			case "big":
				var n, size int
				fmt.Sscan(arg, &n, &size)
				for i := range n {
					text := fmt.Sprintf("big %d ", i)
					say(text + strings.Repeat("x", max(0, size-len(text))))
				}
			case "read":
				ch := make(chan answer, 1)
				pmu.Lock()
				nextID++
				rid := fmt.Sprintf(`"read-%d"`, nextID)
				pending[rid] = ch
				pmu.Unlock()
				reads = append(reads, read{arg, ch})
				send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(rid), "method": "fs/read_text_file", "params": map[string]string{"sessionId": sid, "path": arg}})
			case "perm":
				ch := make(chan answer, 1)
				pmu.Lock()
				nextID++
				rid := fmt.Sprintf(`"perm-%d"`, nextID)
				pending[rid] = ch
				pmu.Unlock()
				send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(rid), "method": "session/request_permission", "params": map[string]any{
					"sessionId": sid, "_meta": map[string]any{"acp-router/answerers": []string{"agent-forged"}, "x-agent": 1},
					"toolCall": map[string]any{"toolCallId": "tc-" + rid[1:len(rid)-1], "title": arg, "kind": "execute", "rawInput": map[string]string{"command": arg}},
					"options": []map[string]string{{"optionId": "ok", "name": "Allow", "kind": "allow_once"},
						{"optionId": "always", "name": "Always", "kind": "allow_always"}, {"optionId": "no", "name": "No", "kind": "reject_once"}}}})
				a := <-ch
				var res struct {
					Outcome struct {
						Outcome  string `json:"outcome"`
						OptionID string `json:"optionId"`
					} `json:"outcome"`
					Meta json.RawMessage `json:"_meta"`
				}
				switch {
				case a.Error != nil:
					say("perm: error " + a.Error.Message)
				case json.Unmarshal(a.Result, &res) != nil:
					say("perm: undecodable " + string(a.Result))
				case res.Outcome.Outcome == "selected":
					say("perm: selected " + res.Outcome.OptionID)
				default:
					say("perm: " + res.Outcome.Outcome)
				}
				if res.Meta != nil {
					say("perm meta: " + string(res.Meta))
				}
			case "mode":
				send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": sid,
					"update": map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": arg}}})
			case "on-cancel":
				pmu.Lock()
				onCancel = arg
				pmu.Unlock()
			case "wait":
				for _, r := range reads {
					a := <-r.ch
					var res struct{ Content string }
					if a.Error != nil {
						say(fmt.Sprintf("read %s: error %s", r.path, a.Error.Message))
					} else if json.Unmarshal(a.Result, &res) == nil {
						say(fmt.Sprintf("read %s: ok %s", r.path, res.Content))
					}
				}
				reads = nil
			}
		}
		send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]string{"stopReason": "end_turn"}})
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			answer
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		reply := func(result any) { send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result}) }
		switch {
		case m.Method == "" && len(m.ID) > 0:
			pmu.Lock()
			ch := pending[string(m.ID)]
			delete(pending, string(m.ID))
			pmu.Unlock()
			if ch != nil {
				ch <- m.answer
			}
		case m.Method == "initialize":
			reply(map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}})
		case m.Method == "session/new":
			nextSes++
			reply(map[string]any{"sessionId": fmt.Sprintf("sess-%d", nextSes),
				"modes": map[string]any{"currentModeId": "default", "availableModes": []map[string]string{{"id": "default", "name": "Default"}}}})
		case m.Method == "session/prompt":
			var p struct {
				SessionID string `json:"sessionId"`
				Prompt    []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"prompt"`
			}
			json.Unmarshal(m.Params, &p)
			script := ""
			for _, b := range p.Prompt {
				if b.Type == "text" {
					script = b.Text
				}
			}
			go run(m.ID, p.SessionID, script)
		case m.Method == "session/set_mode":
			var p struct{ SessionID, ModeID string }
			json.Unmarshal(m.Params, &p)
			pmu.Lock()
			held := onCancel != ""
			if held {
				heldMode[string(m.ID)] = [2]string{p.SessionID, p.ModeID}
			}
			pmu.Unlock()
			if !held {
				send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
			}
		case m.Method == "$/cancel_request":
			var p struct {
				RequestID json.RawMessage `json:"requestId"`
			}
			json.Unmarshal(m.Params, &p)
			pmu.Lock()
			h, ok := heldMode[string(p.RequestID)]
			delete(heldMode, string(p.RequestID))
			how := onCancel
			pmu.Unlock()
			switch {
			case !ok:
			case how == "apply":
				send(map[string]any{"jsonrpc": "2.0", "id": p.RequestID, "result": map[string]any{}})
			default:
				send(map[string]any{"jsonrpc": "2.0", "id": p.RequestID, "error": map[string]any{"code": -32800, "message": "request cancelled"}})
				send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": h[0],
					"update": map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": h[1]}}})
			}
		case m.Method != "" && len(m.ID) > 0:
			send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		}
	}
	return 0
}
