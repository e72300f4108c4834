// Package console is the terminal client behind `acp-router try`: it runs
// the router in-process, plays the editor for one prompt, and prints the
// stream readably (text, tool calls with status, plans, permission asks).
package console

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/config"
	"github.com/acp-router/acp-router/guard"
	"github.com/acp-router/acp-router/router"
	"github.com/acp-router/acp-router/sandbox"
)

// Answer picks a permission option: the index into options, or -1 to
// cancel.
type Answer func(c *Client, title string, options []Option) int

// Option is one permission choice offered by an agent.
type Option struct {
	ID   string `json:"optionId"`
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// Allow picks the first allow option.
func Allow(_ *Client, _ string, options []Option) int {
	return pick(options, "allow_once", "allow_always")
}

// Reject picks the first reject option.
func Reject(_ *Client, _ string, options []Option) int {
	return pick(options, "reject_once", "reject_always")
}

func pick(options []Option, kinds ...string) int {
	for _, k := range kinds {
		for i, o := range options {
			if o.Kind == k {
				return i
			}
		}
	}
	return -1
}

// Ask asks on the terminal.
func Ask(c *Client, title string, options []Option) int {
	fmt.Fprintf(c.out, "\n? permission: %s\n", title)
	for i, o := range options {
		fmt.Fprintf(c.out, "  %d) %s [%s]\n", i+1, o.Name, o.Kind)
	}
	for {
		fmt.Fprintf(c.out, "choose 1-%d (empty cancels): ", len(options))
		line, err := c.in.ReadString('\n')
		line = strings.TrimSpace(line)
		if line == "" {
			return -1
		}
		if n, convErr := strconv.Atoi(line); convErr == nil && n >= 1 && n <= len(options) {
			return n - 1
		}
		if err != nil {
			return -1
		}
	}
}

// Options configure Try.
type Options struct {
	Prompt string
	Agent  string // "" = routed as usual
	// Guard enforces the permission policy, as for an editor.
	Guard *guard.Guard
	// Confine is the agents' sandbox, as for an editor (router.Options).
	Confine func(config.Agent) (*sandbox.Plan, error)
	Answer  Answer
	Logger  hclog.Logger
	Out     io.Writer
	In      io.Reader
}

// Client is the editor side of a try run.
type Client struct {
	out    io.Writer
	in     *bufio.Reader
	answer Answer

	mu     sync.Mutex
	titles map[string]string // tool call id → title
	inText bool              // the last thing printed was message text
}

// Try runs the router in-process with cfg and sends it one prompt. It
// returns 0 when the turn ended normally.
func Try(ctx context.Context, cfg *config.Config, opts Options) (int, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	r := router.New(cfg, router.Options{Logger: opts.Logger, Version: router.Version(), ForceAgent: opts.Agent, Guard: opts.Guard, Confine: opts.Confine})
	toRouterR, toRouterW := io.Pipe()
	fromRouterR, fromRouterW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- r.Serve(context.WithoutCancel(ctx), toRouterR, fromRouterW) }()

	c := &Client{out: opts.Out, in: bufio.NewReader(opts.In), answer: opts.Answer, titles: map[string]string{}}
	peer := acp.NewPeer(ctx, fromRouterR, toRouterW, acp.StreamOptions{Logger: opts.Logger.Named("try")}, c)
	code, err := c.run(ctx, peer, opts.Prompt)
	peer.Close() // the router sees EOF and shuts its agents down
	<-served
	return code, err
}

func (c *Client) run(ctx context.Context, peer *acp.Peer, prompt string) (int, error) {
	call := func(method string, params any) (json.RawMessage, error) {
		cl, err := peer.Call(ctx, method, params, nil, nil)
		if err != nil {
			return nil, err
		}
		return cl.Wait(ctx)
	}
	if _, err := call(acp.MethodInitialize, map[string]any{
		"protocolVersion":    acp.ProtocolVersion,
		"clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": true, "writeTextFile": true}},
		"clientInfo":         map[string]string{"name": "acp-router-try", "version": router.Version()},
	}); err != nil {
		return 1, fmt.Errorf("initialize: %w", describe(err))
	}
	cwd, err := os.Getwd()
	if err != nil {
		return 1, err
	}
	res, err := call(acp.MethodSessionNew, map[string]any{"cwd": cwd, "mcpServers": []any{}})
	if err != nil {
		return 1, fmt.Errorf("session/new: %w", describe(err))
	}
	var s acp.SessionRef
	json.Unmarshal(res, &s)
	done := make(chan struct{})
	defer close(done)
	go func() { // Ctrl-C cancels the turn first
		select {
		case <-ctx.Done():
			peer.Notify(context.Background(), acp.MethodSessionCancel, s)
		case <-done:
		}
	}()
	res, err = call(acp.MethodSessionPrompt, map[string]any{
		"sessionId": s.SessionID,
		"prompt":    []any{map[string]string{"type": "text", "text": prompt}},
	})
	if err != nil {
		return 1, fmt.Errorf("session/prompt: %w", describe(err))
	}
	var pr struct {
		StopReason string `json:"stopReason"`
	}
	json.Unmarshal(res, &pr)
	c.printf(false, "\n[%s]\n", pr.StopReason)
	if pr.StopReason != "end_turn" {
		return 1, nil
	}
	return 0, nil
}

