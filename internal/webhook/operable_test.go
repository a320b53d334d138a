package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestOneAnomalyPerOutage: an endpoint whose receiver is down fails every delivery for the
// whole schedule; the outage is one webhook_failing anomaly however many deliveries fail in
// it. A 2xx ends it; the next outage is one more. Each failed delivery raised its own
// anomaly: a long outage, hundreds.
func TestOneAnomalyPerOutage(t *testing.T) {
	f := newFixture(t)
	var up atomic.Bool
	rcv := newReceiver(t, func(hit, int) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	s := f.sender(f.db, 20*time.Millisecond)
	ctx := context.Background()
	failAll := func(n int) []int64 {
		t.Helper()
		var evs []int64
		for i := range n {
			evs = append(evs, f.announce(t, outbox.OrderPaid, map[string]int{"n": i}))
		}
		f.sequence(t)
		apptest.Eventually(t, 10*time.Second, "every delivery failed", func() (bool, string) {
			_, _ = s.RunOnce(ctx)
			var pending int64
			f.db.Model(&webhook.Delivery{}).Where("status = ?", webhook.Pending).Count(&pending)
			return pending == 0, fmt.Sprintf("%d pending", pending)
		})
		return evs
	}
	anomalies := func() []anomaly.Anomaly {
		var kept []anomaly.Anomaly
		f.db.Where("kind = ?", anomaly.WebhookFailing).Order("id").Find(&kept)
		return kept
	}

	// The outage is named by whichever of its deliveries failed first.
	opened := func(a anomaly.Anomaly, evs []int64) bool {
		return slices.ContainsFunc(evs, func(ev int64) bool { return a.TradeNo == ids.Format(e.ID)+"/"+ids.Format(ev) })
	}
	first := failAll(3)
	if kept := anomalies(); len(kept) != 1 || !opened(kept[0], first) {
		t.Fatalf("after one outage of 3 failed deliveries: %d anomalies %+v, want one, named by the event that opened it", len(kept), kept)
	}
	up.Store(true)
	f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "mended"})
	f.sequence(t)
	if n, err := s.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("sent %d (%v), want 1", n, err)
	}
	if got, _ := f.endpoints.Get(ctx, f.db, e.ID); got.Status != webhook.Enabled {
		t.Fatalf("endpoint %s after a 2xx, want enabled", got.Status)
	}
	up.Store(false)
	second := failAll(2)
	kept := anomalies()
	if len(kept) != 2 || !opened(kept[1], second) {
		t.Errorf("after two outages of 3 and 2 failed deliveries: %d anomalies %+v, want two, one per outage", len(kept), kept)
	}
}

// TestDisabledEndpointExpiresWithRetention: a disabled endpoint's pending deliveries are
// purged with the events past retention, and so are those events; an enabled endpoint's
// pending delivery still keeps its event. They were kept for ever.
func TestDisabledEndpointExpiresWithRetention(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	live := f.endpoint(t, "https://live.example/hook", outbox.OrderPaid)
	off := f.endpoint(t, "https://off.example/hook", outbox.OrderCreated)
	paid := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "p"})
	created := f.announce(t, outbox.OrderCreated, map[string]string{"order_id": "c"})
	f.sequence(t)
	disabled := webhook.Disabled
	if _, err := f.endpoints.Update(ctx, off.ID, webhook.Patch{Status: &disabled}); err != nil {
		t.Fatal(err)
	}
	old := time.Now().UTC().Add(-48 * time.Hour)
	for _, table := range []string{"events", "webhook_deliveries"} {
		if err := f.db.Table(table).Where("1 = 1").Update("created_at", old).Error; err != nil {
			t.Fatal(err)
		}
	}

	if _, err := webhook.NewFeed(f.db).Purge(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	var left []webhook.Delivery
	f.db.Find(&left)
	if len(left) != 1 || left[0].EndpointID != live.ID || left[0].EventID != paid {
		t.Errorf("deliveries left %+v, want only the enabled endpoint's pending one", left)
	}
	var events []int64
	f.db.Model(&outbox.Event{}).Pluck("id", &events)
	if len(events) != 1 || events[0] != paid {
		t.Errorf("events left %v, want only %d (a pending delivery keeps it); %d expired with the disabled endpoint's delivery", events, paid, created)
	}
}

// TestWebhookMetrics: the attempts by outcome and their latency, the queue depth and the age
// of the oldest pending delivery per endpoint, and the feed's lag are on the registry.
func TestWebhookMetrics(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := webhook.NewMetrics(reg, f.db)
	ok := newReceiver(t, nil)
	refusing := newReceiver(t, func(hit, int) int { return http.StatusInternalServerError })
	good := f.endpoint(t, ok.srv.URL, outbox.OrderPaid)
	bad := f.endpoint(t, refusing.srv.URL, outbox.OrderPaid)
	for i := range 2 {
		f.announce(t, outbox.OrderPaid, map[string]int{"n": i})
	}
	seq := webhook.NewSequencer(f.db, f.gen)
	seq.Metrics = m
	if n, err := seq.Sequence(ctx); n != 2 || err != nil {
		t.Fatalf("sequenced %d (%v)", n, err)
	}
	s := f.sender(f.db, time.Hour)
	s.Metrics = m
	// Two rounds: an endpoint not heard from yet gets one attempt at a time (capacity.go).
	sent := 0
	for range 3 {
		n, err := s.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	if sent != 4 {
		t.Fatalf("sent %d, want 4", sent)
	}
	// One event committed a minute ago and not yet sequenced: the feed lags a minute.
	waiting := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "late"})
	var ev outbox.Event
	if err := f.db.Where("id = ?", waiting).Take(&ev).Error; err != nil {
		t.Fatal(err)
	}
	f.db.Model(&outbox.Event{}).Where("id = ?", waiting).Update("created_at", ev.CreatedAt.Add(-time.Minute))

	got := gather(t, reg)
	for _, c := range []struct {
		name, labels string
		want         func(float64) bool
	}{
		{"oncepay_webhook_attempts_total", ids.Format(good.ID) + ",2xx", eq(2)},
		{"oncepay_webhook_attempts_total", ids.Format(bad.ID) + ",non_2xx", eq(2)},
		{"oncepay_webhook_attempt_duration_seconds", ids.Format(good.ID), eq(2)}, // the count
		{"oncepay_webhook_feed_delay_seconds", "", eq(2)},                        // the count
		{"oncepay_webhook_queue_depth", ids.Format(good.ID) + ",enabled", eq(0)},
		{"oncepay_webhook_queue_depth", ids.Format(bad.ID) + ",enabled", eq(2)},
		{"oncepay_webhook_oldest_pending_seconds", ids.Format(good.ID) + ",enabled", eq(0)},
		{"oncepay_webhook_oldest_pending_seconds", ids.Format(bad.ID) + ",enabled", func(v float64) bool { return v >= 0 && v < 60 }},
		{"oncepay_webhook_feed_lag_seconds", "", func(v float64) bool { return v >= 55 && v < 120 }},
	} {
		v, found := got[c.name+"{"+c.labels+"}"]
		if !found || !c.want(v) {
			t.Errorf("%s{%s} = %v (found %v)", c.name, c.labels, v, found)
		}
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// gather reads reg into name{label values,…} → value; a histogram's value is its count.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			key := fam.GetName() + "{" + labelValues(m) + "}"
			switch fam.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func labelValues(m *dto.Metric) string {
	s := ""
	for i, l := range m.GetLabel() {
		if i > 0 {
			s += ","
		}
		s += l.GetValue()
	}
	return s
}
