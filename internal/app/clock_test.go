package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestReportRefusedOnClockPastTolerance: an instance whose clock runs ten minutes ahead — past
// ONCEPAY_SIGNATURE_TOLERANCE (5 min) — refuses an honest, freshly signed report with 401
// invalid_signature and stores nothing; the same report, once the clock is right (on another
// instance, for the channel's next attempt), pays the order once. The refusal is oncepay's
// answer to a clock it cannot trust.
func TestReportRefusedOnClockPastTolerance(t *testing.T) {
	s := apptest.Start(t)
	o := s.CreateOrder(t, apptest.AliceKey, "skewed-report", apptest.Item{SKU: "SKU-1001", Quantity: 1})
	body := apptest.JSON(apptest.Notification(o, "alipay", "T-SKEW-"+o.OrderID))
	prev := clock.SetOffset(10 * time.Minute)
	r := s.SignedNotify(body)
	clock.SetOffset(prev)
	if r.Status != http.StatusUnauthorized || !strings.Contains(r.String(), "invalid_signature") {
		t.Fatalf("a report to an instance 10 min ahead: %s, want 401 invalid_signature", r)
	}
	if st := s.Order(t, o.OrderID).Status; st != "PENDING_PAYMENT" {
		t.Fatalf("after the refused report the order is %s, want PENDING_PAYMENT", st)
	}
	apptest.Must(t, s.NotifyUntilDone(body), http.StatusOK)
	if st := s.Order(t, o.OrderID).Status; st != "PAID" {
		t.Errorf("after the report on a right clock the order is %s, want PAID", st)
	}
}

// TestRechargeStampedOnTheDatabasesClock: a recharge asked for on an instance whose clock runs
// ten minutes ahead is stamped with the database's time, which reconcile-payments compares
// with when it picks the pending recharges to ask the channel about. Stamped on the
// instance's clock, a recharge whose every report was lost waited ten minutes to be credited
// (the chaos run's -redis-cluster run 2 lost one that way).
func TestRechargeStampedOnTheDatabasesClock(t *testing.T) {
	s := apptest.Start(t)
	apptest.SkewClock(t, 10*time.Minute)
	rid := s.CreateRecharge(t, apptest.AliceKey, 500)
	var created time.Time
	if err := s.DB.Raw("SELECT created_at FROM recharges WHERE id = ?", rid).Scan(&created).Error; err != nil {
		t.Fatal(err)
	}
	now, err := database.Now(context.Background(), s.DB)
	if err != nil {
		t.Fatal(err)
	}
	if d := now.Sub(created); d < 0 || d > time.Minute {
		t.Errorf("created_at %s is %s before the database's now %s, want within a minute (not 10 min ahead)", created, d, now)
	}
}