// describe makes an ACP error readable, with the agent's stderr tail.
func describe(err error) error {
	var e *jsonrpc2.Error
	if !errors.As(err, &e) {
		return err
	}
	msg := e.Message
	if e.Data != nil {
		var d struct {
			StderrTail string `json:"stderrTail"`
		}
		if json.Unmarshal(*e.Data, &d) == nil && d.StderrTail != "" {
			msg += "\nagent stderr:\n  " + strings.ReplaceAll(d.StderrTail, "\n", "\n  ")
		}
	}
	return fmt.Errorf("%s (code %d)", msg, e.Code)
}

// printf prints; text continues the current message line, anything else
// starts on a fresh line.
func (c *Client) printf(text bool, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !text && c.inText {
		fmt.Fprintln(c.out)
	}
	c.inText = text
	fmt.Fprintf(c.out, format, args...)
}

// Handle is the editor side: session updates, permission asks, files.
func (c *Client) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p json.RawMessage
	if req.Params != nil {
		p = *req.Params
	}
	switch req.Method {
	case acp.MethodSessionUpdate:
		c.update(p)
	case acp.MethodRequestPermission:
		go c.reply(ctx, conn, req, c.permission, p)
	case acp.MethodReadTextFile:
		go c.reply(ctx, conn, req, readFile, p)
	case acp.MethodWriteTextFile:
		go c.reply(ctx, conn, req, writeFile, p)
	default:
		if !req.Notif {
			conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: acp.CodeMethodNotFound, Message: "method not found"})
		}
	}
}

// reply answers req with what handle makes of its params; it runs outside
// the read loop, since asking on the terminal takes a while.
func (c *Client) reply(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request, handle func(json.RawMessage) (any, error), p json.RawMessage) {
	res, err := handle(p)
	if err != nil {
		conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: acp.CodeInternalError, Message: err.Error()})
		return
	}
	conn.Reply(ctx, req.ID, res)
}

type toolCall struct {
	ID     string `json:"toolCallId"`
	Title  string `json:"title"`
	Kind   string `json:"kind"`
	Status string `json:"status"`
}

func (c *Client) update(p json.RawMessage) {
	var n struct {
		Update struct {
			Kind    string          `json:"sessionUpdate"`
			Content json.RawMessage `json:"content"` // a block, or a tool call's list
			toolCall
			Entries []struct {
				Content string `json:"content"`
				Status  string `json:"status"`
			} `json:"entries"`
		} `json:"update"`
	}
	if json.Unmarshal(p, &n) != nil {
		return
	}
	u := n.Update
	var text struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(u.Content, &text)
	switch u.Kind {
	case "agent_message_chunk":
		if text.Type == "text" {
			c.printf(true, "%s", text.Text)
		}
	case "agent_thought_chunk":
		if text.Type == "text" {
			c.printf(false, "(thinking) %s\n", text.Text)
		}
	case "tool_call":
		c.mu.Lock()
		c.titles[u.ID] = u.Title
		c.mu.Unlock()
		c.printf(false, "[tool %s] %s (%s)\n", orDefault(u.toolCall.Kind, "other"), u.Title, orDefault(u.Status, "pending"))
	case "tool_call_update":
		c.mu.Lock()
		if u.Title != "" {
			c.titles[u.ID] = u.Title
		}
		title := c.titles[u.ID]
		c.mu.Unlock()
		if u.Status != "" {
			c.printf(false, "[tool] %s: %s\n", orDefault(title, u.ID), u.Status)
		}
	case "plan":
		var b strings.Builder
		b.WriteString("[plan]\n")
		for _, e := range u.Entries {
			fmt.Fprintf(&b, "  [%s] %s\n", e.Status, e.Content)
		}
		c.printf(false, "%s", b.String())
	}
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func (c *Client) permission(p json.RawMessage) (any, error) {
	var req struct {
		ToolCall toolCall `json:"toolCall"`
		Options  []Option `json:"options"`
	}
	if err := json.Unmarshal(p, &req); err != nil {
		return nil, err
	}
	title := req.ToolCall.Title
	if title == "" {
		c.mu.Lock()
		title = orDefault(c.titles[req.ToolCall.ID], req.ToolCall.ID)
		c.mu.Unlock()
	}
	i := c.answer(c, title, req.Options)
	if i < 0 || i >= len(req.Options) {
		c.printf(false, "[permission] %s: cancelled\n", title)
		return map[string]any{"outcome": map[string]string{"outcome": "cancelled"}}, nil
	}
	c.printf(false, "[permission] %s: %s\n", title, req.Options[i].Name)
	return map[string]any{"outcome": map[string]string{"outcome": "selected", "optionId": req.Options[i].ID}}, nil
}

func readFile(p json.RawMessage) (any, error) {
	var req struct {
		Path  string `json:"path"`
		Line  int    `json:"line"`
		Limit int    `json:"limit"`
	}
	if err := json.Unmarshal(p, &req); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(req.Path)
	if err != nil {
		return nil, err
	}
	content := string(b)
	if req.Line > 0 || req.Limit > 0 {
		lines := strings.SplitAfter(content, "\n")
		start := max(req.Line-1, 0)
		start = min(start, len(lines))
		end := len(lines)
		if req.Limit > 0 {
			end = min(start+req.Limit, end)
		}
		content = strings.Join(lines[start:end], "")
	}
	return map[string]string{"content": content}, nil
}

func writeFile(p json.RawMessage) (any, error) {
	var req struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(p, &req); err != nil {
		return nil, err
	}
	if err := os.WriteFile(req.Path, []byte(req.Content), 0o644); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}
