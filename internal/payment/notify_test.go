package payment_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// basket is the order the incident tests pay: two SKUs, so that a stock movement applied
// twice or only halfway shows on either line.
var basket = []apptest.Item{{SKU: "SKU-1001", Quantity: 2}, {SKU: "SKU-1002", Quantity: 3}}

// stockOf reads the stock of every SKU of items.
func stockOf(t *testing.T, s *apptest.Server, items []apptest.Item) map[string]inventory.Item {
	t.Helper()
	out := map[string]inventory.Item{}
	for _, it := range items {
		out[it.SKU] = s.Inventory(t, it.SKU)
	}
	return out
}

// stormResult is what the copies of one notification got.
type stormResult struct {
	http     []apptest.Response
	kafka    []error
	statuses []order.Status
}

// storm delivers body nHTTP times over HTTP and nKafka times over payment.notifications, all
// released at once, like the channel's retry, the gateway's retry and the queue's redelivery
// of I1. An HTTP copy answered 409 (a copy in flight) is sent again, as a channel does. While
// the copies run, the order's status is polled through the API. storm returns once every
// copy has been answered and the consumer has committed every message.
func storm(t *testing.T, s *apptest.Server, orderID string, body []byte, nHTTP, nKafka int) stormResult {
	t.Helper()
	w := s.Writer(t)
	res := stormResult{http: make([]apptest.Response, nHTTP), kafka: make([]error, nKafka)}

	stop := make(chan struct{})
	polled := make(chan []order.Status)
	go func() {
		var seen []order.Status
		defer func() { polled <- seen }()
		for {
			var v order.View
			if r := s.GetOrder(apptest.AliceKey, orderID); r.Status == http.StatusOK && json.Unmarshal(r.Body, &v) == nil {
				seen = append(seen, v.Status)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range nHTTP {
		wg.Go(func() {
			<-start
			res.http[i] = s.NotifyUntilDone(body)
		})
	}
	for i := range nKafka {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res.kafka[i] = apptest.PublishNotification(ctx, w, body)
		})
	}
	close(start)
	wg.Wait()
	s.WaitConsumed(t)
	close(stop)
	res.statuses = <-polled
	return res
}

// check fails the test unless every copy was answered 200 success, every Kafka copy was
// published and none was dead-lettered, and the polled statuses never left PAID once reached.
func (r stormResult) check(t *testing.T, s *apptest.Server) {
	t.Helper()
	executed := 0
	for i, res := range r.http {
		if res.Status != http.StatusOK || !bytes.Contains(res.Body, []byte(`"result":"success"`)) {
			t.Errorf("HTTP copy %d: %s, want 200 success", i, res)
		}
		if res.Header.Get("Idempotency-Outcome") == "executed" {
			executed++
		}
	}
	if executed > 1 {
		t.Errorf("%d HTTP copies were executed, want at most one (the others replayed)", executed)
	}
	for i, err := range r.kafka {
		if err != nil {
			t.Errorf("Kafka copy %d: publish: %v", i, err)
		}
	}
	if dlq := s.Messages(t, kafkax.TopicPaymentNotificationsDLQ); len(dlq) != 0 {
		t.Errorf("%d copies were dead-lettered (first reason %q): the HTTP and Kafka copies must converge on one key",
			len(dlq), apptest.Header(dlq[0], notify.HeaderRejectReason))
	}
	if len(r.statuses) == 0 {
		t.Fatal("the status poller read nothing")
	}
	paidAt := slices.Index(r.statuses, order.Paid)
	for i, st := range r.statuses {
		if paidAt >= 0 && i > paidAt && st != order.Paid {
			t.Fatalf("status went from PAID back to %s (poll %d of %d): %v", st, i, len(r.statuses), r.statuses)
		}
		if st != order.Paid && st != order.PendingPayment {
			t.Errorf("poll %d saw status %s, want only PENDING_PAYMENT then PAID", i, st)
		}
	}
}

// wantPaidOnce fails the test unless order o was paid exactly once by channel's tradeNo: PAID
// with that trade, every line's sold up by its quantity and reserved back to what it was
// before the order (stock from before the order was created), one payments row, one
// CONFIRM movement per line, one order.paid outbox row and one order.paid message, no anomaly.
func wantPaidOnce(t *testing.T, s *apptest.Server, o order.View, channel, tradeNo string, before map[string]inventory.Item) {
	t.Helper()
	got := s.Order(t, o.OrderID)
	if got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != tradeNo || got.Channel == nil || *got.Channel != channel {
		t.Errorf("order: status %s channel %v trade %v, want PAID by %s/%s", got.Status, got.Channel, got.TradeNo, channel, tradeNo)
	}
	for _, it := range o.Items {
		b, a := before[it.SKU], s.Inventory(t, it.SKU)
		if a.Sold != b.Sold+it.Quantity || a.Reserved != b.Reserved || a.Available != b.Available-it.Quantity {
			t.Errorf("%s: available/reserved/sold %d/%d/%d, want %d/%d/%d (before the order %d/%d/%d, quantity %d)",
				it.SKU, a.Available, a.Reserved, a.Sold, b.Available-it.Quantity, b.Reserved, b.Sold+it.Quantity,
				b.Available, b.Reserved, b.Sold, it.Quantity)
		}
	}
	if n := s.Count(t, "payments", "order_id = ?", got.ID); n != 1 {
		t.Errorf("payments rows for the order: %d, want 1", n)
	}
	if n := s.Count(t, "inventory_movements", "order_id = ? AND kind = ?", got.ID, order.Confirm); n != int64(len(o.Items)) {
		t.Errorf("CONFIRM movements: %d, want one per line (%d)", n, len(o.Items))
	}
	if n := apptest.CountEvents(s.OutboxEvents(t, o.OrderID), "order.paid"); n != 1 {
		t.Errorf("order.paid outbox rows: %d, want 1", n)
	}
	if n := apptest.CountEvents(s.OrderEvents(t, o.OrderID), "order.paid"); n != 1 {
		t.Errorf("order.paid messages on order.events: %d, want 1", n)
	}
	if n := s.Count(t, "anomalies", "order_id = ?", got.ID); n != 0 {
		t.Errorf("anomalies for the order: %d, want 0 (one trade, delivered several times)", n)
	}
}

// TestTripleDelivery reproduces I1: one "payment succeeded" notification reaches the service
// three times over HTTP (the channel's retry, the gateway's retry) and three times over Kafka
// (the queue's redelivery), all at once. Every path names it channel + trade_no, so the order
// is paid once, stock is confirmed once, and no late copy moves the status backwards.
func TestTripleDelivery(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "i1-order", basket...)
	tradeNo := "T-I1-" + o.OrderID
	body := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))

	storm(t, s, o.OrderID, body, 3, 3).check(t, s)

	wantPaidOnce(t, s, o, "alipay", tradeNo, before)
	if n := s.Count(t, "idempotency_records", "biz_type = ? AND biz_key = ?", notify.BizTypeTrade, tradeNo); n != 1 {
		t.Errorf("dedup records for the trade: %d, want 1 (HTTP and Kafka share one key)", n)
	}
}

