package account_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// wantUnchanged fails the test unless the business state (balances, ledger, recharge
// statuses, anomalies) is before plus the anomalies added, by kind.
func wantUnchanged(t *testing.T, before, after snapshot, added map[string]int64) {
	t.Helper()
	for kind, n := range added {
		before.Anomalies[kind] += n
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("business state changed:\nbefore (+ expected anomalies) %+v\nafter  %+v", before, after)
	}
}

// TestMalformedRechargeNotifyFirst: copies of a recharge notification with an extra field, or
// amount 0 (for SUCCESS and for another status alike), arrive before the channel's correct
// copy under the same channel + trade_no. Each is refused 400 invalid_request before its key
// is claimed and stores nothing — no dedup record, no claim, no balance, no ledger row — so
// the correct copy still credits the recharge, once.
func TestMalformedRechargeNotifyFirst(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
	userID, key := s.User(t, "malformed")
	rechargeID := s.CreateRecharge(t, key, 5000)
	good := apptest.RechargeReport(rechargeID, "alipay", "MF-"+apptest.RandHex(4), 5000)
	goodBody := good.Body()
	zero, waitZero := good, good
	zero.Amount = 0
	waitZero.Amount, waitZero.Status = 0, "WAIT_BUYER_PAY"

	before := takeSnapshot(t, s.DB)
	records, claims := s.Count(t, "idempotency_records", ""), s.Count(t, "report_claims", "")
	for name, body := range map[string][]byte{
		"extra field":         []byte(strings.TrimSuffix(string(goodBody), "}") + `,"bonus":1}`),
		"amount 0":            zero.Body(),
		"amount 0, not paid":  waitZero.Body(),
		"amount as a string":  []byte(strings.Replace(string(goodBody), `"amount":5000`, `"amount":"5000"`, 1)),
		"status in lowercase": []byte(strings.Replace(string(goodBody), `"status"`, `"Status"`, 1)),
	} {
		r := s.SignedPost(apptest.RechargeNotifyPath, body)
		if r.Status != http.StatusBadRequest || r.Code() != "invalid_request" {
			t.Errorf("%s: got %s, want 400 invalid_request", name, r)
		}
	}
	wantUnchanged(t, before, takeSnapshot(t, s.DB), nil)
	if n := s.Count(t, "idempotency_records", ""); n != records {
		t.Errorf("%d dedup records, want %d: a refused copy claimed its key", n, records)
	}
	if n := s.Count(t, "report_claims", ""); n != claims {
		t.Errorf("%d claims, want %d: a refused copy claimed its trade number", n, claims)
	}

	for range 2 {
		if r := s.NotifyRecharge(good); r.Status != http.StatusOK {
			t.Fatalf("the correct copy: %s", r)
		}
	}
	creditedOnce(t, s.DB, rechargeID, good.Number)
	if got := invariant(t, s.DB)[userID]; got != 5000 {
		t.Errorf("balance %d, want 5000", got)
	}
}

