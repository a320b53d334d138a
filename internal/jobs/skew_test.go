package jobs_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestCloseOnClockAhead: a close job on an instance whose clock runs ten minutes ahead closes
// no order before its expires_at by the database's clock. The job once compared expires_at
// with the instance's clock and closed an order with a minute left.
func TestCloseOnClockAhead(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Channel, func(c *config.Config) { c.OrderTTL = time.Minute })
	o := s.CreateOrder(t, apptest.AliceKey, "skew-ahead", basket...)
	apptest.SkewClock(t, 10*time.Minute)
	if n := s.RunCloseJob(t); n != 0 {
		t.Errorf("close job on a clock 10 min ahead closed %d orders, want 0 (expires_at is a minute away)", n)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("order is %s, want PENDING_PAYMENT until its expires_at", st)
	}
	pay := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey("skew-ahead-pay"))
	if pay.Status == http.StatusConflict {
		t.Errorf("opening a payment on a clock 10 min ahead: %s, want the trade (the order has a minute left)", pay)
	}
}

// TestOrdersExpireByTheDatabasesClock: an order placed on an instance whose clock is off
// expires the order TTL after it was placed by the database's clock. Stamped with the
// instance's clock, an order placed ten minutes behind was born expired, and one placed ten
// minutes ahead stayed open ten minutes past its TTL.
func TestOrdersExpireByTheDatabasesClock(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, shortTTL)
	for _, d := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		prev := clock.SetOffset(d)
		o := s.CreateOrder(t, apptest.AliceKey, "skew-placed-"+d.String(), basket...)
		clock.SetOffset(prev)
		got := s.Order(t, o.OrderID)
		if lag := time.Until(got.ExpiresAt); lag < 0 || lag > s.Config.OrderTTL+time.Second {
			t.Errorf("order placed on a clock %s off: expires_at %s is %s from now by the database's clock, want within the TTL (%s)",
				d, got.ExpiresAt.Format(time.RFC3339Nano), lag, s.Config.OrderTTL)
		}
		if n := s.RunCloseJob(t); n != 0 {
			t.Errorf("order placed on a clock %s off: the close job closed %d at once, want 0", d, n)
		}
		pastExpiry(s)
		if n := s.RunCloseJob(t); n != 1 {
			t.Errorf("order placed on a clock %s off: the close job closed %d after its TTL, want 1", d, n)
		}
	}
}

// TestNoPaymentOpenedAfterExpiryOnClockBehind: an instance ten minutes behind refuses to open
// a payment on an order whose expires_at has passed by the database's clock, which the close
// job is about to close.
func TestNoPaymentOpenedAfterExpiryOnClockBehind(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Channel, shortTTL)
	o := s.CreateOrder(t, apptest.AliceKey, "skew-behind", basket...)
	pastExpiry(s)
	apptest.SkewClock(t, -10*time.Minute)
	pay := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey("skew-behind-pay"))
	if pay.Status != http.StatusConflict {
		t.Errorf("opening a payment on an expired order on a clock 10 min behind: %s, want 409 illegal_state", pay)
	}
}
