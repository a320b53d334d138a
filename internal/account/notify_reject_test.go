package account_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/app/apptest"
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
// is claimed and stores nothing — no dedup record, no balance, no ledger row — so the correct
// copy still credits the recharge, once.
func TestMalformedRechargeNotifyFirst(t *testing.T) {
	s := apptest.StartHTTPOnly(t, accountConfig)
	userID, key := s.User(t, "malformed")
	rechargeID := s.CreateRecharge(t, key, 5000)
	good := account.Notification{Channel: "alipay", TradeNo: "MF-" + apptest.RandHex(4), OutTradeNo: rechargeID, Amount: 5000, Status: "SUCCESS"}
	marshal := func(n account.Notification) []byte { b, _ := json.Marshal(n); return b }
	goodBody := marshal(good)
	zero, waitZero := good, good
	zero.Amount = 0
	waitZero.Amount, waitZero.Status = 0, "WAIT_BUYER_PAY"

	before := takeSnapshot(t, s.DB)
	records := s.Count(t, "idempotency_records", "")
	for name, body := range map[string][]byte{
		"extra field":         []byte(strings.TrimSuffix(string(goodBody), "}") + `,"bonus":1}`),
		"amount 0":            marshal(zero),
		"amount 0, not paid":  marshal(waitZero),
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

	for range 2 {
		if r := s.NotifyRecharge(good); r.Status != http.StatusOK {
			t.Fatalf("the correct copy: %s", r)
		}
	}
	creditedOnce(t, s.DB, rechargeID, good.TradeNo)
	if got := invariant(t, s.DB)[userID]; got != 5000 {
		t.Errorf("balance %d, want 5000", got)
	}
}

// TestRechargeTradeConflict: the channel + trade_no that paid recharge A, reported for
// recharge B, is refused 422 trade_conflict and recorded once as an anomaly, however many
// copies; the same trade for A with another body is 422 idempotency_key_reused with no
// anomaly. Neither changes a balance, the ledger or a recharge's status, and B can still be
// paid by its own trade.
func TestRechargeTradeConflict(t *testing.T) {
	s := apptest.StartHTTPOnly(t, accountConfig)
	userID, key := s.User(t, "conflict")
	a := s.CreateRecharge(t, key, 5000)
	b := s.CreateRecharge(t, key, 5000)
	paysA := account.Notification{Channel: "alipay", TradeNo: "TC-" + apptest.RandHex(4), OutTradeNo: a, Amount: 5000, Status: "SUCCESS"}
	if r := s.NotifyRecharge(paysA); r.Status != http.StatusOK {
		t.Fatalf("pay A: %s", r)
	}

	before := takeSnapshot(t, s.DB)
	forB := paysA
	forB.OutTradeNo = b
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
	var conflicts []anomaly.Anomaly
	must(t, s.DB.Where("kind = ?", anomaly.TradeConflict).Find(&conflicts).Error)
	if len(conflicts) != 1 || conflicts[0].RechargeID == nil || fmt.Sprint(*conflicts[0].RechargeID) != b || conflicts[0].TradeNo != paysA.TradeNo {
		t.Errorf("trade_conflict anomalies %+v, want one for recharge %s and trade %s", conflicts, b, paysA.TradeNo)
	}

	before = takeSnapshot(t, s.DB)
	other := paysA
	other.Amount = 5001
	if r := s.NotifyRecharge(other); r.Status != http.StatusUnprocessableEntity || r.Code() != "idempotency_key_reused" {
		t.Errorf("A's trade with another amount: got %s, want 422 idempotency_key_reused", r)
	}
	wantUnchanged(t, before, takeSnapshot(t, s.DB), nil)

	paysB := account.Notification{Channel: "alipay", TradeNo: "TC-" + apptest.RandHex(4), OutTradeNo: b, Amount: 5000, Status: "SUCCESS"}
	if r := s.NotifyRecharge(paysB); r.Status != http.StatusOK {
		t.Fatalf("pay B with its own trade: %s", r)
	}
	creditedOnce(t, s.DB, a, paysA.TradeNo)
	creditedOnce(t, s.DB, b, paysB.TradeNo)
	if got := invariant(t, s.DB)[userID]; got != 10000 {
		t.Errorf("balance %d, want 10000", got)
	}
}