// TestRedeliveryAfterPurge reproduces I6: the dedup records (and the Redis markers with them)
// are purged, then the notification is delivered again over both paths. Nothing remembers the
// key any more; the order's state precondition (only PENDING_PAYMENT may become PAID) is what
// stops the copies, and the channel still gets success.
func TestRedeliveryAfterPurge(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "i6-order", basket...)
	tradeNo := "T-I6-" + o.OrderID
	body := apptest.JSON(apptest.Notification(o, "wechat", tradeNo))

	// First delivery over both paths, so that the HTTP dedup record and the consumer's
	// "done" marker both exist before the purge.
	storm(t, s, o.OrderID, body, 1, 1).check(t, s)
	wantPaidOnce(t, s, o, "wechat", tradeNo, before)

	if n := s.PurgeDedup(t, "0s"); n < 2 {
		t.Fatalf("purge deleted %d records, want at least 2 (the order's and the payment's)", n)
	}
	if n := s.Count(t, "idempotency_records", ""); n != 0 {
		t.Fatalf("%d dedup records left after purging everything", n)
	}

	storm(t, s, o.OrderID, body, 3, 3).check(t, s)

	wantPaidOnce(t, s, o, "wechat", tradeNo, before)
}

// TestPayingReportIsADuplicateWhateverTheStatus (I13): the report of the trade that paid an
// order, delivered again over both paths once every dedup record is purged, is a duplicate
// whatever the order's status since — PAID, then REFUNDED — answered 200 success with
// Idempotency-Outcome: state_rejected and acknowledged over Kafka, and it changes nothing and
// records no anomaly. Before, a REFUNDED order's own report became paid_after_close, kept for
// a refund of a payment already refunded.
func TestPayingReportIsADuplicateWhateverTheStatus(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	w := s.Writer(t)
	o := s.CreateOrder(t, apptest.AliceKey, "paid-then-refunded", basket...)
	tradeNo := "T-REFUNDED-" + o.OrderID
	body := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	apptest.Must(t, s.NotifyUntilDone(body), http.StatusOK)
	id := s.Order(t, o.OrderID).ID

	for _, status := range []order.Status{order.Paid, order.Refunded} {
		// REFUNDED stands for the order's refunds, which this package does not make: the
		// status is what the report's precondition reads.
		if err := s.DB.Exec("UPDATE orders SET status = ? WHERE id = ?", status, id).Error; err != nil {
			t.Fatalf("set the order %s: %v", status, err)
		}
		s.PurgeDedup(t, "0s")
		snap := stateOf(t, s)
		r := s.NotifyUntilDone(body)
		if r.Status != http.StatusOK || r.Code() != "" || r.Outcome() != "state_rejected" {
			t.Errorf("%s order, its own report again: %s (Idempotency-Outcome %q), want 200 success state_rejected", status, r, r.Outcome())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := apptest.PublishNotification(ctx, w, body); err != nil {
			t.Fatalf("publish: %v", err)
		}
		cancel()
		s.WaitConsumed(t)
		// Only the HTTP copy's stored answer, which the Kafka copy replayed.
		wantOnlyDelta(t, snap, stateOf(t, s), map[string]int64{"idempotency_records": 1})
		if dlq := s.Messages(t, kafkax.TopicPaymentNotificationsDLQ); len(dlq) != 0 {
			t.Errorf("%s order: %d dead letters, want 0", status, len(dlq))
		}
		got := s.Order(t, o.OrderID)
		if got.Status != status || got.TradeNo == nil || *got.TradeNo != tradeNo {
			t.Errorf("order is %s paid by %v, want still %s by %s", got.Status, got.TradeNo, status, tradeNo)
		}
	}
	if n := s.Count(t, "anomalies", "order_id = ?", id); n != 0 {
		t.Errorf("anomalies for the order: %d, want 0 (its own report, delivered again)", n)
	}
	if n := s.Count(t, "payments", "order_id = ?", id); n != 1 {
		t.Errorf("payments rows: %d, want 1", n)
	}
}

// TestSecondTradeForPaidOrder: a different trade paying an order that is already paid answers
// success (the channel must stop) but changes nothing, and is recorded as duplicate_payment for
// refund — however many times it is delivered.
func TestSecondTradeForPaidOrder(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "dup-order", basket...)
	first := "T-FIRST-" + o.OrderID
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, "alipay", first))), http.StatusOK)

	second := "T-SECOND-" + o.OrderID
	res := storm(t, s, o.OrderID, apptest.JSON(apptest.Notification(o, "alipay", second)), 2, 2)
	res.check(t, s)

	got := s.AnomaliesOf(t, anomaly.DuplicatePayment, o.OrderID)
	if len(got) != 1 || got[0].TradeNo != second || got[0].Amount != o.Amount || got[0].Channel != "alipay" {
		t.Errorf("duplicate_payment anomalies %+v, want one for trade %s amount %d", got, second, o.Amount)
	}
	// wantPaidOnce would also count this anomaly; check the rest of it by hand.
	if st := s.Order(t, o.OrderID); st.Status != order.Paid || *st.TradeNo != first {
		t.Errorf("order %s paid by %v, want PAID by the first trade %s", st.Status, st.TradeNo, first)
	}
	for _, it := range o.Items {
		if a := s.Inventory(t, it.SKU); a.Sold != before[it.SKU].Sold+it.Quantity || a.Reserved != before[it.SKU].Reserved {
			t.Errorf("%s: sold %d reserved %d, want %d %d", it.SKU, a.Sold, a.Reserved, before[it.SKU].Sold+it.Quantity, before[it.SKU].Reserved)
		}
	}
	if n := s.Count(t, "payments", "order_id = ?", s.Order(t, o.OrderID).ID); n != 1 {
		t.Errorf("payments rows: %d, want 1", n)
	}
}

