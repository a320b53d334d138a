package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	ID         int64
	DeliveryID int64
	EndpointID int64
	EventID    int64
	Attempt    int
	// ClaimedAt is when the attempt's lease was claimed, on the database's clock: an attempt
	// claimed before a redelivery committed is of the round before it (record).
	ClaimedAt       *time.Time
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
//
// Each endpoint is its own queue: a sender has at most PerEndpoint attempts in flight to one
// endpoint and claims a delivery only when one of that endpoint's slots is free, right before
// sending it. A receiver that hangs holds its own slots and little else: its circuit opens
// (capacity.go) — one attempt at a time, after a back-off — and hanging endpoints together
// hold at most a quarter of the sender's MaxInFlight, while endpoints that answer are claimed
// first in every round and started as soon as each is claimed. With 150 hung endpoints
// retried every second, each of them took 8 attempts in flight, a claiming round of
// hundreds of sequential claims took up to 2.7 s, the attempts queued for the database pool,
// and a healthy receiver got its events 6.7 s late (p50; issue 27). And a claimed delivery
// never waits for a slot, so its lease is spent on its attempt alone; a heartbeat renews the
// lease while the attempt and its record last, so that no other sender takes it meanwhile —
// a delivery sent twice at once, a retry sent before its pause, an attempt answered 2xx sent
// again (issue 27: 154–165 requests for 120 deliveries, with a lease that ran out while a
// claimed delivery waited behind slower ones).
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
	// Lease is how long a claim keeps other senders off without a heartbeat: the heartbeat
	// renews it every Lease/3 while the attempt is in flight, so it bounds how long a killed
	// sender's delivery waits for another one (default 2 × Timeout + 5 s).
	Lease time.Duration
	// PerEndpoint is the most attempts this sender has in flight to one endpoint that answers.
	PerEndpoint int
	// MaxInFlight is the most attempts this sender has in flight in all: it bounds the
	// goroutines, connections and database work of attempts. Endpoints not heard from yet,
	// slow ones (answering after more than half of Timeout) and failing ones together hold at
	// most half of it, failing ones at most a quarter, so that the rest is always there for
	// the endpoints that answer in time; and an endpoint's attempts beyond its first draw on
	// half of it, so that one with nothing in flight finds a slot.
	MaxInFlight int
	// Backoff is the pause after an attempt that got no answer before the endpoint's next
	// attempt; it doubles with each further one, up to MaxBackoff, and an answer resets it.
	// It only delays deliveries, never spends their attempts: each delivery's schedule still
	// counts from its own attempts.
	Backoff, MaxBackoff time.Duration
	// BatchSize is the most deliveries of one endpoint claimed per poll.
	BatchSize int
	// Jitter spreads a pause so that a receiver coming back is not hit by every retry at
	// once; the default is ±20 %.
	Jitter func(time.Duration) time.Duration
	// Metrics counts the attempts; nil counts nothing.
	Metrics *Metrics

	mu          sync.Mutex
	health      map[int64]*health // per endpoint: attempts in flight and circuit (capacity.go)
	inFlight    int               // attempts in flight in all
	unproven    int               // of which to endpoints not proven when claimed
	failingHeld int               // of which to failing endpoints
	extra       int               // of which beyond each endpoint's first: Σ max(0, busy−1)
	wake        chan struct{}
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
		Schedule: schedule, Timeout: timeout, Lease: 2*timeout + 5*time.Second,
		PerEndpoint: 8, MaxInFlight: 512, BatchSize: 100, Backoff: time.Second, MaxBackoff: time.Minute,
		Jitter: func(d time.Duration) time.Duration { return time.Duration(float64(d) * (0.8 + 0.4*mrand.Float64())) },
		health: map[int64]*health{}, wake: make(chan struct{}, 1),
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
	// class is the endpoint's class when its slot was taken: Done gives the slot back to it.
	class class
	// at is the database's time the claim compared with: the attempt's ClaimedAt.
	at time.Time
}

