package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
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

// exchange is one request a slowReceiver got: when it arrived, when it was answered, and with
// what.
type exchange struct {
	start, end time.Time
	status     int
}

// slowReceiver holds every request for hold and then answers status(event, n), n the number
// of requests for that event that came before; it keeps every exchange per event.
type slowReceiver struct {
	hold   time.Duration
	status func(event string, n int) int

	mu  sync.Mutex
	got map[string][]exchange
}

func newSlowReceiver(t *testing.T, hold time.Duration, status func(string, int) int) (*slowReceiver, string) {
	t.Helper()
	r := &slowReceiver{hold: hold, status: status, got: map[string][]exchange{}}
	srv := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ev := req.Header.Get(webhook.HeaderEventID)
		r.mu.Lock()
		n := len(r.got[ev])
		r.got[ev] = append(r.got[ev], exchange{start: time.Now()})
		r.mu.Unlock()
		time.Sleep(r.hold)
		code := r.status(ev, n)
		r.mu.Lock()
		r.got[ev][n].end, r.got[ev][n].status = time.Now(), code
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	return r, srv
}

// newHTTPServer serves h on a free port of 127.0.0.1 until the test ends and returns its URL.
func newHTTPServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (r *slowReceiver) exchanges() map[string][]exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]exchange{}
	for k, v := range r.got {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestSlowAttemptsSentOnceAcrossInstances is the measurement: three instances, one
// receiver that answers after 2 s with an attempt timeout of 3 s, 120 deliveries. Every
// delivery must reach it once (twice for the events whose first answer is a 500), never two
// attempts of one delivery at once, never again after a 2xx, and a retry never before its
// pause. Before the lease covered the attempt, a delivery claimed in a batch of 100 waited
// behind 8 workers longer than its lease: 154–165 requests for 120 deliveries.
func TestSlowAttemptsSentOnceAcrossInstances(t *testing.T) {
	testenv.RequireMySQL(t)
	f := newFixture(t)
	const events, pause = 120, 4 * time.Second
	failFirst := map[string]bool{} // every 12th event is answered 500 the first time
	var order []string
	for i := range events {
		id := ids.Format(f.announce(t, outbox.OrderPaid, map[string]int{"n": i}))
		order = append(order, id)
		if i%12 == 0 {
			failFirst[id] = true
		}
	}
	rcv, url := newSlowReceiver(t, 2*time.Second, func(ev string, n int) int {
		if n == 0 && failFirst[ev] {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	f.endpoint(t, url, outbox.OrderPaid)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		pool := apptest.OpenPool(t, f.db, f.dsn)
		s := webhook.NewSender(pool, f.gen, anomaly.NewRecorder(pool, f.gen), []time.Duration{pause, time.Hour}, 3*time.Second).
			UsePolicy(webhook.AddressPolicy{Dev: true}).UseKeys(testKeys())
		s.Jitter = func(d time.Duration) time.Duration { return d }
		loop := &webhook.Loop{Sequencer: webhook.NewSequencer(pool, f.gen), Sender: s, Interval: 50 * time.Millisecond}
		wg.Go(func() { _ = loop.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	var left, all int64
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		f.db.Model(&webhook.Delivery{}).Where("status <> ?", webhook.Succeeded).Count(&left)
		f.db.Model(&webhook.Delivery{}).Count(&all)
		if all == events && left == 0 {
			break
		}
	}
	if all != events || left != 0 {
		t.Errorf("after 90s: %d deliveries, %d not succeeded; want %d, all succeeded", all, left, events)
	}
	// A late duplicate would come within a lease or two: give it a moment, then stop.
	time.Sleep(time.Second)
	cancel()
	wg.Wait()

	got := rcv.exchanges()
	var requests, extra, overlapping, afterOK, early int
	for _, ev := range order {
		xs := got[ev]
		requests += len(xs)
		want := 1
		if failFirst[ev] {
			want = 2
		}
		extra += max(0, len(xs)-want)
		for i := 1; i < len(xs); i++ {
			prev, x := xs[i-1], xs[i]
			switch {
			case prev.end.IsZero() || x.start.Before(prev.end):
				overlapping++
			case prev.status/100 == 2:
				afterOK++
			case x.start.Sub(prev.end) < pause-100*time.Millisecond:
				early++
			}
		}
		if len(xs) < want {
			t.Errorf("event %s reached the receiver %d times, want %d", ev, len(xs), want)
		}
	}
	t.Logf("%d requests for %d deliveries (%d expected with the %d first answers of 500): %d extra, %d overlapping another attempt of the same delivery, %d sent again after a 2xx, %d retries before their %s pause",
		requests, events, events+len(failFirst), len(failFirst), extra, overlapping, afterOK, early, pause)
	if extra != 0 || overlapping != 0 || afterOK != 0 || early != 0 {
		t.Errorf("%d extra requests, %d overlapping, %d after a 2xx, %d early retries; want 0 of each", extra, overlapping, afterOK, early)
	}
}

// TestLeaseRenewedWhileAttemptInFlight: an attempt that takes longer than the lease keeps its
// delivery: a second sender polling all the while never sends it.
func TestLeaseRenewedWhileAttemptInFlight(t *testing.T) {
	f := newFixture(t)
	rcv, url := newSlowReceiver(t, 2500*time.Millisecond, func(string, int) int { return http.StatusOK })
	f.endpoint(t, url, outbox.OrderPaid)
	f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "10"})
	f.sequence(t)
	ctx := context.Background()

	holder := f.sender(f.db, time.Minute)
	holder.Timeout = 5 * time.Second
	holder.Lease = 600 * time.Millisecond
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n, err := holder.RunOnce(ctx); n != 1 || err != nil {
			t.Errorf("holder sent %d (%v), want 1", n, err)
		}
	}()
	other := f.sender(apptest.OpenPool(t, f.db, f.dsn), time.Minute)
	for {
		select {
		case <-done:
			n := 0
			for _, xs := range rcv.exchanges() {
				n += len(xs)
			}
			if n != 1 {
				t.Errorf("the receiver got %d requests for one delivery, want 1: the lease expired under an attempt in flight", n)
			}
			if sent, _ := other.RunOnce(ctx); sent != 0 {
				t.Errorf("a succeeded delivery was sent again")
			}
			return
		case <-time.After(100 * time.Millisecond):
			if _, err := other.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
