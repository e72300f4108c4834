package acp

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/sourcegraph/jsonrpc2"
)

// TestPeerActivity pins what idle detection reads (issue 5 req. 7): every
// message either way counts, our calls are outstanding until answered and
// the peer's requests until we answer them (also with ids the stream
// replaces by tokens, and an id used twice); CloseIfIdle closes only a
// connection unchanged since the snapshot with nothing outstanding, and a
// Call after it fails. In a synctest bubble: each count is read once the
// bubble is idle, not polled.
func TestPeerActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		requests := make(chan *jsonrpc2.Request, 4)
		h := handlerFunc(func(_ context.Context, _ *jsonrpc2.Conn, r *jsonrpc2.Request) {
			if !r.Notif {
				requests <- r
			}
		})
		p, remote := newPeerHarness(t, StreamOptions{}, h)
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()

		// Once every goroutine of the bubble is blocked, what was sent or
		// received has been counted.
		want := func(t *testing.T, what string, w Activity) {
			t.Helper()
			synctest.Wait()
			if got := p.Activity(); got != w {
				t.Fatalf("%s: Activity = %+v, want %+v", what, got, w)
			}
		}
		want(t, "at start", Activity{})
		if (Activity{}).Busy() || !(Activity{Calls: 1}).Busy() || !(Activity{Requests: 1}).Busy() {
			t.Error("Busy is wrong")
		}

		start := p.Activity()
		c, err := p.Call(ctx, "m", nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want(t, "our call sent", Activity{Messages: 1, Calls: 1})
		f := decodeFields(t, recv(t, remote.Out))
		if p.CloseIfIdle(start) {
			t.Fatal("CloseIfIdle closed a connection that changed since the snapshot")
		}
		if p.CloseIfIdle(p.Activity()) {
			t.Fatal("CloseIfIdle closed a connection with a call outstanding")
		}
		write(t, remote.In, `{"jsonrpc":"2.0","id":`+string(f["id"])+`,"result":1}`+"\n")
		if _, err := c.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		want(t, "our call answered", Activity{Messages: 2})

		// A negative id is replaced by a token on the way in; "x" comes twice.
		write(t, remote.In, `{"jsonrpc":"2.0","id":-1,"method":"ask"}`+"\n"+
			`{"jsonrpc":"2.0","id":"x","method":"ask"}`+"\n"+
			`{"jsonrpc":"2.0","id":"x","method":"ask"}`+"\n"+
			`{"jsonrpc":"2.0","method":"note"}`+"\n")
		want(t, "the peer's requests received", Activity{Messages: 6, Requests: 3})
		if p.CloseIfIdle(p.Activity()) {
			t.Fatal("CloseIfIdle closed a connection with a request of the peer outstanding")
		}
		for i := range 3 {
			r := <-requests
			if err := p.Reply(ctx, r.ID, json.RawMessage(`"ok"`), nil); err != nil {
				t.Fatal(err)
			}
			want(t, "a request answered", Activity{Messages: uint64(7 + i), Requests: 2 - i})
			recv(t, remote.Out)
		}

		if !p.CloseIfIdle(p.Activity()) {
			t.Fatal("CloseIfIdle did not close an idle connection")
		}
		waitClosed(t, p.Done(), "the connection to close")
		if _, err := p.Call(ctx, "m", nil, nil, nil); !errors.Is(err, jsonrpc2.ErrClosed) {
			t.Errorf("Call after CloseIfIdle: %v, want jsonrpc2.ErrClosed", err)
		}
	})
}