// Claim takes the leases of due deliveries — pending, due, unleased or with an expired
// lease, of an endpoint that is not disabled — as many per endpoint as the endpoint has room
// for (capacity.go; at most BatchSize), oldest due first, and returns them, each holding one
// slot of its endpoint until Done. Each claim is a conditional UPDATE carrying the attempt
// count the candidate was read with: of two senders that read the same candidate only one
// matches, and rows affected decides. "Now" is the database's clock, read once per claim:
// every sender compares every lease and due time with the one clock they all share, so that
// a sender whose own clock runs ahead takes no lease that is still held
// (TestLeaseHeldAgainstClockAhead).
func (s *Sender) Claim(ctx context.Context) ([]Claimed, error) {
	var out []Claimed
	_, err := s.claimEach(ctx, func(c Claimed) { out = append(out, c) })
	return out, err
}

// claimEach is Claim handing each delivery to start as soon as it is claimed, the endpoints
// that answer first: a healthy endpoint's attempt does not wait for the rest of the round.
// It returns how many it claimed.
func (s *Sender) claimEach(ctx context.Context, start func(Claimed)) (int, error) {
	now, err := database.Now(ctx, s.db)
	if err != nil {
		return 0, err
	}
	skew := now.Sub(clock.Now())
	local := time.Now() // the circuits' clock: this instance's own, monotonic
	q := s.due(ctx, now)
	if full := s.full(local); len(full) > 0 && len(full) <= 1000 {
		q = q.Where("webhook_deliveries.endpoint_id NOT IN ?", full) // no room: not worth a look
	}
	var endpoints []int64
	if err := q.Distinct().Pluck("webhook_deliveries.endpoint_id", &endpoints).Error; err != nil {
		return 0, err
	}
	n, others := 0, 0
	for _, ep := range s.byClass(endpoints) {
		if others >= roundOthers {
			break // Run comes back at once, and serves the endpoints that answer first again
		}
		free := s.free(ep, local)
		if free == 0 {
			continue // busy with this sender's attempts, or its circuit open: its own queue waits
		}
		// An endpoint not answering gets one attempt, a probe: the delivery tried most, then
		// the longest due. A receiver that loses the answer of every first attempt (I16) would
		// otherwise spend each probe on a new event's first attempt, its circuit never closing,
		// while the retry of the answer it lost waited behind them.
		order := "webhook_deliveries.next_attempt_at"
		if s.probing(ep) {
			order = "webhook_deliveries.attempts DESC, webhook_deliveries.next_attempt_at"
		}
		var due []Delivery
		err := s.due(ctx, now).Where("webhook_deliveries.endpoint_id = ?", ep).
			Order(order).Limit(free).
			Select("webhook_deliveries.*").Find(&due).Error
		if err != nil {
			return n, err
		}
		for _, d := range due {
			c, ok, err := s.claim(ctx, d, now, skew, local)
			if err != nil {
				return n, err
			}
			if ok {
				n++
				if c.class != proven {
					others++
				}
				start(c)
			}
		}
	}
	return n, nil
}

// roundOthers is the most deliveries of endpoints not proven that one claiming round takes:
// each claim is a round trip or two to the database, and a round that claimed a probe for
// each of 150 failing endpoints kept a healthy one's next event waiting until it ended.
const roundOthers = 16

// byClass orders endpoints proven first, then slow, then unheard, then failing, and within a class the
// ones with fewer attempts in flight first, so that a round serves the receivers that answer
// before it spends its time on the others. Ties are in random order: after a restart every
// endpoint is unheard, and a healthy one whose id sorts last waited for every other's claim.
func (s *Sender) byClass(endpoints []int64) []int64 {
	mrand.Shuffle(len(endpoints), func(i, j int) { endpoints[i], endpoints[j] = endpoints[j], endpoints[i] })
	s.mu.Lock()
	defer s.mu.Unlock()
	rank := func(ep int64) (int, int) {
		if h := s.health[ep]; h != nil {
			return int(h.class()), h.busy
		}
		return int(unheard), 0
	}
	slices.SortStableFunc(endpoints, func(a, b int64) int {
		ca, ba := rank(a)
		cb, bb := rank(b)
		return cmp.Or(ca-cb, ba-bb)
	})
	return endpoints
}

