package token

import (
	"container/list"
	"sync"
	"time"
)

// limiter remembers recent authentication failures per source address and
// holds an address back for a delay that doubles with each failure. It
// remembers at most max addresses, dropping the least recently failing one
// to make room: an attacker spreading failures over many addresses makes it
// forget old ones, never grow.
type limiter struct {
	now               func() time.Time
	base, max, forget time.Duration
	cap               int

	mu  sync.Mutex
	m   map[string]*list.Element // of *failures
	lru *list.List               // front: the most recent failure
}

type failures struct {
	key   string
	n     int
	last  time.Time // the last failure
	until time.Time // held back before this
}

func newLimiter(o Options) *limiter {
	return &limiter{now: o.Now, base: o.BaseDelay, max: o.MaxDelay, forget: o.Forget, cap: o.MaxTracked,
		m: map[string]*list.Element{}, lru: list.New()}
}

// allow says whether key's attempt may be checked now.
func (l *limiter) allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[key]
	if e == nil {
		return true
	}
	f := e.Value.(*failures)
	now := l.now()
	if now.Sub(f.last) >= l.forget {
		l.remove(e)
		return true
	}
	return !now.Before(f.until)
}

// fail counts a failure of key and returns how many in a row, and for how
// long key is now held back.
func (l *limiter) fail(key string) (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.m[key]
	if e == nil {
		for l.lru.Len() >= l.cap {
			l.remove(l.lru.Back())
		}
		e = l.lru.PushFront(&failures{key: key})
		l.m[key] = e
	} else {
		l.lru.MoveToFront(e)
	}
	f := e.Value.(*failures)
	if f.n > 0 && now.Sub(f.last) >= l.forget {
		f.n = 0
	}
	f.n++
	delay := l.max
	if shift := f.n - 1; shift < 32 && l.base<<shift < l.max && l.base<<shift > 0 {
		delay = l.base << shift
	}
	f.last, f.until = now, now.Add(delay)
	return f.n, delay
}

// succeed forgets key's failures.
func (l *limiter) succeed(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[key]; e != nil {
		l.remove(e)
	}
}

func (l *limiter) remove(e *list.Element) {
	delete(l.m, e.Value.(*failures).key)
	l.lru.Remove(e)
}

// tracked is how many addresses are remembered (tests).
func (l *limiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
