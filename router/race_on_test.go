//go:build race

package router

// raceEnabled: the race detector's runtime allocates on its own (goroutine
// and channel bookkeeping), so the allocation guards have a bound for it.
const raceEnabled = true