// due is the query of the deliveries due at now that no live lease holds, of endpoints that
// are not disabled.
func (s *Sender) due(ctx context.Context, now time.Time) *gorm.DB {
	return s.db.WithContext(ctx).Model(&Delivery{}).
		Joins("JOIN webhook_endpoints e ON e.id = webhook_deliveries.endpoint_id AND e.status <> ?", Disabled).
		Where("webhook_deliveries.status = ? AND webhook_deliveries.next_attempt_at <= ?", Pending, now).
		Where("webhook_deliveries.locked_until IS NULL OR webhook_deliveries.locked_until < ?", now)
}

// claim takes one slot of d's endpoint, if it has room at local, and d's lease by the
// conditional UPDATE; a lost claim gives the slot back.
func (s *Sender) claim(ctx context.Context, d Delivery, now time.Time, skew time.Duration, local time.Time) (Claimed, bool, error) {
	cls, ok := s.reserve(d.EndpointID, local)
	if !ok {
		return Claimed{}, false, nil
	}
	token := s.holder + "-" + strconv.FormatInt(s.ids.Next(), 36)
	until := now.Add(s.Lease)
	res := s.db.WithContext(ctx).Model(&Delivery{}).
		Where("id = ? AND status = ? AND attempts = ? AND next_attempt_at <= ?", d.ID, Pending, d.Attempts, now).
		Where("locked_until IS NULL OR locked_until < ?", now).
		Updates(map[string]any{
			"locked_until": until, "locked_by": token, "updated_at": now,
			"attempts": gorm.Expr("attempts + 1"), "round_attempts": gorm.Expr("round_attempts + 1"),
		})
	if res.Error != nil || res.RowsAffected != 1 {
		s.release(d.EndpointID, cls)
		return Claimed{}, false, res.Error
	}
	d.Attempts++
	d.RoundAttempts++
	d.LockedUntil, d.LockedBy = &until, &token
	return Claimed{Delivery: d, Token: token, skew: skew, class: cls, at: now}, true, nil
}

// Done gives back the slot c held: its endpoint may be sent another attempt.
func (s *Sender) Done(c Claimed) {
	s.release(c.EndpointID, c.class)
	s.Nudge()
}

// Nudge has Run look for due deliveries now rather than at its next poll: an event was just
// fanned out, or a slot was given back.
func (s *Sender) Nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run sends due deliveries until ctx ends: it claims what each endpoint has room for, sends
// each claimed delivery in a goroutine of its own, and looks again at once when nudged or
// after interval. It never waits for an attempt, so a slow receiver delays nothing but its
// own deliveries. Attempts in flight when ctx ends are abandoned (their requests cancelled)
// and recorded, and Run returns once they are.
func (s *Sender) Run(ctx context.Context, interval time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		n, err := s.claimEach(ctx, func(c Claimed) { wg.Go(func() { s.deliverDone(ctx, c) }) })
		if err != nil && ctx.Err() == nil {
			slog.WarnContext(ctx, "webhook sender", "err", err)
		}
		if n > 0 {
			continue // some endpoint may have more due and slots to spare
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-time.After(interval):
		}
	}
}

// RunOnce claims the due deliveries and sends them, and returns how many it sent once every
// attempt is recorded: one round of Run, for tests and tools that drive the sender by hand.
func (s *Sender) RunOnce(ctx context.Context) (int, error) {
	claimed, err := s.Claim(ctx)
	var wg sync.WaitGroup
	for _, c := range claimed {
		wg.Go(func() { s.deliverDone(ctx, c) })
	}
	wg.Wait()
	return len(claimed), err
}

// deliverDone delivers c and gives its slot back.
func (s *Sender) deliverDone(ctx context.Context, c Claimed) {
	defer s.Done(c)
	if err := s.Deliver(ctx, c); err != nil && ctx.Err() == nil {
		slog.WarnContext(ctx, "webhook delivery", "delivery_id", c.ID, "event_id", c.EventID, "err", err)
	}
}

// result is what one attempt came back with.
type result struct {
	sentAt  time.Time
	status  int
	latency time.Duration
	outcome string
	err     string
	snippet string
}

