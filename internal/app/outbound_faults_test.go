package app_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// These tests combine the simulator's faults over many orders at once, where channel_test.go
// takes them one at a time: lost and duplicated notifications, a refund call applied but
// answered too late, the next call refused before it applies, orders paid and orders left to
// expire. After the jobs have run — reconcile-payments, resume-refunds, close-expired-orders,
// reconcile-bills — the channel and oncepay must agree.

// faultsSKU is the SKU of the combined-faults test: its own, so that its stock is conserved
// whatever the demo data does.
const faultsSKU = "SKU-FAULTS"

// openOn creates an order of one unit of sku for alice and opens its channel trade.
func openOn(t *testing.T, s *apptest.Server, key string) order.View {
	t.Helper()
	o := s.CreateOrder(t, apptest.AliceKey, key+"-order", apptest.Item{SKU: faultsSKU, Quantity: 1})
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey(key+"-pay")), http.StatusCreated)
	return o
}

// stockTotal is available + reserved + sold of sku: what no move of an order may change.
func stockTotal(t *testing.T, s *apptest.Server, sku string) (int64, string) {
	t.Helper()
	it := s.Inventory(t, sku)
	return it.Available + it.Reserved + it.Sold, fmt.Sprintf("available %d, reserved %d, sold %d", it.Available, it.Reserved, it.Sold)
}

// waitDropped waits until the simulator has lost a notification of each trade: it reads the
// faults when it sends, so they must not change before that.
func waitDropped(t *testing.T, s *apptest.Server, outTradeNos ...string) {
	t.Helper()
	for _, id := range outTradeNos {
		apptest.Eventually(t, 10*time.Second, "a dropped notification of "+id, func() (bool, string) {
			for _, n := range s.App.Channel.State().Notifications {
				for _, a := range n.Attempts {
					if n.OutTradeNo == id && a.Dropped {
						return true, ""
					}
				}
			}
			return false, "none yet"
		})
	}
}

// resumeUntilSettled runs resume-refunds until no refund is PENDING or SUBMITTED.
func resumeUntilSettled(t *testing.T, s *apptest.Server) {
	t.Helper()
	apptest.Eventually(t, 30*time.Second, "every refund SUCCEEDED or FAILED", func() (bool, string) {
		adminRun(t, s, "resume-refunds", nil, nil)
		n := s.Count(t, "refunds", "status IN ?", []string{string(refund.Pending), string(refund.Submitted)})
		if n > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		return n == 0, fmt.Sprintf("%d refunds open", n)
	})
}

