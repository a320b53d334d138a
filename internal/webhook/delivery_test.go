package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestRolledBackChangeAnnouncesNothing is I17 from the sender's side: an event written in a
// transaction that rolls back never reaches the feed, a delivery or a receiver; the committed
// one beside it does, once.
func TestRolledBackChangeAnnouncesNothing(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, nil)
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	ctx := context.Background()

	errRollback := errors.New("the change failed after its event was written")
	err := f.db.Transaction(func(tx *gorm.DB) error {
		if err := f.events.Announce(ctx, tx, outbox.OrderPaid, map[string]string{"order_id": "rolled-back"}); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("transaction: %v", err)
	}
	committed := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "committed"})

	if n := f.sequence(t); n != 1 {
		t.Errorf("sequenced %d events, want the committed one only", n)
	}
	var events int64
	f.db.Model(&outbox.Event{}).Count(&events)
	if events != 1 {
		t.Errorf("events holds %d rows, want 1: the rolled-back change's event survived", events)
	}
	if _, err := f.sender(f.db).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	hits := rcv.got()
	if len(hits) != 1 || hits[0].eventID != ids.Format(committed) {
		t.Fatalf("receiver got %d requests %+v, want the committed event %d once", len(hits), hits, committed)
	}
	if !verify(hits[0].signature, hits[0].body, e.Secret) {
		t.Errorf("signature %q does not verify with the endpoint's secret", hits[0].signature)
	}
	if got := eventOf(t, hits[0].body); string(got.Data) != `{"order_id":"committed"}` || got.Type != outbox.OrderPaid || got.EventID != ids.Format(committed) {
		t.Errorf("body %s", hits[0].body)
	}
}

// TestSendersNeverSendOneAttemptTwiceAtOnce runs three delivery loops, each on its own pool
// (three instances), against one receiver that holds every request a moment: every event
// reaches it exactly once, never two copies of one at the same time, and the log holds one
// attempt per event.
func TestSendersNeverSendOneAttemptTwiceAtOnce(t *testing.T) {
	testenv.RequireMySQL(t)
	f := newFixture(t)
	rcv := newReceiver(t, nil)
	rcv.hold = 20 * time.Millisecond
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	const events = 120
	want := map[string]bool{}
	for i := range events {
		want[ids.Format(f.announce(t, outbox.OrderPaid, map[string]int{"n": i}))] = true
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		pool := apptest.OpenPool(t, f.db, f.dsn)
		loop := &webhook.Loop{Sequencer: webhook.NewSequencer(pool, f.gen), Sender: f.sender(pool, time.Second), Interval: 10 * time.Millisecond}
		loop.Sender.BatchSize = 10
		wg.Go(func() { _ = loop.Run(ctx) })
	}
	// Stop the loops before the pools close, also when the test fails half-way.
	t.Cleanup(func() { cancel(); wg.Wait() })
	apptest.Eventually(t, 60*time.Second, "every delivery succeeded", func() (bool, string) {
		// A count that fails must not read as "none pending": it once ended the wait at once,
		// before anything was sent.
		// The attempts are counted too. The two counts of deliveries are two reads: the first
		// may run before the fan-out commits (none pending) and the second after it (all of
		// them), which twice under CI's load ended the wait before anything was sent. Only a
		// send logs an attempt.
		var pending, all, logged int64
		if err := f.db.Model(&webhook.Delivery{}).Where("status <> ?", webhook.Succeeded).Count(&pending).Error; err != nil {
			return false, err.Error()
		}
		if err := f.db.Model(&webhook.Delivery{}).Count(&all).Error; err != nil {
			return false, err.Error()
		}
		if err := f.db.Model(&webhook.Attempt{}).Count(&logged).Error; err != nil {
			return false, err.Error()
		}
		return all == events && pending == 0 && logged >= events, fmt.Sprintf("%d deliveries, %d not succeeded, %d attempts logged", all, pending, logged)
	})
	cancel()
	wg.Wait()
	t.Cleanup(func() {
		if t.Failed() {
			var byStatus []struct {
				Status string
				N      int64
			}
			f.db.Model(&webhook.Delivery{}).Select("status, COUNT(*) AS n").Group("status").Scan(&byStatus)
			t.Logf("deliveries by status: %+v", byStatus)
		}
	})

	perEvent := map[string]int{}
	for _, h := range rcv.got() {
		perEvent[h.eventID]++
		if h.attempt != "1" {
			t.Errorf("event %s came as attempt %s, want 1", h.eventID, h.attempt)
		}
		if !verify(h.signature, h.body, e.Secret) {
			t.Errorf("event %s: signature does not verify", h.eventID)
		}
	}
	for id := range want {
		if perEvent[id] != 1 {
			t.Errorf("event %s reached the receiver %d times, want once", id, perEvent[id])
		}
	}
	if rcv.maxInFlight != 1 {
		t.Errorf("the receiver had up to %d copies of one event in flight at once, want 1", rcv.maxInFlight)
	}
	var attempts int64
	f.db.Model(&webhook.Attempt{}).Count(&attempts)
	if attempts != events {
		t.Errorf("the log holds %d attempts, want %d", attempts, events)
	}
}

