package upstream

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acp-router/acp-router/config"
)

// pipeLink is a Link to an in-memory agent that answers every request with
// an initialize result.
type pipeLink struct {
	done  chan struct{}
	close func()
}

func newPipeLink(t *testing.T) (*Link, *pipeLink) {
	t.Helper()
	outR, outW := io.Pipe() // the agent's messages
	inR, inW := io.Pipe()   // to the agent
	pl := &pipeLink{done: make(chan struct{})}
	pl.close = sync.OnceFunc(func() {
		outW.CloseWithError(io.EOF)
		inR.CloseWithError(io.ErrClosedPipe)
		close(pl.done)
	})
	go func() {
		sc := bufio.NewScanner(inR)
		for sc.Scan() {
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil {
				continue
			}
			outW.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":1,"agentCapabilities":{}}}` + "\n"))
		}
		pl.close() // what it is told ended: the link is gone
	}()
	return &Link{Out: outR, In: inW, Done: pl.done, Err: func() error { return errors.New("link closed") }, Close: pl.close}, pl
}

// TestLinkAgent: an agent with a Connect is initialized over its link,
// needs no command, and Stop ends the link.
func TestLinkAgent(t *testing.T) {
	var links []*pipeLink
	a := New(config.Agent{Name: config.SuccessorName, StartupTimeout: 5 * time.Second, StallTimeout: 5 * time.Second}, Options{})
	a.SetConnect(func() (*Link, error) {
		l, pl := newPipeLink(t)
		links = append(links, pl)
		return l, nil
	})
	inst, err := a.Ready(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if inst.Init() == nil || inst.Init().ProtocolVersion != 1 {
		t.Fatalf("init = %+v", inst.Init())
	}
	a.Stop()
	select {
	case <-links[0].done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end the link")
	}
	if st, _ := a.Status(); st != Stopped {
		t.Errorf("state %v after Stop", st)
	}
}

// TestLinkEnds: a link that ends by itself fails the agent with the link's
// error; the next Ready connects again.
func TestLinkEnds(t *testing.T) {
	var links []*pipeLink
	a := New(config.Agent{Name: config.SuccessorName, StartupTimeout: 5 * time.Second, StallTimeout: 5 * time.Second}, Options{RestartWindow: time.Minute})
	a.SetConnect(func() (*Link, error) {
		l, pl := newPipeLink(t)
		links = append(links, pl)
		return l, nil
	})
	t.Cleanup(a.Stop)
	inst, err := a.Ready(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	links[0].close()
	select {
	case <-inst.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("the instance did not end with its link")
	}
	if st, err := a.Status(); st != Failed || err == nil || !strings.Contains(err.Error(), "link closed") {
		t.Errorf("status %v, %v: want failed with the link's error", st, err)
	}
	if _, err := a.Ready(t.Context()); err != nil {
		t.Fatalf("Ready after the link ended: %v", err)
	}
	if len(links) != 2 {
		t.Errorf("%d links, want 2", len(links))
	}
}

// TestNoCommand: the successor without a command cannot start outside a
// proxy chain, and says so.
func TestNoCommand(t *testing.T) {
	a := New(config.Agent{Name: config.SuccessorName, StartupTimeout: time.Second}, Options{})
	_, err := a.Ready(t.Context())
	if !errors.Is(err, ErrNoProcess) || !strings.Contains(err.Error(), "proxy chain") {
		t.Fatalf("err = %v", err)
	}
}
