package idempotent

import "context"

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
}
