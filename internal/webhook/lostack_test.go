package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestLostAcksDoNotStarveTheRetry: a receiver that processes the first attempt of every event
// and drops the connection instead of answering (a lost 2xx each time, I16) keeps opening its
// endpoint's circuit. The circuit's probe is the delivery tried most, so the retry of the first
// lost answer goes out with the first probe, not behind the first attempts of the events that
// came after it (which failed too, doubling the back-off each time: the drill's I16 waited past
// its 30 s).
func TestLostAcksDoNotStarveTheRetry(t *testing.T) {
	f := newFixture(t)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		id := r.Header.Get("Oncepay-Event-Id")
		seen[id]++
		first := seen[id] == 1
		mu.Unlock()
		if first {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = conn.Close() // processed; the answer never leaves
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	f.endpoint(t, srv.URL, outbox.OrderPaid)
	lost := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "1"})
	f.sequence(t)
	s := f.sender(f.db, 300*time.Millisecond, time.Hour)
	ctx := context.Background()
	if n, err := s.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("first round sent %d (%v), want 1", n, err)
	}
	for i := range 3 { // newer events, due before the lost one's retry
		f.announce(t, outbox.OrderPaid, map[string]string{"order_id": fmt.Sprint(i + 2)})
	}
	f.sequence(t)
	apptest.Eventually(t, 1800*time.Millisecond, "the retry of the lost answer with the circuit's first probe", func() (bool, string) {
		_, _ = s.RunOnce(ctx)
		mu.Lock()
		defer mu.Unlock()
		return seen[ids.Format(lost)] >= 2, fmt.Sprint(seen)
	})
}
