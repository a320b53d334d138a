package webhook

import (
	"context"
	"log/slog"
	"time"
)

// Loop is the background work of webhooks on one instance: every Interval it sequences the
// events committed since (Sequencer) and sends the deliveries that are due (Sender). Every
// instance runs one; the counter's lock and the deliveries' leases keep them from doing any
// piece of work twice at once, so no leader is needed and a dead instance's work is simply
// picked up by the others.
type Loop struct {
	Sequencer *Sequencer
	Sender    *Sender
	// Interval is the pause between polls that found nothing left to do.
	Interval time.Duration
}

// Run polls until ctx ends, finishing the attempts in flight. It returns nil on a clean stop.
func (l *Loop) Run(ctx context.Context) error {
	for {
		busy := l.Tick(ctx)
		if busy {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(l.Interval):
		}
	}
}

// Tick does one round of work and reports whether a full batch was found (there may be more).
func (l *Loop) Tick(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	n, err := l.Sequencer.Sequence(ctx)
	if err != nil && ctx.Err() == nil {
		slog.WarnContext(ctx, "webhook sequencer", "err", err)
	}
	sent, err := l.Sender.RunOnce(ctx)
	if err != nil && ctx.Err() == nil {
		slog.WarnContext(ctx, "webhook sender", "err", err)
	}
	return ctx.Err() == nil && (n >= l.Sequencer.BatchSize || sent >= l.Sender.BatchSize)
}
