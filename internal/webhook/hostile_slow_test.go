package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestSlowAnsweringEndpointsDelayOnlyThemselves: receivers that do answer 200, but only just
// within the attempt timeout, are proven endpoints and each may have PerEndpoint attempts in
// flight. Enough of them with a backlog (here 8 × 8 slots against a MaxInFlight of 32; with
// the defaults, 64 of them against 512) took every slot of the sender, in waves that all began
// and ended together, and a healthy receiver's events waited for the end of a wave: up to the
// slow receivers' answer time. Slow endpoints together must leave room for the others, and so
// must busy ones that answer just under the slow mark (2.9 s of a 6 s timeout): an endpoint's
// first attempt in flight may take any free slot, its further ones only half of them.
func TestSlowAnsweringEndpointsDelayOnlyThemselves(t *testing.T) {
	for _, answerAfter := range []time.Duration{5 * time.Second, 2900 * time.Millisecond} {
		t.Run(answerAfter.String(), func(t *testing.T) { slowAnswering(t, answerAfter) })
	}
}

func slowAnswering(t *testing.T, answerAfter time.Duration) {
	f := newFixture(t)
	healthy := newReceiver(t, nil)
	const timeout = 6 * time.Second
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(answerAfter):
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	for range 8 {
		f.endpoint(t, slow.URL+"/hook", outbox.OrderPaid)
	}
	good := f.endpoint(t, healthy.srv.URL, outbox.OrderPaid)
	// A backlog for the slow ones: every slot of theirs stays busy.
	for i := range 30 {
		f.announce(t, outbox.OrderPaid, map[string]int{"backlog": i})
	}

	s := webhook.NewSender(f.db, f.gen, anomaly.NewRecorder(f.db, f.gen), []time.Duration{time.Hour}, timeout).
		UsePolicy(webhook.AddressPolicy{Dev: true}).UseKeys(testKeys())
	s.MaxInFlight = 32
	loop := &webhook.Loop{Sequencer: webhook.NewSequencer(f.db, f.gen), Sender: s, Interval: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = loop.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Past the healthy receiver's backlog and into the slow ones' waves.
	deadline := time.Now().Add(20 * time.Second)
	for len(healthy.got()) < 30 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(answerAfter + time.Second)

	committed := measureLags(t, f, healthy, 15, 200*time.Millisecond)
	if n := f.db.Where("endpoint_id = ? AND status = ?", good.ID, webhook.Succeeded).Find(&[]webhook.Delivery{}).RowsAffected; n < int64(len(committed)) {
		t.Errorf("%d healthy deliveries succeeded, want at least %d", n, len(committed))
	}
}