func (r result) ok() bool { return r.status >= 200 && r.status < 300 }

// Deliver sends c's attempt and records it, under a heartbeat that keeps c's lease from the
// moment it is sent to the moment it is recorded.
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
	held, sending, release := s.hold(ctx, c)
	defer release()
	res := s.send(held, e, ev, c.Attempts, c.skew)
	sending.Store(false)
	if held.Err() == nil {
		s.observe(e.ID, c.class, res.outcome, time.Now())
		if res.outcome != OutcomeTimeout && res.outcome != OutcomeError {
			s.paced(e.ID, res.latency)
		}
	}
	s.Metrics.attempt(e.ID, res)
	return s.record(context.WithoutCancel(ctx), c, e, res)
}

// hold renews c's lease every Lease/3 until release is called, and returns the context of
// the attempt, with a flag the caller clears once the attempt is answered: the context is
// cancelled when the lease is lost (another sender holds it) or could not
// be renewed for 2/3 of a lease, before it can expire under the attempt — an attempt is
// abandoned rather than risk being sent by two senders at once.
func (s *Sender) hold(ctx context.Context, c Claimed) (context.Context, *atomic.Bool, func()) {
	held, cancel := context.WithCancel(ctx)
	var sending atomic.Bool // until the attempt is answered; the lease guards its record after
	sending.Store(true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		every := max(s.Lease/3, 10*time.Millisecond)
		renewed := time.Now()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ok, err := s.renew(context.WithoutCancel(ctx), c, every)
			switch {
			case err == nil && ok:
				renewed = time.Now()
			case err == nil, time.Since(renewed) > every*3/2:
				// Lost: taken by another sender, or — the attempt just recorded — given
				// back. Only an attempt still waiting for its answer has anything to abandon.
				if sending.Load() {
					slog.WarnContext(ctx, "webhook delivery: lease lost under its attempt; abandoning it", "delivery_id", c.ID, "err", err)
				}
				cancel()
				return
			}
		}
	})
	return held, &sending, func() { close(stop); wg.Wait(); cancel() }
}

// renew moves c's lease to a full Lease from now, by the database's clock, if c still holds
// it; it reports whether it did.
func (s *Sender) renew(ctx context.Context, c Claimed, within time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	now, err := database.Now(ctx, s.db)
	if err != nil {
		return false, err
	}
	res := s.db.WithContext(ctx).Model(&Delivery{}).Where("id = ? AND locked_by = ?", c.ID, c.Token).
		Update("locked_until", now.Add(s.Lease))
	return res.RowsAffected == 1, res.Error
}

// send POSTs ev's payload to e, signed now by the database's clock (the instance's plus skew),
// within Timeout. The receiver checks the signed time against its own clock (five minutes,
// Stripe's tolerance): signed with the clock of an instance ten minutes ahead, every attempt
// of that instance was refused (TestSignedOnTheDatabasesClock).
func (s *Sender) send(ctx context.Context, e Endpoint, ev outbox.Event, attempt int, skew time.Duration) (r result) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	start := time.Now() // the latency's, on the monotonic clock
	now := clock.Now().Add(skew)
	r.sentAt = now
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(ev.Payload))
	if err != nil {
		r.err = attemptError(err, e.URL)
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
	if err != nil {
		r.latency, r.outcome, r.err = time.Since(start), OutcomeError, attemptError(err, e.URL)
		if errors.Is(err, context.DeadlineExceeded) {
			r.outcome, r.err = OutcomeTimeout, fmt.Sprintf("no answer within %s", s.Timeout)
		}
		return r
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, SnippetBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	// The latency includes the body read: a receiver that trickles its answer holds the
	// attempt that long.
	r.latency = time.Since(start)
	r.status = resp.StatusCode
	r.snippet = snippet(head)
	r.outcome = OutcomeOK
	if !r.ok() {
		r.outcome, r.err = OutcomeStatus, "HTTP "+strconv.Itoa(resp.StatusCode)
	}
	return r
}

// RedactURL is a receiver URL as the sender shows it anywhere but the endpoint row:
// scheme://host[:port]. The URL may carry a capability token in its path, query, fragment or
// user info (https://hooks.example.com/services/T000/B000/XXXX, ?token=…), and every failed
// attempt wrote it whole into the delivery log, the webhook_failing anomaly and the log line
// (Go's *url.Error quotes the URL).
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unreadable url)"
	}
	return u.Scheme + "://" + u.Host
}