func TestCombinedOutboundFaults(t *testing.T) {
	s := channelServer(t, func(c *config.Config) { c.OrderTTL = 4 * time.Second })
	s.PutInventory(t, faultsSKU, 1000, 50)
	total0, _ := stockTotal(t, s, faultsSKU)

	// Ten orders, every trade opened before any fault.
	orders := make([]order.View, 10)
	for i := range orders {
		orders[i] = openOn(t, s, fmt.Sprintf("cf%d", i))
	}
	pay := func(i int) {
		t.Helper()
		if err := s.App.Channel.Pay(orders[i].OrderID); err != nil {
			t.Fatal(err)
		}
	}

	// 0–2 are paid while every notification is lost: only reconcile-payments can find them.
	s.App.Channel.SetFaults(channelsim.Faults{DropNotifications: 1})
	for i := range 3 {
		pay(i)
	}
	waitDropped(t, s, orders[0].OrderID, orders[1].OrderID, orders[2].OrderID)
	// 3–5 are paid with every notification sent six times at once.
	s.App.Channel.SetFaults(channelsim.Faults{DuplicateNotifications: 5})
	for i := 3; i < 6; i++ {
		pay(i)
	}
	for i := 3; i < 6; i++ {
		waitStatus(t, s, orders[i].OrderID, order.Paid)
	}

	// Refunds: 3 partly, under a call applied and answered after the caller gave up (and its
	// notification lost), then the next call refused before it applies; 4 partly under the
	// 503; 5 wholly, its notification sent six times.
	s.App.Channel.SetFaults(channelsim.Faults{TimeoutAfterApply: 1, DropNotifications: 1})
	var r3 refund.View
	apptest.Must(t, postRefund(s, apptest.AliceKey, orders[3].OrderID, "cf3-refund", map[string]any{"amount": 400}), http.StatusCreated).Decode(t, &r3)
	if got := getRefund(t, s, r3.RefundID); got.Status != refund.Pending {
		t.Fatalf("refund %s is %s after a call that timed out, want PENDING", r3.RefundID, got.Status)
	}
	s.App.Channel.SetFaults(channelsim.Faults{FailBeforeApply: 1, DropNotifications: 1})
	adminRun(t, s, "resume-refunds", nil, nil) // the next call: refused before it applies
	if got := getRefund(t, s, r3.RefundID); got.Status != refund.Pending || got.OutRefundNo != r3.OutRefundNo {
		t.Fatalf("refund %+v after a 503, want PENDING under %s", got, r3.OutRefundNo)
	}
	var r4 refund.View
	apptest.Must(t, postRefund(s, apptest.AliceKey, orders[4].OrderID, "cf4-refund", map[string]any{"amount": 250}), http.StatusCreated).Decode(t, &r4)
	s.App.Channel.SetFaults(channelsim.Faults{DuplicateNotifications: 5})
	var r5 refund.View
	apptest.Must(t, postRefund(s, apptest.AliceKey, orders[5].OrderID, "cf5-refund", nil), http.StatusCreated).Decode(t, &r5)

	// The jobs, notifications still lost: reconcile-payments finds 0–2 …
	s.App.Channel.SetFaults(channelsim.Faults{DropNotifications: 1, DuplicateNotifications: 5})
	var rec struct{ Checked, Applied int64 }
	adminRun(t, s, "reconcile-payments", nil, &rec)
	if rec.Applied != 3 {
		t.Errorf("reconcile-payments applied %d, want 3 (orders 0–2, whose notifications were lost)", rec.Applied)
	}
	// … 6 is paid now, its notifications lost too, and left to the close job (I9); 7–9 never.
	pay(6)
	waitDropped(t, s, orders[6].OrderID)
	resumeUntilSettled(t, s)
	time.Sleep(time.Until(s.Order(t, orders[9].OrderID).ExpiresAt) + 200*time.Millisecond)
	adminRun(t, s, "close-expired-orders", nil, nil)
	s.App.Channel.SetFaults(channelsim.Faults{})
	resumeUntilSettled(t, s)

	want := map[int]order.Status{0: order.Paid, 1: order.Paid, 2: order.Paid, 3: order.Paid, 4: order.Paid,
		5: order.Refunded, 6: order.Paid, 7: order.Closed, 8: order.Closed, 9: order.Closed}
	for i, w := range want {
		if got := s.Order(t, orders[i].OrderID).Status; got != w {
			t.Errorf("order %d (%s) is %s, want %s", i, orders[i].OrderID, got, w)
		}
	}
	for _, r := range []refund.View{r3, r4, r5} {
		if got := getRefund(t, s, r.RefundID); got.Status != refund.Succeeded {
			t.Errorf("refund %s of %d is %s, want SUCCEEDED", r.OutRefundNo, r.Amount, got.Status)
		}
	}
	checkChannelAgrees(t, s, orders)

	// The day's bill reconciles.
	var bill struct {
		Matched    int64
		Mismatches []map[string]any
	}
	adminRun(t, s, "reconcile-bills", map[string]string{"date": time.Now().UTC().Format(time.DateOnly)}, &bill)
	if len(bill.Mismatches) != 0 || bill.Matched != 7+3 {
		t.Errorf("bill: matched %d, mismatches %v; want 10 matched (7 payments, 3 refunds) and none", bill.Matched, bill.Mismatches)
	}

	// Stock is conserved, and says what the orders say: 6 sold (0–4, 6), none reserved.
	total, desc := stockTotal(t, s, faultsSKU)
	if total != total0 {
		t.Errorf("stock total %d (%s), was %d", total, desc, total0)
	}
	if it := s.Inventory(t, faultsSKU); it.Sold != 6 || it.Reserved != 0 {
		t.Errorf("stock %s, want sold 6 and reserved 0", desc)
	}
}

