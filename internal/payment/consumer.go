package payment

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/idemhttp"
	"github.com/oncepay/oncepay/internal/idempotent"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Group is the consumer group of the payment notifications topic.
const Group = "oncepay-payments"

// HeaderRejectReason is the header of a dead letter that says why it was rejected.
const HeaderRejectReason = "X-Reject-Reason"

// The reasons a message is dead-lettered, sent in HeaderRejectReason. An unparseable message
// carries ReasonUnparseable followed by ": " and the parser's error.
const (
	// ReasonUnsigned is a message without an X-Signature header, or with an empty one.
	ReasonUnsigned = "unsigned"
	// ReasonInvalidSignature is a message whose X-Signature is not the HMAC of its value.
	ReasonInvalidSignature = "invalid_signature"
	// ReasonUnparseable is a signed message that is not a valid notification.
	ReasonUnparseable = "unparseable"
	// ReasonKeyReused is a notification whose channel + trade_no was stored with another body.
	ReasonKeyReused = "key_reused"
	// ReasonTradeConflict is a notification whose channel + trade_no belongs to another order;
	// an anomaly trade_conflict is recorded as well.
	ReasonTradeConflict = anomaly.TradeConflict
)

// MessageWriter publishes messages: a *kafka.Writer, or a stand-in in tests.
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Consumer applies notifications from the payment.notifications topic through the same
// Service and the same key (channel + trade_no) as the HTTP path, so a Kafka redelivery of a
// notification that already arrived over HTTP is a replay, not a second payment (I1).
//
// A message is trusted only with the channel's signature: its X-Signature header must be the
// HMAC-SHA256 of its value under the channel secret, as over HTTP. A message that is unsigned,
// wrongly signed or unparseable, or that reuses a key with another body (or names another
// order than its trade's), is never applied: it goes to the dead-letter topic with its
// X-Reject-Reason. A message's offset is committed only after its transaction committed, it
// was found a duplicate, or its dead letter was written; until then it is retried in place,
// with backoff, so that no message is skipped, and stopping leaves it for redelivery.
type Consumer struct {
	cluster  *kafkax.Cluster
	reader   *kafka.Reader
	dlq      MessageWriter
	guard    *idempotent.Guard
	payments *Service
	secret   []byte
	joined   atomic.Bool
}

// NewConsumer returns a consumer of cluster's payment.notifications topic whose messages must
// be signed with secret, the channel secret (ONCEPAY_CHANNEL_SECRET).
func NewConsumer(cluster *kafkax.Cluster, guard *idempotent.Guard, payments *Service, secret string) *Consumer {
	return &Consumer{cluster: cluster, guard: guard, payments: payments, secret: []byte(secret)}
}

// WithDeadLetterWriter makes the consumer write its dead letters through w instead of a
// producer of its own; tests use it to make the dead-letter topic fail. It returns c.
func (c *Consumer) WithDeadLetterWriter(w MessageWriter) *Consumer {
	c.dlq = w
	return c
}

// Ready reports whether the consumer has joined its group (or fetched a message).
func (c *Consumer) Ready() bool { return c.joined.Load() }

