package config

import (
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/acp-router/acp-router/yamlpos"
)

// Permissions is the user layer of the permission policy, kept as YAML:
// the policy package compiles it (config may not import policy; DESIGN §2),
// so its errors still carry the config file's line and column.
type Permissions struct {
	// File is the name the config was parsed under (error positions).
	File string
	// Node is the value of the permissions: key.
	Node *yaml.Node
	// Home expands ~ in include: paths.
	Home string
}

// Audit says where permission decisions are logged (DESIGN §6).
type Audit struct {
	// File is the audit log. Empty: $XDG_STATE_HOME/acp-router/audit.jsonl
	// (DefaultAuditFile) whenever a policy is in force.
	File string
	// MaxBytes is the size at which the log is rotated; 0: the audit
	// package's default.
	MaxBytes int64
	Pos      Pos
}

var auditKeys = []string{"file", "max_bytes"}

func (p *parser) permissions(n *yaml.Node) *Permissions {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "permissions", "expected a mapping, got %s", yamlpos.Describe(n))
		return nil
	}
	return &Permissions{File: p.file, Node: n, Home: p.home}
}

func (p *parser) audit(n *yaml.Node) Audit {
	a := Audit{Pos: p.pos(n)}
	f := p.fields("audit", n, auditKeys)
	if v := f["file"]; v != nil {
		a.File = p.path("audit.file", v, false)
	}
	if v := f["max_bytes"]; v != nil {
		if b, ok := p.integer("audit.max_bytes", v); ok {
			if b < 4096 {
				p.errorf(v, "audit.max_bytes", "must be at least 4096, got %d", b)
			}
			a.MaxBytes = int64(b)
		}
	}
	return a
}

// defaultAuditFile is $XDG_STATE_HOME/acp-router/audit.jsonl, else
// ~/.local/state/acp-router/audit.jsonl; "" when neither is absolute (the
// router then refuses to enforce a policy it cannot audit).
func (p *parser) defaultAuditFile() string {
	if dir, ok := p.env("XDG_STATE_HOME"); ok && filepath.IsAbs(dir) {
		return filepath.Join(dir, "acp-router", "audit.jsonl")
	}
	if filepath.IsAbs(p.home) {
		return filepath.Join(p.home, ".local", "state", "acp-router", "audit.jsonl")
	}
	return ""
}
