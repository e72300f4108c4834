package telemetry

import (
	"context"
	"errors"
	"sync"
	"time"

	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// errQueueFull: a span ended while the queue was full (the collector is
// slower than the router, or down).
var errQueueFull = errors.New("telemetry: the span queue is full")

// spanQueue is a batching span processor whose every drop is counted: the
// SDK's batch processor drops silently when its queue is full. OnEnd never
// blocks, and wakes the exporter goroutine only when a batch is full: the
// turn that ends a span does not pay a goroutine hand-off (issue 17, the
// on-path cost); the others wait for the interval's tick.
type spanQueue struct {
	exp      sdktrace.SpanExporter
	mu       sync.Mutex
	buf      []sdktrace.ReadOnlySpan // ended, waiting; at most size
	size     int
	full     chan struct{} // a batch is waiting (capacity 1)
	flush    chan chan struct{}
	stop     chan context.Context
	done     chan struct{}
	interval time.Duration
	timeout  time.Duration
	batch    int
	drops    *drops
	once     sync.Once
}

func newSpanQueue(exp sdktrace.SpanExporter, size int, interval, timeout time.Duration, d *drops) *spanQueue {
	q := &spanQueue{exp: exp, size: size, full: make(chan struct{}, 1), flush: make(chan chan struct{}),
		stop: make(chan context.Context, 1), done: make(chan struct{}), interval: interval, timeout: timeout,
		batch: min(512, size), drops: d}
	go q.run()
	return q
}

func (q *spanQueue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (q *spanQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	q.mu.Lock()
	n := len(q.buf)
	if n < q.size {
		q.buf = append(q.buf, s)
	}
	q.mu.Unlock()
	switch {
	case n >= q.size:
		q.drops.lost(sigTraces, 1, errQueueFull)
	case n+1 == q.batch:
		select {
		case q.full <- struct{}{}:
		default:
		}
	}
}

func (q *spanQueue) run() {
	defer close(q.done)
	tick := time.NewTicker(q.interval)
	defer tick.Stop()
	var spare []sdktrace.ReadOnlySpan
	// export sends what is queued, in batches, until a batch is not full.
	export := func(ctx context.Context) {
		for {
			// The two buffers swap: OnEnd appends to one while the other
			// is exported.
			q.mu.Lock()
			take := q.buf
			if len(take) == 0 {
				q.mu.Unlock()
				return
			}
			if len(take) > q.batch {
				take = take[:q.batch:q.batch]
				q.buf = append(spare[:0], q.buf[q.batch:]...)
			} else {
				q.buf = spare[:0]
			}
			q.mu.Unlock()
			ctx, cancel := context.WithTimeout(ctx, q.timeout)
			q.exp.ExportSpans(ctx, take) // counted by countingSpans
			cancel()
			clear(take)
			spare = take[:0]
			if len(take) < q.batch {
				return
			}
		}
	}
	for {
		select {
		case <-q.full:
			export(context.Background())
		case <-tick.C:
			export(context.Background())
		case ack := <-q.flush:
			export(context.Background())
			close(ack)
		case ctx := <-q.stop:
			export(ctx)
			return
		}
	}
}

// ForceFlush exports what is queued.
func (q *spanQueue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case q.flush <- ack:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued within ctx and stops the exporter.
func (q *spanQueue) Shutdown(ctx context.Context) error {
	q.once.Do(func() { q.stop <- ctx })
	select {
	case <-q.done:
	case <-ctx.Done():
		// The last export still runs, bounded by ctx (it was handed it).
	}
	return q.exp.Shutdown(ctx)
}

// countingSpans counts the spans an export loses.
type countingSpans struct {
	sdktrace.SpanExporter
	d *drops
}

func (c countingSpans) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.d.lost(sigTraces, len(spans), err)
	} else {
		c.d.ok(sigTraces)
	}
	return err
}

// countingMetrics counts the metric exports that fail.
type countingMetrics struct {
	sdkmetric.Exporter
	d *drops
}

func (c countingMetrics) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := c.Exporter.Export(ctx, rm)
	if err != nil {
		c.d.lost(sigMetrics, 1, err)
	} else {
		c.d.ok(sigMetrics)
	}
	return err
}

// countingLogs counts the log records an export loses.
type countingLogs struct {
	sdklog.Exporter
	d *drops
}

func (c countingLogs) Export(ctx context.Context, recs []sdklog.Record) error {
	err := c.Exporter.Export(ctx, recs)
	if err != nil {
		c.d.lost(sigLogs, len(recs), err)
	} else {
		c.d.ok(sigLogs)
	}
	return err
}