// TestRechargeRefusalStoresNothing: a recharge report the work refuses — an amount that
// differs from the recharge's, a recharge nobody issued — is answered its problem (400
// amount_mismatch, 404 not_found) on every copy and stores nothing under its key: no dedup
// record, no claim, no balance, no ledger row; only the amount_mismatch anomaly, recorded
// once however many copies. So the channel's corrected report under the same trade_no still
// credits the recharge, once.
func TestRechargeRefusalStoresNothing(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
	userID, key := s.User(t, "refused")
	rechargeID := s.CreateRecharge(t, key, 5000)
	tradeNo := "RF-" + apptest.RandHex(4)
	wrong := apptest.RechargeReport(rechargeID, "alipay", tradeNo, 4999)
	nobodys := apptest.RechargeReport("123456789", "alipay", tradeNo, 5000)

	before := takeSnapshot(t, s.DB)
	records, claims := s.Count(t, "idempotency_records", ""), s.Count(t, "report_claims", "")
	for i := range 3 {
		if r := s.NotifyRecharge(wrong); r.Status != http.StatusBadRequest || r.Code() != "amount_mismatch" {
			t.Errorf("copy %d of the wrong amount: got %s, want 400 amount_mismatch", i+1, r)
		}
		if r := s.NotifyRecharge(nobodys); r.Status != http.StatusNotFound || r.Code() != "not_found" {
			t.Errorf("copy %d for a recharge nobody issued: got %s, want 404 not_found", i+1, r)
		}
	}
	wantUnchanged(t, before, takeSnapshot(t, s.DB), map[string]int64{anomaly.AmountMismatch: 1})
	if n := s.Count(t, "idempotency_records", ""); n != records {
		t.Errorf("%d dedup records, want %d: a refusal was stored", n, records)
	}
	if n := s.Count(t, "report_claims", ""); n != claims {
		t.Errorf("%d claims, want %d: a refusal claimed the trade number", n, claims)
	}
	var mismatches []anomaly.Anomaly
	must(t, s.DB.Where("kind = ?", anomaly.AmountMismatch).Find(&mismatches).Error)
	if len(mismatches) != 1 || mismatches[0].RechargeID == nil || fmt.Sprint(*mismatches[0].RechargeID) != rechargeID ||
		mismatches[0].TradeNo != tradeNo || mismatches[0].Amount != 4999 {
		t.Errorf("amount_mismatch anomalies %+v, want one for recharge %s, trade %s, amount 4999", mismatches, rechargeID, tradeNo)
	}

	corrected := apptest.RechargeReport(rechargeID, "alipay", tradeNo, 5000)
	for i := range 2 {
		r := s.NotifyRecharge(corrected)
		if r.Status != http.StatusOK || r.Code() != "" {
			t.Fatalf("copy %d of the corrected report: %s, want 200 success", i+1, r)
		}
		if want := []string{"executed", "replayed"}[min(i, 1)]; r.Outcome() != want {
			t.Errorf("copy %d of the corrected report: Idempotency-Outcome %q, want %q", i+1, r.Outcome(), want)
		}
	}
	creditedOnce(t, s.DB, rechargeID, tradeNo)
	if got := invariant(t, s.DB)[userID]; got != 5000 {
		t.Errorf("balance %d, want 5000", got)
	}
}

