package config

import (
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// History configures the session store (DESIGN §4 `history:`).
type History struct {
	MaxTotalBytes int64         // default DefaultHistoryBytes
	MaxAge        time.Duration // default DefaultHistoryAge
	// MetadataOnly (`content: metadata-only`) keeps ids, titles, agents,
	// modes and options but no content.
	MetadataOnly bool
}

// Defaults of `history:`.
const (
	DefaultHistoryBytes = 1 << 30
	DefaultHistoryAge   = 720 * time.Hour
)

var historyKeys = []string{"max_total_bytes", "max_age", "content"}

func (p *parser) history(n *yaml.Node) History {
	h := History{MaxTotalBytes: DefaultHistoryBytes, MaxAge: DefaultHistoryAge}
	f := p.fields("history", n, historyKeys)
	if v := f["max_total_bytes"]; v != nil {
		if b, ok := p.size("history.max_total_bytes", v); ok {
			if b < 1<<20 {
				p.errorf(v, "history.max_total_bytes", "must be at least 1MiB, got %d bytes", b)
			}
			h.MaxTotalBytes = b
		}
	}
	if v := f["max_age"]; v != nil {
		if d := p.duration("history.max_age", v); d > 0 {
			h.MaxAge = d
		}
	}
	if v := f["content"]; v != nil {
		h.MetadataOnly = p.enum("history.content", v, "full", "metadata-only") == "metadata-only"
	}
	return h
}

// size reads a byte count: an integer, or a number with a unit B, KB, MB,
// GB, KiB, MiB, GiB (e.g. 1GiB, 500MB).
func (p *parser) size(path string, n *yaml.Node) (int64, bool) {
	if n.ShortTag() == "!!int" {
		var i int64
		if n.Decode(&i) == nil && i >= 0 {
			return i, true
		}
	}
	s, _ := p.str(path, n)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			if v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64); err == nil && v >= 0 && v <= (1<<62)/u.mult {
				return v * u.mult, true
			}
			break
		}
	}
	p.errorf(n, path, "expected a size such as 1GiB, 500MB or a number of bytes, got %s", yamlpos.Describe(n))
	return 0, false
}