// TestTripleDeliveryTwoReplicas is I1 across two instances of the service on one database,
// Redis and Kafka: the HTTP copies land on both, and both consumers share the group. Nothing
// process-local can deduplicate here; the shared key and the order's precondition must.
func TestTripleDeliveryTwoReplicas(t *testing.T) {
	deps := apptest.NewDeps(t)
	a := apptest.StartOn(t, deps)
	b := apptest.StartOn(t, deps, func(c *config.Config) { c.NodeID = a.Config.NodeID + 1 })
	before := stockOf(t, a, basket)
	o := a.CreateOrder(t, apptest.AliceKey, "replicas", basket...)
	tradeNo := "T-REPLICAS-" + o.OrderID
	body := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))

	start := make(chan struct{})
	answers := make([]apptest.Response, 6)
	var wg sync.WaitGroup
	for i := range answers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			answers[i] = s.NotifyUntilDone(body)
		})
	}
	w := a.Writer(t)
	wg.Go(func() {
		<-start
		for range 3 {
			if err := apptest.PublishNotification(context.Background(), w, body); err != nil {
				t.Errorf("publish: %v", err)
			}
		}
	})
	close(start)
	wg.Wait()
	a.WaitConsumed(t)

	for i, r := range answers {
		if r.Status != http.StatusOK || r.Code() != "" {
			t.Errorf("copy %d: %s, want 200 success", i, r)
		}
	}
	wantPaidOnce(t, a, o, "alipay", tradeNo, before)
}

