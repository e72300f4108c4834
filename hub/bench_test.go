package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkUpdate1MiBTo10Observers: one turn whose single update is 1 MiB
// of text, streamed to the editor and 10 observers (issue 30's benchmark
// page). An op is the turn, from the prompt until every observer has the
// update; B/op counts every allocation of the process (Router, hub, test
// clients), and hub-B/op what the hub's queues held at most.
func BenchmarkUpdate1MiBTo10Observers(b *testing.B) {
	for _, n := range []int{0, 10} {
		b.Run(fmt.Sprintf("observers=%d", n), func(b *testing.B) { benchUpdate1MiB(b, n) })
	}
}

func benchUpdate1MiB(b *testing.B, observers int) {
	e := startHub(b, Options{})
	ed, sid := e.editorSession()
	var got atomic.Int64 // messages the observers got
	wake := make(chan struct{}, 1)
	for range observers {
		conn := newPipeConn()
		go e.hub.Serve(context.Background(), conn, Identity{Name: "watcher", Role: RoleObserver, AllSessions: true})
		b.Cleanup(func() { conn.Close(nil) })
		conn.in <- []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
		<-conn.out
		conn.in <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/attach","params":{"sessionId":%q,"role":"observer","historyPolicy":"none"}}`, sid))
		<-conn.out
		go func() {
			for {
				select {
				case <-conn.out:
					got.Add(1)
					signal(wake)
				case <-conn.closed:
					return
				}
			}
		}()
	}
	turn := func(want int64) {
		ed.mustCall("session/prompt", promptParams(sid, "big 1 1048576"))
		for got.Load() < want {
			<-wake
		}
	}
	n := int64(observers)
	turn(n) // warm
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		turn(n * int64(i+2))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/turn")
}

// BenchmarkIdleClient: the memory one idle client attached to a session
// costs, measured as the heap in use after a GC with 1,000 of them, per
// client: the hub's (its client, membership, queue) and the test's
// transport (a pipeConn of 4 messages); the stacks are not heap:
// goroutines/client says how many (Serve's reader and the writer).
func BenchmarkIdleClient(b *testing.B) {
	e := startHub(b, Options{})
	_, sid := e.editorSession()
	const n = 1000
	attach := []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/attach","params":{"sessionId":%q,"role":"observer","historyPolicy":"none"}}`, sid))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		before, stack0, g0 := heapInUse(), stackInUse(), runtime.NumGoroutine()
		var conns []*pipeConn
		served := make(chan struct{}, n)
		b.StartTimer()
		for range n {
			conn := newPipeConnCap(4)
			go func() {
				e.hub.Serve(context.Background(), conn, Identity{Name: "idle", Role: RoleObserver, AllSessions: true})
				served <- struct{}{}
			}()
			conn.in <- []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
			<-conn.out
			conn.in <- attach
			<-conn.out
			conns = append(conns, conn)
		}
		b.StopTimer()
		after, stack1, g1 := heapInUse(), stackInUse(), runtime.NumGoroutine()
		b.ReportMetric(float64(after-before)/n, "heap-B/client")
		b.ReportMetric(float64(stack1-stack0)/n, "stack-B/client")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/client")
		for _, c := range conns {
			c.Close(nil)
		}
		for range n {
			<-served
		}
		b.StartTimer()
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func stackInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}

// BenchmarkChunkStream: an agent streams small agent_message_chunk
// updates (64 bytes of text each, "big N 64") through the Router and the
// hub to the editor and one observer, which reads them as fast as it can
// (fast) or like a busy browser, 100 µs a message on average (slow: a
// pause of 1 ms every 10 messages, the timer's granularity). An op is one
// update; updates/s is what reaches the observer end to end (the turn's
// text complete), msgs/update how many messages it took the observer.
//
//	go test -run '^$' -bench ChunkStream -benchtime 20000x ./hub
func BenchmarkChunkStream(b *testing.B) {
	for _, c := range []struct {
		name string
		read time.Duration
	}{{"fast", 0}, {"slow", 100 * time.Microsecond}} {
		b.Run(c.name, func(b *testing.B) { benchChunks(b, c.read) })
	}
}

func benchChunks(b *testing.B, read time.Duration) {
	e := startHub(b, Options{})
	ed, sid := e.editorSession()
	conn := newPipeConn()
	go e.hub.Serve(context.Background(), conn, Identity{Name: "watcher", Role: RoleObserver, AllSessions: true})
	b.Cleanup(func() { conn.Close(nil) })
	conn.in <- []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	<-conn.out
	conn.in <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/attach","params":{"sessionId":%q,"role":"observer","historyPolicy":"none"}}`, sid))
	<-conn.out
	var text, msgs atomic.Int64
	wake := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case m := <-conn.out:
				var p struct {
					Params struct {
						Update struct {
							Content struct{ Text string }
						}
					}
				}
				json.Unmarshal(m, &p)
				if read > 0 && msgs.Load()%10 == 0 {
					time.Sleep(10 * read)
				}
				msgs.Add(1)
				text.Add(int64(len(p.Params.Update.Content.Text)))
				signal(wake)
			case <-conn.closed:
				return
			}
		}
	}()
	const size = 64
	b.ResetTimer()
	ed.mustCall("session/prompt", promptParams(sid, fmt.Sprintf("big %d %d", b.N, size)))
	for text.Load() < int64(b.N*size) {
		<-wake
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
	b.ReportMetric(float64(msgs.Load())/float64(b.N), "msgs/update")
}
