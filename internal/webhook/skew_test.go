package webhook_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestLeaseHeldAgainstClockAhead: a delivery's lease, held by one sender, is not taken by a
// sender whose clock runs ten minutes ahead. The lease compared locked_until with the
// claimer's clock, and the sender ahead took every live lease.
func TestLeaseHeldAgainstClockAhead(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, nil)
	f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "7"})
	f.sequence(t)
	ctx := context.Background()

	holder := f.sender(f.db, time.Second)
	holder.Lease = time.Minute
	if claimed, err := holder.Claim(ctx); err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d (%v), want 1", len(claimed), err)
	}
	apptest.SkewClock(t, 10*time.Minute)
	ahead := f.sender(apptest.OpenPool(t, f.db, f.dsn), time.Second)
	if n, err := ahead.RunOnce(ctx); n != 0 || err != nil {
		t.Errorf("a sender 10 min ahead sent %d (%v) while another held the lease for a minute, want 0", n, err)
	}
	if hits := rcv.got(); len(hits) != 0 {
		t.Errorf("receiver got %d attempts while the lease held, want 0", len(hits))
	}
}

// TestDeliveriesDueByTheDatabasesClock: the times a delivery is due are the database's. A
// delivery fanned out by an instance ten minutes ahead is due at once, and a retry scheduled
// by an instance ten minutes behind is not due before its pause is over. On the instances'
// clocks the first waited ten minutes and the second went out five minutes early.
func TestDeliveriesDueByTheDatabasesClock(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, func(h hit, n int) int { return http.StatusInternalServerError })
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	id := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "8"})
	ctx := context.Background()

	prev := clock.SetOffset(10 * time.Minute)
	f.sequence(t)
	clock.SetOffset(prev)
	s := f.sender(f.db, 5*time.Minute, 5*time.Minute)
	if n, err := s.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("a delivery fanned out on a clock 10 min ahead: sent %d (%v) at once, want 1", n, err)
	}

	// The first attempt failed (500). Its retry is made due now, and sent by a sender ten
	// minutes behind, whose attempt fails too and schedules the next one.
	d := f.delivery(t, e.ID, id)
	apptest.SkewClock(t, -10*time.Minute)
	if err := f.db.Model(&webhook.Delivery{}).Where("id = ?", d.ID).Update("next_attempt_at", time.Now().UTC().Add(-time.Second)).Error; err != nil {
		t.Fatal(err)
	}
	if n, err := s.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("second attempt: sent %d (%v), want 1", n, err)
	}
	d = f.delivery(t, e.ID, id)
	if wait := time.Until(d.NextAttemptAt); wait < 4*time.Minute {
		t.Errorf("a retry scheduled on a clock 10 min behind is due in %s by the database's clock, want its 5 min pause", wait)
	}
	clock.SetOffset(prev)
	if n, err := s.RunOnce(ctx); n != 0 || err != nil {
		t.Errorf("a sender on the database's clock sent %d (%v) before the retry's pause was over, want 0", n, err)
	}
}

// TestSignedOnTheDatabasesClock: a sender whose clock runs ten minutes ahead signs each
// attempt with the database's time, which a receiver's tolerance (five minutes, Stripe's)
// accepts. Signed with its own clock, every attempt of that sender was refused — and, its
// refusals answered at once while the other senders waited on slow receivers, it sent 80 % of
// all attempts: the chaos run's clock skew failed whole deliveries.
func TestSignedOnTheDatabasesClock(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, nil)
	f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "9"})
	f.sequence(t)
	apptest.SkewClock(t, 10*time.Minute)
	if n, err := f.sender(f.db, time.Second).RunOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("sent %d (%v), want 1", n, err)
	}
	hits := rcv.got()
	if len(hits) != 1 {
		t.Fatalf("receiver got %d attempts, want 1", len(hits))
	}
	var ts int64
	for _, part := range strings.Split(hits[0].signature, ",") {
		if k, v, _ := strings.Cut(part, "="); k == "t" {
			ts, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if d := time.Since(time.Unix(ts, 0)); d < -5*time.Second || d > 5*time.Second {
		t.Errorf("a sender 10 min ahead signed with t=%d, %s off the database's clock; want within seconds (a receiver allows 5 min)", ts, -d)
	}
}
