package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/acp-router/acp-router/internal/atomicfile"
)

// A running router records, in StateDir/running/PID.json, which config
// file it runs and the fingerprint (Keys) of what it applied, so that
// `acp-router check` can name the edits a running router has not applied
// ("restart to apply"). The record holds hashes, never values.

// Running is one running router's record.
type Running struct {
	PID  int               `json:"pid"`
	File string            `json:"file"`
	Keys map[string]string `json:"keys"`
}

func runningDir(stateDir string) string { return filepath.Join(stateDir, "running") }

// WriteRunning records this process's applied config (again after each
// reload). The file is replaced atomically.
func WriteRunning(stateDir, file string, keys map[string]string) error {
	dir := runningDir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("config: running record: %w", err)
	}
	b, err := json.Marshal(Running{PID: os.Getpid(), File: file, Keys: keys})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, strconv.Itoa(os.Getpid())+".json"), b); err != nil {
		return fmt.Errorf("config: running record: %w", err)
	}
	return nil
}

// RemoveRunning deletes this process's record (at exit).
func RemoveRunning(stateDir string) {
	os.Remove(filepath.Join(runningDir(stateDir), strconv.Itoa(os.Getpid())+".json"))
}

// ReadRunning returns the records of the routers alive now that run the
// config file; records of routers that are gone are removed.
func ReadRunning(stateDir, file string) ([]Running, error) {
	dir := runningDir(stateDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: running records: %w", err)
	}
	var out []Running
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		pid, err := strconv.Atoi(name)
		if !ok || err != nil {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if !alive(pid) {
			os.Remove(path)
			continue
		}
		b, err := os.ReadFile(path)
		var r Running
		if err != nil || json.Unmarshal(b, &r) != nil || r.File != file {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// alive: a process with that pid exists (a recycled pid counts: the
// record is then only a stale hint, harmless for check).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// A router that listens (listen:, serve --listen) records where, in
// StateDir/running/PID.listen, so that several routers on one machine are
// each found (`acp-router check`, a client looking for the router of an
// editor window) whatever port each one got.

// Listening is one listening router's record.
type Listening struct {
	PID int `json:"pid"`
	// URL is the /acp endpoint, with the port the router really has.
	URL string `json:"url"`
	// File is the config file the router runs ("" without one).
	File string `json:"file,omitempty"`
	// Stdio: the router also serves an editor on stdio.
	Stdio bool `json:"stdio,omitempty"`
}

func listeningPath(stateDir string, pid int) string {
	return filepath.Join(runningDir(stateDir), strconv.Itoa(pid)+".listen")
}

// WriteListening records this process's listening address, replacing
// the file atomically.
func WriteListening(stateDir string, l Listening) error {
	dir := runningDir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("config: listening record: %w", err)
	}
	l.PID = os.Getpid()
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(listeningPath(stateDir, l.PID), b); err != nil {
		return fmt.Errorf("config: listening record: %w", err)
	}
	return nil
}

// RemoveListening deletes this process's listening record (at exit).
func RemoveListening(stateDir string) {
	os.Remove(listeningPath(stateDir, os.Getpid()))
}

// ReadListening returns the records of the listening routers alive now,
// whatever config they run, by pid; records of routers that are gone are
// removed.
func ReadListening(stateDir string) ([]Listening, error) {
	entries, err := os.ReadDir(runningDir(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: listening records: %w", err)
	}
	var out []Listening
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".listen")
		pid, err := strconv.Atoi(name)
		if !ok || err != nil {
			continue
		}
		path := filepath.Join(runningDir(stateDir), e.Name())
		if !alive(pid) {
			os.Remove(path)
			continue
		}
		b, err := os.ReadFile(path)
		var l Listening
		if err != nil || json.Unmarshal(b, &l) != nil || l.PID != pid {
			continue
		}
		out = append(out, l)
	}
	return out, nil
}
