package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/upstream"
)

// The router advertises the union of its agents' prompt and MCP
// capabilities (merge.Capabilities); what one agent lacks is adapted here
// before it reaches that agent.

func agentCaps(inst *upstream.Instance) acp.AgentCapabilities {
	if init := inst.Init(); init != nil {
		return init.AgentCapabilities
	}
	return acp.AgentCapabilities{}
}

// adaptNewSession drops MCP servers whose transport the agent does not
// support, with a warning: the session still starts. It drops
// additionalDirectories when the agent does not take them
// (sessionCapabilities.additionalDirectories): the agent is told them in
// its first prompt instead (briefAndRecord), and the policy's ${roots}
// covers them whatever the agent (Session.roots).
func adaptNewSession(p json.RawMessage, caps acp.AgentCapabilities, agent string, log hclog.Logger) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(p, &fields) != nil {
		return p
	}
	changed := false
	if dirs, ok := fields["additionalDirectories"]; ok && !acp.Supported(caps.SessionCapabilities.AdditionalDirectories) {
		log.Info("agent does not take additional directories; its first prompt names them", "agent", agent, "directories", string(dirs))
		delete(fields, "additionalDirectories")
		changed = true
	}
	var servers []json.RawMessage
	if json.Unmarshal(fields["mcpServers"], &servers) == nil {
		kept := make([]json.RawMessage, 0, len(servers))
		for _, srv := range servers {
			var s struct {
				Name string `json:"name"`
				Type string `json:"type"`
			}
			if err := json.Unmarshal(srv, &s); err != nil {
				// A server the router cannot read is no transport it knows
				// the agent lacks: passed on as sent, the agent answers it.
				kept = append(kept, srv)
				continue
			}
			if (s.Type == "http" && !caps.MCPCapabilities.HTTP) || (s.Type == "sse" && !caps.MCPCapabilities.SSE) || (s.Type == "acp" && !caps.MCPCapabilities.ACP) {
				log.Warn("agent does not support this MCP transport; server left out", "agent", agent, "server", s.Name, "transport", s.Type)
				changed = true
				continue
			}
			kept = append(kept, srv)
		}
		if changed {
			fields["mcpServers"], _ = json.Marshal(kept)
		}
	}
	if !changed {
		return p
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return p
	}
	return out
}

// adaptPrompt rewrites content blocks the agent cannot take: images and
// audio become a text marker naming the mime type, an embedded resource
// becomes its text.
func adaptPrompt(p json.RawMessage, caps acp.AgentCapabilities, title string) json.RawMessage {
	pc := caps.PromptCapabilities
	if pc.Image && pc.Audio && pc.EmbeddedContext || !needsAdapting(p, pc.Image, pc.Audio, pc.EmbeddedContext) {
		return p
	}
	var fields map[string]json.RawMessage
	var blocks []json.RawMessage
	if json.Unmarshal(p, &fields) != nil || json.Unmarshal(fields["prompt"], &blocks) != nil {
		return p
	}
	changed := false
	for i, b := range blocks {
		var blk struct {
			Type     string `json:"type"`
			MimeType string `json:"mimeType"`
			Resource struct {
				URI      string  `json:"uri"`
				Text     *string `json:"text"`
				MimeType string  `json:"mimeType"`
			} `json:"resource"`
		}
		if json.Unmarshal(b, &blk) != nil {
			continue
		}
		var text string
		switch {
		case blk.Type == "image" && !pc.Image:
			text = fmt.Sprintf("[image (%s) omitted: %s does not accept images]", blk.MimeType, title)
		case blk.Type == "audio" && !pc.Audio:
			text = fmt.Sprintf("[audio (%s) omitted: %s does not accept audio]", blk.MimeType, title)
		case blk.Type == "resource" && !pc.EmbeddedContext:
			if blk.Resource.Text != nil {
				text = *blk.Resource.Text
			} else {
				text = fmt.Sprintf("[file %s (%s) omitted: %s does not accept embedded files]", blk.Resource.URI, blk.Resource.MimeType, title)
			}
		default:
			continue
		}
		blocks[i], _ = json.Marshal(map[string]string{"type": "text", "text": text})
		changed = true
	}
	if !changed {
		return p
	}
	fields["prompt"], _ = json.Marshal(blocks)
	out, err := json.Marshal(fields)
	if err != nil {
		return p
	}
	return out
}

// adaptSystemPrompt fits the session's systemPrompt (acp-currency row 6)
// to an agent's sessionCapabilities.systemPrompt before session/new, load
// or resume: passed when the agent takes its mode; an append prompt is
// removed and returned as text, for the agent's first prompt (carryLocked);
// an override, which text in a prompt cannot carry, is refused with an
// error naming the agent, never dropped.
func adaptSystemPrompt(p json.RawMessage, caps acp.AgentCapabilities, agent string) (json.RawMessage, string, error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(p, &fields) != nil {
		return p, "", nil
	}
	raw, ok := fields["systemPrompt"]
	if !ok || string(raw) == "null" {
		return p, "", nil
	}
	var sp struct {
		Mode    string `json:"mode"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &sp); err != nil {
		return nil, "", fail(errParams, "acp-router: malformed systemPrompt: "+err.Error(), map[string]string{"agent": agent})
	}
	if acp.SystemPromptMode(caps.SessionCapabilities.SystemPrompt, sp.Mode) {
		return p, "", nil
	}
	if sp.Mode != "append" {
		return nil, "", fail(errParams, fmt.Sprintf("acp-router: agent %q does not support a systemPrompt in %q mode, and the router cannot carry one for it; start a session without it, or use append", agent, sp.Mode),
			map[string]string{"agent": agent})
	}
	var texts []string
	for _, b := range sp.Content {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	delete(fields, "systemPrompt")
	out, err := json.Marshal(fields)
	if err != nil {
		return p, "", nil
	}
	return out, strings.Join(texts, "\n"), nil
}

// needsAdapting reports whether a block of the prompt in p (params the
// router built from a line it validated) is of a type the agent does not
// take; when in doubt (a type written with escapes, p not read), true.
func needsAdapting(p json.RawMessage, image, audio, embedded bool) bool {
	var prompt [1]json.RawMessage
	if acp.MembersOfValid(p, promptMember, prompt[:]) != nil {
		return true
	}
	needs := false
	err := acp.EachElementOfValid(prompt[0], func(b json.RawMessage) bool {
		var typ [1]json.RawMessage
		switch {
		case acp.MembersOfValid(b, typeMember, typ[:]) != nil, bytes.IndexByte(typ[0], '\\') >= 0:
			needs = true
		case string(typ[0]) == `"image"`:
			needs = !image
		case string(typ[0]) == `"audio"`:
			needs = !audio
		case string(typ[0]) == `"resource"`:
			needs = !embedded
		}
		return !needs
	})
	return needs || err != nil
}

var (
	promptMember = []string{"prompt"}
	typeMember   = []string{"type"}
)