// checkChannelAgrees holds the channel's state against oncepay's for orders: every trade
// SUCCESS at the channel is PAID or REFUNDED here; the refunds of every trade at the channel
// sum to what oncepay asked (its refunds not FAILED), never more, each under a number oncepay
// committed; and every refund of oncepay's is SUCCEEDED or FAILED.
func checkChannelAgrees(t *testing.T, s *apptest.Server, orders []order.View) {
	t.Helper()
	st := s.App.Channel.State()
	mine := map[string]bool{}
	for _, o := range orders {
		mine[o.OrderID] = true
	}
	for _, tr := range st.Trades {
		if !mine[tr.OutTradeNo] {
			continue
		}
		o := s.Order(t, tr.OutTradeNo)
		if tr.Status == channelsim.TradeSuccess && o.Status != order.Paid && o.Status != order.Refunded {
			t.Errorf("trade %s is SUCCESS at the channel, order is %s", tr.OutTradeNo, o.Status)
		}
		if tr.Status != channelsim.TradeSuccess && (o.Status == order.Paid || o.Status == order.Refunded) {
			t.Errorf("order %s is %s, its trade is %s at the channel", tr.OutTradeNo, o.Status, tr.Status)
		}
		atChannel, n := refundedAtChannel(s, tr.OutTradeNo)
		var asked int64
		if err := s.DB.Table("refunds").Select("COALESCE(SUM(amount), 0)").
			Where("out_trade_no = ? AND status <> ?", tr.OutTradeNo, refund.Failed).Scan(&asked).Error; err != nil {
			t.Fatal(err)
		}
		if atChannel != asked || atChannel > tr.Amount {
			t.Errorf("trade %s of %d: the channel refunded %d in %d refunds, oncepay asked %d", tr.OutTradeNo, tr.Amount, atChannel, n, asked)
		}
	}
	for _, r := range st.Refunds {
		if mine[r.OutTradeNo] && s.Count(t, "refunds", "out_refund_no = ?", r.OutRefundNo) != 1 {
			t.Errorf("the channel refunded %s under %s, a number oncepay never committed", r.OutTradeNo, r.OutRefundNo)
		}
	}
	if n := s.Count(t, "refunds", "status NOT IN ?", []string{string(refund.Succeeded), string(refund.Failed)}); n != 0 {
		t.Errorf("%d refunds neither SUCCEEDED nor FAILED", n)
	}
}

