package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/jobs"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// shortTTL makes orders expire after a second, and keeps the scheduled close job out of the
// way so that each test decides when the job runs.
func shortTTL(c *config.Config) {
	c.OrderTTL = time.Second
	c.CloseJobInterval = time.Hour
}

// pastExpiry sleeps until every order created so far has expired.
func pastExpiry(s *apptest.Server) { time.Sleep(s.Config.OrderTTL + 100*time.Millisecond) }

// basket is what the close tests order.
var basket = []apptest.Item{{SKU: "SKU-1001", Quantity: 1}, {SKU: "SKU-1002", Quantity: 4}}

// TestExpiredButPaidStaysPaid is the first half of I5: an order paid after its expiry but
// before the close job reached it stays PAID when the job runs late; the job counts nothing.
func TestExpiredButPaidStaysPaid(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, shortTTL)
	o := s.CreateOrder(t, apptest.AliceKey, "late-paid", basket...)
	pastExpiry(s)
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, "alipay", "T-"+o.OrderID))), http.StatusOK)
	paid := s.Snapshot(t)

	if n := s.RunCloseJob(t); n != 0 {
		t.Errorf("close job closed %d orders, want 0", n)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.Paid {
		t.Errorf("order is %s, want PAID", st)
	}
	if diff := paid.Diff(s.Snapshot(t)); len(diff) != 0 {
		t.Errorf("the late close job changed %v, want nothing", apptest.Snapshot(diff))
	}
}

// TestPaymentAfterClose is the second half of I5: the job closes an unpaid order and releases
// its stock; the payment that arrives afterwards answers success so that the channel stops,
// leaves the order CLOSED and the stock alone, and is recorded as paid_after_close for refund.
func TestPaymentAfterClose(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops, shortTTL) // the relay publishes order.closed
	before := s.Snapshot(t)
	o := s.CreateOrder(t, apptest.AliceKey, "closed", basket...)
	pastExpiry(s)

	if n := s.RunCloseJob(t); n != 1 {
		t.Fatalf("close job closed %d orders, want 1", n)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.Closed {
		t.Fatalf("order is %s, want CLOSED", st)
	}
	closed := s.Snapshot(t)
	for _, it := range basket {
		for _, col := range []string{".available", ".reserved", ".sold"} {
			if closed[it.SKU+col] != before[it.SKU+col] {
				t.Errorf("%s%s = %d after close, want %d as before the order", it.SKU, col, closed[it.SKU+col], before[it.SKU+col])
			}
		}
	}

	tradeNo := "T-AFTER-CLOSE-" + o.OrderID
	r := apptest.Must(t, s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, "alipay", tradeNo))), http.StatusOK)
	if r.Code() != "" {
		t.Errorf("payment after close answered %s, want success", r)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.Closed {
		t.Errorf("order is %s after the payment, want CLOSED", st)
	}
	want := map[string]int64{"anomalies": 1, "idempotency_records": 1}
	if diff := closed.Diff(s.Snapshot(t)); !maps.Equal(diff, want) {
		t.Errorf("the payment changed %v, want %v (no stock, no payments row, no event)", apptest.Snapshot(diff), apptest.Snapshot(want))
	}
	got := s.AnomaliesOf(t, anomaly.PaidAfterClose, o.OrderID)
	if len(got) != 1 || got[0].TradeNo != tradeNo || got[0].Amount != o.Amount || got[0].Channel != "alipay" {
		t.Errorf("paid_after_close anomalies %+v, want one for %s, amount %d", got, tradeNo, o.Amount)
	}
	if n := s.RunCloseJob(t); n != 0 {
		t.Errorf("second close job run closed %d, want 0", n)
	}
	evs := s.OrderEvents(t, o.OrderID)
	if apptest.CountEvents(evs, "order.closed") != 1 || apptest.CountEvents(evs, "order.paid") != 0 {
		t.Errorf("order.events %+v, want order.created and one order.closed", evs)
	}
}

