// Package idemlab holds the switches that make the idempotency guard weaker or slower, never
// more correct: the bench (bench/) turns layers off to price each one, and the training lab
// turns them off to reproduce the incident each one stops. A service that adopts the kit
// never imports it; the guard it builds with idempotent.New is the one the package
// documentation of idempotent describes (oncepay's service binary never sets a switch: its
// tests and its training kit's lab binary do, through app.Deps.GuardConfig). The switches are
// kept out of idempotent.Config so that the kit's public surface is what a service needs.
package idemlab

import (
	"context"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/internal/labkit"
)

// Lab is the set of switches; its zero value is the guard as a service runs it.
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
	// 003, the default). bench/results/dedup-placement.md has the measurements that chose the default.
	RecordFirst bool
	// BeforeWork, when set, runs after the lock is taken and before the transaction begins;
	// an error from it ends the attempt with nothing stored. oncepay's training kit uses it
	// for ONCEPAY_CHAOS_PAYMENT_DELAY, a slow upstream held under the lock (I4) without holding
	// a database transaction open, and to pause a lease holder (I10).
	BeforeWork func(ctx context.Context, k idempotent.Key) error
	// ForgetLease, when set and true for an attempt that took the lease, deletes that lease
	// from Redis right after it was taken, before BeforeWork: what a Redis failover does to a
	// holder when the replica it promotes never saw the lease (I15). The holder goes on
	// working, believing it holds the key, while another copy takes the lease again; the
	// training lab uses it to show that the dedup record, not the lock, is the fence.
	ForgetLease func(ctx context.Context, k idempotent.Key) bool
	// Unguarded switches the guard off altogether: Do runs Before, the work in a transaction
	// of its own with a record that only keeps the answer, and After — no token, cache,
	// lease, dedup record, attempt log or metrics, so a copy runs the work again. The bench
	// uses it to price the guard on a real route against the same use case without it.
	Unguarded bool
}

// With returns cfg with lab's switches, for idempotent.New. The switches replace any cfg
// carried before.
func With(cfg idempotent.Config, lab Lab) idempotent.Config {
	s := labkit.Switches{
		NoLock: lab.NoLock, NoWatchdog: lab.NoWatchdog, NoCache: lab.NoCache,
		RedsyncLock: lab.RedsyncLock, RecordFirst: lab.RecordFirst, Unguarded: lab.Unguarded,
	}
	if f := lab.BeforeWork; f != nil {
		s.BeforeWork = func(ctx context.Context, scope, bizType, bizKey string) error {
			return f(ctx, idempotent.Key{Scope: scope, BizType: bizType, BizKey: bizKey})
		}
	}
	if f := lab.ForgetLease; f != nil {
		s.ForgetLease = func(ctx context.Context, scope, bizType, bizKey string) bool {
			return f(ctx, idempotent.Key{Scope: scope, BizType: bizType, BizKey: bizKey})
		}
	}
	return labkit.Set(cfg, s).(idempotent.Config)
}

// Of returns the switches cfg carries (With), the zero Lab for a service's Config.
func Of(cfg idempotent.Config) Lab {
	s := labkit.Get(cfg)
	lab := Lab{
		NoLock: s.NoLock, NoWatchdog: s.NoWatchdog, NoCache: s.NoCache,
		RedsyncLock: s.RedsyncLock, RecordFirst: s.RecordFirst, Unguarded: s.Unguarded,
	}
	if f := s.BeforeWork; f != nil {
		lab.BeforeWork = func(ctx context.Context, k idempotent.Key) error { return f(ctx, k.Scope, k.BizType, k.BizKey) }
	}
	if f := s.ForgetLease; f != nil {
		lab.ForgetLease = func(ctx context.Context, k idempotent.Key) bool { return f(ctx, k.Scope, k.BizType, k.BizKey) }
	}
	return lab
}
