package payment_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestNotifyRefusals sends reports that must not pay anything and checks, for each, the
// answer and exactly what it left in the database: nothing at all when it was refused before
// the idempotency layer (signature, unreadable body, unknown channel) and nothing either when
// the work refused it (an amount that differs, an order nobody issued) — no dedup record, no
// claim, so that the channel's correct report still applies — but the anomaly of an amount
// mismatch; only a report the work accepted stores its answer (a status that changes
// nothing).
func TestNotifyRefusals(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	o := s.CreateOrder(t, apptest.AliceKey, "refusals", basket...)
	valid := func(tradeNo string) notify.Report { return apptest.Notification(o, "alipay", tradeNo) }
	with := func(tradeNo string, f func(*notify.Report)) []byte {
		n := valid(tradeNo)
		f(&n)
		return apptest.JSON(n)
	}
	signed := func(body []byte) map[string]string { return map[string]string{web.HeaderSignature: s.Sign(body)} }
	signedAt := func(at time.Time) func([]byte) map[string]string {
		return func(body []byte) map[string]string {
			return map[string]string{web.HeaderSignature: reportsig.Sign(s.Config.ChannelSecret, at, string(notify.Trade), body)}
		}
	}

	tests := []struct {
		name   string
		body   []byte
		header func(body []byte) map[string]string
		status int
		code   string
		// delta is the change each count may show (stateOf); every other count, status, balance
		// and stock figure must stay as it was.
		delta map[string]int64
	}{
		{
			name: "notify401WrongSignature", body: apptest.JSON(valid("T-SIG")),
			header: func([]byte) map[string]string { return map[string]string{web.HeaderSignature: s.Sign([]byte("other"))} },
			status: http.StatusUnauthorized, code: "invalid_signature",
		},
		{
			name: "notify401NoSignature", body: apptest.JSON(valid("T-NOSIG")),
			header: func([]byte) map[string]string { return nil },
			status: http.StatusUnauthorized, code: "invalid_signature",
		},
		{
			// The earlier form, a bare hex HMAC of the body, is refused.
			name: "notify401BareHMAC", body: apptest.JSON(valid("T-BARE")),
			header: func(body []byte) map[string]string {
				return map[string]string{web.HeaderSignature: web.Sign(s.Config.ChannelSecret, body)}
			},
			status: http.StatusUnauthorized, code: "invalid_signature",
		},
		{
			// The same body signed as a recharge report: a signature binds its kind.
			name: "notify401SignedAsRecharge", body: apptest.JSON(valid("T-KIND")),
			header: func(body []byte) map[string]string {
				return map[string]string{web.HeaderSignature: s.SignAs(notify.Recharge, body)}
			},
			status: http.StatusUnauthorized, code: "invalid_signature",
		},
		{
			// Signed more than ONCEPAY_SIGNATURE_TOLERANCE (5m) ago: a captured report replayed.
			name: "notify401TimestampTooOld", body: apptest.JSON(valid("T-OLD")), header: signedAt(time.Now().Add(-6 * time.Minute)),
			status: http.StatusUnauthorized, code: "invalid_signature",
		},
		{
			name: "notify401TimestampInTheFuture", body: apptest.JSON(valid("T-FUTURE")), header: signedAt(time.Now().Add(6 * time.Minute)),
			status: http.StatusUnauthorized, code: "invalid_signature",
		},
		{
			name: "notify400MalformedJSON", body: []byte(`{"channel":"alipay","trade_no":`), header: signed,
			status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "notify400UnknownField", body: []byte(`{"channel":"alipay","trade_no":"T-F","out_trade_no":"` + o.OrderID + `","amount":1,"status":"SUCCESS","extra":1}`),
			header: signed, status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "notify400ZeroAmount", body: with("T-ZERO", func(n *notify.Report) { n.Amount = 0 }),
			header: signed, status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "notify400ChannelNotCanonical", body: with("T-UPPER", func(n *notify.Report) { n.Channel = "Alipay" }),
			header: signed, status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "notify400UnknownChannel", body: with("T-CHANNEL", func(n *notify.Report) { n.Channel = "unionpay" }),
			header: signed, status: http.StatusBadRequest, code: "unknown_channel",
		},
		{
			name: "notify400AmountMismatch", body: with("T-AMOUNT", func(n *notify.Report) { n.Amount++ }),
			header: signed, status: http.StatusBadRequest, code: "amount_mismatch",
			delta: map[string]int64{"anomalies": 1, "anomalies." + anomaly.AmountMismatch: 1},
		},
		{
			name: "notify404UnknownOrder", body: with("T-UNKNOWN", func(n *notify.Report) { n.OutNo = "42" }),
			header: signed, status: http.StatusNotFound, code: "not_found",
		},
		{
			name: "notify404MalformedOrderID", body: with("T-NOTANID", func(n *notify.Report) { n.OutNo = "not-an-order" }),
			header: signed, status: http.StatusNotFound, code: "not_found",
		},
		{
			name: "notify200StatusFailed", body: with("T-FAILED", func(n *notify.Report) { n.Status = "FAILED" }),
			header: signed, status: http.StatusOK,
			delta: map[string]int64{"idempotency_records": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := stateOf(t, s)
			r := s.Do(http.MethodPost, "/v1/payments/notify", "", tt.body, tt.header(tt.body))
			if tt.code != "" {
				apptest.WantProblem(t, r, tt.status, tt.code)
			} else if r.Status != tt.status || r.Code() != "" {
				t.Fatalf("got %s, want %d success", r, tt.status)
			}
			wantOnlyDelta(t, before, stateOf(t, s), tt.delta)
			if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
				t.Errorf("order is %s, want it still PENDING_PAYMENT", st)
			}
		})
	}

	mismatch := s.AnomaliesOf(t, anomaly.AmountMismatch, o.OrderID)
	if len(mismatch) != 1 || mismatch[0].TradeNo != "T-AMOUNT" || mismatch[0].Amount != o.Amount+1 {
		t.Errorf("amount_mismatch anomalies %+v, want one for T-AMOUNT with the reported amount %d", mismatch, o.Amount+1)
	}
}