// TestStatusReportNeverTakesAnotherTradesKey: a channel reports trade "X" as WAIT_PAY (keyed
// apart, it changes nothing), then pays the order under trade number "X#WAIT_PAY" — a number
// is the channel's to choose. Before, both reports were keyed "X#WAIT_PAY": the payment got
// 422 idempotency_key_reused on every retry and was never applied. Now the status lives in
// the key's scope (notify.Report.Key) and the payment applies once.
func TestStatusReportNeverTakesAnotherTradesKey(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	o := s.CreateOrder(t, apptest.AliceKey, "status-order", basket...)
	wait := apptest.Notification(o, "alipay", "X-"+o.OrderID)
	wait.Status = "WAIT_PAY"
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(wait)), http.StatusOK)
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Fatalf("order is %s after a WAIT_PAY report, want PENDING_PAYMENT", st)
	}
	paid := apptest.Notification(o, "alipay", wait.Number+"#WAIT_PAY")
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(paid)), http.StatusOK)
	got := s.Order(t, o.OrderID)
	if got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != paid.Number {
		t.Errorf("order is %s paid by %v, want PAID by %s", got.Status, got.TradeNo, paid.Number)
	}
	// The WAIT_PAY report again changes nothing and is answered from its own record.
	again := s.SignedNotify(apptest.JSON(wait))
	if again.Status != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the WAIT_PAY report's copy: %s, want 200 replayed", again)
	}
}
