package notify

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/sethvargo/go-retry"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// Group is the consumer group of the payment notifications topic.
const Group = "oncepay-payments"

// HeaderRejectReason is the header of a dead letter that says why it was rejected.
const HeaderRejectReason = "X-Reject-Reason"

// The reasons a message is dead-lettered, sent in HeaderRejectReason. An unparseable message
// carries ReasonUnparseable followed by ": " and the parser's error; a report the work refused
// carries its problem code (amount_mismatch, not_found, trade_conflict).
const (
	// ReasonUnsigned is a message without an X-Signature header, or with an empty one.
	ReasonUnsigned = "unsigned"
	// ReasonInvalidSignature is a message whose X-Signature is not the signature of its value
	// as a trade report, or whose timestamp is older than the redelivery window.
	ReasonInvalidSignature = "invalid_signature"
	// ReasonUnparseable is a signed message that is not a valid report.
	ReasonUnparseable = "unparseable"
	// ReasonUnknownChannel is a report from a channel that is not configured.
	ReasonUnknownChannel = "unknown_channel"
	// ReasonKeyReused is a report whose channel + trade_no was stored with another body.
	ReasonKeyReused = "key_reused"
	// ReasonTradeConflict is a report whose channel + trade_no belongs to another order or
	// recharge; an anomaly trade_conflict is recorded as well.
	ReasonTradeConflict = "trade_conflict"
)

// MessageWriter publishes messages: a *kafka.Writer, or a stand-in in tests.
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Consumer feeds the payment.notifications topic into the port: the same parser, key,
// fingerprint and work as the HTTP route, so a Kafka redelivery of a report that already
// arrived over HTTP is a replay, not a second payment (I1).
//
// A message is trusted only with its channel's signature (X-Signature, the trade kind), as
// over HTTP, except that its timestamp may be as old as the redelivery window: a message
// waits in its topic. A message that is unsigned, wrongly signed or unparseable, from an
// unknown channel, refused by the work, or that reuses a key with another body, is never
// applied: it goes to the dead-letter topic with its X-Reject-Reason. Its offset is committed
// only after its transaction committed, it was found a duplicate, or its dead letter was
// written; until then it is retried in place, with backoff, so that no message is skipped,
// and stopping leaves it for redelivery.
//
// The consumer is a member of Group. Each partition it is assigned is read and handled in
// offset order by a goroutine of the generation that assigned it, and its offsets are
// committed through that generation only: when a rebalance ends the generation, the message
// in hand is abandoned uncommitted (the partition's next owner redelivers it, and the guard
// answers it as a duplicate if it had been applied), and a commit that arrives after the
// partition was handed over is refused by the coordinator. A commit sent with whatever
// generation is current instead, as kafka-go's group Reader does, could land after the new
// owner's and move the group's offset back behind messages already handled, where it stays on
// a partition that has gone quiet (TestConsumerCommitsOnlyInItsGeneration).
type Consumer struct {
	port    *Port
	cluster *kafkax.Cluster
	dlq     MessageWriter
	joined  atomic.Bool
}

// NewConsumer returns a consumer of cluster's payment.notifications topic into p.
func NewConsumer(p *Port, cluster *kafkax.Cluster) *Consumer {
	return &Consumer{port: p, cluster: cluster}
}

// WithDeadLetterWriter makes the consumer write its dead letters through w instead of a
// producer of its own; tests use it to make the dead-letter topic fail. It returns c.
func (c *Consumer) WithDeadLetterWriter(w MessageWriter) *Consumer {
	c.dlq = w
	return c
}

// Ready reports whether the consumer has joined its group once.
func (c *Consumer) Ready() bool { return c.joined.Load() }

// Run consumes until ctx ends, then leaves the group, leaving uncommitted messages for the
// next member. A generation that cannot be joined (the coordinator unreachable, say) is logged
// and tried again, after kafka-go's JoinGroupBackoff, until ctx ends; Run returns an error only
// when the group cannot be configured.
func (c *Consumer) Run(ctx context.Context) error {
	group, err := c.cluster.Group(Group, kafkax.TopicPaymentNotifications)
	if err != nil {
		return err
	}
	defer group.Close()
	if c.dlq == nil {
		w := c.cluster.Writer()
		defer w.Close()
		c.dlq = w
	}
	for {
		gen, err := group.Next(ctx)
		switch {
		case ctx.Err() != nil:
			return nil // stopping
		case err != nil:
			slog.WarnContext(ctx, "report consumer: join", "err", err)
			continue
		}
		c.joined.Store(true)
		parts := gen.Assignments[kafkax.TopicPaymentNotifications]
		slog.InfoContext(ctx, "report consumer: joined", "generation", gen.ID, "member", gen.MemberID, "partitions", len(parts))
		for _, p := range parts {
			gen.Start(func(gctx context.Context) { c.consume(gctx, gen, p) })
		}
	}
}

