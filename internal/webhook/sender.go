package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/keyring"
)

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// The delivery statuses: pending until a 2xx (succeeded) or the end of the schedule (failed).
// A redelivery makes a delivery pending again, with a fresh schedule.
const (
	Pending   DeliveryStatus = "pending"
	Succeeded DeliveryStatus = "succeeded"
	Failed    DeliveryStatus = "failed"
)

// Delivery is a row of webhook_deliveries: one event to one endpoint.
type Delivery struct {
	ID         int64
	EndpointID int64
	EventID    int64
	Status     DeliveryStatus
	// Attempts counts every attempt ever claimed; the Oncepay-Delivery-Attempt of the next
	// one is Attempts + 1.
	Attempts int
	// RoundAttempts counts the attempts since the delivery was created or redelivered; the
	// schedule is read from it.
	RoundAttempts int
	NextAttemptAt time.Time
	// LockedUntil and LockedBy are the lease of the sender sending it now (LeaseHolder).
	LockedUntil *time.Time
	LockedBy    *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// TableName is the table of Delivery.
func (Delivery) TableName() string { return "webhook_deliveries" }

// Attempt is a row of webhook_attempts: one attempt sent, with what came back.
type Attempt struct {
	ID              int64
	DeliveryID      int64
	EndpointID      int64
	EventID         int64
	Attempt         int
	SentAt          time.Time
	StatusCode      int
	LatencyMS       int64 `gorm:"column:latency_ms"`
	Error           *string
	ResponseSnippet *string
}

// TableName is the table of Attempt.
func (Attempt) TableName() string { return "webhook_attempts" }

// SnippetBytes is how much of a receiver's answer the delivery log keeps.
const SnippetBytes = 512

// Sender sends due deliveries. Any number of senders — goroutines of one instance, or
// instances — may run on one database: a sender claims a delivery by a conditional UPDATE of
// its lease (locked_until, locked_by) that only one claimer can win, so an attempt is never
// sent twice at once; a sender killed mid-attempt (kill -9) leaves a lease that expires, and
// another sender sends the next attempt. The attempt's outcome is recorded only by the
// lease's holder.
type Sender struct {
	db        *gorm.DB
	ids       *ids.Generator
	anomalies *anomaly.Recorder
	client    *http.Client
	keys      *keyring.Ring // opens the endpoints' sealed secrets (secrets.go)
	holder    string
	// Schedule is the pause before each retry, after the first attempt; a delivery that is
	// not acknowledged after len(Schedule)+1 attempts fails.
	Schedule []time.Duration
	// Timeout bounds one attempt: the receiver must answer within it.
	Timeout time.Duration
	// Lease is how long a claim keeps other senders off; it must outlast an attempt and its
	// record (default 2 × Timeout + 5 s).
	Lease time.Duration
	// Workers is the most attempts one sender has in flight.
	Workers int
	// BatchSize is the most deliveries claimed per poll.
	BatchSize int
	// Jitter spreads a pause so that a receiver coming back is not hit by every retry at
	// once; the default is ±20 %.
	Jitter func(time.Duration) time.Duration
}

// NewSender returns a sender on db whose failures end as webhook_failing anomalies.
func NewSender(db *gorm.DB, gen *ids.Generator, anomalies *anomaly.Recorder, schedule []time.Duration, timeout time.Duration) *Sender {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &Sender{
		db: db, ids: gen, anomalies: anomalies, holder: hex.EncodeToString(b),
		// Public addresses only, checked on every connection, and no redirect followed
		// (dial.go); UsePolicy sets the deployment's policy.
		client:   AddressPolicy{}.Client(),
		Schedule: schedule, Timeout: timeout, Lease: 2*timeout + 5*time.Second, Workers: 8, BatchSize: 100,
		Jitter: func(d time.Duration) time.Duration { return time.Duration(float64(d) * (0.8 + 0.4*mrand.Float64())) },
	}
}

// Claimed is a delivery this sender holds the lease of.
type Claimed struct {
	Delivery
	// Token is the lease's holder: only it records the attempt's outcome.
	Token string
	// skew is the database's clock minus this instance's, as Claim read them: send signs the
	// attempt with the database's time, clock.Now() + skew, not the instance's own.
	skew time.Duration
}

// Claim takes the leases of up to BatchSize due deliveries — pending, due, unleased or with an
// expired lease, of an endpoint that is not disabled — and returns them. Each claim is a
// conditional UPDATE carrying the attempt count the candidate was read with: of two senders
// that read the same candidate only one matches, and rows affected decides. "Now" is the
// database's clock, read once per claim: every sender compares every lease and due time with
// the one clock they all share, so that a sender whose own clock runs ahead takes no lease
// that is still held (docs/chaos.md, "Clock skew").
func (s *Sender) Claim(ctx context.Context) ([]Claimed, error) {
	now, err := database.Now(ctx, s.db)
	if err != nil {
		return nil, err
	}
	skew := now.Sub(clock.Now())
	var due []Delivery
	err = s.db.WithContext(ctx).Model(&Delivery{}).
		Joins("JOIN webhook_endpoints e ON e.id = webhook_deliveries.endpoint_id AND e.status <> ?", Disabled).
		Where("webhook_deliveries.status = ? AND webhook_deliveries.next_attempt_at <= ?", Pending, now).
		Where("webhook_deliveries.locked_until IS NULL OR webhook_deliveries.locked_until < ?", now).
		Order("webhook_deliveries.next_attempt_at").Limit(s.BatchSize).
		Select("webhook_deliveries.*").Find(&due).Error
	if err != nil {
		return nil, err
	}
	var out []Claimed
	for _, d := range due {
		token := s.holder + "-" + strconv.FormatInt(s.ids.Next(), 36)
		until := now.Add(s.Lease)
		res := s.db.WithContext(ctx).Model(&Delivery{}).
			Where("id = ? AND status = ? AND attempts = ? AND next_attempt_at <= ?", d.ID, Pending, d.Attempts, now).
			Where("locked_until IS NULL OR locked_until < ?", now).
			Updates(map[string]any{
				"locked_until": until, "locked_by": token, "updated_at": now,
				"attempts": gorm.Expr("attempts + 1"), "round_attempts": gorm.Expr("round_attempts + 1"),
			})
		if res.Error != nil {
			return out, res.Error
		}
		if res.RowsAffected == 1 {
			d.Attempts++
			d.RoundAttempts++
			d.LockedUntil, d.LockedBy = &until, &token
			out = append(out, Claimed{Delivery: d, Token: token, skew: skew})
		}
	}
	return out, nil
}

// RunOnce claims the due deliveries and sends them, Workers at a time, and returns how many
// it sent.
func (s *Sender) RunOnce(ctx context.Context) (int, error) {
	claimed, err := s.Claim(ctx)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, s.Workers))
	for _, c := range claimed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.Deliver(ctx, c); err != nil && ctx.Err() == nil {
				slog.WarnContext(ctx, "webhook delivery", "delivery_id", c.ID, "event_id", c.EventID, "err", err)
			}
		})
	}
	wg.Wait()
	return len(claimed), err
}

