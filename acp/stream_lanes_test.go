package acp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// laneMsg is a notification in session sid ("": none), numbered like
// checkSequences wants, padded to about size bytes.
func laneMsg(sid string, w, n, size int) []byte {
	params := `{}`
	if sid != "" {
		params = fmt.Sprintf(`{"sessionId":%q}`, sid)
	}
	head := fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":%s,"w":%d,"n":%d,"pad":"`, params, w, n)
	return []byte(head + strings.Repeat("p", max(size-len(head)-2, 0)) + `"}`)
}

// laneBytes is what lane key has queued (WaitRoom's measure).
func laneBytes(s *Stream, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.laneBytesLocked(key)
}

// laneHeld is what lane key holds: queued, or taken by the writer and not
// written yet.
func laneHeld(s *Stream, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.shared
	if key != "" {
		l = s.lanes[key]
	}
	if l == nil {
		return 0
	}
	return l.bytes + l.taken
}

// plug gives the writer of a stream nobody reads a message larger than a
// batch, in lane "plug", and returns once the writer has taken it: what is
// written next stays queued until the peer reads.
func plug(t *testing.T, s *Stream) {
	t.Helper()
	if err := s.WriteRawLane("plug", laneMsg("plug", 99, 0, 2*maxBatch)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for laneBytes(s, "plug") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not take the plug")
		}
		time.Sleep(time.Millisecond)
	}
}

// returnsWithin fails the test unless f returns within d, and returns its
// error.
func returnsWithin(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
	return nil
}

// blocked starts f and checks that it has not returned after a minute of
// the test's bubble (synctest: at once, every timer due in it fired) and
// once every goroutine of the bubble is blocked: it waits, then, until
// the test does something. The channel gets its error once it returns.
func blocked(t *testing.T, what string, f func() error) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	time.Sleep(time.Minute)
	synctest.Wait()
	select {
	case err := <-errc:
		t.Fatalf("%s returned %v, want it to wait", what, err)
	default:
	}
	return errc
}

