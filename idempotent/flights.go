package idempotent

import (
	"context"
	"sync"
)

// flights lets the copies of one request that reach one guard while a first copy's
// transaction runs wait for its answer, instead of each running a transaction of its own. It
// serves the attempts that hold no lease — a guard without Redis, or Redis down — whose fence
// is the record's unique key: there every concurrent copy would wait on the first's
// uncommitted record holding a database connection, and a storm of one key would take the
// whole pool. With flights an instance holds at most one connection per key and request.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one first copy's attempt; done is closed once res and err are set.
type flight struct {
	done chan struct{}
	res  Result
	err  error
}

// do runs attempt as the first copy of name, or waits for the first copy's answer. A copy
// that waited is answered the first one's stored outcome as a replay. When the first copy
// ended without a stored outcome (an error, a copy in flight elsewhere) the copy runs again
// itself: the error was the first copy's — its context, its connection — not the request's.
func (f *flights) do(ctx context.Context, name string, attempt func() (Result, error)) (Result, error) {
	for {
		f.mu.Lock()
		if f.m == nil {
			f.m = map[string]*flight{}
		}
		first, waiting := f.m[name]
		if !waiting {
			first = &flight{done: make(chan struct{})}
			f.m[name] = first
		}
		f.mu.Unlock()

		if !waiting {
			return f.run(name, first, attempt)
		}
		select {
		case <-first.done:
		case <-ctx.Done():
			return Result{}, context.Cause(ctx)
		}
		if first.err == nil && storable(first.res.Response.Status) &&
			(first.res.Outcome == Executed || first.res.Outcome == Replayed) {
			return Result{Response: first.res.Response, Outcome: Replayed, Layer: layerDedup}, nil
		}
	}
}

// run is do's first copy: it answers the waiting copies however attempt ends, a panic
// included.
func (f *flights) run(name string, fl *flight, attempt func() (Result, error)) (Result, error) {
	fl.err = errPanicked
	defer func() {
		f.mu.Lock()
		delete(f.m, name)
		f.mu.Unlock()
		close(fl.done)
	}()
	fl.res, fl.err = attempt()
	return fl.res, fl.err
}
