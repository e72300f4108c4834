package config

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// DefaultCompareMaxAgents bounds the agents of one /compare (issue 32) when
// compare.max_agents is not set: each runs a whole turn at once, at its
// cost, and the editor shows every answer.
const DefaultCompareMaxAgents = 4

// Compare is the compare: block (issue 32): /compare PROMPT without agent
// names asks Default; one /compare names at most MaxAgents agents.
type Compare struct {
	Default []string
	// MaxAgents: 0 is DefaultCompareMaxAgents (Max).
	MaxAgents int
}

// Max is the most agents one /compare may name.
func (c Compare) Max() int {
	if c.MaxAgents == 0 {
		return DefaultCompareMaxAgents
	}
	return c.MaxAgents
}

var compareKeys = []string{"default", "max_agents"}

func (p *parser) compare(n *yaml.Node, agents []string) Compare {
	var c Compare
	f := p.fields("compare", n, compareKeys)
	if f == nil {
		return c
	}
	if v := f["max_agents"]; v != nil {
		if m, ok := p.integer("compare.max_agents", v); ok {
			if m < 2 {
				p.errorf(v, "compare.max_agents", "must be at least 2 (a comparison needs two agents), got %d", m)
			}
			c.MaxAgents = m
		}
	}
	if v := f["default"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, "compare.default", "expected a list of agent names, got %s", yamlpos.Describe(v))
			return c
		}
		for i, item := range v.Content {
			path := fmt.Sprintf("compare.default[%d]", i)
			name := p.target(path, item, agents)
			if slices.Contains(c.Default, name) {
				p.errorf(item, path, "agent %q is listed twice", name)
				continue
			}
			c.Default = append(c.Default, name)
		}
		switch {
		case len(c.Default) < 2:
			p.errorf(v, "compare.default", "must list at least two agents, got %d", len(c.Default))
		case c.MaxAgents == 0 || c.MaxAgents >= 2:
			if len(c.Default) > c.Max() {
				p.errorf(v, "compare.default", "lists %d agents, more than compare.max_agents (%d)", len(c.Default), c.Max())
			}
		}
	}
	return c
}