// TestCloseLeavesUnexpired: the job closes only orders past their expiry.
func TestCloseLeavesUnexpired(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router) // no scheduled job: the test runs it
	o := s.CreateOrder(t, apptest.AliceKey, "fresh", basket...)
	if n := s.RunCloseJob(t); n != 0 {
		t.Errorf("close job closed %d, want 0", n)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("order is %s, want PENDING_PAYMENT", st)
	}
}

// TestScheduledClose: with a short interval the scheduled job closes an expired order by
// itself, once.
func TestScheduledClose(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops, func(c *config.Config) {
		c.OrderTTL = time.Second
		c.CloseJobInterval = 200 * time.Millisecond
	})
	before := s.Inventory(t, basket[0].SKU)
	o := s.CreateOrder(t, apptest.AliceKey, "scheduled", basket...)
	apptest.Eventually(t, 10*time.Second, "the scheduled job closes the order", func() (bool, string) {
		st := s.Order(t, o.OrderID).Status
		return st == order.Closed, string(st)
	})
	if after := s.Inventory(t, basket[0].SKU); after.Available != before.Available || after.Reserved != before.Reserved {
		t.Errorf("%s available/reserved %d/%d, want %d/%d", basket[0].SKU, after.Available, after.Reserved, before.Available, before.Reserved)
	}
	if n := apptest.CountEvents(s.OrderEvents(t, o.OrderID), "order.closed"); n != 1 {
		t.Errorf("order.closed events: %d, want 1", n)
	}
}

// orderService builds a second order service on the instance's database, as another replica
// of the service would have, so that the test can run the job function itself.
func orderService(t *testing.T, s *apptest.Server) *order.Service {
	t.Helper()
	gen, err := ids.New(s.Config.NodeID + 1)
	if err != nil {
		t.Fatal(err)
	}
	return order.NewService(s.DB, gen, outbox.NewWriter(gen), s.Config.OrderTTL)
}

// raceOrder is one order of the race and what the test did to it.
type raceOrder struct {
	view  order.View
	items []apptest.Item
	pay   bool
	// answer is the channel's answer to the payment, when pay.
	answer apptest.Response
}