// TestDuplicatePaymentNeverRefundsTheOrdersOwnTrade: a second trade pays an order already
// paid through the channel; the payment is kept as a duplicate_payment anomaly. Refunding the
// anomaly by the order's out_trade_no would take back the payment the order keeps, so its one
// refund names the anomaly's own trade, by trade_no, through the channel that took it.
// Here that trade is one the channel does not know (the report is the only news of it): the
// channel refuses the refund, which ends FAILED — once, however often resume-refunds runs —
// and the anomaly is left to an operator (needs_operator). The channel refunds nothing
// against the order's own trade, and the buyer's own refund of the PAID order later succeeds
// in full.
func TestDuplicatePaymentNeverRefundsTheOrdersOwnTrade(t *testing.T) {
	s := channelServer(t)
	o := paidOrder(t, s, "dupay")
	first := s.Order(t, o.OrderID)
	secondTrade := "SIM-SECOND-" + o.OrderID

	// The second payment: same order, same channel, another trade_no.
	second := apptest.Notification(o, "simpay", secondTrade)
	if r := s.NotifyUntilDone(apptest.JSON(second)); r.Status != http.StatusOK {
		t.Fatalf("the second payment answered %s, want 200 so the channel stops", r)
	}
	as := s.AnomaliesOf(t, "duplicate_payment", o.OrderID)
	if len(as) != 1 {
		t.Fatalf("%d duplicate_payment anomalies for order %s, want 1", len(as), o.OrderID)
	}
	for range 4 {
		adminRun(t, s, "resume-refunds", nil, nil)
	}
	var rows []refund.Refund
	if err := s.DB.Where("order_id = ?", first.ID).Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d refunds for order %s after four runs of resume-refunds, want the anomaly's one", len(rows), o.OrderID)
	}
	rf := rows[0]
	if rf.AnomalyID == nil || ids.Format(*rf.AnomalyID) != as[0].ID || rf.Channel != "simpay" || derefOr(rf.TradeNo) != secondTrade ||
		rf.Amount != o.Amount || rf.Status != refund.Failed {
		t.Errorf("the anomaly's refund: anomaly %v, channel %s, trade_no %q, amount %d, status %s; want anomaly %s's FAILED refund of %d by trade_no %s at simpay",
			rf.AnomalyID, rf.Channel, derefOr(rf.TradeNo), rf.Amount, rf.Status, as[0].ID, o.Amount, secondTrade)
	}
	if got := s.AnomaliesOf(t, "duplicate_payment", o.OrderID); len(got) != 1 || got[0].Resolution != anomaly.NeedsOperator ||
		got[0].RefundID != ids.Format(rf.ID) {
		t.Errorf("the anomaly after its refund failed: %+v, want resolution needs_operator with refund %d", got, rf.ID)
	}
	if sum, n := refundedAtChannel(s, o.OrderID); n != 0 {
		t.Fatalf("the channel refunded %d in %d refunds against the order's own trade, want nothing", sum, n)
	}
	if got := s.Order(t, o.OrderID); got.Status != order.Paid || derefOr(got.TradeNo) != derefOr(first.TradeNo) {
		t.Errorf("order is %s by %s, want PAID by the first trade %s", got.Status, derefOr(got.TradeNo), derefOr(first.TradeNo))
	}
	if n := s.Count(t, "payments", "order_id = ?", o.OrderID); n != 1 {
		t.Errorf("%d payments for order %s, want 1 (the duplicate is an anomaly, not a payment)", n, o.OrderID)
	}

	// The buyer's own refund of the PAID order still gets its whole payment back, once.
	var later refund.View
	apptest.Must(t, postRefund(s, apptest.AliceKey, o.OrderID, "dupay-later", nil), http.StatusCreated).Decode(t, &later)
	apptest.Eventually(t, 20*time.Second, "the buyer's refund ended", func() (bool, string) {
		adminRun(t, s, "resume-refunds", nil, nil)
		v := getRefund(t, s, later.RefundID)
		return v.Status == refund.Succeeded || v.Status == refund.Failed, string(v.Status)
	})
	if v := getRefund(t, s, later.RefundID); v.Status != refund.Succeeded || v.Amount != o.Amount {
		t.Errorf("the buyer's refund: %s of %d, want SUCCEEDED of %d", v.Status, v.Amount, o.Amount)
	}
	if sum, n := refundedAtChannel(s, o.OrderID); n != 1 || sum != o.Amount {
		t.Errorf("the channel refunded %d in %d refunds, want %d in 1", sum, n, o.Amount)
	}
	waitStatus(t, s, o.OrderID, order.Refunded)
	if n := s.Count(t, "refunds", "order_id = ?", first.ID); n != 2 {
		t.Errorf("%d refunds for order %s, want 2 (the anomaly's, the buyer's)", n, o.OrderID)
	}
}

// derefOr returns *p, or "" for nil.
func derefOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
