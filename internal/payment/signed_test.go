package payment_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/app/apptest"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// publish writes value to payment.notifications keyed by key, with headers.
func publish(t *testing.T, w *kafka.Writer, key string, value []byte, headers ...kafka.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := w.WriteMessages(ctx, kafka.Message{Topic: kafkax.TopicPaymentNotifications, Key: []byte(key), Value: value, Headers: headers})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// signature is the X-Signature header of value under secret.
func signature(secret string, value []byte) kafka.Header {
	return kafka.Header{Key: web.HeaderSignature, Value: []byte(web.Sign(secret, value))}
}

// reasons returns the X-Reject-Reason of every dead letter, by message key and value.
func reasons(t *testing.T, s *apptest.Server) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range s.Messages(t, kafkax.TopicPaymentNotificationsDLQ) {
		out[string(m.Key)+" "+string(m.Value)] = apptest.Header(m, payment.HeaderRejectReason)
	}
	return out
}

// other is the order B of the conflict tests: another SKU than basket's, so that wantPaidOnce
// can still compare basket's stock for order A.
var other = []apptest.Item{{SKU: "SKU-1003", Quantity: 1}}

// wantPaidBy fails the test unless order o is PAID by tradeNo with one payments row.
func wantPaidBy(t *testing.T, s *apptest.Server, o order.View, tradeNo string) {
	t.Helper()
	got := s.Order(t, o.OrderID)
	if got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != tradeNo {
		t.Errorf("order %s: status %s trade %v, want PAID by %s", o.OrderID, got.Status, got.TradeNo, tradeNo)
	}
	if n := s.Count(t, "payments", "order_id = ?", got.ID); n != 1 {
		t.Errorf("order %s: %d payments rows, want 1", o.OrderID, n)
	}
}

// wantOnlyDelta fails the test unless the snapshot changed exactly by want.
func wantOnlyDelta(t *testing.T, before, after apptest.Snapshot, want map[string]int64) {
	t.Helper()
	if want == nil {
		want = map[string]int64{}
	}
	if got := before.Diff(after); !maps.Equal(got, want) {
		t.Errorf("state changed by %v, want %v", got, want)
	}
}