// TestCloseRacesPayment is I5 as a storm: 100 expired orders, half of them paid while the close
// job runs several times at once — through the admin endpoint and as the job function of a
// second replica. Every order ends PAID or CLOSED, never both effects: the jobs' closed counts
// add up to the CLOSED orders, stock per SKU is conserved, and sold is exactly what the PAID
// orders bought. A payment that lost the race to a close is recorded for refund.
func TestCloseRacesPayment(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, shortTTL)
	skus := []string{"SKU-RACE-A", "SKU-RACE-B", "SKU-RACE-C"}
	for i, sku := range skus {
		s.PutInventory(t, sku, int64(100*(i+1)), 1000)
	}
	before := s.Snapshot(t)

	const n = 100
	orders := make([]raceOrder, n)
	for i := range orders {
		orders[i].items = []apptest.Item{{SKU: skus[i%3], Quantity: int64(1 + i%4)}}
		if i%5 == 0 {
			orders[i].items = append(orders[i].items, apptest.Item{SKU: skus[(i+1)%3], Quantity: 2})
		}
		orders[i].pay = i%2 == 0
	}
	apptest.Parallel(8, n, func(i int) {
		orders[i].answer = s.PostOrder(apptest.AliceKey, apptest.Key("race", i), orders[i].items...)
	})
	for i := range orders {
		apptest.Must(t, orders[i].answer, http.StatusCreated).Decode(t, &orders[i].view)
		orders[i].answer = apptest.Response{}
	}
	pastExpiry(s)

	svc := orderService(t, s)
	var (
		mu      sync.Mutex
		closed  int64
		jobErrs []error
	)
	count := func(c int64, err error) {
		mu.Lock()
		defer mu.Unlock()
		closed += c
		if err != nil {
			jobErrs = append(jobErrs, err)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			<-start
			for range 3 {
				if w%2 == 0 {
					count(jobs.CloseExpiredOrders(svc, nil)(context.Background()))
					continue
				}
				r := s.Do(http.MethodPost, "/v1/admin/jobs/close-expired-orders/run", apptest.AdminKey, nil, nil)
				var v struct{ Closed int64 }
				if err := json.Unmarshal(r.Body, &v); r.Status != http.StatusOK || err != nil {
					count(0, fmt.Errorf("admin run: %s", r))
					continue
				}
				count(v.Closed, nil)
			}
		})
	}
	for i := range orders {
		if orders[i].pay {
			wg.Go(func() {
				<-start
				o := orders[i].view
				orders[i].answer = s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, "alipay", "T-RACE-"+o.OrderID)))
			})
		}
	}
	close(start)
	wg.Wait()
	for _, err := range jobErrs {
		t.Errorf("a close job run failed: %v", err)
	}
	closed += s.RunCloseJob(t) // sweep whatever a failed run left

	var paid, closedOrders, lost int64
	sold := map[string]int64{}
	for i, ro := range orders {
		o := s.Order(t, ro.view.OrderID)
		if ro.pay && (ro.answer.Status != http.StatusOK || ro.answer.Code() != "") {
			t.Errorf("order %d: payment answered %s, want 200 success", i, ro.answer)
		}
		switch {
		case o.Status == order.Paid && ro.pay:
			paid++
			for _, it := range ro.items {
				sold[it.SKU] += it.Quantity
			}
		case o.Status == order.Closed:
			closedOrders++
			if ro.pay {
				lost++
				if got := s.AnomaliesOf(t, anomaly.PaidAfterClose, ro.view.OrderID); len(got) != 1 {
					t.Errorf("order %d closed before its payment: %d paid_after_close anomalies, want 1", i, len(got))
				} else if !strings.Contains(got[0].Detail, string(order.Closed)) {
					// Pay must read the order as it is now, not from the REPEATABLE READ snapshot
					// its transaction took before the close committed (fixed in c15a586).
					t.Errorf("order %d: paid_after_close detail %q, want it to name the order's status, CLOSED", i, got[0].Detail)
				}
			}
		default:
			t.Errorf("order %d is %s (paid: %v), want PAID when paid, CLOSED otherwise", i, o.Status, ro.pay)
		}
	}
	t.Logf("%d paid, %d closed (%d of them lost the race to a payment)", paid, closedOrders, lost)

	if closed != closedOrders {
		t.Errorf("the job runs counted %d closes, but %d orders are CLOSED: an order was closed twice or uncounted", closed, closedOrders)
	}
	after := s.Snapshot(t)
	for _, sku := range skus {
		total := func(s apptest.Snapshot) int64 { return s[sku+".available"] + s[sku+".reserved"] + s[sku+".sold"] }
		if total(after) != total(before) {
			t.Errorf("%s: available+reserved+sold %d, want %d (before)", sku, total(after), total(before))
		}
		if after[sku+".reserved"] != before[sku+".reserved"] {
			t.Errorf("%s: reserved %d, want %d: every order has ended", sku, after[sku+".reserved"], before[sku+".reserved"])
		}
		if got := after[sku+".sold"] - before[sku+".sold"]; got != sold[sku] {
			t.Errorf("%s: sold rose by %d, want %d, the quantities of the PAID orders", sku, got, sold[sku])
		}
	}
	if got := s.Count(t, "payments", ""); got != paid {
		t.Errorf("payments rows: %d, want %d (one per PAID order)", got, paid)
	}
	if got := s.Count(t, "anomalies", ""); got != lost {
		t.Errorf("anomalies: %d, want %d (one per payment that lost the race)", got, lost)
	}
	evs := s.OutboxEvents(t, "")
	if p, c := apptest.CountEvents(evs, "order.paid"), apptest.CountEvents(evs, "order.closed"); int64(p) != paid || int64(c) != closedOrders {
		t.Errorf("outbox holds %d order.paid and %d order.closed, want %d and %d", p, c, paid, closedOrders)
	}
}