// TestStreamLaneOrder: with lanes, each writer's messages come out in the
// order written, nothing lost, whether writers share a lane or not, and
// whether the lane is named (WriteRawLane) or read from the message
// (WriteRaw, WriteObject).
func TestStreamLaneOrder(t *testing.T) {
	const perWriter = 300
	writers := []struct {
		sid   string
		write func(s *Stream, sid string, msg []byte) error
	}{
		{"", func(s *Stream, _ string, msg []byte) error { return s.WriteRaw(msg) }},
		{"a", func(s *Stream, _ string, msg []byte) error { return s.WriteRaw(msg) }},
		{"a", func(s *Stream, sid string, msg []byte) error { return s.WriteRawLane(sid, msg) }},
		{"b", func(s *Stream, sid string, msg []byte) error { return s.WriteRawLane(sid, msg) }},
		{"c", func(s *Stream, _ string, msg []byte) error { return s.WriteObject(json.RawMessage(msg)) }},
		{"d", func(s *Stream, _ string, msg []byte) error { return s.WriteObject(json.RawMessage(msg)) }},
	}
	s, out := writeStream(t, StreamOptions{LaneBytes: 4 << 10, QueueBytes: 1 << 20})
	res := collect(t, &slowReader{r: out, until: time.Now().Add(100 * time.Millisecond)})
	var wg sync.WaitGroup
	for w, wr := range writers {
		wg.Go(func() {
			for n := range perWriter {
				if err := wr.write(s, wr.sid, laneMsg(wr.sid, w, n, 100+(n*7919)%3000)); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				if err := s.WaitRoom(wr.sid); err != nil {
					t.Errorf("writer %d: WaitRoom: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.Close()
	checkSequences(t, recvAll(t, res), len(writers), perWriter)
}

// TestStreamLaneFairness: a lane with megabytes queued delays a message of
// another lane by at most one batch (maxBatch bytes), and two lanes with a
// backlog take turns of at most one batch each. One FIFO put the message
// behind the whole backlog.
func TestStreamLaneFairness(t *testing.T) {
	const msgSize = 4 << 10
	t.Run("another lane's message", func(t *testing.T) {
		s, out := writeStream(t, StreamOptions{LaneBytes: 64 << 20, QueueBytes: 64 << 20})
		// Nobody reads: the writer took a first batch and waits.
		for n := range 1024 { // 4 MiB
			if err := s.WriteRawLane("a", laneMsg("a", 0, n, msgSize)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.WriteRaw(laneMsg("b", 1, 0, 100)); err != nil {
			t.Fatal(err)
		}
		res := collect(t, out)
		s.Close()
		got := recvAll(t, res)
		var a [][]byte
		before := -1
		for i, line := range got {
			var m struct{ W int }
			json.Unmarshal(line, &m)
			if m.W == 1 {
				before = 0
				for _, l := range got[:i] {
					before += len(l) + 1
				}
				continue
			}
			a = append(a, line)
		}
		checkSequences(t, a, 1, 1024)
		if before < 0 {
			t.Fatal("lane b's message is lost")
		}
		t.Logf("lane b's message came after %d bytes of lane a", before)
		if before > maxBatch {
			t.Errorf("lane b's message came after %d bytes of lane a's 4 MiB backlog, want at most one batch (%d)", before, maxBatch)
		}
	})
	t.Run("two backlogs", func(t *testing.T) {
		s, out := writeStream(t, StreamOptions{LaneBytes: 64 << 20, QueueBytes: 64 << 20})
		for w, sid := range []string{"a", "b"} {
			for n := range 512 { // 2 MiB each
				if err := s.WriteRawLane(sid, laneMsg(sid, w, n, msgSize)); err != nil {
					t.Fatal(err)
				}
			}
		}
		res := collect(t, out)
		s.Close()
		got := recvAll(t, res)
		checkSequences(t, got, 2, 512)
		run, longest, last := 0, 0, -1
		for _, line := range got[:len(got)-64] { // the end of a's backlog is b's alone
			var m struct{ W int }
			json.Unmarshal(line, &m)
			if m.W != last {
				run, last = 0, m.W
			}
			run += len(line) + 1
			longest = max(longest, run)
		}
		if longest > maxBatch {
			t.Errorf("a lane wrote %d bytes in a row while the other had a backlog, want at most one batch (%d)", longest, maxBatch)
		}
	})
}

// TestStreamLaneWritesNeverWait: with lanes, a write returns at once and
// does not fail however full the queue is (the router writes holding a
// session's lock, and in the editor's read loop); only WaitRoom waits.
func TestStreamLaneWritesNeverWait(t *testing.T) {
	f := newFailRecorder()
	s, out := writeStream(t, StreamOptions{LaneBytes: 1000, QueueBytes: 4000, OnFail: f.OnFail})
	err := returnsWithin(t, waitTimeout, "1 MiB of writes nobody reads", func() error {
		for n := range 1024 {
			if err := s.WriteRawLane("a", laneMsg("a", 0, n, 1<<10)); err != nil {
				return err
			}
		}
		if err := s.WriteRaw(laneMsg("b", 1, 0, 100)); err != nil {
			return err
		}
		return s.WriteObject(&jsonrpc2.Request{Method: "x", Notif: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.n.Load() != 0 || s.Err() != nil {
		t.Fatalf("the stream failed: %v", s.Err())
	}
	res := collect(t, out)
	s.Close()
	if got := recvAll(t, res); len(got) != 1026 {
		t.Errorf("%d messages written, want 1026", len(got))
	}
}

// TestStreamWaitRoom pins WaitRoom: it waits only for its own lane's
// backlog (LaneBytes), or for the hard cap on all lanes (QueueBytes), and
// returns when the peer reads, or with ErrClosed or the failure.
func TestStreamWaitRoom(t *testing.T) {
	const laneBound, cap = 10 << 10, 200 << 10
	opts := StreamOptions{LaneBytes: laneBound, QueueBytes: cap}
	fill := func(t *testing.T, s *Stream, sid string, bytes int) {
		t.Helper()
		for n := 0; bytes > 0; n++ {
			if err := s.WriteRawLane(sid, laneMsg(sid, 0, n, min(bytes, 1000))); err != nil {
				t.Fatal(err)
			}
			bytes -= 1001
		}
	}
	t.Run("own lane", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, out := writeStream(t, opts)
			plug(t, s)
			fill(t, s, "a", laneBound/2)
			if err := returnsWithin(t, time.Second, "WaitRoom under the lane bound", func() error { return s.WaitRoom("a") }); err != nil {
				t.Fatal(err)
			}
			fill(t, s, "a", laneBound)
			waiting := blocked(t, "WaitRoom of a full lane", func() error { return s.WaitRoom("a") })
			for _, other := range []string{"b", ""} {
				if err := returnsWithin(t, time.Second, fmt.Sprintf("WaitRoom(%q) beside a full lane", other), func() error { return s.WaitRoom(other) }); err != nil {
					t.Fatal(err)
				}
			}
			collect(t, out)
			if err := returnsWithin(t, waitTimeout, "WaitRoom once the peer reads", func() error { return <-waiting }); err != nil {
				t.Fatal(err)
			}
			if n := laneBytes(s, "a"); n >= laneBound {
				t.Errorf("WaitRoom returned with %d bytes in the lane", n)
			}
		})
	})
	t.Run("hard cap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, out := writeStream(t, opts)
			for i := range 23 { // 23 lanes just under their bound: over the cap
				fill(t, s, fmt.Sprint("s", i), laneBound-1100)
			}
			waiting := blocked(t, "WaitRoom of an empty lane over the hard cap", func() error { return s.WaitRoom("empty") })
			collect(t, out)
			if err := returnsWithin(t, waitTimeout, "WaitRoom once the peer reads", func() error { return <-waiting }); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, _ := writeStream(t, opts)
			plug(t, s)
			fill(t, s, "a", 2*laneBound)
			waiting := blocked(t, "WaitRoom of a full lane", func() error { return s.WaitRoom("a") })
			s.Close()
			if err := returnsWithin(t, waitTimeout, "WaitRoom after Close", func() error { return <-waiting }); !errors.Is(err, ErrClosed) {
				t.Errorf("WaitRoom after Close = %v, want ErrClosed", err)
			}
		})
	})
	t.Run("failure", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, _ := writeStream(t, opts)
			plug(t, s)
			fill(t, s, "a", 2*laneBound)
			waiting := blocked(t, "WaitRoom of a full lane", func() error { return s.WaitRoom("a") })
			boom := errors.New("boom")
			s.Abort(boom)
			if err := returnsWithin(t, waitTimeout, "WaitRoom after Abort", func() error { return <-waiting }); !errors.Is(err, boom) {
				t.Errorf("WaitRoom after Abort = %v, want the failure", err)
			}
		})
	})
	t.Run("without lanes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, out := writeStream(t, StreamOptions{QueueBytes: 12 * 1001})
			fill(t, s, "", 6*1001)
			if err := returnsWithin(t, time.Second, "WaitRoom under the bound", func() error { return s.WaitRoom("") }); err != nil {
				t.Fatal(err)
			}
			fill(t, s, "", 6*1001) // the queue holds its bound now
			waiting := blocked(t, "WaitRoom of a full queue", func() error { return s.WaitRoom("x") })
			collect(t, out)
			if err := returnsWithin(t, waitTimeout, "WaitRoom once the peer reads", func() error { return <-waiting }); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestStreamLaneOf pins which lane a message goes in (the editor's stream:
// every sessionId is a router session id).
func TestStreamLaneOf(t *testing.T) {
	in, inW := io.Pipe()
	s := NewStream(in, discardCloser{}, StreamOptions{LaneBytes: 1 << 20})
	t.Cleanup(func() { inW.Close(); s.Abort(errors.New("test over")) })
	read := func(line string) {
		t.Helper()
		go io.WriteString(inW, line+"\n")
		var v json.RawMessage
		if err := s.ReadObject(&v); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		read string // a line the peer sends first
		msg  string // a message we write
		want string
	}{
		{name: "notification", msg: `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{}}}`, want: "s1"},
		{name: "sessionId after a large member", msg: `{"jsonrpc":"2.0","method":"session/update","params":{"update":{"content":"` + strings.Repeat("x", 100<<10) + `"},"sessionId":"s1"}}`, want: "s1"},
		{name: "escaped sessionId", msg: `{"jsonrpc":"2.0","method":"x","params":{"sessionId":"s\u00e9"}}`, want: "sé"},
		{name: "no sessionId", msg: `{"jsonrpc":"2.0","method":"session/update","params":{"update":{}}}`, want: ""},
		{name: "sessionId not a string", msg: `{"jsonrpc":"2.0","method":"x","params":{"sessionId":7}}`, want: ""},
		{name: "sessionId of a nested object", msg: `{"jsonrpc":"2.0","method":"x","params":{"a":{"sessionId":"s1"}}}`, want: ""},
		{name: "params an array", msg: `{"jsonrpc":"2.0","method":"x","params":["s1"]}`, want: ""},
		{name: "not JSON", msg: `{"jsonrpc":`, want: ""},
		{name: "our request", msg: `{"jsonrpc":"2.0","id":3,"method":"session/request_permission","params":{"sessionId":"s2"}}`, want: "s2"},
		{name: "$/cancel_request for it", msg: `{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}`, want: "s2"},
		{name: "$/cancel_request for another", msg: `{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":4}}`, want: ""},
		{name: "$/cancel_request once answered", read: `{"jsonrpc":"2.0","id":3,"result":{}}`, msg: `{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}`, want: ""},
		{name: "answer to a request in a session", read: `{"jsonrpc":"2.0","id":"r1","method":"session/prompt","params":{"sessionId":"s3","prompt":[]}}`, msg: `{"jsonrpc":"2.0","id":"r1","result":{"stopReason":"end_turn"}}`, want: "s3"},
		{name: "answer to it again", msg: `{"jsonrpc":"2.0","id":"r1","result":{}}`, want: ""},
		{name: "answer naming a new session", read: `{"jsonrpc":"2.0","id":"r2","method":"session/new","params":{"cwd":"/"}}`, msg: `{"id":"r2","result":{"sessionId":"s4"},"jsonrpc":"2.0"}`, want: "s4"},
		{name: "error answer", read: `{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}`, msg: `{"jsonrpc":"2.0","id":9,"error":{"code":-32603,"message":"x"}}`, want: ""},
	}
	for _, st := range steps {
		if st.read != "" {
			read(st.read)
		}
		if got := s.LaneOf([]byte(st.msg)); got != st.want {
			t.Errorf("%s: LaneOf = %q, want %q", st.name, got, st.want)
		}
	}
	t.Run("bounded", func(t *testing.T) {
		for n := range maxLaneIDs + 10 {
			s.LaneOf(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"x","params":{"sessionId":"s"}}`, 1000+n))
		}
		s.idMu.Lock()
		n := len(s.callLanes)
		s.idMu.Unlock()
		if n > maxLaneIDs {
			t.Errorf("%d request lanes remembered, want at most %d", n, maxLaneIDs)
		}
	})
}

// TestStreamLaneAnswer: the jsonrpc2 Conn's answer to a request that named
// a session goes in that session's lane, also when the request's id had to
// be replaced by a token (and the answer carries the original id).
func TestStreamLaneAnswer(t *testing.T) {
	in, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := NewStream(in, outW, StreamOptions{LaneBytes: 1 << 20})
	t.Cleanup(func() { inW.Close(); outR.Close(); s.Abort(errors.New("test over")) })
	out := bufio.NewReader(outR)
	for _, id := range []string{`"r1"`, `-5`} {
		go io.WriteString(inW, `{"jsonrpc":"2.0","id":`+id+`,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}`+"\n")
		var req jsonrpc2.Request
		if err := s.ReadObject(&req); err != nil {
			t.Fatal(err)
		}
		result := json.RawMessage(`{"stopReason":"end_turn"}`)
		if err := s.WriteObject(&jsonrpc2.Response{ID: req.ID, Result: &result}); err != nil {
			t.Fatal(err)
		}
		// Nobody reads yet: the answer is queued or being written.
		if n := laneHeld(s, "s1"); n == 0 {
			t.Errorf("id %s: the answer is not in the session's lane", id)
		}
		var line []byte
		if err := returnsWithin(t, waitTimeout, "reading the answer", func() (err error) {
			line, err = out.ReadBytes('\n')
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if got := string(jsonPathRaw(t, line, "id")); got != id {
			t.Errorf("answer id %s, want %s", got, id)
		}
	}
}

// jsonPathRaw is member key of the object line.
func jsonPathRaw(t *testing.T, line []byte, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return m[key]
}

// TestStreamWriteRawLines: a batch writer queues, per call, only what its
// lane has room for (at least one message), in order, beside a writer of
// single messages in another lane; nothing is lost.
func TestStreamWriteRawLines(t *testing.T) {
	const perWriter, laneCap = 2000, 4 << 10
	s, out := writeStream(t, StreamOptions{LaneBytes: laneCap, QueueBytes: 1 << 20})
	res := collect(t, &slowReader{r: out, until: time.Now().Add(100 * time.Millisecond)})
	var wg sync.WaitGroup
	wg.Go(func() {
		var msgs [][]byte
		for n := range perWriter {
			msgs = append(msgs, laneMsg("r", 0, n, 100+(n*7919)%1500))
		}
		calls := 0
		for len(msgs) > 0 {
			n, err := s.WriteRawLines("r", msgs)
			if err != nil {
				t.Errorf("WriteRawLines: %v", err)
				return
			}
			queued := 0
			for _, m := range msgs[:n] {
				queued += len(m) + 1
			}
			if n < 1 || n > 1 && queued > laneCap {
				t.Errorf("call %d queued %d messages (%d bytes) in a lane of %d bytes", calls, n, queued, laneCap)
				return
			}
			msgs, calls = msgs[n:], calls+1
			if err := s.WaitRoom("r"); err != nil {
				t.Errorf("WaitRoom: %v", err)
				return
			}
		}
		if calls >= perWriter/2 {
			t.Errorf("%d calls for %d messages: not batched", calls, perWriter)
		}
	})
	wg.Go(func() {
		for n := range perWriter {
			if err := s.WriteRawLane("b", laneMsg("b", 1, n, 200)); err != nil {
				t.Errorf("WriteRawLane: %v", err)
				return
			}
			if err := s.WaitRoom("b"); err != nil {
				t.Errorf("WaitRoom: %v", err)
				return
			}
		}
	})
	wg.Wait()
	s.Close()
	checkSequences(t, recvAll(t, res), 2, perWriter)
}
