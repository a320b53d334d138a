package lab

import (
	"context"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// orderForm is the body of POST /v1/orders, which the lab's order replicas take too.
type orderForm struct {
	Items []struct {
		SKU      string `json:"sku"`
		Quantity int64  `json:"quantity"`
	} `json:"items"`
}

// decodeOrderForm reads and validates an order form the way the real route does.
func decodeOrderForm(r *http.Request) ([]order.Line, error) {
	var form orderForm
	if err := web.Decode(r, &form); err != nil {
		return nil, err
	}
	lines := make([]order.Line, len(form.Items))
	for i, it := range form.Items {
		lines[i] = order.Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	return lines, order.Validate(lines)
}

// openOrder writes in tx a new PENDING_PAYMENT order of lines for userID, with its items at
// the catalog's prices, and touches no stock: the replicas whose bug is how they reserve stock
// write their order with it, then reserve their own way. It writes what GET /v1/orders/{id}
// reads — the order and its items — and nothing else the real route writes
// (order.Service.Create): no stock movement, whose unique key would refuse a second
// reservation, and no order.created, which the replica of I17 sends itself.
func (l *Lab) openOrder(ctx context.Context, tx *gorm.DB, userID int64, lines []order.Line) (order.Order, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := order.Order{
		ID: l.ids.Next(), UserID: userID, Status: order.PendingPayment, Currency: order.Currency,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(l.orderTTL),
	}
	catalog := inventory.NewStore(tx)
	for _, line := range lines {
		it, err := catalog.Get(ctx, line.SKU)
		if err != nil {
			return order.Order{}, err
		}
		o.Items = append(o.Items, order.Item{OrderID: o.ID, SKU: line.SKU, Quantity: line.Quantity, Price: it.Price})
		o.Amount += line.Quantity * it.Price
	}
	if err := tx.WithContext(ctx).Create(&o).Error; err != nil {
		return order.Order{}, err
	}
	return o, tx.WithContext(ctx).Create(&o.Items).Error
}

// createOrderEverySubmit is the BUG of I7 (seed 002, seed 000 §3.2): the order form has no
// one-time token, so the server cannot tell a second click, or a resubmitted form, from a
// new order. Every submit creates an order and reserves its stock (correctly, with the
// stock's own precondition: the bug is only the missing token). An Idempotency-Key, if one is
// sent, is ignored.
func (l *Lab) createOrderEverySubmit(w http.ResponseWriter, r *http.Request) {
	lines, err := decodeOrderForm(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	userID, _ := web.UserID(ctx)
	var o order.Order
	err = l.write(ctx, func(db *gorm.DB) error {
		return db.Transaction(func(tx *gorm.DB) (err error) {
			o, err = l.orders.Create(ctx, tx, userID, lines, nil)
			return err
		})
	})
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusCreated, order.ViewOf(o))
}

// checkThenActGap is the time between the naive flash sale's check and its act: a risk check
// or a price lookup, 50 ms. Concurrent buyers all read the stock inside it.
const checkThenActGap = 50 * time.Millisecond

// createOrderCheckThenAct is the BUG of the flash sale's oversell (seed 002 §6): it reads the
// stock (SELECT available …), decides there is enough, and then writes
// UPDATE inventory SET available = available - q, reserved = reserved + q WHERE sku = ?
// with no "AND available >= q". Concurrent buyers all pass the check on the same reading, and
// every one of them is sold a unit: more orders than stock, and available below zero. The
// real route makes the UPDATE itself the check (WHERE available >= q, rows affected decides).
func (l *Lab) createOrderCheckThenAct(w http.ResponseWriter, r *http.Request) {
	lines, err := decodeOrderForm(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	for _, line := range lines { // check …
		var it struct{ Available int64 }
		if err := l.db.WithContext(ctx).Table("inventory").Select("available").Where("sku = ?", line.SKU).Take(&it).Error; err != nil {
			web.WriteError(w, r, notFound(err))
			return
		}
		if it.Available < line.Quantity {
			web.WriteError(w, r, inventory.ErrOutOfStock.Withf("not enough %s in stock for %d", line.SKU, line.Quantity))
			return
		}
	}
	time.Sleep(checkThenActGap) // … the risk check, while the other buyers read the same stock …
	userID, _ := web.UserID(ctx)
	var o order.Order
	err = l.write(ctx, func(db *gorm.DB) error {
		return db.Transaction(func(tx *gorm.DB) (err error) {
			if o, err = l.openOrder(ctx, tx, userID, lines); err != nil { // the order's rows, no stock yet
				return err
			}
			for _, line := range lines { // … then act, with no precondition.
				err = tx.Table("inventory").Where("sku = ?", line.SKU).Updates(map[string]any{
					"available": gorm.Expr("available - ?", line.Quantity), "reserved": gorm.Expr("reserved + ?", line.Quantity),
					"updated_at": time.Now().UTC(),
				}).Error
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusCreated, order.ViewOf(o))
}
