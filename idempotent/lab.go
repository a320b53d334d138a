package idempotent

import (
	"context"
	"errors"

	"gorm.io/gorm"
)

// Lab holds the switches that make the guard weaker or slower, never more correct: the bench
// (bench/) turns layers off to price each one, and the training lab (tools/lab) turns them off
// to reproduce the incident each one stops. A service leaves Config.Lab zero, and the guard is
// then the one the package doc describes.
type Lab struct {
	// NoLock turns the lock layer off; tests and drills use it to show that the dedup record
	// alone still gives exactly-once.
	NoLock bool
	// NoWatchdog keeps the lock but never renews it: the fixed-TTL lock of incident I4.
	NoWatchdog bool
	// NoCache turns the replay cache off.
	NoCache bool
	// RedsyncLock takes the request-path lock with a redsync mutex (a cache read, a lock, a
	// cache write and an unlock: four Redis round trips) instead of the default lease, which
	// reads the cache and takes the lock in one Lua script and fills the cache and releases in
	// another (two round trips). Both keep a random owner value, compare-and-delete release
	// and the watchdog; the bench compares them.
	RedsyncLock bool
	// RecordFirst inserts the dedup record PROCESSING before the work and completes it after
	// (seed 000) instead of inserting the finished record where the work calls record (seed
	// 003, the default). docs/dedup-placement.md has the measurements that chose the default.
	RecordFirst bool
	// BeforeWork, when set, runs after the lock is taken and before the transaction begins;
	// an error from it ends the attempt with nothing stored. oncepay uses it for
	// ONCEPAY_CHAOS_PAYMENT_DELAY: a slow upstream held under the lock (I4) without holding a
	// database transaction open; the lab uses it to pause a lease holder (I10).
	BeforeWork func(ctx context.Context, k Key) error
	// ForgetLease, when set and true for an attempt that took the lease, deletes that lease
	// from Redis right after it was taken, before BeforeWork: what a Redis failover does to a
	// holder when the replica it promotes never saw the lease (I15). The holder goes on
	// working, believing it holds the key, while another copy takes the lease again; the
	// training lab uses it to show that the dedup record, not the lock, is the fence.
	ForgetLease func(ctx context.Context, k Key) bool
	// Unguarded switches the guard off altogether: Do runs Before, the work in a transaction
	// of its own with a record that only keeps the answer, and After — no token, cache,
	// lease, dedup record, attempt log or metrics, so a copy runs the work again. The bench
	// uses it to price the guard on a real route against the same use case without it.
	Unguarded bool
}

// unguarded is Do with Lab.Unguarded: the request's work and nothing of the guard.
func (g *Guard) unguarded(ctx context.Context, req Request, work Work) (Result, error) {
	if req.Before != nil {
		if err := req.Before(ctx); err != nil {
			return Result{Outcome: Failed, Layer: LayerWork}, err
		}
	}
	var (
		resp     Response
		recorded bool
	)
	err := g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return work(ctx, tx, func(r Response) error {
			if recorded {
				return errRecordedTwice
			}
			recorded, resp = true, r
			if !storable(r.Status) {
				return errNotStored
			}
			return nil
		})
	})
	switch {
	case err == nil && !recorded:
		return Result{Outcome: Failed, Layer: LayerWork}, errNotRecorded
	case err == nil, errors.Is(err, errNotStored):
		res := Result{Response: resp, Outcome: Executed, Layer: LayerWork}
		if req.After != nil {
			req.After(ctx, res)
		}
		return res, nil
	}
	if r, ok := g.reject(ctx, req, err); ok {
		return Result{Response: r, Outcome: StateRejected, Layer: LayerWork, Rejection: err}, nil
	}
	return Result{Outcome: Failed, Layer: LayerWork}, err
}
