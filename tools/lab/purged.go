package lab

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// refundWhatCannotApply is the BUG of I13 (the purged fence on a money path). The payment
// report handler's only fence against a copy it has already handled is a dedup row keyed by
// channel + trade_no, inserted in the payment's own transaction (right, as in I6) and purged
// after shortRetention (as in I6). Behind the row, the payment is right as well: oncepay's
// conditional PENDING_PAYMENT → PAID (order.Service.Pay). What is wrong is what the handler
// makes of a report it cannot apply: an order that is not PENDING_PAYMENT "must have been
// closed before the buyer paid", so the money is given back at once — the full reported
// amount, at the channel, under a NEW out_refund_no, with no record of the payment it is
// about and no look at what paid the order. While the row is there, the order's own report
// sent again is caught; once it is purged, that same report for an order already refunded in
// full is taken for a payment after close and refunded a second time. Only the channel's cap
// (409 refund_exceeds: the refunds of a trade never exceed its amount) stops the money; a
// channel without one, or a partial first refund, pays out twice. The answer is success
// either way, as the channel expects, and says what the handler asked of the channel
// (refund_asked), which the channel keeps no trace of when it refuses.
//
// oncepay recognises the report of the trade that paid the order whatever the order's status
// since (payment.Service.refuse, order.Order.PaidBy: a duplicate, 200 state_rejected), and
// the claim on the trade number outlives every purge (internal/notify, report_claims).
// POST /lab/payments/notify-purged, signed like /v1/payments/notify (kind trade).
func (l *Lab) refundWhatCannotApply(w http.ResponseWriter, r *http.Request) {
	n, id, err := decodeNotification(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if n.Status != "SUCCESS" {
		web.WriteJSON(w, http.StatusOK, success)
		return
	}
	ctx := r.Context()
	paid := false
	err = l.write(ctx, func(db *gorm.DB) error {
		return db.Transaction(func(tx *gorm.DB) error {
			now := time.Now().UTC()
			err := tx.Table("idempotency_records").Create(map[string]any{
				"id": l.ids.Next(), "scope": "lab:channel:" + n.Channel, "biz_type": "lab.payment.notify-purged", "biz_key": n.TradeNo,
				"request_id": "", "fingerprint": "", "status": "COMPLETED", "created_at": now, "updated_at": now,
				"expires_at": now.Add(shortRetention),
			}).Error
			if database.IsDuplicateKey(err) {
				return errSeen // the only fence: caught, as long as the row is there
			}
			if err != nil {
				return err
			}
			moved, _, err := l.orders.Pay(ctx, tx, id, n.Channel, n.TradeNo)
			paid = moved
			return err
		})
	})
	switch {
	case errors.Is(err, errSeen):
		web.WriteJSON(w, http.StatusOK, success)
		return
	case err != nil:
		web.WriteError(w, r, err)
		return
	case paid:
		web.WriteJSON(w, http.StatusOK, map[string]string{"result": "success", "order_id": ids.Format(id)})
		return
	}
	// The BUG: the order is not PENDING_PAYMENT, so this "is" a payment after close: refund
	// what was reported, now, under a new number — without asking whether this very trade
	// paid the order, and whether it was refunded already.
	asked := l.refundAtChannel(ctx, id, n.Amount)
	web.WriteJSON(w, http.StatusOK, map[string]any{"result": "success", "order_id": ids.Format(id), "refund_asked": asked})
}

// refundAtChannel asks the channel to refund amount of order id's trade, by out_trade_no,
// under a fresh out_refund_no, and returns what it sent and what the channel answered.
func (l *Lab) refundAtChannel(ctx context.Context, id, amount int64) naiveRefundAttempt {
	a := naiveRefundAttempt{OutRefundNo: "LAB-RF-" + ids.Format(l.ids.Next()), Amount: amount}
	base, err := l.channelURL(ctx, id)
	if err != nil {
		a.Error = err.Error()
		return a
	}
	body, _ := json.Marshal(map[string]any{"out_refund_no": a.OutRefundNo, "out_trade_no": ids.Format(id), "amount": amount})
	ans, err := l.callChannel(ctx, base+"/channel/v1/refunds", body)
	a.Status, a.Code = ans.Status, ans.Code
	if err != nil {
		a.Error = err.Error()
	}
	return a
}
