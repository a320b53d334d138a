// Package jobs runs oncepay's background work on a schedule, one instance at a time (a Redis
// leader lock renewed by the watchdog), and on demand through the admin endpoints. Every job
// is safe to run late, twice or concurrently, because each change it makes carries its state
// precondition (I5), and dedup records are only purged past the redelivery window (I6).
package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemops"
	"github.com/oncepay/oncepay/internal/order"
)

// Scheduled runs a job every Interval on the instance that holds the job's lock.
type Scheduled struct {
	Name     string
	Interval time.Duration
	Guard    *idempotent.Guard
	Job      func(ctx context.Context) (int64, error)
}

// Run runs the job every Interval until ctx ends.
func (s *Scheduled) Run(ctx context.Context) error {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var n int64
		ran, err := idemops.RunLocked(ctx, s.Guard, s.Name, func(ctx context.Context) error {
			var err error
			n, err = s.Job(ctx)
			return err
		})
		switch {
		case err != nil && ctx.Err() == nil:
			slog.WarnContext(ctx, "job failed", "job", s.Name, "err", err)
		case ran && n > 0:
			slog.InfoContext(ctx, "job ran", "job", s.Name, "affected", n)
		}
	}
}

// BeforeClose asks the payment channel about an expired order before it is closed locally
// (I9) and reports whether it may be closed: payment.Trades.BeforeClose.
type BeforeClose func(ctx context.Context, orderID int64) (closeIt bool, err error)

// CloseExpiredOrders closes every unpaid order past its expiry, in batches, and returns how
// many it closed. Each close is the conditional PENDING_PAYMENT → CLOSED update: an order paid
// while the job ran is left PAID (I5), and the job's count does not include it. When before is
// set, the channel is asked first (I9): an order paid there is applied as a payment instead,
// and one the channel cannot answer about now stays open until the next run.
func CloseExpiredOrders(orders *order.Service, before BeforeClose) func(ctx context.Context) (int64, error) {
	const batch = 100
	return func(ctx context.Context) (int64, error) {
		var closed int64
		for {
			ids, err := orders.ExpiredIDs(ctx, batch)
			if err != nil {
				return closed, err
			}
			var settled int
			for _, id := range ids {
				if before != nil {
					closeIt, err := before(ctx, id)
					if err != nil {
						return closed, err
					}
					if !closeIt {
						continue
					}
				}
				moved, err := orders.Close(ctx, id)
				if err != nil {
					return closed, err
				}
				settled++
				if moved {
					closed++
				}
			}
			// A full batch that moved nothing is made of orders the channel could not answer
			// about: the next run asks again, rather than this one spinning on them.
			if len(ids) < batch || settled == 0 {
				return closed, nil
			}
		}
	}
}

// PurgeDedupRecords deletes dedup records older than retention, in bounded batches (I6).
func PurgeDedupRecords(guard *idempotent.Guard, retention time.Duration) func(ctx context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		return guard.Purge(ctx, idempotent.PurgeOptions{OlderThan: retention})
	}
}
