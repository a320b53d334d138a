package app_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestPartialRefundsSucceedingTogetherRefundTheOrder: two partial refunds that add up to the
// order's amount, taken at the same moment, succeed at the channel at the same moment, and
// their two notifications are applied concurrently. Each must see the other: the order ends
// REFUNDED with its stock back. Found by the chaos run: without the order's row lock and a
// current read of the refunds' sum, each transaction counted only its own refund and the order
// stayed PAID although everything was refunded.
func TestPartialRefundsSucceedingTogetherRefundTheOrder(t *testing.T) {
	s := channelServer(t)
	const orders = 6
	paid := make([]order.View, orders)
	for i := range paid {
		paid[i] = paidOrder(t, s, "race-"+string(rune('a'+i)))
	}
	before := s.Inventory(t, "SKU-1002")

	refunds := make([][2]refund.View, orders)
	var wg sync.WaitGroup
	for i, o := range paid {
		half := o.Amount / 2
		for j, body := range []any{map[string]any{"amount": half}, map[string]any{"amount": o.Amount - half}} {
			wg.Go(func() {
				res := postRefund(s, apptest.AliceKey, o.OrderID, "race-refund-"+o.OrderID+"-"+string(rune('0'+j)), body)
				if res.Status != http.StatusCreated {
					t.Errorf("refund %d of order %s: %d %s", j, o.OrderID, res.Status, res.Body)
					return
				}
				res.Decode(t, &refunds[i][j])
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, o := range paid {
		for _, r := range refunds[i] {
			waitRefund(t, s, r.RefundID, refund.Succeeded)
		}
		waitStatus(t, s, o.OrderID, order.Refunded)
	}
	after := s.Inventory(t, "SKU-1002")
	if after.Sold != before.Sold-orders || after.Available != before.Available+orders {
		t.Errorf("stock %+v after the refunds, was %+v: want sold−%d, available+%d", after, before, orders, orders)
	}
}
