package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// labKeyBizType is the biz_type of the lab's client keys: the same rules as oncepay's
// (httpkey.BizType: a key names one write of one user, and the fingerprint is the method,
// the path and the body), in a namespace of their own.
const labKeyBizType = "lab." + httpkey.BizType

// cancelChannelFirst is the BUG of I12 (a side effect before the key): a cancel closes the
// order's trade at the channel first — "so that the buyer cannot pay while we cancel" — and
// only then asks the idempotency layer whether this request may run at all. The key check
// itself is right: it is oncepay's own guard (keyed), under the real route's rules, so another
// request's key is refused 422 idempotency_key_reused (the fingerprint names the path: the
// same key on another order's cancel is another request), a copy in flight 409, a tok_ key
// that is not this user's 400. But by then the refused cancel has done its one irreversible
// thing: the trade is CLOSED at the channel while the order, which nothing cancelled, is still
// PENDING_PAYMENT — an order the buyer can never pay. oncepay's cancel makes the channel call
// in the guard's Before phase, after the key is claimed (order.Handler.cancel,
// idempotent.Request.Before): a refused request never reaches it.
// POST /lab/orders/{order_id}/cancel, as the order's user, with an Idempotency-Key.
func (l *Lab) cancelChannelFirst(w http.ResponseWriter, r *http.Request) {
	key, err := l.keyed.Key(r) // the header must be there and well formed …
	if err != nil {
		l.keyed.Reject(w, r, err)
		return
	}
	body, err := web.ReadBody(r)
	if err != nil {
		l.keyed.Reject(w, r, err)
		return
	}
	key.BizType = labKeyBizType
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	if !ok {
		web.WriteError(w, r, apperr.ErrNotFound)
		return
	}
	ctx := r.Context()
	userID, _ := web.UserID(ctx)
	o, err := l.orders.Lookup(ctx, l.db, id)
	if err == nil && o.UserID != userID {
		err = apperr.ErrNotFound
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	// The BUG: the channel first, before anything has claimed the key …
	if o.Status == order.PendingPayment {
		if err := l.closeTradeAtChannel(ctx, id); err != nil {
			web.WriteError(w, r, err)
			return
		}
	}
	// … and only then the key. The guard may refuse this request now; the trade stays closed.
	_, _ = l.keyed.Do(w, r, key, body, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		o, err := l.orders.Cancel(ctx, tx, userID, id, nil)
		if err != nil {
			return idempotent.Response{}, err
		}
		return idem.JSON(http.StatusOK, order.ViewOf(o)), nil
	}))
}

// closeTradeAtChannel closes order id's trade at the channel, if the order has one: POST
// /channel/v1/trades/{out_trade_no}/close, signed. Not part of any bug by itself — oncepay
// closes the trade before a cancel too — only where the naive cancel calls it. A trade the
// buyer paid meanwhile (409 trade_paid) is left to the cancel, which then finds nothing to
// close either way; an unanswered call is an error.
func (l *Lab) closeTradeAtChannel(ctx context.Context, id int64) error {
	var trades int64
	if err := l.db.WithContext(ctx).Table("trades").Where("order_id = ?", id).Count(&trades).Error; err != nil || trades == 0 {
		return err
	}
	base, err := l.channelURL(ctx, id)
	if err != nil {
		return err
	}
	ans, err := l.callChannel(ctx, base+"/channel/v1/trades/"+url.PathEscape(ids.Format(id))+"/close", nil)
	switch {
	case err != nil:
		return fmt.Errorf("lab: closing the trade of order %d at the channel: %w", id, err)
	case ans.Status >= 500:
		return fmt.Errorf("lab: closing the trade of order %d at the channel: answered %d %s", id, ans.Status, ans.Code)
	}
	return nil
}