// TestRetriedUntil2xx: a receiver that answers 500 and then 200 gets the same event twice —
// same id, same body, attempt 1 then 2 — after the schedule's pause, and the log keeps both
// answers.
func TestRetriedUntil2xx(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, func(_ hit, n int) int {
		if n == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	id := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "1"})
	f.sequence(t)
	s := f.sender(f.db, 300*time.Millisecond, time.Hour)
	ctx := context.Background()

	if n, err := s.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("first round sent %d (%v), want 1", n, err)
	}
	if n, _ := s.RunOnce(ctx); n != 0 {
		t.Fatalf("the retry was sent before its pause")
	}
	apptest.Eventually(t, 5*time.Second, "the retry", func() (bool, string) {
		n, err := s.RunOnce(ctx)
		return n == 1 && err == nil, fmt.Sprint(n, err)
	})
	hits := rcv.got()
	if len(hits) != 2 || hits[0].attempt != "1" || hits[1].attempt != "2" || string(hits[0].body) != string(hits[1].body) ||
		hits[0].eventID != ids.Format(id) || hits[1].eventID != ids.Format(id) {
		t.Fatalf("receiver got %+v, want attempts 1 and 2 of event %d with one body", hits, id)
	}
	if gap := hits[1].at.Sub(hits[0].at); gap < 300*time.Millisecond {
		t.Errorf("retry after %s, want the schedule's 300ms", gap)
	}
	d := f.delivery(t, e.ID, id)
	if d.Status != webhook.Succeeded || d.Attempts != 2 || d.LockedBy != nil {
		t.Errorf("delivery %+v, want succeeded after 2 attempts, unleased", d)
	}
	var log []webhook.Attempt
	f.db.Where("delivery_id = ?", d.ID).Order("id").Find(&log)
	if len(log) != 2 || log[0].StatusCode != 500 || log[1].StatusCode != 200 || log[1].ResponseSnippet == nil || *log[1].ResponseSnippet != `{"received":true}` {
		t.Errorf("log %+v, want 500 then 200 with the answer's bytes", log)
	}
	// Each attempt says when its lease was claimed, on the database's clock, before it was
	// signed: the claim, not the send, tells which round a 2xx ended when a redelivery comes
	// while it is in flight.
	for _, a := range log {
		if a.ClaimedAt == nil || a.ClaimedAt.After(a.SentAt.Add(time.Millisecond)) || a.SentAt.Sub(*a.ClaimedAt) > 5*time.Second {
			t.Errorf("attempt %d claimed at %v, signed at %v: want a claim just before the signature", a.Attempt, a.ClaimedAt, a.SentAt)
		}
	}
}