// attemptError is the text of an attempt's error, with the endpoint's URL raw shown as
// RedactURL shows it: the delivery log, the anomaly and the log line carry this text.
func attemptError(err error, raw string) string {
	var ue *url.Error
	if errors.As(err, &ue) && ue == err {
		err = &url.Error{Op: ue.Op, URL: RedactURL(ue.URL), Err: ue.Err}
	}
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil {
		for _, whole := range []string{raw, u.String(), u.Redacted()} {
			msg = strings.ReplaceAll(msg, whole, RedactURL(raw))
		}
	} else {
		msg = strings.ReplaceAll(msg, raw, RedactURL(raw))
	}
	return msg
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
// attempt, or — after the last one — fails it and, if the endpoint was enabled, marks it
// failing with a webhook_failing anomaly. Only the lease's holder moves the delivery: a sender
// whose delivery was redelivered meanwhile still logs its attempt but leaves the delivery to
// the new round.
func (s *Sender) record(ctx context.Context, c Claimed, e Endpoint, r result) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		a := Attempt{ID: s.ids.Next(), DeliveryID: c.ID, EndpointID: c.EndpointID, EventID: c.EventID, Attempt: c.Attempts,
			ClaimedAt: &c.at, SentAt: r.sentAt, StatusCode: r.status, LatencyMS: r.latency.Milliseconds(), Error: nonEmpty(r.err), ResponseSnippet: nonEmpty(r.snippet)}
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
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			// Redelivered while in flight: the new round is due already; only the lease, if
			// still this one, is given back, so that it need not expire first.
			return tx.Model(&Delivery{}).Where("id = ? AND locked_by = ?", c.ID, c.Token).
				Updates(map[string]any{"locked_until": nil, "locked_by": nil}).Error
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

// fail marks e failing and keeps its outage as an anomaly, for an operator to redeliver once
// the receiver is mended: nothing is dropped silently. One outage is one anomaly: only the
// delivery that moves the endpoint from enabled to failing records it (rows affected
// decides, so two instances failing deliveries at once record one), and the deliveries that
// fail after it, while the endpoint stays failing, add none — a long outage raised one
// anomaly per delivery, hundreds of them. The next 2xx enables the endpoint again, and a later
// outage is a new anomaly, named by the event that opened it.
func (s *Sender) fail(ctx context.Context, tx *gorm.DB, c Claimed, e Endpoint, r result) error {
	now := clock.Now()
	res := tx.Model(&Endpoint{}).Where("id = ? AND status = ?", e.ID, Enabled).Updates(map[string]any{"status": Failing, "updated_at": now})
	if res.Error != nil || res.RowsAffected == 0 {
		return res.Error // failing already (this outage has its anomaly), or disabled
	}
	slog.WarnContext(ctx, "webhook delivery failed for its whole schedule; endpoint marked failing",
		"endpoint_id", e.ID, "event_id", c.EventID, "attempts", c.Attempts, "last_error", r.err)
	return s.anomalies.Record(ctx, tx, anomaly.Anomaly{
		Kind: anomaly.WebhookFailing, Channel: "webhook", Space: "webhook",
		TradeNo: ids.Format(e.ID) + "/" + ids.Format(c.EventID),
		Detail: fmt.Sprintf("endpoint %d (%s) stopped acknowledging at %s: event %d was not acknowledged after %d attempts (last: %s), and every delivery that fails before the endpoint's next 2xx belongs to this outage; once the receiver answers 2xx, redeliver the endpoint's events from %s",
			e.ID, RedactURL(e.URL), now.UTC().Format(time.RFC3339), c.EventID, c.RoundAttempts, r.err, c.CreatedAt.UTC().Format(time.RFC3339)),
	})
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
