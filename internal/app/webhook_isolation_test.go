package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// stuckReceiver is a receiver that never answers in time: silent ones accept the request and
// say nothing; trickling ones answer 200 at once and then send their body a byte a second. It
// lets go of every request when the test ends.
func stuckReceiver(t *testing.T, trickle bool) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if trickle {
			w.WriteHeader(http.StatusOK)
		}
		for {
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
				if trickle {
					_, _ = w.Write([]byte(" "))
					w.(http.Flusher).Flush()
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: the handlers return, then Close stops waiting
	return srv.URL
}

// arrivals records when each order's event first arrived, by order id.
type arrivals struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (a *arrivals) see(body []byte) {
	var ev struct {
		Data struct {
			OrderID string `json:"order_id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.Data.OrderID == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.at[ev.Data.OrderID]; !ok {
		a.at[ev.Data.OrderID] = time.Now()
	}
}

func (a *arrivals) get(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[id]
	return t, ok
}

// p99 is the 99th percentile of the delays of committed orders arrived in seen; an order that
// never arrived counts as forever.
func p99(committed map[string]time.Time, seen *arrivals) (time.Duration, int) {
	var ds []time.Duration
	missing := 0
	for id, c := range committed {
		at, ok := seen.get(id)
		if !ok {
			missing++
			ds = append(ds, time.Hour)
			continue
		}
		ds = append(ds, at.Sub(c))
	}
	slices.Sort(ds)
	i := (len(ds)*99 + 99) / 100 // the nearest-rank percentile
	return ds[min(len(ds), i)-1], missing
}

// TestStuckReceiversDelayOnlyThemselves is the isolation target: three instances on
// one database; five receivers that never answer in time (three silent, two trickling a byte a
// second) and one healthy one, all subscribed to order.created. As orders are created, each
// event must appear in the events API within 1 s (p99) of its commit and reach the healthy
// receiver within 2 s (p99). Before sequencing and sending were apart, a tick of the loop
// waited for its slowest attempt: the feed lagged by the attempt timeout and the healthy
// receiver behind it.
//
// The bounds asserted are the targets with half again as margin, for a loaded 2-core CI
// machine; the measured p99s are printed against the targets themselves.
func TestStuckReceiversDelayOnlyThemselves(t *testing.T) {
	testenv.RequireMySQL(t)
	const feedTarget, deliveryTarget, margin = time.Second, 2 * time.Second, 1.5
	servers := apptest.Replicas(t, 3, func(c *config.Config) {
		c.CloseJobInterval, c.ReconcileJobInterval, c.RefundJobInterval = time.Hour, time.Hour, time.Hour
		c.WebhookTimeout = 5 * time.Second
		c.WebhookSchedule = []time.Duration{time.Second, time.Second, time.Second}
		// ONCEPAY_WEBHOOK_INTERVAL stays at its default, the contract's 500 ms.
	})
	s := servers[0]
	for i := range 5 {
		register(t, s, stuckReceiver(t, i >= 3), "order.created")
	}
	delivered := &arrivals{at: map[string]time.Time{}}
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		delivered.see(body)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(healthy.Close)
	good := register(t, s, healthy.URL, "order.created")

	// A reader of the feed, on the instances in turn, as a merchant's poller would.
	listed := &arrivals{at: map[string]time.Time{}}
	ctx, stopReader := context.WithCancel(context.Background())
	var reader sync.WaitGroup
	reader.Go(func() {
		cursor := ""
		for i := 0; ctx.Err() == nil; i++ {
			path := "/v1/admin/events?limit=1000"
			if cursor != "" {
				path += "&after=" + cursor
			}
			r := servers[i%len(servers)].DoContext(ctx, http.MethodGet, path, apptest.AdminKey, nil, nil)
			var page webhook.Page
			if r.Status == http.StatusOK && json.Unmarshal(r.Body, &page) == nil {
				for _, ev := range page.Events {
					listed.see(ev)
				}
				cursor = page.NextCursor
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	t.Cleanup(func() { stopReader(); reader.Wait() })

	// Orders, one every 150 ms, through the instances in turn; each committed when its 201
	// came back.
	const orders = 60
	committed := map[string]time.Time{}
	for i := range orders {
		o := servers[i%len(servers)].CreateOrder(t, apptest.AliceKey, fmt.Sprintf("iso-%d", i), apptest.Item{SKU: "SKU-1002", Quantity: 1})
		committed[o.OrderID] = time.Now()
		time.Sleep(150 * time.Millisecond)
	}
	// Wait for the stragglers a while; one still missing then counts as never arrived.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, inFeed := p99(committed, listed)
		_, atHealthy := p99(committed, delivered)
		if inFeed == 0 && atHealthy == 0 {
			break
		}
	}
	feed, notListed := p99(committed, listed)
	delivery, notDelivered := p99(committed, delivered)
	t.Logf("with 5 stuck receivers and 3 instances, over %d events: in the events API within %s p99 (target %s; %d never listed), at the healthy receiver within %s p99 (target %s; %d never delivered)",
		orders, feed.Round(time.Millisecond), feedTarget, notListed, delivery.Round(time.Millisecond), deliveryTarget, notDelivered)
	if limit := time.Duration(margin * float64(feedTarget)); feed > limit {
		t.Errorf("events appeared in the events API %s (p99) after their commit, want within %s (target %s)", feed, limit, feedTarget)
	}
	if limit := time.Duration(margin * float64(deliveryTarget)); delivery > limit {
		t.Errorf("events reached the healthy receiver %s (p99) after their commit, want within %s (target %s)", delivery, limit, deliveryTarget)
	}

	// The operator sees it in /metrics: the healthy endpoint's 2xx attempts on the instances
	// that sent them, and on every instance the queues and the feed's lag.
	var sent bool
	for _, srv := range servers {
		body := string(srv.Do(http.MethodGet, "/metrics", "", nil, nil).Body)
		sent = sent || strings.Contains(body, `oncepay_webhook_attempts_total{endpoint_id="`+good.EndpointID+`",outcome="2xx"}`)
		for _, want := range []string{`oncepay_webhook_queue_depth{endpoint_id="` + good.EndpointID + `",status="enabled"}`, "oncepay_webhook_feed_lag_seconds "} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	if !sent {
		t.Errorf("no instance's /metrics counts the healthy endpoint's 2xx attempts")
	}
}
