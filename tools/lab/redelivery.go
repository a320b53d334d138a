package lab

import (
	"errors"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// shortRetention is how long the naive I6 consumer meant its dedup rows to live: the
// article's one day, shorter than the longest redelivery window. The drill does not wait a
// day: it runs oncepay's purge job with older_than=0s, which removes these rows too.
const shortRetention = 24 * time.Hour

// errSeen ends the naive I6 transaction when its dedup row is already there.
var errSeen = errors.New("lab: delivery already recorded")

// payDedupThenUnconditional is the BUG of I6 (seed 000 §4.4). Its dedup is right as far as
// it goes — the row is keyed by channel + trade_no and inserted in the same transaction as
// the change, so while the row exists every redelivery is caught — but two things are wrong
// together:
//
//   - the rows are purged after shortRetention, before the last redelivery can arrive, and
//   - the change behind the row is UPDATE orders SET status='PAID', paid_at=now WHERE id=?
//     with no status precondition, and reserved → sold with none either.
//
// So a redelivery that comes after the purge finds no row, and nothing else refuses it: the
// paid order is paid again (paid_at stamped anew) and its stock is confirmed a second time.
// oncepay's own consumer keeps the same purge harmless with its state precondition.
func (l *Lab) payDedupThenUnconditional(w http.ResponseWriter, r *http.Request) {
	n, id, err := decodeNotification(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	o, err := l.orders.Lookup(ctx, l.db, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	err = l.write(ctx, func(db *gorm.DB) error {
		return db.Transaction(func(tx *gorm.DB) error {
			now := time.Now().UTC()
			err := tx.Table("idempotency_records").Create(map[string]any{
				"id": l.ids.Next(), "scope": "lab:channel:" + n.Channel, "biz_type": "lab.payment.notify", "biz_key": n.TradeNo,
				"request_id": "", "fingerprint": "", "status": "COMPLETED", "created_at": now, "updated_at": now,
				"expires_at": now.Add(shortRetention),
			}).Error
			if database.IsDuplicateKey(err) {
				return errSeen // caught, as long as the row is there
			}
			if err != nil {
				return err
			}
			// No AND status = 'PENDING_PAYMENT': a redelivery pays the paid order again.
			err = tx.Table("orders").Where("id = ?", id).Updates(map[string]any{
				"status": "PAID", "channel": n.Channel, "trade_no": n.TradeNo, "paid_at": now, "updated_at": now,
			}).Error
			for _, it := range o.Items {
				if err == nil {
					err = tx.Table("inventory").Where("sku = ?", it.SKU).Updates(map[string]any{ // no AND reserved >= q
						"reserved": gorm.Expr("reserved - ?", it.Quantity), "sold": gorm.Expr("sold + ?", it.Quantity),
					}).Error
				}
			}
			return err
		})
	})
	if err != nil && !errors.Is(err, errSeen) {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"result": "success", "order_id": ids.Format(id)})
}
