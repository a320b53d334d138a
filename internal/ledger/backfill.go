package ledger

import (
	"context"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// RefundFrom is the account a refund's money goes back out of: suspense for the refund of a
// payment kept as an anomaly, the merchant's revenue for a refund a customer asked for.
func RefundFrom(ofAnomaly bool) string {
	if ofAnomaly {
		return Suspense
	}
	return Revenue
}

// backfillBatch bounds the rows one pass of Backfill reads from a table.
const backfillBatch = 500

// fact is a row that moved money, as Backfill reads it.
type fact struct {
	Channel       string
	Number        string
	Amount        int64
	UserID        int64
	TradeNo       *string
	OfAnomaly     bool
	Status        string
	ChannelStatus *string
	At            time.Time
	EndedAt       time.Time
}

// backfills are the facts whose transfers may be missing, each with the transfer it needs.
// They run in this order, so that a refund is held before it ends.
var backfills = []struct {
	query string
	rows  func(b *Books, f fact) Rows
}{
	{`SELECT channel, trade_no AS number, amount, created_at AS at FROM payments p
	  WHERE NOT EXISTS (SELECT 1 FROM ledger_transfers t WHERE t.kind = 'capture' AND t.channel = p.channel AND t.number = p.trade_no)`,
		func(b *Books, f fact) Rows { return b.CaptureTrade(f.Channel, f.Number, f.Amount, Revenue) }},
	{`SELECT channel, trade_no AS number, amount, user_id, succeeded_at AS at FROM recharges rc
	  WHERE rc.status = 'SUCCEEDED'
	    AND NOT EXISTS (SELECT 1 FROM ledger_transfers t WHERE t.kind = 'capture' AND t.channel = rc.channel AND t.number = rc.trade_no)`,
		func(b *Books, f fact) Rows {
			return b.CaptureTrade(f.Channel, f.Number, f.Amount, CustomerAccount(f.UserID))
		}},
	{`SELECT channel, trade_no AS number, amount, created_at AS at FROM anomalies an
	  WHERE an.kind IN ('paid_after_close', 'duplicate_payment') AND an.space = 'trade'
	    AND (an.order_id IS NOT NULL OR an.recharge_id IS NOT NULL)
	    AND NOT EXISTS (SELECT 1 FROM ledger_transfers t WHERE t.kind = 'capture' AND t.channel = an.channel AND t.number = an.trade_no)`,
		func(b *Books, f fact) Rows { return b.CaptureTrade(f.Channel, f.Number, f.Amount, Suspense) }},
	{`SELECT channel, out_refund_no AS number, amount, trade_no, anomaly_id IS NOT NULL AS of_anomaly, created_at AS at FROM refunds r
	  WHERE NOT EXISTS (SELECT 1 FROM ledger_transfers t WHERE t.kind = 'pending' AND t.channel = r.channel AND t.number = r.out_refund_no)`,
		func(b *Books, f fact) Rows { return b.Hold(f.refund()) }},
	{`SELECT channel, out_refund_no AS number, amount, trade_no, anomaly_id IS NOT NULL AS of_anomaly, status, updated_at AS at FROM refunds r
	  WHERE r.status IN ('SUCCEEDED', 'FAILED')
	    AND NOT EXISTS (SELECT 1 FROM ledger_transfers t WHERE t.kind IN ('post', 'void') AND t.channel = r.channel AND t.number = r.out_refund_no)`,
		func(b *Books, f fact) Rows { return b.End(f.refund(), f.Status == "SUCCEEDED") }},
	{`SELECT channel, out_refund_no AS number, amount, trade_no, anomaly_id IS NOT NULL AS of_anomaly, updated_at AS at FROM refunds r
	  WHERE r.status = 'FAILED' AND r.channel_status = 'SUCCESS'
	    AND NOT EXISTS (SELECT 1 FROM ledger_transfers t WHERE t.kind = 'late' AND t.channel = r.channel AND t.number = r.out_refund_no)`,
		func(b *Books, f fact) Rows { return b.LateRefund(f.refund()) }},
}

func (f fact) refund() Refund {
	return Refund{Channel: f.Channel, OutRefundNo: f.Number, Amount: f.Amount, TradeNo: f.TradeNo, From: RefundFrom(f.OfAnomaly)}
}

// Backfill posts the transfers of the money that moved before the books existed — a database
// migrated from before them holds payments, recharges, kept payments and refunds without
// their transfers, which Check names — and returns how many it posted. Each transfer is the one
// the write would have posted, dated by its row (the payment's, the recharge's success, the
// refund's last move), so that reconcile-bills finds it on its own day. A transfer that exists
// is left alone (its id is the fence, as on the write path), so Backfill may run at any time,
// on any instance, as often as wanted: the second run posts nothing.
func (b *Books) Backfill(ctx context.Context, db *gorm.DB) (int64, error) {
	db = db.WithContext(ctx)
	var posted int64
	for _, bf := range backfills {
		for {
			var facts []fact
			if err := db.Raw(bf.query+" LIMIT ?", backfillBatch).Scan(&facts).Error; err != nil {
				return posted, err
			}
			fresh := 0
			for _, f := range facts {
				rows := bf.rows(b, f)
				rows.Transfer.CreatedAt = f.At
				for i := range rows.Postings {
					rows.Postings[i].CreatedAt = f.At
				}
				inserted := false
				err := db.Transaction(func(tx *gorm.DB) error {
					res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(rows.Transfer)
					if res.Error != nil || res.RowsAffected == 0 {
						return res.Error
					}
					inserted = true
					if len(rows.Postings) == 0 {
						return nil
					}
					return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(rows.Postings).Error
				})
				if err != nil {
					return posted, err
				}
				if inserted {
					posted++
					fresh++
				}
			}
			// A pass that posted nothing new would read the same rows again.
			if len(facts) < backfillBatch || fresh == 0 {
				break
			}
		}
	}
	return posted, nil
}