// TestAmountMismatchRepeated: copies of a mismatching report over both paths are all refused
// (400 amount_mismatch over HTTP, dead-lettered with X-Reject-Reason amount_mismatch over
// Kafka, committed, not retried) and leave one anomaly, not one per copy, and nothing under
// the trade's key: the channel's corrected report under the same trade_no then pays the
// order, once.
func TestAmountMismatchRepeated(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "mismatch", basket...)
	n := apptest.Notification(o, "alipay", "T-MISMATCH")
	n.Amount--
	body := apptest.JSON(n)

	res := storm(t, s, o.OrderID, body, 3, 2)
	for i, r := range res.http {
		apptest.WantProblem(t, r, http.StatusBadRequest, "amount_mismatch")
		if i > 0 && r.Problem().Detail != res.http[0].Problem().Detail {
			t.Errorf("copy %d answered %s, copy 0 %s: every copy is refused the same way", i, r, res.http[0])
		}
	}
	for i, err := range res.kafka {
		if err != nil {
			t.Errorf("Kafka copy %d: publish: %v", i, err)
		}
	}
	dlq := s.Messages(t, kafkax.TopicPaymentNotificationsDLQ)
	if len(dlq) != 2 {
		t.Errorf("%d dead letters, want the 2 Kafka copies", len(dlq))
	}
	for _, m := range dlq {
		if got := apptest.Header(m, notify.HeaderRejectReason); got != "amount_mismatch" || string(m.Value) != string(body) {
			t.Errorf("dead letter %q: X-Reject-Reason %q, want amount_mismatch", m.Value, got)
		}
	}
	if got := s.AnomaliesOf(t, anomaly.AmountMismatch, o.OrderID); len(got) != 1 || got[0].Amount != n.Amount {
		t.Errorf("amount_mismatch anomalies: %+v, want 1 with the reported amount %d", got, n.Amount)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("order is %s, want PENDING_PAYMENT", st)
	}
	if n := s.Count(t, "payments", ""); n != 0 {
		t.Errorf("payments rows: %d, want 0", n)
	}
	if n := s.Count(t, "idempotency_records", "biz_type = ? AND biz_key = ?", notify.BizTypeTrade, "T-MISMATCH"); n != 0 {
		t.Errorf("dedup records for the trade: %d, want 0 (a refusal stores nothing)", n)
	}
	if n := s.Count(t, "report_claims", "channel_no = ?", "T-MISMATCH"); n != 0 {
		t.Errorf("claims of the trade: %d, want 0 (a refusal claims nothing)", n)
	}

	// The corrected report of the same trade pays the order, once.
	corrected := apptest.Notification(o, "alipay", "T-MISMATCH")
	r := apptest.Must(t, s.NotifyUntilDone(apptest.JSON(corrected)), http.StatusOK)
	if r.Outcome() != "executed" {
		t.Errorf("the corrected report: Idempotency-Outcome %q, want executed", r.Outcome())
	}
	got := s.Order(t, o.OrderID)
	if got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != "T-MISMATCH" {
		t.Errorf("order is %s paid by %v, want PAID by T-MISMATCH", got.Status, got.TradeNo)
	}
	for _, it := range o.Items {
		b, a := before[it.SKU], s.Inventory(t, it.SKU)
		if a.Sold != b.Sold+it.Quantity || a.Reserved != b.Reserved || a.Available != b.Available-it.Quantity {
			t.Errorf("%s: available/reserved/sold %d/%d/%d, want %d/%d/%d", it.SKU, a.Available, a.Reserved, a.Sold,
				b.Available-it.Quantity, b.Reserved, b.Sold+it.Quantity)
		}
	}
	if n := s.Count(t, "payments", "order_id = ?", got.ID); n != 1 {
		t.Errorf("payments rows: %d, want 1", n)
	}
	if n := apptest.CountEvents(s.OrderEvents(t, o.OrderID), "order.paid"); n != 1 {
		t.Errorf("order.paid messages: %d, want 1", n)
	}
	if n := s.Count(t, "anomalies", "order_id = ?", got.ID); n != 1 {
		t.Errorf("anomalies for the order: %d, want only the amount_mismatch", n)
	}
}

// TestFailedThenSuccess: a channel reports a trade as FAILED (or pending), then the same trade
// as SUCCESS — how a buyer's second attempt or a delayed confirmation arrives. The non-SUCCESS
// notification "changes nothing" (docs/contract.md), so it must not poison the trade's key either:
// the later SUCCESS pays the order. A 422 here would mean a payment the channel took is never
// applied nor recorded for refund.
func TestFailedThenSuccess(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "failed-then-success", basket...)
	n := apptest.Notification(o, "alipay", "T-RETRY-"+o.OrderID)
	n.Status = "FAILED"
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(n)), http.StatusOK)

	n.Status = notify.StatusSuccess
	if r := s.NotifyUntilDone(apptest.JSON(n)); r.Status != http.StatusOK {
		t.Fatalf("SUCCESS after FAILED for the same trade: %s, want 200 and the order paid", r)
	}
	wantPaidOnce(t, s, o, "alipay", n.Number, before)
}