// TestConsumerRejects (I1, the Kafka entry path held to the HTTP path's rules): after a signed
// notification paid order A through Kafka, copies that are unsigned, wrongly signed,
// unparseable, that reuse A's channel + trade_no with another body, or that name order B with
// A's trade_no are all dead-lettered with their X-Reject-Reason and never applied: orders,
// payments, stock and dedup records are unchanged, and only the trade_conflict anomaly is
// recorded (once, for two copies). The rejected copies claimed no key: B's own trade still
// pays B afterwards.
func TestConsumerRejects(t *testing.T) {
	s := apptest.Start(t)
	secret := s.Config.ChannelSecret
	w := s.Writer(t)
	before := stockOf(t, s, basket)
	a := s.CreateOrder(t, apptest.AliceKey, "kafka-reject-a", basket...)
	b := s.CreateOrder(t, apptest.AliceKey, "kafka-reject-b", other...)
	tradeA, tradeB := "T-KA-"+a.OrderID, "T-KB-"+b.OrderID

	paysA := apptest.JSON(apptest.Notification(a, "alipay", tradeA))
	publish(t, w, tradeA, paysA, signature(secret, paysA))
	s.WaitConsumed(t)
	snap := s.Snapshot(t)

	paysB := apptest.JSON(apptest.Notification(b, "alipay", tradeB))
	otherBody := apptest.Notification(a, "alipay", tradeA)
	otherBody.Amount++ // same order, same trade, another body
	reused := apptest.JSON(otherBody)
	conflict := apptest.JSON(apptest.Notification(b, "alipay", tradeA)) // A's trade for order B
	garbage := []byte(`{"channel":"alipay","trade_no":"` + tradeB)
	want := map[string]string{
		tradeB + " " + string(paysB):    payment.ReasonUnsigned,
		tradeB + "x " + string(paysB):   payment.ReasonInvalidSignature,
		tradeB + "X " + string(paysB):   payment.ReasonInvalidSignature,
		tradeA + " " + string(reused):   payment.ReasonKeyReused,
		tradeA + " " + string(conflict): payment.ReasonTradeConflict,
		tradeB + " " + string(garbage):  payment.ReasonUnparseable + ": ",
	}
	publish(t, w, tradeB, paysB)
	publish(t, w, tradeB, paysB, kafka.Header{Key: web.HeaderSignature, Value: nil})
	publish(t, w, tradeB+"x", paysB, signature("another-secret", paysB))
	// The right MAC in uppercase hex: not the contract's one form (lowercase), refused too.
	publish(t, w, tradeB+"X", paysB, kafka.Header{Key: web.HeaderSignature, Value: []byte(strings.ToUpper(web.Sign(secret, paysB)))})
	publish(t, w, tradeA, reused, signature(secret, reused))
	publish(t, w, tradeA, conflict, signature(secret, conflict))
	publish(t, w, tradeA, conflict, signature(secret, conflict))
	publish(t, w, tradeB, garbage, signature(secret, garbage))
	publish(t, w, tradeA, paysA, signature(secret, paysA)) // an exact duplicate: acknowledged, not dead-lettered
	s.WaitConsumed(t)

	wantOnlyDelta(t, snap, s.Snapshot(t), map[string]int64{"anomalies": 1})
	got := reasons(t, s)
	if len(got) != len(want) {
		t.Errorf("dead letters %v, want %d: %v", got, len(want), want)
	}
	for k, reason := range want {
		if r, ok := got[k]; !ok || !strings.HasPrefix(r, reason) || (reason != r && !strings.HasSuffix(reason, ": ")) {
			t.Errorf("dead letter %q: X-Reject-Reason %q (present %v), want %q", k, r, ok, reason)
		}
	}
	if n := len(s.Messages(t, kafkax.TopicPaymentNotificationsDLQ)); n != len(want)+2 {
		t.Errorf("%d dead letters, want %d (the unsigned and trade_conflict copies twice each)", n, len(want)+2)
	}
	if c := s.AnomaliesOf(t, anomaly.TradeConflict, b.OrderID); len(c) != 1 || c[0].TradeNo != tradeA {
		t.Errorf("trade_conflict anomalies for order B: %+v, want one for %s", c, tradeA)
	}
	if got := s.Order(t, b.OrderID); got.Status != order.PendingPayment {
		t.Errorf("order B is %s, want PENDING_PAYMENT", got.Status)
	}
	wantPaidOnce(t, s, a, "alipay", tradeA, before)

	publish(t, w, tradeB, paysB, signature(secret, paysB))
	s.WaitConsumed(t)
	wantPaidBy(t, s, b, tradeB)
}

// TestNotifyTradeConflict: over HTTP, order A's channel + trade_no reported for order B is
// refused 422 trade_conflict and recorded once as an anomaly, however many copies; the same
// trade for A with another body is 422 idempotency_key_reused with no anomaly. Neither
// changes orders, payments, stock or dedup records. After the dedup record is purged (I6),
// the payments row still refuses the trade for B with trade_conflict.
func TestNotifyTradeConflict(t *testing.T) {
	s := apptest.Start(t)
	before := stockOf(t, s, basket)
	a := s.CreateOrder(t, apptest.AliceKey, "conflict-a", basket...)
	b := s.CreateOrder(t, apptest.AliceKey, "conflict-b", other...)
	tradeNo := "T-CONFLICT-" + a.OrderID
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(a, "alipay", tradeNo))), http.StatusOK)
	snap := s.Snapshot(t)

	forB := apptest.JSON(apptest.Notification(b, "alipay", tradeNo))
	for i := range 3 {
		r := s.SignedNotify(forB)
		apptest.WantProblem(t, r, http.StatusUnprocessableEntity, anomaly.TradeConflict)
		if i == 0 && r.Outcome() != "mismatch" {
			t.Errorf("Idempotency-Outcome %q, want mismatch", r.Outcome())
		}
	}
	wantOnlyDelta(t, snap, s.Snapshot(t), map[string]int64{"anomalies": 1})

	snap = s.Snapshot(t)
	reused := apptest.Notification(a, "alipay", tradeNo)
	reused.Amount++
	apptest.WantProblem(t, s.SignedNotify(apptest.JSON(reused)), http.StatusUnprocessableEntity, "idempotency_key_reused")
	wantOnlyDelta(t, snap, s.Snapshot(t), nil)

	s.PurgeDedup(t, "0s")
	snap = s.Snapshot(t)
	apptest.WantProblem(t, s.SignedNotify(forB), http.StatusUnprocessableEntity, anomaly.TradeConflict)
	wantOnlyDelta(t, snap, s.Snapshot(t), map[string]int64{"idempotency_records": 1}) // the stored refusal; the anomaly exists already

	if c := s.AnomaliesOf(t, anomaly.TradeConflict, b.OrderID); len(c) != 1 {
		t.Errorf("trade_conflict anomalies for order B: %+v, want one", c)
	}
	if got := s.Order(t, b.OrderID); got.Status != order.PendingPayment {
		t.Errorf("order B is %s, want PENDING_PAYMENT", got.Status)
	}
	wantPaidOnce(t, s, a, "alipay", tradeNo, before)
}