// Run consumes until ctx ends, then closes the reader, leaving uncommitted messages for the
// next member of the group.
func (c *Consumer) Run(ctx context.Context) error {
	c.reader = c.cluster.Reader(Group, kafkax.TopicPaymentNotifications)
	defer c.reader.Close()
	if c.dlq == nil {
		w := c.cluster.Writer()
		defer w.Close()
		c.dlq = w
	}
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
	n, reason := c.admit(m)
	if reason != "" {
		return c.deadLetter(ctx, m, reason)
	}
	req := idempotent.Request{
		Key: n.Key(), Fingerprint: idempotent.Fingerprint("POST", Route, m.Value),
		Via: "kafka", Reject: idemhttp.StoredProblemAt(Route),
	}
	for attempt := 0; ; attempt++ {
		res, err := c.guard.Message(ctx, req, c.payments.Work(n))
		if err == nil && res.Layer == idempotent.LayerMessage {
			err = c.sameBody(ctx, req)
		}
		switch {
		case err == nil:
			slog.InfoContext(ctx, "payment notification consumed", "trade_no", n.TradeNo, "outcome", res.Outcome,
				"layer", res.Layer, "partition", m.Partition, "offset", m.Offset)
			return true
		case errors.Is(err, idempotent.ErrKeyReused):
			// The same channel + trade_no with another body (I1): never applied, never
			// acknowledged as a replay. It names another order: a trade_conflict, kept as an
			// anomaly too.
			conflict, cerr := c.payments.TradeConflict(ctx, n)
			if cerr == nil {
				reason := ReasonKeyReused
				if conflict {
					reason = ReasonTradeConflict
				}
				return c.deadLetter(ctx, m, reason)
			}
			err = cerr
		}
		slog.WarnContext(ctx, "payment notification: will retry", "trade_no", n.TradeNo, "attempt", attempt, "err", err)
		if !sleep(ctx, backoff(attempt)) {
			return false
		}
	}
}

// admit checks m before anything is keyed or applied (I1: a queue is one more entry path, and
// it is held to the HTTP path's rules): the channel's signature on the value, compared in
// constant time, then the notification parsed and validated completely. It returns the
// notification, or the reason to dead-letter m.
func (c *Consumer) admit(m kafka.Message) (Notification, string) {
	sig, _ := header(m, web.HeaderSignature)
	if sig == "" {
		return Notification{}, ReasonUnsigned
	}
	if !web.ValidSignature(string(c.secret), m.Value, sig) {
		return Notification{}, ReasonInvalidSignature
	}
	n, err := Parse(m.Value)
	if err != nil {
		return Notification{}, ReasonUnparseable + ": " + err.Error()
	}
	return n, ""
}

// sameBody confirms a copy that the guard's message marker answered as a duplicate. The
// marker remembers only that the key is done, not with which body, so the committed dedup
// record is asked: another fingerprint is ErrKeyReused. A record already purged leaves the
// copy a duplicate: the state preconditions still hold without it (I6).
func (c *Consumer) sameBody(ctx context.Context, req idempotent.Request) error {
	rec, found, err := c.guard.Lookup(ctx, req.Key)
	switch {
	case err != nil:
		return err
	case found && rec.Fingerprint != req.Fingerprint:
		return idempotent.ErrKeyReused
	}
	return nil
}

// deadLetter publishes m to the dead-letter topic with reason, again and again with backoff
// until the write succeeds, and reports true then: only a message whose dead letter is
// written may be committed, or it would be lost. It reports false when ctx ends first, which
// leaves m uncommitted for redelivery.
func (c *Consumer) deadLetter(ctx context.Context, m kafka.Message, reason string) bool {
	headers := []kafka.Header{{Key: HeaderRejectReason, Value: []byte(reason)}}
	for _, h := range m.Headers {
		if h.Key != HeaderRejectReason {
			headers = append(headers, h)
		}
	}
	letter := kafka.Message{Topic: kafkax.TopicPaymentNotificationsDLQ, Key: m.Key, Value: m.Value, Headers: headers}
	for attempt := 0; ; attempt++ {
		err := c.dlq.WriteMessages(ctx, letter)
		if err == nil {
			slog.WarnContext(ctx, "payment notification dead-lettered", "partition", m.Partition, "offset", m.Offset, "reason", reason)
			return true
		}
		slog.WarnContext(ctx, "payment notification: dead letter not written, will retry", "partition", m.Partition,
			"offset", m.Offset, "reason", reason, "attempt", attempt, "err", err)
		if !sleep(ctx, backoff(attempt)) {
			return false
		}
	}
}

// header returns the value of m's header key and whether m has it.
func header(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
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
