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
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
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

// signature is the X-Signature header of value, a trade report, signed now under secret: the
// only kind the payment.notifications topic carries.
func signature(secret string, value []byte) kafka.Header {
	return signatureAs(secret, notify.Trade, value)
}

// signatureAs is the X-Signature header of value as a report of kind, signed now under secret.
func signatureAs(secret string, kind notify.Kind, value []byte) kafka.Header {
	return kafka.Header{Key: web.HeaderSignature, Value: []byte(apptest.SignReport(secret, kind, value))}
}

// upperMAC is sig, an X-Signature, with its v1 in uppercase hex: the right MAC, but not the
// contract's one form (lowercase).
func upperMAC(sig string) string {
	t, v1, _ := strings.Cut(sig, ",v1=")
	return t + ",v1=" + strings.ToUpper(v1)
}

// reasons returns the X-Reject-Reason of every dead letter, by message key and value.
func reasons(t *testing.T, s *apptest.Server) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range s.Messages(t, kafkax.TopicPaymentNotificationsDLQ) {
		out[string(m.Key)+" "+string(m.Value)] = apptest.Header(m, notify.HeaderRejectReason)
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

// stateOf is everything a refused report must leave alone, in numbers: apptest.Snapshot's
// row counts (the dedup records among them) and stock, apptest.State's statuses, balances,
// prices and anomalies by kind, and the report_claims rows (a refused report claims no
// number).
func stateOf(t *testing.T, s *apptest.Server) apptest.Snapshot {
	t.Helper()
	snap := s.Snapshot(t)
	maps.Copy(snap, s.State(t))
	snap["report_claims"] = s.Count(t, "report_claims", "")
	return snap
}

// wantOnlyDelta fails the test unless the state changed exactly by want.
func wantOnlyDelta(t *testing.T, before, after apptest.Snapshot, want map[string]int64) {
	t.Helper()
	if want == nil {
		want = map[string]int64{}
	}
	if got := before.Diff(after); !maps.Equal(got, want) {
		t.Errorf("state changed by %v, want %v", apptest.Snapshot(got), apptest.Snapshot(want))
	}
}

// TestConsumerRejects (I1, the Kafka entry path held to the HTTP path's rules): after a signed
// report paid order A through Kafka, copies that are unsigned, wrongly signed (another
// secret, the MAC in uppercase, the earlier bare HMAC, signed as a recharge report, signed
// before the redelivery window), unparseable, from a channel oncepay is not configured for,
// that reuse A's channel + trade_no with another body, that name order B with A's trade_no,
// that pay order B another amount, or that name an order nobody issued are all
// dead-lettered with their X-Reject-Reason (the work's refusals with their problem code) and
// never applied: orders, payments, stock, claims and dedup records are unchanged, and only
// the trade_conflict anomaly (once, for two copies) and the amount_mismatch anomaly are
// recorded. The rejected copies stored and claimed nothing: B's correct report, under the
// very trade number its wrong amount was refused for, still pays B afterwards.
func TestConsumerRejects(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	secret := s.Config.ChannelSecret
	w := s.Writer(t)
	before := stockOf(t, s, basket)
	a := s.CreateOrder(t, apptest.AliceKey, "kafka-reject-a", basket...)
	b := s.CreateOrder(t, apptest.AliceKey, "kafka-reject-b", other...)
	tradeA, tradeB := "T-KA-"+a.OrderID, "T-KB-"+b.OrderID

	paysA := apptest.JSON(apptest.Notification(a, "alipay", tradeA))
	publish(t, w, tradeA, paysA, signature(secret, paysA))
	s.WaitConsumed(t)
	snap := stateOf(t, s)

	paysB := apptest.JSON(apptest.Notification(b, "alipay", tradeB))
	otherBody := apptest.Notification(a, "alipay", tradeA)
	otherBody.Amount++ // same order, same trade, another body
	reused := apptest.JSON(otherBody)
	conflict := apptest.JSON(apptest.Notification(b, "alipay", tradeA)) // A's trade for order B
	garbage := []byte(`{"channel":"alipay","trade_no":"` + tradeB)
	unknownChannel := apptest.JSON(apptest.Notification(b, "unionpay", tradeB))
	wrongAmount := apptest.Notification(b, "alipay", tradeB)
	wrongAmount.Amount++
	mismatch := apptest.JSON(wrongAmount)
	nobodys := apptest.Notification(b, "alipay", "T-KN-"+b.OrderID)
	nobodys.OutNo = "42" // an order nobody issued
	notFound := apptest.JSON(nobodys)
	stale := reportsig.Sign(secret, time.Now().Add(-s.Config.MaxRedeliveryWindow-time.Hour), string(notify.Trade), paysB)
	want := map[string]string{
		tradeB + " " + string(paysB):            notify.ReasonUnsigned,
		tradeB + "x " + string(paysB):           notify.ReasonInvalidSignature,
		tradeB + "X " + string(paysB):           notify.ReasonInvalidSignature,
		tradeB + "b " + string(paysB):           notify.ReasonInvalidSignature,
		tradeB + "r " + string(paysB):           notify.ReasonInvalidSignature,
		tradeB + "s " + string(paysB):           notify.ReasonInvalidSignature,
		tradeA + " " + string(reused):           notify.ReasonKeyReused,
		tradeA + " " + string(conflict):         notify.ReasonTradeConflict,
		tradeB + " " + string(garbage):          notify.ReasonUnparseable + ": ",
		tradeB + " " + string(unknownChannel):   notify.ReasonUnknownChannel,
		tradeB + " " + string(mismatch):         payment.ErrAmountMismatch.Code,
		nobodys.Number + " " + string(notFound): "not_found",
	}
	publish(t, w, tradeB, paysB)
	publish(t, w, tradeB, paysB, kafka.Header{Key: web.HeaderSignature, Value: nil})
	publish(t, w, tradeB+"x", paysB, signature("another-secret", paysB))
	// The right MAC in uppercase hex: not the contract's one form (lowercase), refused too.
	publish(t, w, tradeB+"X", paysB, kafka.Header{Key: web.HeaderSignature, Value: []byte(upperMAC(apptest.SignReport(secret, notify.Trade, paysB)))})
	// The earlier form, a bare HMAC of the body, and the signature of the same body as a
	// recharge report, or from before the redelivery window.
	publish(t, w, tradeB+"b", paysB, kafka.Header{Key: web.HeaderSignature, Value: []byte(web.Sign(secret, paysB))})
	publish(t, w, tradeB+"r", paysB, signatureAs(secret, notify.Recharge, paysB))
	publish(t, w, tradeB+"s", paysB, kafka.Header{Key: web.HeaderSignature, Value: []byte(stale)})
	publish(t, w, tradeA, reused, signature(secret, reused))
	publish(t, w, tradeA, conflict, signature(secret, conflict))
	publish(t, w, tradeA, conflict, signature(secret, conflict))
	publish(t, w, tradeB, garbage, signature(secret, garbage))
	publish(t, w, tradeB, unknownChannel, signature(secret, unknownChannel))
	publish(t, w, tradeB, mismatch, signature(secret, mismatch))
	publish(t, w, nobodys.Number, notFound, signature(secret, notFound))
	publish(t, w, tradeA, paysA, signature(secret, paysA)) // an exact duplicate: acknowledged, not dead-lettered
	s.WaitConsumed(t)

	wantOnlyDelta(t, snap, stateOf(t, s), map[string]int64{
		"anomalies": 2, "anomalies." + anomaly.TradeConflict: 1, "anomalies." + anomaly.AmountMismatch: 1,
	})
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
	if m := s.AnomaliesOf(t, anomaly.AmountMismatch, b.OrderID); len(m) != 1 || m[0].TradeNo != tradeB || m[0].Amount != b.Amount+1 {
		t.Errorf("amount_mismatch anomalies for order B: %+v, want one for %s with the reported amount %d", m, tradeB, b.Amount+1)
	}
	if got := s.Order(t, b.OrderID); got.Status != order.PendingPayment {
		t.Errorf("order B is %s, want PENDING_PAYMENT", got.Status)
	}
	wantPaidOnce(t, s, a, "alipay", tradeA, before)

	publish(t, w, tradeB, paysB, signature(secret, paysB))
	s.WaitConsumed(t)
	wantPaidBy(t, s, b, tradeB)
	if n := len(s.Messages(t, kafkax.TopicPaymentNotificationsDLQ)); n != len(want)+2 {
		t.Errorf("%d dead letters after B's correct report, want still %d", n, len(want)+2)
	}
}

// TestNotifyTradeConflict: over HTTP, order A's channel + trade_no reported for order B is
// refused 422 trade_conflict and recorded once as an anomaly, however many copies; the same
// trade for A with another body is 422 idempotency_key_reused with no anomaly. Neither
// changes orders, payments, stock, claims or dedup records. After every dedup record is
// purged (I6, I13), the trade number's claim (report_claims) still refuses it for B with
// trade_conflict — and stores nothing, no refusal either.
func TestNotifyTradeConflict(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	a := s.CreateOrder(t, apptest.AliceKey, "conflict-a", basket...)
	b := s.CreateOrder(t, apptest.AliceKey, "conflict-b", other...)
	tradeNo := "T-CONFLICT-" + a.OrderID
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(a, "alipay", tradeNo))), http.StatusOK)
	snap := stateOf(t, s)

	forB := apptest.JSON(apptest.Notification(b, "alipay", tradeNo))
	for i := range 3 {
		r := s.SignedNotify(forB)
		apptest.WantProblem(t, r, http.StatusUnprocessableEntity, anomaly.TradeConflict)
		if i == 0 && r.Outcome() != "mismatch" {
			t.Errorf("Idempotency-Outcome %q, want mismatch", r.Outcome())
		}
	}
	wantOnlyDelta(t, snap, stateOf(t, s), map[string]int64{"anomalies": 1, "anomalies." + anomaly.TradeConflict: 1})

	snap = stateOf(t, s)
	reused := apptest.Notification(a, "alipay", tradeNo)
	reused.Amount++
	apptest.WantProblem(t, s.SignedNotify(apptest.JSON(reused)), http.StatusUnprocessableEntity, "idempotency_key_reused")
	wantOnlyDelta(t, snap, stateOf(t, s), nil)

	s.PurgeDedup(t, "0s")
	snap = stateOf(t, s)
	for range 2 {
		apptest.WantProblem(t, s.SignedNotify(forB), http.StatusUnprocessableEntity, anomaly.TradeConflict)
	}
	wantOnlyDelta(t, snap, stateOf(t, s), nil) // nothing stored; the anomaly exists already

	if c := s.AnomaliesOf(t, anomaly.TradeConflict, b.OrderID); len(c) != 1 {
		t.Errorf("trade_conflict anomalies for order B: %+v, want one", c)
	}
	if got := s.Order(t, b.OrderID); got.Status != order.PendingPayment {
		t.Errorf("order B is %s, want PENDING_PAYMENT", got.Status)
	}
	wantPaidOnce(t, s, a, "alipay", tradeNo, before)
}

