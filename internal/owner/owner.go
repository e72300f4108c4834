// Package owner gives goroutines an owner that waits for them: every
// goroutine the router and its agents start belongs to one (STYLE.md
// Concurrency), and shutdown waits for it within a bound.
package owner

import (
	"sync"
	"time"
)

// Group counts the goroutines it started and waits for them. Unlike a
// sync.WaitGroup it may start more while a Wait is under way (a goroutine
// that ends a turn starts the next one during shutdown).
type Group struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, while a Wait waits
}

// Go runs f in a new goroutine.
func (o *Group) Go(f func()) {
	o.mu.Lock()
	o.n++
	o.mu.Unlock()
	go func() {
		defer o.done()
		f()
	}()
}

func (o *Group) done() {
	o.mu.Lock()
	o.n--
	if o.n == 0 && o.idle != nil {
		close(o.idle)
		o.idle = nil
	}
	o.mu.Unlock()
}

// Wait waits until every goroutine ended or d passed; it returns how many
// are still running.
func (o *Group) Wait(d time.Duration) int {
	o.mu.Lock()
	if o.n == 0 {
		o.mu.Unlock()
		return 0
	}
	if o.idle == nil {
		o.idle = make(chan struct{})
	}
	idle := o.idle
	o.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(d):
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}