// TestMalformedCopyFirst: copies of a notification with an extra field, or amount 0, arrive
// before the channel's correct copy. They are refused 400 before the key is claimed and store
// nothing, so the correct copy still pays the order, once.
func TestMalformedCopyFirst(t *testing.T) {
	s := apptest.Start(t)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "malformed-first", basket...)
	tradeNo := "T-MALFORMED-" + o.OrderID
	good := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	zero := apptest.Notification(o, "alipay", tradeNo)
	zero.Amount = 0
	snap := s.Snapshot(t)
	for _, body := range [][]byte{
		[]byte(strings.TrimSuffix(string(good), "}") + `,"extra":1}`),
		apptest.JSON(zero),
	} {
		apptest.WantProblem(t, s.SignedNotify(body), http.StatusBadRequest, "invalid_request")
	}
	wantOnlyDelta(t, snap, s.Snapshot(t), nil)
	apptest.Must(t, s.SignedNotify(good), http.StatusOK)
	wantPaidOnce(t, s, o, "alipay", tradeNo, before)
}

// flakyWriter is a dead-letter topic that fails its first fails writes, then records them.
type flakyWriter struct {
	mu      sync.Mutex
	fails   int
	calls   int
	written []kafka.Message
}

func (w *flakyWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.calls <= w.fails {
		return errors.New("dead-letter topic unavailable")
	}
	w.written = append(w.written, msgs...)
	return nil
}

func (w *flakyWriter) state() (calls int, written []kafka.Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls, append([]kafka.Message(nil), w.written...)
}

// TestDeadLetterBeforeCommit: a rejected message is committed only after its dead letter was
// written. A consumer whose dead-letter writes keep failing retries them and, stopped, leaves
// the message uncommitted; the next consumer of the group gets it again, and once its write
// succeeds (after failing twice) the message is dead-lettered and committed — never lost.
func TestDeadLetterBeforeCommit(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	o := s.CreateOrder(t, apptest.AliceKey, "dlq-retry", basket...)
	tradeNo := "T-DLQ-RETRY-" + o.OrderID
	unsigned := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	publish(t, s.Writer(t), tradeNo, unsigned)

	run := func(w *flakyWriter, until func() bool) {
		t.Helper()
		// No payments service: an unsigned message is dead-lettered before anything is applied.
		c := payment.NewConsumer(s.Deps.Kafka, s.App.Guard, nil, s.Config.ChannelSecret).WithDeadLetterWriter(w)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		apptest.Eventually(t, 30*time.Second, "the consumer got that far", func() (bool, string) { return until(), "" })
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}

	down := &flakyWriter{fails: 1 << 30}
	run(down, func() bool { calls, _ := down.state(); return calls >= 2 })
	if _, written := down.state(); len(written) != 0 {
		t.Fatalf("wrote %d dead letters through a failing writer", len(written))
	}

	flaky := &flakyWriter{fails: 2}
	run(flaky, func() bool { _, written := flaky.state(); return len(written) > 0 })
	s.WaitConsumed(t)
	calls, written := flaky.state()
	if len(written) != 1 || string(written[0].Value) != string(unsigned) ||
		apptest.Header(written[0], payment.HeaderRejectReason) != payment.ReasonUnsigned {
		t.Fatalf("dead letters %+v, want the unsigned message once with reason %q", written, payment.ReasonUnsigned)
	}
	if calls != 3 {
		t.Errorf("%d dead-letter writes, want 3 (two failures, then the one that succeeded)", calls)
	}
	if got := s.Order(t, o.OrderID); got.Status != order.PendingPayment {
		t.Errorf("order is %s, want PENDING_PAYMENT: an unsigned notification paid it", got.Status)
	}
}