// TestRechargeTradeConflict: the channel + trade_no that paid recharge A, reported for
// recharge B, is refused 422 trade_conflict and recorded once as an anomaly, however many
// copies; the same trade for A with another body is 422 idempotency_key_reused with no
// anomaly. After every dedup record is purged, A's claim of the number (report_claims) still
// refuses it for B. A trade number is one payment whatever it pays: recharge C's trade
// reported as paying an order is a trade_conflict too, with its own anomaly. None of them
// changes a balance, the ledger, an order or a recharge's status, or stores anything, and B
// can still be paid by its own trade.
func TestRechargeTradeConflict(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
	userID, key := s.User(t, "conflict")
	a := s.CreateRecharge(t, key, 5000)
	b := s.CreateRecharge(t, key, 5000)
	paysA := apptest.RechargeReport(a, "alipay", "TC-"+apptest.RandHex(4), 5000)
	if r := s.NotifyRecharge(paysA); r.Status != http.StatusOK {
		t.Fatalf("pay A: %s", r)
	}

	before := takeSnapshot(t, s.DB)
	records := s.Count(t, "idempotency_records", "")
	forB := paysA
	forB.OutNo = b
	for i := range 3 {
		r := s.NotifyRecharge(forB)
		if r.Status != http.StatusUnprocessableEntity || r.Code() != anomaly.TradeConflict {
			t.Errorf("copy %d for B: got %s, want 422 trade_conflict", i+1, r)
		}
		if i == 0 && r.Outcome() != "mismatch" {
			t.Errorf("Idempotency-Outcome %q, want mismatch", r.Outcome())
		}
	}
	wantUnchanged(t, before, takeSnapshot(t, s.DB), map[string]int64{anomaly.TradeConflict: 1})
	wantConflict := func(tradeNo, rechargeID string, orderID int64) {
		t.Helper()
		var conflicts []anomaly.Anomaly
		must(t, s.DB.Where("kind = ? AND trade_no = ?", anomaly.TradeConflict, tradeNo).Find(&conflicts).Error)
		switch {
		case len(conflicts) != 1:
			t.Errorf("trade_conflict anomalies for %s: %+v, want one", tradeNo, conflicts)
		case rechargeID != "" && (conflicts[0].RechargeID == nil || fmt.Sprint(*conflicts[0].RechargeID) != rechargeID || conflicts[0].OrderID != nil):
			t.Errorf("trade_conflict anomaly %+v, want it for recharge %s", conflicts[0], rechargeID)
		case orderID != 0 && (conflicts[0].OrderID == nil || *conflicts[0].OrderID != orderID || conflicts[0].RechargeID != nil):
			t.Errorf("trade_conflict anomaly %+v, want it for order %d", conflicts[0], orderID)
		}
	}
	wantConflict(paysA.Number, b, 0)

	before = takeSnapshot(t, s.DB)
	other := paysA
	other.Amount = 5001
	if r := s.NotifyRecharge(other); r.Status != http.StatusUnprocessableEntity || r.Code() != "idempotency_key_reused" {
		t.Errorf("A's trade with another amount: got %s, want 422 idempotency_key_reused", r)
	}
	wantUnchanged(t, before, takeSnapshot(t, s.DB), nil)
	if n := s.Count(t, "idempotency_records", ""); n != records {
		t.Errorf("%d dedup records, want %d: a refusal was stored", n, records)
	}

	// With every dedup record purged, the claim is what refuses the number for B.
	if _, err := s.App.Guard.Purge(context.Background(), idempotent.PurgeOptions{OlderThan: -time.Second}); err != nil {
		t.Fatal(err)
	}
	before = takeSnapshot(t, s.DB)
	for i := range 2 {
		if r := s.NotifyRecharge(forB); r.Status != http.StatusUnprocessableEntity || r.Code() != anomaly.TradeConflict {
			t.Errorf("copy %d for B after the purge: got %s, want 422 trade_conflict", i+1, r)
		}
	}
	wantUnchanged(t, before, takeSnapshot(t, s.DB), nil) // the anomaly exists already
	if n := s.Count(t, "idempotency_records", ""); n != 0 {
		t.Errorf("%d dedup records after the purge, want 0: a refusal was stored", n)
	}
	wantConflict(paysA.Number, b, 0)

	// Recharge C's trade number, reported as paying an order.
	orderID := createOrder(t, s, key)
	c := s.CreateRecharge(t, key, 3000)
	paysC := apptest.RechargeReport(c, "alipay", "TC-"+apptest.RandHex(4), 3000)
	if r := s.NotifyRecharge(paysC); r.Status != http.StatusOK {
		t.Fatalf("pay C: %s", r)
	}
	before = takeSnapshot(t, s.DB)
	records = s.Count(t, "idempotency_records", "")
	forOrder := paysC
	forOrder.Kind, forOrder.OutNo, forOrder.Amount = notify.Trade, ids.Format(orderID), orderAmount
	for i := range 2 {
		if r := s.SignedPost(apptest.PaymentNotifyPath, forOrder.Body()); r.Status != http.StatusUnprocessableEntity || r.Code() != anomaly.TradeConflict {
			t.Errorf("copy %d of C's trade for an order: got %s, want 422 trade_conflict", i+1, r)
		}
	}
	wantUnchanged(t, before, takeSnapshot(t, s.DB), map[string]int64{anomaly.TradeConflict: 1})
	if n := s.Count(t, "idempotency_records", ""); n != records {
		t.Errorf("%d dedup records, want %d: a refusal was stored", n, records)
	}
	wantConflict(paysC.Number, "", orderID)
	if n := s.Count(t, "orders", "id = ? AND status = ? AND trade_no IS NULL", orderID, "PENDING_PAYMENT"); n != 1 {
		t.Errorf("order %d is no longer PENDING_PAYMENT without a trade", orderID)
	}
	if n := s.Count(t, "payments", ""); n != 0 {
		t.Errorf("%d payments rows, want 0", n)
	}

	paysB := apptest.RechargeReport(b, "alipay", "TC-"+apptest.RandHex(4), 5000)
	if r := s.NotifyRecharge(paysB); r.Status != http.StatusOK {
		t.Fatalf("pay B with its own trade: %s", r)
	}
	creditedOnce(t, s.DB, a, paysA.Number)
	creditedOnce(t, s.DB, b, paysB.Number)
	creditedOnce(t, s.DB, c, paysC.Number)
	if got := invariant(t, s.DB)[userID]; got != 13000 {
		t.Errorf("balance %d, want 13000", got)
	}
}

// orderAmount is the amount of the order createOrder makes.
const orderAmount = 1500

// createOrder makes a SKU of price orderAmount through the admin route (accountConfig seeds
// no demo data) and an order of one of it for the user of key, and returns the order's id.
func createOrder(t *testing.T, s *apptest.Server, key string) int64 {
	t.Helper()
	sku := "SKU-ACC-" + apptest.RandHex(3)
	apptest.Must(t, s.Do(http.MethodPut, "/v1/admin/inventory/"+sku, s.Config.AdminKey, map[string]int64{"price": orderAmount, "available": 5}, nil), http.StatusOK)
	o := s.CreateOrder(t, key, "order-"+apptest.RandHex(4), apptest.Item{SKU: sku, Quantity: 1})
	id, ok := ids.Parse(o.OrderID)
	if !ok || o.Amount != orderAmount {
		t.Fatalf("created order %+v, want an id and amount %d", o, orderAmount)
	}
	return id
}
