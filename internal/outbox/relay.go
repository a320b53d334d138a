package outbox

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/clock"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// Publisher sends messages to Kafka; *kafka.Writer is one.
type Publisher interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Locker runs fn while holding a cluster-wide lock named name, or returns at once with
// ok=false when another instance holds it.
type Locker func(ctx context.Context, name string, fn func(ctx context.Context) error) (ok bool, err error)

// Relay publishes pending outbox rows in id order and marks them published. Only the
// instance holding the relay lock publishes, so several instances do not double-publish in
// the normal case; after a crash between publish and mark, the batch is published again
// (at least once), which is why events carry event_id.
type Relay struct {
	db        *gorm.DB
	publisher Publisher
	lock      Locker
	// Interval is the pause between polls when the outbox is empty.
	Interval time.Duration
	// BatchSize is the most rows published per poll.
	BatchSize int
}

// NewRelay returns a relay from db to publisher.
func NewRelay(db *gorm.DB, publisher Publisher, lock Locker) *Relay {
	return &Relay{db: db, publisher: publisher, lock: lock, Interval: 200 * time.Millisecond, BatchSize: 100}
}

// Run polls until ctx ends. It returns nil on a clean stop.
func (r *Relay) Run(ctx context.Context) error {
	for {
		_, err := r.lock(ctx, "outbox-relay", r.drain)
		if err != nil && ctx.Err() == nil {
			slog.WarnContext(ctx, "outbox relay", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Interval):
		}
	}
}

// drain publishes batches until the outbox is empty or ctx ends.
func (r *Relay) drain(ctx context.Context) error {
	for ctx.Err() == nil {
		n, err := r.PublishBatch(ctx)
		if err != nil || n < r.BatchSize {
			return err
		}
	}
	return nil
}

// PublishBatch publishes up to BatchSize pending rows and marks them published. It returns
// how many it published.
func (r *Relay) PublishBatch(ctx context.Context) (int, error) {
	var batch []Message
	err := r.db.WithContext(ctx).Where("published_at IS NULL").Order("id").Limit(r.BatchSize).Find(&batch).Error
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	msgs := make([]kafka.Message, len(batch))
	ids := make([]int64, len(batch))
	for i, m := range batch {
		ids[i] = m.ID
		msgs[i] = kafka.Message{
			Topic: m.Topic,
			Key:   []byte(m.MsgKey),
			Value: m.Payload,
			Headers: []kafka.Header{
				{Key: kafkax.HeaderRequestID, Value: []byte(m.RequestID)},
				{Key: "event_id", Value: []byte(strconv.FormatInt(m.ID, 10))},
			},
		}
	}
	if err := r.publisher.WriteMessages(ctx, msgs...); err != nil {
		if uerr := r.db.WithContext(context.WithoutCancel(ctx)).Model(&Message{}).Where("id IN ?", ids).
			Update("attempts", gorm.Expr("attempts + 1")).Error; uerr != nil {
			slog.WarnContext(ctx, "outbox: could not count a failed publish", "err", uerr)
		}
		return 0, err
	}
	now := clock.Now()
	err = r.db.WithContext(context.WithoutCancel(ctx)).Model(&Message{}).Where("id IN ?", ids).Update("published_at", now).Error
	if err != nil {
		return 0, err
	}
	slog.DebugContext(requestid.With(ctx, batch[0].RequestID), "outbox published", "count", len(batch))
	return len(batch), nil
}
