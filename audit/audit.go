// Package audit owns the permission audit log (DESIGN §6): one JSON object
// a line in a 0600 file, written and flushed per decision, rotated when it
// grows past a size cap. It never records file contents or environment
// values: callers pass evidence (paths, commands, domains) only.
package audit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Rotation: the log is capped at DefaultMaxBytes (or Open's maxBytes); a
// full log becomes FILE.1, FILE.1 becomes FILE.2, ... up to Generations.
const (
	DefaultMaxBytes = 64 << 20
	Generations     = 3
)

// Record is one audited decision. Field names are the log's (DESIGN §6).
type Record struct {
	Time       time.Time `json:"time"`
	DecisionID string    `json:"decisionId"`
	Session    string    `json:"session,omitempty"`
	Agent      string    `json:"agent,omitempty"`
	Method     string    `json:"method"`
	ToolCallID string    `json:"toolCallId,omitempty"`
	Evidence   any       `json:"evidence"`
	Decision   string    `json:"decision"`
	Rule       *string   `json:"rule"` // null when no rule decided
	Layer      string    `json:"layer,omitempty"`
	Source     string    `json:"source"` // rule | default | grant | user | builtin
	UserChoice string    `json:"userChoice,omitempty"`
	PolicyHash string    `json:"policyHash"`
	LatencyUs  int64     `json:"latencyUs"`
}

// Log appends records to a file. It is safe for concurrent use.
type Log struct {
	path     string
	maxBytes int64

	mu   sync.Mutex
	f    *os.File
	size int64
	seq  uint64
}

// Open opens (creating 0600, in a 0700 directory) the log at path.
// maxBytes <= 0 means DefaultMaxBytes.
func Open(path string, maxBytes int64) (*Log, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	l := &Log{path: path, maxBytes: maxBytes}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	// A file created earlier with looser permissions is tightened.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("audit: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: %w", err)
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// NewID returns a decision id unique within this log's process.
func (l *Log) NewID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	return fmt.Sprintf("%d-%d-%d", os.Getpid(), time.Now().UnixNano(), l.seq)
}

// Write appends one record and flushes it to the OS. When the file would
// grow past the cap, it is rotated first.
func (l *Log) Write(r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("audit: log closed")
	}
	if l.size > 0 && l.size+int64(len(line)) > l.maxBytes {
		l.f.Close()
		for g := Generations - 1; g >= 1; g-- {
			os.Rename(fmt.Sprintf("%s.%d", l.path, g), fmt.Sprintf("%s.%d", l.path, g+1))
		}
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return fmt.Errorf("audit: rotate: %w", err)
		}
		if err := l.open(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