// TestTradeConflictAcrossKinds: a trade number names one payment, whatever it pays. The
// channel + trade_no that paid order A, reported as paying a recharge, is refused 422
// trade_conflict with one trade_conflict anomaly naming the recharge — under the shared key
// (channel.trade) while A's dedup record lives, and by A's claim once every dedup record is
// purged. Nothing is credited, stored or claimed, and the recharge is still paid by its own
// trade afterwards.
func TestTradeConflictAcrossKinds(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	a := s.CreateOrder(t, apptest.AliceKey, "kinds-a", basket...)
	tradeNo := "T-KINDS-" + a.OrderID
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(a, "alipay", tradeNo))), http.StatusOK)
	userID, key := s.User(t, "kinds")
	rid := s.CreateRecharge(t, key, 4200)
	snap := stateOf(t, s)

	forRecharge := apptest.RechargeReport(rid, "alipay", tradeNo, 4200)
	for i := range 2 {
		r := s.NotifyRecharge(forRecharge)
		apptest.WantProblem(t, r, http.StatusUnprocessableEntity, anomaly.TradeConflict)
		if i == 0 && r.Outcome() != "mismatch" {
			t.Errorf("Idempotency-Outcome %q, want mismatch (A's record is under the same key)", r.Outcome())
		}
	}
	wantOnlyDelta(t, snap, stateOf(t, s), map[string]int64{"anomalies": 1, "anomalies." + anomaly.TradeConflict: 1})

	s.PurgeDedup(t, "0s")
	snap = stateOf(t, s)
	for range 2 {
		apptest.WantProblem(t, s.NotifyRecharge(forRecharge), http.StatusUnprocessableEntity, anomaly.TradeConflict)
	}
	wantOnlyDelta(t, snap, stateOf(t, s), nil)

	var conflicts []anomaly.View
	for _, an := range s.Anomalies(t) {
		if an.Kind == anomaly.TradeConflict && an.TradeNo == tradeNo {
			conflicts = append(conflicts, an)
		}
	}
	if len(conflicts) != 1 || conflicts[0].RechargeID != rid || conflicts[0].OrderID != "" || conflicts[0].Channel != "alipay" {
		t.Errorf("trade_conflict anomalies for %s: %+v, want one naming recharge %s", tradeNo, conflicts, rid)
	}
	if n := s.Count(t, "recharges", "id = ? AND status = ?", rid, "PENDING"); n != 1 {
		t.Errorf("recharge %s is no longer PENDING", rid)
	}
	if n := s.Count(t, "account_ledger", "user_id = ?", userID); n != 0 {
		t.Errorf("%d ledger rows for the recharge's user, want 0", n)
	}
	wantPaidOnce(t, s, a, "alipay", tradeNo, before)

	own := apptest.RechargeReport(rid, "alipay", "T-KINDS-R-"+rid, 4200)
	apptest.Must(t, s.NotifyRecharge(own), http.StatusOK)
	if n := s.Count(t, "recharges", "id = ? AND status = ? AND trade_no = ?", rid, "SUCCEEDED", own.Number); n != 1 {
		t.Errorf("recharge %s is not SUCCEEDED by its own trade %s", rid, own.Number)
	}
	if n := s.Count(t, "account_ledger", "user_id = ? AND amount = ?", userID, 4200); n != 1 {
		t.Errorf("%d ledger rows of 4200 for the recharge's user, want 1", n)
	}
}

