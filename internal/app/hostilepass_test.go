package app_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// These tests hold what a hostile pass on the money paths found, each fixed.

// TestCancelRefusesABody: a cancel carries nothing; a body that is not empty or {} is 400
// and cancels nothing — before, any body cancelled the order and closed its channel trade.
func TestCancelRefusesABody(t *testing.T) {
	s := channelServer(t)
	o := s.CreateOrder(t, apptest.AliceKey, "cancel-body", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	openTradeOf(t, s, o, "cancel-body-pay")
	for i, body := range []string{"not json", `{"foo":1}`, `[1,2]`, `{}{}`} {
		r := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/cancel", apptest.AliceKey, []byte(body), apptest.IdemKey("cancel-body-"+string(rune('a'+i))))
		apptest.WantProblem(t, r, http.StatusBadRequest, "invalid_request")
	}
	if tr, _ := tradeAtChannel(s, o.OrderID); tr.Status != channelsim.TradeWaitBuyerPay {
		t.Fatalf("after refused cancels the channel's trade is %s, want WAIT_BUYER_PAY", tr.Status)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Fatalf("after refused cancels the order is %s", st)
	}
	// An empty body and {} are one request under one key.
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("cancel-body-ok")), http.StatusOK)
	r := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/cancel", apptest.AliceKey, []byte(`{}`), apptest.IdemKey("cancel-body-ok"))
	if apptest.Must(t, r, http.StatusOK); r.Outcome() != "replayed" {
		t.Errorf("the {} copy of an empty-bodied cancel: %s, want replayed", r)
	}
}

// TestAnotherChannelNameCannotRefundTheSimulatorsTrade: with the embedded simulator only
// ONCEPAY_CHANNEL_NAME is called; a report under another configured name that borrows the
// simulator's trade number is kept as an anomaly whose refund ends FAILED for an operator,
// and the simulator refunds nothing of the order's own payment — before, it refunded it.
func TestAnotherChannelNameCannotRefundTheSimulatorsTrade(t *testing.T) {
	s := channelServer(t)
	o := paidOrder(t, s, "alias")
	own := s.Order(t, o.OrderID)
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(o, "alipay", *own.TradeNo))), http.StatusOK)
	dup := s.AnomaliesOf(t, anomaly.DuplicatePayment, o.OrderID)
	if len(dup) != 1 || dup[0].Channel != "alipay" {
		t.Fatalf("anomalies %+v, want one duplicate_payment under alipay", dup)
	}
	adminRun(t, s, "resume-refunds", nil, nil)
	var rf refund.Refund
	if err := s.DB.Where("order_id = ? AND anomaly_id IS NOT NULL", o.OrderID).Take(&rf).Error; err != nil || rf.Status != refund.Failed {
		t.Fatalf("the anomaly's refund: %+v, %v; want FAILED (alipay has no API here)", rf, err)
	}
	if sum, n := refundedAtChannel(s, o.OrderID); n != 0 {
		t.Fatalf("the simulator refunded %d in %d refunds of the order's own trade", sum, n)
	}
	// The buyer's own refund still goes through, whole.
	r := apptest.Must(t, postRefund(s, apptest.AliceKey, o.OrderID, "alias-refund", nil), http.StatusCreated)
	var v refund.View
	r.Decode(t, &v)
	waitRefund(t, s, v.RefundID, refund.Succeeded)
	waitStatus(t, s, o.OrderID, order.Refunded)
}

// TestBillsReconcileRecharges: a recharge credited by a trade the channel's bill lacks is a
// reconcile_unbilled_recharge anomaly — money oncepay gave that the channel never took.
func TestBillsReconcileRecharges(t *testing.T) {
	s := channelServer(t)
	rid := s.CreateRecharge(t, apptest.BobKey, 7000)
	apptest.Must(t, s.NotifyRecharge(apptest.RechargeReport(rid, "simpay", "FORGED-R1", 7000)), http.StatusOK)
	var rep struct {
		Mismatches []struct {
			Kind    string `json:"kind"`
			TradeNo string `json:"trade_no"`
		} `json:"mismatches"`
	}
	adminRun(t, s, "reconcile-bills", map[string]string{"date": time.Now().UTC().Format(time.DateOnly)}, &rep)
	found := false
	for _, m := range rep.Mismatches {
		found = found || (m.Kind == "reconcile_unbilled_recharge" && m.TradeNo == "FORGED-R1")
	}
	if !found {
		t.Errorf("mismatches %+v, want reconcile_unbilled_recharge for FORGED-R1", rep.Mismatches)
	}
}