// result is what one attempt came back with.
type result struct {
	sentAt  time.Time
	status  int
	latency time.Duration
	err     string
	snippet string
}

func (r result) ok() bool { return r.status >= 200 && r.status < 300 }

// Deliver sends c's attempt and records it.
func (s *Sender) Deliver(ctx context.Context, c Claimed) error {
	var ev outbox.Event
	if err := s.db.WithContext(ctx).Where("id = ?", c.EventID).Take(&ev).Error; err != nil {
		return fmt.Errorf("event %d: %w", c.EventID, err)
	}
	var e Endpoint
	if err := s.db.WithContext(ctx).Where("id = ?", c.EndpointID).Take(&e).Error; err != nil {
		return fmt.Errorf("endpoint %d: %w", c.EndpointID, err)
	}
	if err := open(s.keys, &e); err != nil {
		return err
	}
	res := s.send(ctx, e, ev, c.Attempts, c.skew)
	return s.record(context.WithoutCancel(ctx), c, e, res)
}

// send POSTs ev's payload to e, signed now by the database's clock (the instance's plus skew),
// within Timeout. The receiver checks the signed time against its own clock (five minutes,
// Stripe's tolerance): signed with the clock of an instance ten minutes ahead, every attempt
// of that instance was refused (docs/chaos.md, "Clock skew").
func (s *Sender) send(ctx context.Context, e Endpoint, ev outbox.Event, attempt int, skew time.Duration) (r result) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	start := time.Now() // the latency's, on the monotonic clock
	now := clock.Now().Add(skew)
	r.sentAt = now
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(ev.Payload))
	if err != nil {
		r.err = err.Error()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "oncepay-webhooks/1")
	req.Header.Set(HeaderEventID, ids.Format(ev.ID))
	req.Header.Set(HeaderEventType, ev.Type)
	req.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	req.Header.Set(HeaderSignature, Sign(e.Secrets(now), now, ev.Payload)) // legacy, until its removal is announced
	req.Header.Set(HeaderWebhookID, ids.Format(ev.ID))
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderWebhookSignature, SignStandard(e.Secrets(now), ids.Format(ev.ID), now, ev.Payload))
	resp, err := s.client.Do(req)
	// The latency ends when the answer is read: a receiver that sends its headers and trickles
	// its body holds the attempt all that time (issue 27).
	defer func() { r.latency = time.Since(start) }()
	if err != nil {
		r.err = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			r.err = fmt.Sprintf("no answer within %s", s.Timeout)
		}
		return r
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, SnippetBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	r.status = resp.StatusCode
	r.snippet = snippet(head)
	if !r.ok() {
		r.err = "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	return r
}