// TestMalformedCopyFirst: copies of a notification with an extra field, or amount 0, arrive
// before the channel's correct copy. They are refused 400 before the key is claimed and store
// nothing, so the correct copy still pays the order, once.
func TestMalformedCopyFirst(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "malformed-first", basket...)
	tradeNo := "T-MALFORMED-" + o.OrderID
	good := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	zero := apptest.Notification(o, "alipay", tradeNo)
	zero.Amount = 0
	snap := stateOf(t, s)
	for _, body := range [][]byte{
		[]byte(strings.TrimSuffix(string(good), "}") + `,"extra":1}`),
		apptest.JSON(zero),
	} {
		apptest.WantProblem(t, s.SignedNotify(body), http.StatusBadRequest, "invalid_request")
	}
	wantOnlyDelta(t, snap, stateOf(t, s), nil)
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
	s := apptest.StartOnly(t, apptest.Kafka)
	o := s.CreateOrder(t, apptest.AliceKey, "dlq-retry", basket...)
	tradeNo := "T-DLQ-RETRY-" + o.OrderID
	unsigned := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	publish(t, s.Writer(t), tradeNo, unsigned)

	run := func(w *flakyWriter, until func() bool) {
		t.Helper()
		// A consumer of the instance's port, as app.Run would start it: an unsigned message is
		// dead-lettered before anything is keyed or applied.
		c := notify.NewConsumer(s.App.Reports, s.Deps.Kafka).WithDeadLetterWriter(w)
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
		apptest.Header(written[0], notify.HeaderRejectReason) != notify.ReasonUnsigned {
		t.Fatalf("dead letters %+v, want the unsigned message once with reason %q", written, notify.ReasonUnsigned)
	}
	if calls != 3 {
		t.Errorf("%d dead-letter writes, want 3 (two failures, then the one that succeeded)", calls)
	}
	if got := s.Order(t, o.OrderID); got.Status != order.PendingPayment {
		t.Errorf("order is %s, want PENDING_PAYMENT: an unsigned notification paid it", got.Status)
	}
}