// TestTradeAndRefundNumbersKeepTheirAnomalies: a refund's number and a trade's number that
// happen to be the same string each keep their amount_mismatch anomaly.
func TestTradeAndRefundNumbersKeepTheirAnomalies(t *testing.T) {
	s := channelServer(t)
	o := paidOrder(t, s, "spaces")
	r := apptest.Must(t, postRefund(s, apptest.AliceKey, o.OrderID, "spaces-refund", map[string]int64{"amount": 100}), http.StatusCreated)
	var v refund.View
	r.Decode(t, &v)
	shared := "SAME-" + apptest.RandHex(4)
	bad := notify.Report{Kind: notify.Refund, Channel: "simpay", Number: shared, OutNo: v.OutRefundNo, Amount: 99, Status: "SUCCESS"}
	apptest.WantProblem(t, s.SignedPost(apptest.RefundNotifyPath, bad.Body()), http.StatusBadRequest, "amount_mismatch")
	other := s.CreateOrder(t, apptest.AliceKey, "spaces-other", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	trade := apptest.Notification(other, "simpay", shared)
	trade.Amount++
	apptest.WantProblem(t, s.SignedNotify(trade.Body()), http.StatusBadRequest, "amount_mismatch")
	if n := s.Count(t, "anomalies", "kind = ? AND trade_no = ?", anomaly.AmountMismatch, shared); n != 2 {
		t.Errorf("%d amount_mismatch anomalies for %s, want one for the refund and one for the trade", n, shared)
	}
}

// TestOneSignatureHeader: a report with two X-Signature headers is refused, whichever is
// first: a valid one beside an invalid one is not a signature.
func TestOneSignatureHeader(t *testing.T) {
	s := channelServer(t)
	o := s.CreateOrder(t, apptest.AliceKey, "two-sigs", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	body := apptest.JSON(apptest.Notification(o, "simpay", "TWO-SIGS"))
	for _, sigs := range [][]string{{s.Sign(body), "bad"}, {"bad", s.Sign(body)}, {s.Sign(body), s.Sign(body)}} {
		req, err := http.NewRequest(http.MethodPost, s.URL+apptest.PaymentNotifyPath, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for _, sig := range sigs {
			req.Header.Add("X-Signature", sig)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("two X-Signature headers: %d, want 401", res.StatusCode)
		}
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("the order is %s, want it unpaid", st)
	}
}

// TestRefundCapCountsWhatTheChannelRefunded: a refund that ended FAILED and that the channel
// then reported SUCCESS (refund_status_conflict: the money went back) counts against what
// may still be refunded, so that a second refund of the same money is refused here, not only
// by the channel's cap.
func TestRefundCapCountsWhatTheChannelRefunded(t *testing.T) {
	s := channelServer(t)
	o := paidOrder(t, s, "cap")
	r := apptest.Must(t, postRefund(s, apptest.AliceKey, o.OrderID, "cap-refund", nil), http.StatusCreated)
	var v refund.View
	r.Decode(t, &v)
	var row refund.Refund
	apptest.Eventually(t, 10*time.Second, "the refund submitted", func() (bool, string) {
		_ = s.DB.Where("id = ?", v.RefundID).Take(&row).Error
		return row.RefundNo != nil, string(row.Status)
	})
	failed := notify.Report{Kind: notify.Refund, Channel: row.Channel, Number: *row.RefundNo, OutNo: row.OutRefundNo, Amount: row.Amount, Status: "FAILED"}
	apptest.Must(t, s.SignedPost(apptest.RefundNotifyPath, failed.Body()), http.StatusOK)
	apptest.Eventually(t, 20*time.Second, "the channel's SUCCESS after the FAILED", func() (bool, string) {
		_ = s.DB.Where("id = ?", v.RefundID).Take(&row).Error
		return row.ChannelStatus != nil && *row.ChannelStatus == "SUCCESS", string(row.Status)
	})
	if row.Status != refund.Failed || len(s.AnomaliesOf(t, anomaly.RefundStatusConflict, o.OrderID)) != 1 {
		t.Fatalf("refund %+v: want FAILED with the channel's SUCCESS kept and one refund_status_conflict", row)
	}
	apptest.WantProblem(t, postRefund(s, apptest.AliceKey, o.OrderID, "cap-refund-again", nil), http.StatusConflict, "refund_exceeds_paid")
}