// TestFailingForTheWholeSchedule: a receiver that never answers 2xx gets 1 + len(schedule)
// attempts; then the delivery fails, the endpoint is marked failing and one webhook_failing
// anomaly is kept. A redelivery once the receiver is mended is the same event, and its 2xx
// enables the endpoint again.
func TestFailingForTheWholeSchedule(t *testing.T) {
	f := newFixture(t)
	var mended sync.Map
	rcv := newReceiver(t, func(h hit, _ int) int {
		if _, ok := mended.Load("yes"); ok {
			return http.StatusNoContent
		}
		return http.StatusServiceUnavailable
	})
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	id := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "2"})
	f.sequence(t)
	s := f.sender(f.db, 20*time.Millisecond, 20*time.Millisecond)
	ctx := context.Background()
	apptest.Eventually(t, 5*time.Second, "the schedule used up", func() (bool, string) {
		_, _ = s.RunOnce(ctx)
		d := f.delivery(t, e.ID, id)
		return d.Status == webhook.Failed, fmt.Sprintf("%s after %d", d.Status, d.Attempts)
	})
	if n := len(rcv.got()); n != 3 {
		t.Errorf("receiver got %d attempts, want 3 (1 + a schedule of 2)", n)
	}
	if got, _ := f.endpoints.Get(ctx, f.db, e.ID); got.Status != webhook.Failing {
		t.Errorf("endpoint is %s, want failing", got.Status)
	}
	var kept []anomaly.Anomaly
	f.db.Where("kind = ?", anomaly.WebhookFailing).Find(&kept)
	if len(kept) != 1 || kept[0].TradeNo != ids.Format(e.ID)+"/"+ids.Format(id) {
		t.Errorf("anomalies %+v, want one webhook_failing for %d/%d", kept, e.ID, id)
	}

	mended.Store("yes", true)
	h := webhook.NewHandler(f.db, f.gen, f.endpoints, httpkey.Handler{}, webhook.AddressPolicy{Dev: true}, time.Hour)
	var queued int
	err := f.db.Transaction(func(tx *gorm.DB) error {
		var err error
		queued, err = h.Redeliver(ctx, tx, e.ID, webhook.Selection{EventID: id})
		return err
	})
	if err != nil || queued != 1 {
		t.Fatalf("redeliver: %d, %v", queued, err)
	}
	if n, err := s.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("redelivery sent %d (%v)", n, err)
	}
	hits := rcv.got()
	last := hits[len(hits)-1]
	if last.eventID != ids.Format(id) || last.attempt != "4" || string(last.body) != string(hits[0].body) {
		t.Errorf("redelivery %+v, want event %d as attempt 4 with the first body", last, id)
	}
	if got, _ := f.endpoints.Get(ctx, f.db, e.ID); got.Status != webhook.Enabled {
		t.Errorf("endpoint is %s after a 2xx, want enabled", got.Status)
	}
}

// TestKilledSenderLeaseExpires: a sender that claimed a delivery and died (kill -9: it never
// records anything) keeps every other sender off it until its lease expires; then another
// sender sends the next attempt, exactly once.
func TestKilledSenderLeaseExpires(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, nil)
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	id := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "3"})
	f.sequence(t)
	ctx := context.Background()

	dead := f.sender(f.db, time.Second)
	dead.Lease = 700 * time.Millisecond
	claimed, err := dead.Claim(ctx)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d (%v), want 1", len(claimed), err)
	}
	// The dead sender sends nothing more and records nothing.

	other := f.sender(apptest.OpenPool(t, f.db, f.dsn), time.Second)
	if n, err := other.RunOnce(ctx); n != 0 || err != nil {
		t.Fatalf("another sender sent %d (%v) while the lease held, want 0", n, err)
	}
	time.Sleep(800 * time.Millisecond)
	if n, err := other.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("after the lease expired another sender sent %d (%v), want 1", n, err)
	}
	hits := rcv.got()
	if len(hits) != 1 || hits[0].attempt != "2" || hits[0].eventID != ids.Format(id) {
		t.Errorf("receiver got %+v, want attempt 2 of event %d once", hits, id)
	}
	if d := f.delivery(t, e.ID, id); d.Status != webhook.Succeeded {
		t.Errorf("delivery %s, want succeeded", d.Status)
	}
	// A late record by the dead sender's lease changes nothing: its token no longer holds.
	if n, _ := other.RunOnce(ctx); n != 0 {
		t.Errorf("a succeeded delivery was sent again")
	}
}
