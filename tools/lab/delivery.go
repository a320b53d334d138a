package lab

import (
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// perPathBooking is how long the naive I1 handler spends at the accounting service between
// marking the order PAYING and marking it PAID. It is the window in which a late copy's
// PAYING can be seen from outside (the drill polls the order every 25 ms).
const perPathBooking = 400 * time.Millisecond

// perPathSeen is how long each entry path of I1 remembers a delivery id it has handled.
const perPathSeen = time.Hour

// payPerPathKey is the BUG of I1 (seed 000 §1.1): one payment reached the order service by
// three paths — the channel's HTTP callback retried after a client timeout, the gateway's
// own retry, and the message queue's redelivery — and each path deduplicated on a key of its
// own (the callback's notify id, the gateway's request id, the message id), never on the
// business fact, channel + trade_no. So each copy is "new" to the path it came by, and the
// handler behind them does its work unconditionally:
//
//  1. UPDATE orders SET status='PAYING' WHERE id=? — "mark the order as being paid", with no
//     precondition, so a copy that arrives after the order was PAID moves it backwards;
//  2. reserved → sold for every item, with no record that it already happened, so three
//     copies confirm the stock three times;
//  3. the booking at the accounting service (perPathBooking), then
//     UPDATE orders SET status='PAID', paid_at=now WHERE id=?, stamping paid_at again.
//
// Every copy answers 200, as every service did in the incident. The drill names the path
// and its delivery id in the query (?path=callback&delivery_id=…), standing for the three
// entry points; the Kafka path is modelled as its own HTTP path, because the real consumer
// only feeds oncepay.
func (l *Lab) payPerPathKey(w http.ResponseWriter, r *http.Request) {
	n, id, err := decodeNotification(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	path, delivery := r.URL.Query().Get("path"), r.URL.Query().Get("delivery_id")
	if path == "" || delivery == "" {
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("the query must name the entry path and its delivery id: ?path=…&delivery_id=…"))
		return
	}
	ctx := r.Context()
	// Each path's own dedup: right within the path, useless across paths, because the three
	// paths never share a key.
	fresh, err := l.rdb.SetNX(ctx, l.prefix+"seen:"+path+":"+delivery, "1", perPathSeen).Result()
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if !fresh {
		web.WriteJSON(w, http.StatusOK, success)
		return
	}
	o, err := l.orders.Lookup(ctx, l.db, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	err = l.write(ctx, func(db *gorm.DB) error { // PAYING, whatever the order's status was.
		return db.Table("orders").Where("id = ?", id).
			Updates(map[string]any{"status": "PAYING", "updated_at": time.Now().UTC()}).Error
	})
	if err == nil {
		err = l.confirmStockUnconditionally(ctx, o) // once per copy.
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	time.Sleep(perPathBooking)
	if err := l.markPaidUnconditionally(ctx, o, n); err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, success)
}