// consume reads partition p from the offset gen assigned it at, handles each message and
// commits it through gen, until gen ends. It returns only then: kafka-go ends a generation
// as soon as one of its goroutines returns.
func (c *Consumer) consume(ctx context.Context, gen *kafka.Generation, p kafka.PartitionAssignment) {
	r := c.cluster.PartitionReader(kafkax.TopicPaymentNotifications, p.ID)
	defer r.Close()
	if err := r.SetOffset(p.Offset); err != nil {
		slog.ErrorContext(ctx, "report consumer: set offset", "partition", p.ID, "offset", p.Offset, "err", err)
		<-ctx.Done()
		return
	}
	for {
		m, err := c.fetch(ctx, r)
		if err != nil {
			return // the generation ended
		}
		if !c.handle(ctx, m) {
			return // the generation ended: the message stays uncommitted and will be redelivered
		}
		if !c.commit(ctx, gen, m) {
			return
		}
	}
}

// fetch returns the next message of r. A failed fetch is logged and tried again every
// fetchPause until it succeeds; fetch returns an error only when ctx ends.
func (c *Consumer) fetch(ctx context.Context, r *kafka.Reader) (kafka.Message, error) {
	return retry.DoValue(ctx, retry.NewConstant(fetchPause), func(ctx context.Context) (kafka.Message, error) {
		m, err := r.FetchMessage(ctx)
		if err != nil && ctx.Err() == nil {
			slog.WarnContext(ctx, "report consumer: fetch", "err", err)
			return m, retry.RetryableError(err)
		}
		return m, err
	})
}

// commit commits the offset after m through gen, again and again with backoff until the
// coordinator takes it, so that a commit cut off (the broker restarting, a network cut) does
// not leave the group behind on a partition that goes quiet. It reports false when ctx ends
// first: the generation is over, and its commits would be refused anyway.
func (c *Consumer) commit(ctx context.Context, gen *kafka.Generation, m kafka.Message) bool {
	offsets := map[string]map[int]int64{m.Topic: {m.Partition: m.Offset + 1}}
	attempt := 0
	err := retry.Do(ctx, backoff(), func(ctx context.Context) error {
		if err := gen.CommitOffsets(offsets); err != nil {
			slog.WarnContext(ctx, "report consumer: commit", "partition", m.Partition, "offset", m.Offset,
				"generation", gen.ID, "attempt", attempt, "err", err)
			attempt++
			return retry.RetryableError(err)
		}
		return nil
	})
	return err == nil
}

// handle processes m until it is done (applied, a duplicate, or dead-lettered) and reports
// true; it retries other failures in place, with backoff, so that a failed message is never
// skipped. It reports false only when ctx ends first.
func (c *Consumer) handle(ctx context.Context, m kafka.Message) bool {
	id := kafkax.RequestID(m)
	if id == "" {
		id = requestid.New()
	}
	ctx = requestid.With(ctx, id)
	r, reason := c.admit(m)
	if reason != "" {
		return c.deadLetter(ctx, m, reason)
	}
	attempt := 0
	reject := ""
	err := retry.Do(ctx, backoff(), func(ctx context.Context) error {
		res, _, err := c.port.deliver(ctx, r, "kafka", c.port.cfg.Guard.Message)
		if err == nil && res.Layer == "message" {
			err = c.sameBody(ctx, r)
		}
		if err == nil {
			slog.InfoContext(ctx, "trade report consumed", "trade_no", r.Number, "outcome", res.Outcome,
				"layer", res.Layer, "partition", m.Partition, "offset", m.Offset)
			return nil
		}
		if reject = deadLetterReason(err); reject != "" {
			return nil // refused: not retried, but dead-lettered below
		}
		slog.WarnContext(ctx, "trade report: will retry", "trade_no", r.Number, "attempt", attempt, "err", err)
		attempt++
		return retry.RetryableError(err)
	})
	switch {
	case err != nil:
		return false // ctx ended: every failure is retryable, and the backoff never stops
	case reject != "":
		return c.deadLetter(ctx, m, reject)
	}
	return true
}

