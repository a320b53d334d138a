package lab

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/webhook"
)

// announceTimeout bounds each webhook the naive replica sends from inside its transaction.
const announceTimeout = 2 * time.Second

// createOrderAnnounceFirst is the BUG of I17: the order's order.created is sent to the
// merchant's webhook endpoints from inside the transaction, before it commits — "the event is
// out, then we finish". Then the stock is reserved (with its precondition), there is not enough,
// and the transaction rolls back: the order never existed, but every receiver was told of it.
// The real route writes the event in the transaction (internal/outbox) and delivers it only
// once it has committed (internal/webhook), so a rolled-back order announces nothing.
func (l *Lab) createOrderAnnounceFirst(w http.ResponseWriter, r *http.Request) {
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
			if o, err = l.openOrder(ctx, tx, userID, lines); err != nil {
				return err
			}
			l.announce(ctx, tx, outbox.OrderCreated, order.ViewOf(o)) // … out before the commit …
			for _, line := range lines {
				res := tx.Table("inventory").Where("sku = ? AND available >= ?", line.SKU, line.Quantity).Updates(map[string]any{
					"available": gorm.Expr("available - ?", line.Quantity), "reserved": gorm.Expr("reserved + ?", line.Quantity),
					"updated_at": time.Now().UTC(),
				})
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected == 0 { // … and rolled back after it.
					return inventory.ErrOutOfStock.Withf("not enough %s in stock for %d", line.SKU, line.Quantity)
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

// announce POSTs the event typ about data, signed as oncepay signs, to every endpoint that is
// not disabled and is subscribed to typ, now.
func (l *Lab) announce(ctx context.Context, tx *gorm.DB, typ string, data any) {
	ev, err := outbox.NewWriter(l.ids).Notice(ctx, l.ids.Next(), typ, data)
	if err != nil {
		slog.WarnContext(ctx, "lab announce", "err", err)
		return
	}
	var endpoints []webhook.Endpoint
	if err := tx.Where("status <> ?", webhook.Disabled).Find(&endpoints).Error; err != nil {
		slog.WarnContext(ctx, "lab announce", "err", err)
		return
	}
	client := &http.Client{Timeout: announceTimeout}
	for _, e := range endpoints {
		if !e.Subscribed(typ) {
			continue
		}
		now := time.Now().UTC()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(ev.Payload))
		if err != nil {
			continue
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(webhook.HeaderEventID, ids.Format(ev.ID))
		req.Header.Set(webhook.HeaderEventType, typ)
		req.Header.Set(webhook.HeaderAttempt, strconv.Itoa(1))
		req.Header.Set(webhook.HeaderSignature, webhook.Sign(e.Secrets(now), now, ev.Payload))
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
}
