package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// fakeAgent is a Serve that answers like an agent, for the transport's
// tests until the hub is wired: initialize, session/new, session/load
// (one history chunk, then the answer), session/cancel, and session/prompt
// by its text: "ask" asks session/request_permission first, "wait" waits
// for session/cancel, "flood N" sends N chunks, anything else is echoed.
// Sessions are shared between connections, so that another connection
// can load one.
type fakeAgent struct {
	mu       sync.Mutex
	sessions int
	// served counts Serve calls that returned (the hub saw the client go).
	served int
	gone   chan Identity
}

func newFakeAgent() *fakeAgent { return &fakeAgent{gone: make(chan Identity, 100000)} }

type rpc struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

func chunk(sid, text string) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": sid,
		"update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": text}}}}
}

func reply(id json.RawMessage, result any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "result": result}
}

func (a *fakeAgent) Serve(ctx context.Context, c Conn, id Identity) error {
	defer func() {
		a.mu.Lock()
		a.served++
		a.mu.Unlock()
		a.gone <- id
	}()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var wmu sync.Mutex
	write := func(v any) error {
		b, _ := json.Marshal(v)
		wmu.Lock()
		defer wmu.Unlock()
		return c.Write(ctx, b)
	}
	var mu sync.Mutex
	answers := map[string]chan json.RawMessage{}
	cancels := map[string]chan struct{}{}
	asked := 0
	for {
		b, err := c.Read(ctx)
		if err != nil {
			return nil
		}
		var m rpc
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		var p struct {
			SessionID string `json:"sessionId"`
			Prompt    []struct {
				Text string `json:"text"`
			} `json:"prompt"`
		}
		json.Unmarshal(m.Params, &p)
		switch m.Method {
		case "":
			mu.Lock()
			ch := answers[string(m.ID)]
			mu.Unlock()
			if ch != nil {
				ch <- m.Result
			}
		case "initialize":
			write(reply(m.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{"loadSession": true}, "authMethods": []any{}}))
		case "session/new":
			a.mu.Lock()
			a.sessions++
			sid := "sess-" + strconv.Itoa(a.sessions)
			a.mu.Unlock()
			write(reply(m.ID, map[string]any{"sessionId": sid}))
		case "session/load":
			write(chunk(p.SessionID, "history of "+p.SessionID))
			write(reply(m.ID, map[string]any{}))
		case "session/cancel":
			mu.Lock()
			if ch := cancels[p.SessionID]; ch != nil {
				close(ch)
				delete(cancels, p.SessionID)
			}
			mu.Unlock()
		case "session/prompt":
			text := ""
			if len(p.Prompt) > 0 {
				text = p.Prompt[0].Text
			}
			sid, id := p.SessionID, m.ID
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch {
				case text == "ask":
					mu.Lock()
					asked++
					pid := fmt.Sprintf(`"perm-%d"`, asked)
					ch := make(chan json.RawMessage, 1)
					answers[pid] = ch
					mu.Unlock()
					write(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(pid), "method": "session/request_permission", "params": map[string]any{
						"sessionId": sid, "toolCall": map[string]any{"toolCallId": "tc-1", "title": "touch x", "kind": "edit"},
						"options": []any{map[string]any{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
							map[string]any{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}})
					var res struct {
						Outcome struct {
							OptionID string `json:"optionId"`
						} `json:"outcome"`
					}
					select {
					case r := <-ch:
						json.Unmarshal(r, &res)
					case <-ctx.Done():
						return
					}
					write(chunk(sid, "permission: "+res.Outcome.OptionID))
					write(reply(id, map[string]any{"stopReason": "end_turn"}))
				case text == "wait":
					ch := make(chan struct{})
					mu.Lock()
					cancels[sid] = ch
					mu.Unlock()
					write(chunk(sid, "waiting"))
					select {
					case <-ch:
					case <-ctx.Done():
						return
					}
					write(reply(id, map[string]any{"stopReason": "cancelled"}))
				case strings.HasPrefix(text, "flood "):
					n, _ := strconv.Atoi(strings.TrimPrefix(text, "flood "))
					for range n {
						if write(chunk(sid, "x")) != nil {
							return
						}
					}
					write(reply(id, map[string]any{"stopReason": "end_turn"}))
				default:
					write(chunk(sid, "echo: "+text))
					write(reply(id, map[string]any{"stopReason": "end_turn"}))
				}
			}()
		}
	}
}
