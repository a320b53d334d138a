package payment

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/idempotent"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// Group is the consumer group of the payment notifications topic.
const Group = "oncepay-payments"

// Consumer applies notifications from the payment.notifications topic through the same
// Service and the same key (channel + trade_no) as the HTTP path, so a Kafka redelivery of a
// notification that already arrived over HTTP is a replay, not a second payment (I1). A
// message's offset is committed only after its transaction committed (or it was found to be
// a duplicate); a message that cannot be parsed goes to the dead-letter topic with its error
// and never blocks its partition.
type Consumer struct {
	cluster  *kafkax.Cluster
	reader   *kafka.Reader
	dlq      *kafka.Writer
	guard    *idempotent.Guard
	payments *Service
	joined   atomic.Bool
}

// NewConsumer returns a consumer of cluster's payment.notifications topic.
func NewConsumer(cluster *kafkax.Cluster, guard *idempotent.Guard, payments *Service) *Consumer {
	return &Consumer{cluster: cluster, guard: guard, payments: payments}
}

// Ready reports whether the consumer has joined its group (or fetched a message).
func (c *Consumer) Ready() bool { return c.joined.Load() }

// Run consumes until ctx ends, then closes the reader, leaving uncommitted messages for the
// next member of the group.
func (c *Consumer) Run(ctx context.Context) error {
	c.reader = c.cluster.Reader(Group, kafkax.TopicPaymentNotifications)
	c.dlq = c.cluster.Writer()
	defer c.dlq.Close()
	defer c.reader.Close()
	go c.watchJoin(ctx)
	for {
		m, err := c.reader.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			slog.WarnContext(ctx, "payment consumer: fetch", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		c.joined.Store(true)
		if !c.handle(ctx, m) {
			return nil // stopping: the message stays uncommitted and will be redelivered
		}
		if err := c.reader.CommitMessages(context.WithoutCancel(ctx), m); err != nil {
			slog.WarnContext(ctx, "payment consumer: commit", "offset", m.Offset, "err", err)
		}
	}
}

// watchJoin marks the consumer ready once the reader has joined its group: kafka-go counts a
// joined generation as a rebalance in its stats.
func (c *Consumer) watchJoin(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !c.joined.Load() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.reader.Stats().Rebalances > 0 {
				c.joined.Store(true)
			}
		}
	}
}

// handle processes m until it is done (applied, a duplicate, or dead-lettered) and reports
// true; it retries failures in place, with backoff, so that a failed message is never
// skipped. It reports false only when ctx ends first.
func (c *Consumer) handle(ctx context.Context, m kafka.Message) bool {
	id := kafkax.RequestID(m)
	if id == "" {
		id = requestid.New()
	}
	ctx = requestid.With(ctx, id)
	n, err := Parse(m.Value)
	if err != nil {
		c.deadLetter(ctx, m, err)
		return true
	}
	req := idempotent.Request{Key: n.Key(), Fingerprint: idempotent.Fingerprint("POST", Route, m.Value)}
	for attempt := 0; ; attempt++ {
		res, err := c.guard.Message(ctx, req, c.payments.Work(n))
		switch {
		case err == nil:
			slog.InfoContext(ctx, "payment notification consumed", "trade_no", n.TradeNo, "outcome", res.Outcome,
				"layer", res.Layer, "partition", m.Partition, "offset", m.Offset)
			return true
		case errors.Is(err, idempotent.ErrKeyReused):
			c.deadLetter(ctx, m, err)
			return true
		}
		slog.WarnContext(ctx, "payment notification: will retry", "trade_no", n.TradeNo, "attempt", attempt, "err", err)
		if !sleep(ctx, backoff(attempt)) {
			return false
		}
	}
}

// deadLetter publishes m with its error to the dead-letter topic.
func (c *Consumer) deadLetter(ctx context.Context, m kafka.Message, cause error) {
	headers := append([]kafka.Header{{Key: "error", Value: []byte(cause.Error())}}, m.Headers...)
	err := c.dlq.WriteMessages(ctx, kafka.Message{Topic: kafkax.TopicPaymentNotificationsDLQ, Key: m.Key, Value: m.Value, Headers: headers})
	slog.WarnContext(ctx, "payment notification dead-lettered", "partition", m.Partition, "offset", m.Offset, "cause", cause, "err", err)
}

func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 6)
	return min(d, 5*time.Second)
}

// sleep waits d or until ctx ends; it reports whether it waited the whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
