package webhook

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Loop is the background work of webhooks on one instance: the Sequencer places the events
// committed since its last poll in the feed and fans them out, every Interval; the Sender
// sends the deliveries that are due, each endpoint from its own queue. They run apart: the
// feed never waits for a receiver, however slow (issue 27: one trickling receiver held a new
// event out of the events API for 49.6 s, when both shared one loop). Every instance runs
// one; the counter's lock and the deliveries' leases keep them from doing any piece of work
// twice at once, so no leader is needed and a dead instance's work is simply picked up by the
// others.
type Loop struct {
	Sequencer *Sequencer
	Sender    *Sender
	// Interval is the pause between polls that found nothing left to do.
	Interval time.Duration
}

// Run sequences and sends until ctx ends, then waits for the attempts in flight to be
// recorded. It returns nil on a clean stop.
func (l *Loop) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { l.sequence(ctx) })
	wg.Go(func() { l.Sender.Run(ctx, l.Interval) })
	wg.Wait()
	return nil
}

// sequence polls the sequencer: at once again after a full batch, else after Interval. An
// event it fans out nudges this instance's sender, so that a delivery does not wait for the
// sender's next poll.
func (l *Loop) sequence(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := l.Sequencer.Sequence(ctx)
		if err != nil && ctx.Err() == nil {
			slog.WarnContext(ctx, "webhook sequencer", "err", err)
		}
		if n > 0 {
			l.Sender.Nudge()
		}
		if n >= l.Sequencer.BatchSize {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.Interval):
		}
	}
}
