package webhook_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestAdminChurnNeverSendsTwice: three instances send to a receiver that answers 200 after
// 1.2 s (attempt timeout 2 s) while a hostile admin flips the endpoint disabled and enabled
// and its URL between two spellings of the same receiver every 100 ms. No delivery is ever
// sent twice at once, none again after its 2xx, and each event reaches the receiver exactly
// once: the admin's churn moves no lease.
func TestAdminChurnNeverSendsTwice(t *testing.T) {
	testenv.RequireMySQL(t)
	f := newFixture(t)
	const events = 40
	rcv, url := newSlowReceiver(t, 1200*time.Millisecond, func(string, int) int { return http.StatusOK })
	e := f.endpoint(t, url, outbox.OrderPaid)
	var order []string
	for i := range events {
		order = append(order, ids.Format(f.announce(t, outbox.OrderPaid, map[string]int{"n": i})))
	}
	// Fanned out while enabled: a disabled endpoint gets no deliveries of the events sequenced
	// meanwhile (docs/contract.md), which is not what this test is about.
	f.sequence(t)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		pool := apptest.OpenPool(t, f.db, f.dsn)
		s := webhook.NewSender(pool, f.gen, anomaly.NewRecorder(pool, f.gen), []time.Duration{2 * time.Second, time.Hour}, 2*time.Second).
			UsePolicy(webhook.AddressPolicy{Dev: true}).UseKeys(testKeys())
		s.Jitter = func(d time.Duration) time.Duration { return d }
		loop := &webhook.Loop{Sequencer: webhook.NewSequencer(pool, f.gen), Sender: s, Interval: 20 * time.Millisecond}
		wg.Go(func() { _ = loop.Run(ctx) })
	}
	churn, stopChurn := context.WithCancel(ctx)
	wg.Go(func() {
		for i := 0; churn.Err() == nil; i++ {
			st, u := webhook.Disabled, url+"/?spelling=2"
			if i%2 == 1 {
				st, u = webhook.Enabled, url
			}
			if _, err := f.endpoints.Update(churn, e.ID, webhook.Patch{Status: &st, URL: &u}); err != nil && churn.Err() == nil {
				t.Errorf("patch: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		st := webhook.Enabled
		_, _ = f.endpoints.Update(context.Background(), e.ID, webhook.Patch{Status: &st})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })

	time.AfterFunc(6*time.Second, stopChurn)
	var left, all int64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		f.db.Model(&webhook.Delivery{}).Where("status <> ?", webhook.Succeeded).Count(&left)
		f.db.Model(&webhook.Delivery{}).Count(&all)
		if all == events && left == 0 {
			break
		}
	}
	if all != events || left != 0 {
		t.Errorf("after 60s: %d deliveries, %d not succeeded; want %d, all succeeded", all, left, events)
	}
	time.Sleep(time.Second)
	cancel()
	wg.Wait()

	got := rcv.exchanges()
	var extra, overlapping, afterOK int
	for _, ev := range order {
		xs := got[ev]
		extra += max(0, len(xs)-1)
		for i := 1; i < len(xs); i++ {
			prev, x := xs[i-1], xs[i]
			switch {
			case prev.end.IsZero() || x.start.Before(prev.end):
				overlapping++
			case prev.status/100 == 2:
				afterOK++
			}
		}
		if len(xs) == 0 {
			t.Errorf("event %s never reached the receiver", ev)
		}
	}
	if extra != 0 || overlapping != 0 || afterOK != 0 {
		t.Errorf("%d extra requests, %d overlapping another attempt of the same delivery, %d sent again after a 2xx; want 0 of each", extra, overlapping, afterOK)
	}
}