// snippet is the first bytes of an answer as valid UTF-8.
func snippet(b []byte) string {
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1] // A rune cut at SnippetBytes.
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// record writes c's attempt to the log and moves the delivery on, in one transaction: a 2xx
// succeeds it (and a failing endpoint is enabled again); another answer schedules the next
// attempt, or — after the last one — fails it, marks the endpoint failing and records a
// webhook_failing anomaly. Only the lease's holder moves the delivery: a sender whose lease
// expired while it waited, or whose delivery was redelivered meanwhile, still logs its attempt
// but leaves the delivery to whoever holds it now.
func (s *Sender) record(ctx context.Context, c Claimed, e Endpoint, r result) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		a := Attempt{ID: s.ids.Next(), DeliveryID: c.ID, EndpointID: c.EndpointID, EventID: c.EventID, Attempt: c.Attempts,
			SentAt: r.sentAt, StatusCode: r.status, LatencyMS: r.latency.Milliseconds(), Error: nonEmpty(r.err), ResponseSnippet: nonEmpty(r.snippet)}
		if err := tx.Create(&a).Error; err != nil {
			return err
		}
		// The next attempt's due time is on the database's clock, which Claim compares with.
		now, err := database.Now(ctx, tx)
		if err != nil {
			return err
		}
		cols := map[string]any{"locked_until": nil, "locked_by": nil, "updated_at": now}
		last := c.RoundAttempts > len(s.Schedule)
		switch {
		case r.ok():
			cols["status"] = Succeeded
		case last:
			cols["status"] = Failed
		default:
			cols["next_attempt_at"] = now.Add(s.Jitter(s.Schedule[c.RoundAttempts-1]))
		}
		res := tx.Model(&Delivery{}).Where("id = ? AND locked_by = ? AND round_attempts = ?", c.ID, c.Token, c.RoundAttempts).Updates(cols)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		switch {
		case r.ok():
			return tx.Model(&Endpoint{}).Where("id = ? AND status = ?", e.ID, Failing).
				Updates(map[string]any{"status": Enabled, "updated_at": now}).Error
		case last:
			return s.fail(ctx, tx, c, e, r)
		}
		return nil
	})
}

// fail marks e failing and keeps the delivery that used up its schedule as an anomaly, for an
// operator to redeliver once the receiver is mended: nothing is dropped silently.
func (s *Sender) fail(ctx context.Context, tx *gorm.DB, c Claimed, e Endpoint, r result) error {
	now := clock.Now()
	if err := tx.Model(&Endpoint{}).Where("id = ? AND status = ?", e.ID, Enabled).
		Updates(map[string]any{"status": Failing, "updated_at": now}).Error; err != nil {
		return err
	}
	slog.WarnContext(ctx, "webhook delivery failed for its whole schedule; endpoint marked failing",
		"endpoint_id", e.ID, "event_id", c.EventID, "attempts", c.Attempts, "last_error", r.err)
	return s.anomalies.Record(ctx, tx, anomaly.Anomaly{
		Kind: anomaly.WebhookFailing, Channel: "webhook", Space: "webhook",
		TradeNo: ids.Format(e.ID) + "/" + ids.Format(c.EventID),
		Detail: fmt.Sprintf("event %d to endpoint %d (%s) was not acknowledged after %d attempts; last: %s; redeliver it once the receiver answers 2xx",
			c.EventID, e.ID, e.URL, c.RoundAttempts, r.err),
	})
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
