package payment_test

import (
	"maps"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/app/apptest"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// TestNotifyRefusals sends notifications that must not pay anything and checks, for each, the
// answer and exactly what it left in the database: nothing at all when it was refused before
// the idempotency layer (signature, unreadable body), only the stored answer when it reached it
// (a finished notification answers the same again), plus the anomaly of an amount mismatch.
func TestNotifyRefusals(t *testing.T) {
	s := apptest.Start(t)
	o := s.CreateOrder(t, apptest.AliceKey, "refusals", basket...)
	valid := func(tradeNo string) payment.Notification { return apptest.Notification(o, "alipay", tradeNo) }
	signed := func(body []byte) map[string]string { return map[string]string{web.HeaderSignature: s.Sign(body)} }

	tests := []struct {
		name   string
		body   []byte
		header func(body []byte) map[string]string
		status int
		code   string
		// delta is the change each table may show; every other count and stock figure must
		// stay as it was.
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
			name: "notify400MalformedJSON", body: []byte(`{"channel":"alipay","trade_no":`), header: signed,
			status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "notify400UnknownField", body: []byte(`{"channel":"alipay","trade_no":"T-F","out_trade_no":"` + o.OrderID + `","amount":1,"status":"SUCCESS","extra":1}`),
			header: signed, status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "notify400ZeroAmount", body: apptest.JSON(func() payment.Notification { n := valid("T-ZERO"); n.Amount = 0; return n }()),
			header: signed, status: http.StatusBadRequest, code: "invalid_request",
		},
		{
			name: "notify400AmountMismatch", body: apptest.JSON(func() payment.Notification { n := valid("T-AMOUNT"); n.Amount++; return n }()),
			header: signed, status: http.StatusBadRequest, code: "amount_mismatch",
			delta: map[string]int64{"anomalies": 1, "idempotency_records": 1},
		},
		{
			name: "notify404UnknownOrder", body: apptest.JSON(func() payment.Notification { n := valid("T-UNKNOWN"); n.OutTradeNo = "42"; return n }()),
			header: signed, status: http.StatusNotFound, code: "not_found",
			delta: map[string]int64{"idempotency_records": 1},
		},
		{
			name: "notify200StatusFailed", body: apptest.JSON(func() payment.Notification { n := valid("T-FAILED"); n.Status = "FAILED"; return n }()),
			header: signed, status: http.StatusOK,
			delta: map[string]int64{"idempotency_records": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Snapshot(t)
			r := s.Do(http.MethodPost, "/v1/payments/notify", "", tt.body, tt.header(tt.body))
			if tt.code != "" {
				apptest.WantProblem(t, r, tt.status, tt.code)
			} else if r.Status != tt.status || r.Code() != "" {
				t.Fatalf("got %s, want %d success", r, tt.status)
			}
			diff := before.Diff(s.Snapshot(t))
			want := tt.delta
			if want == nil {
				want = map[string]int64{}
			}
			if !maps.Equal(diff, want) {
				t.Errorf("database changed by %v, want %v", apptest.Snapshot(diff), apptest.Snapshot(want))
			}
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

// TestAmountMismatchRepeated: copies of a mismatching notification over both paths get the same
// 400 and leave one anomaly, not one per copy, and the Kafka copy is committed, not retried.
func TestAmountMismatchRepeated(t *testing.T) {
	s := apptest.Start(t)
	o := s.CreateOrder(t, apptest.AliceKey, "mismatch", basket...)
	n := apptest.Notification(o, "alipay", "T-MISMATCH")
	n.Amount--
	body := apptest.JSON(n)

	res := storm(t, s, o.OrderID, body, 3, 2)
	for i, r := range res.http {
		apptest.WantProblem(t, r, http.StatusBadRequest, "amount_mismatch")
		if i > 0 && string(r.Body) != string(res.http[0].Body) {
			t.Errorf("copy %d answered %s, copy 0 %s: a finished notification answers the same", i, r, res.http[0])
		}
	}
	if got := s.AnomaliesOf(t, anomaly.AmountMismatch, o.OrderID); len(got) != 1 {
		t.Errorf("amount_mismatch anomalies: %d, want 1", len(got))
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("order is %s, want PENDING_PAYMENT", st)
	}
	if n := s.Count(t, "payments", ""); n != 0 {
		t.Errorf("payments rows: %d, want 0", n)
	}
}

// TestFailedThenSuccess: a channel reports a trade as FAILED (or pending), then the same trade
// as SUCCESS — how a buyer's second attempt or a delayed confirmation arrives. The non-SUCCESS
// notification "changes nothing" (CONTRACT.md), so it must not poison the trade's key either:
// the later SUCCESS pays the order. A 422 here would mean a payment the channel took is never
// applied nor recorded for refund.
func TestFailedThenSuccess(t *testing.T) {
	s := apptest.Start(t)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "failed-then-success", basket...)
	n := apptest.Notification(o, "alipay", "T-RETRY-"+o.OrderID)
	n.Status = "FAILED"
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(n)), http.StatusOK)

	n.Status = payment.StatusSuccess
	if r := s.NotifyUntilDone(apptest.JSON(n)); r.Status != http.StatusOK {
		t.Fatalf("SUCCESS after FAILED for the same trade: %s, want 200 and the order paid", r)
	}
	wantPaidOnce(t, s, o, "alipay", n.TradeNo, before)
}
