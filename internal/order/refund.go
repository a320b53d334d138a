package order

import (
	"context"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/inventory"
)

// LockPaid returns userID's order id with its row locked in tx, provided it is PAID: the
// refunds of one order are then created one at a time, so that their sum never exceeds what
// was paid whatever the concurrency. Another status is ErrIllegalState; another user's order
// is ErrNotFound.
func (s *Service) LockPaid(ctx context.Context, tx *gorm.DB, userID, id int64) (Order, error) {
	if err := s.orders.Lock(ctx, tx, id); err != nil {
		return Order{}, err
	}
	o, err := s.orders.Current(ctx, tx, id)
	switch {
	case err != nil:
		return Order{}, err
	case o.UserID != userID:
		return Order{}, ErrNotFound
	case o.Status != Paid:
		return Order{}, ErrIllegalState.Withf("order %d is %s; only %s orders can be refunded", id, o.Status, Paid)
	}
	return o, nil
}

// Refund moves order id from PAID to REFUNDED, writes order.refunded and returns its stock
// (sold − q, available + q), in tx, once its refunds have reached its amount. The status
// and the stock — the contended rows — come last, after the caller's new rows. It reports
// false, changing nothing, when the order was not PAID (already refunded, say).
func (s *Service) Refund(ctx context.Context, tx *gorm.DB, id int64) (bool, error) {
	moved, err := s.orders.Transition(ctx, tx, id, Refunded, nil)
	if err != nil || !moved {
		return false, err
	}
	o, err := s.orders.Get(ctx, tx, id)
	if err != nil {
		return false, err
	}
	if err := s.emit(ctx, tx, o, "order.refunded"); err != nil {
		return false, err
	}
	return true, s.stock.Apply(ctx, tx, inventory.Return, o.ID, lines(o))
}