// deadLetterReason is the reason to dead-letter a message whose delivery failed with err, or
// "" when err may pass (the database down, a copy in flight): the message is retried then.
func deadLetterReason(err error) string {
	switch {
	case errors.Is(err, idempotent.ErrKeyReused):
		return ReasonKeyReused
	case errors.Is(err, ErrTradeConflict):
		return ReasonTradeConflict
	}
	if e, ok := apperr.As(err); ok && e.Status >= 400 && e.Status < 500 && e.Status != 409 {
		return e.Code
	}
	return ""
}

// admit checks m before anything is keyed or applied (I1: a queue is one more entry path, and
// it is held to the HTTP path's rules): the channel configured, its signature on the value,
// then the report parsed and validated completely. It returns the report, or the reason to
// dead-letter m.
func (c *Consumer) admit(m kafka.Message) (Report, string) {
	sig, _ := header(m, reportsig.Header)
	if sig == "" {
		return Report{}, ReasonUnsigned
	}
	if headers(m, reportsig.Header) > 1 {
		return Report{}, ReasonInvalidSignature // one signature, as over HTTP
	}
	secret, err := c.port.secretFor(m.Value)
	switch {
	case errors.Is(err, ErrUnknownChannel):
		return Report{}, ReasonUnknownChannel
	case err != nil:
		return Report{}, ReasonUnparseable + ": " + err.Error()
	}
	if err := reportsig.Verify(secret, sig, string(Trade), m.Value, c.port.cfg.Now(), c.port.cfg.KafkaWindow); err != nil {
		return Report{}, ReasonInvalidSignature
	}
	r, err := Parse(Trade, m.Value)
	if err != nil {
		return Report{}, ReasonUnparseable + ": " + err.Error()
	}
	return r, ""
}

// sameBody confirms a copy that the guard's message marker answered as a duplicate. The
// marker remembers only that the key is done, not with which report, so the committed dedup
// record is asked: another fingerprint is ErrKeyReused (a trade_conflict when the number
// belongs to another owner). A record already purged leaves the copy a duplicate: the claims
// and the state preconditions still hold without it (I13).
func (c *Consumer) sameBody(ctx context.Context, r Report) error {
	rec, found, err := c.port.cfg.Guard.Lookup(ctx, r.Key())
	switch {
	case err != nil:
		return err
	case found && rec.Fingerprint != r.Fingerprint():
		return c.port.explain(ctx, r, idempotent.ErrKeyReused)
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
	attempt := 0
	err := retry.Do(ctx, backoff(), func(ctx context.Context) error {
		err := c.dlq.WriteMessages(ctx, letter)
		if err != nil {
			slog.WarnContext(ctx, "trade report: dead letter not written, will retry", "partition", m.Partition,
				"offset", m.Offset, "reason", reason, "attempt", attempt, "err", err)
			attempt++
			return retry.RetryableError(err)
		}
		return nil
	})
	if err != nil {
		return false // ctx ended
	}
	slog.WarnContext(ctx, "trade report dead-lettered", "partition", m.Partition, "offset", m.Offset, "reason", reason)
	return true
}

// headers counts m's headers named key.
func headers(m kafka.Message, key string) int {
	n := 0
	for _, h := range m.Headers {
		if h.Key == key {
			n++
		}
	}
	return n
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

// The pauses of the consumer's retries.
const (
	// firstPause is the pause after a message's first failed attempt, doubled after each
	// failure up to maxPause.
	firstPause = 100 * time.Millisecond
	// maxPause caps the pause between two attempts at one message.
	maxPause = 5 * time.Second
	// fetchPause is the pause after a failed fetch.
	fetchPause = time.Second
)

// backoff returns the pauses between the attempts at one message, or at its dead letter:
// 100 ms, doubled after each failure (200 ms, 400 ms … 3.2 s), then 5 s for as long as the
// failures last. It never stops by itself: only the end of the consumer's context ends the
// retries, so that no message is skipped. A backoff counts its attempts: each message takes a
// fresh one.
func backoff() retry.Backoff {
	return retry.WithCappedDuration(maxPause, retry.NewExponential(firstPause))
}
