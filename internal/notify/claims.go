package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
)

// Claim is a row of report_claims: the owner of one channel number, set by the first report
// that applied (or was kept as an anomaly) under it, and never purged. It is the fence that
// makes one trade number pay one order or credit one recharge, never both, and one refund
// number end one refund — with every dedup record gone too (I13), since the record only
// remembers a key, and the claim what the number belongs to.
type Claim struct {
	Channel string
	// Space is "trade" (trades and recharges share the channel's trade numbers) or "refund".
	Space string
	// ChannelNo is the channel's number: a trade_no or a refund_no.
	ChannelNo string
	// OwnerKind and OwnerNo name the owner: the kind of report that claimed the number and
	// the order, recharge or refund it named (its out_trade_no or out_refund_no).
	OwnerKind Kind
	OwnerNo   string
	CreatedAt time.Time
}

// TableName is the table of Claim.
func (Claim) TableName() string { return "report_claims" }

// ErrTradeConflict is anomaly.ErrTradeConflict: a number that belongs to another owner.
var ErrTradeConflict = anomaly.ErrTradeConflict

// claim makes r's owner the owner of r's number, in tx, the guard's transaction of r: the
// first report that ends something under a number claims it (and a rollback un-claims it);
// a later one naming the same owner passes; one naming another owner is refused as a
// trade_conflict, with its anomaly.
func claim(ctx context.Context, tx *gorm.DB, r Report) error {
	c := Claim{Channel: r.Channel, Space: r.space(), ChannelNo: r.Number, OwnerKind: r.Kind, OwnerNo: r.OutNo, CreatedAt: clock.Now()}
	res := tx.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&c)
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	// A current read: under REPEATABLE READ a plain SELECT could answer from a snapshot older
	// than the claim that just refused the insert.
	owner, found, err := claimOf(ctx, database.ForUpdate(tx), r)
	switch {
	case err != nil:
		return err
	case !found:
		return errors.New("report_claims: the claim that refused the insert cannot be read")
	case owner.owns(r):
		return nil
	}
	return Refuse(ErrTradeConflict.Withf("%s", conflictDetail(r, owner)), conflictAnomaly(r, owner))
}

// claimOf returns the claim of r's number, if there is one.
func claimOf(ctx context.Context, db *gorm.DB, r Report) (Claim, bool, error) {
	var rows []Claim
	err := db.WithContext(ctx).Where("channel = ? AND space = ? AND channel_no = ?", r.Channel, r.space(), r.Number).Limit(1).Find(&rows).Error
	if err != nil || len(rows) == 0 {
		return Claim{}, false, err
	}
	return rows[0], true, nil
}

// owns reports whether c's owner is the one r names.
func (c Claim) owns(r Report) bool { return c.OwnerKind == r.Kind && c.OwnerNo == r.OutNo }

// ownerName names a claim's owner for a person: "order 123", "recharge 456", "refund RF789".
func ownerName(k Kind, outNo string) string {
	switch k {
	case Trade:
		return "order " + outNo
	case Recharge:
		return "recharge " + outNo
	}
	return "refund " + outNo
}

func conflictDetail(r Report, owner Claim) string {
	number, _ := r.fieldNames()
	return fmt.Sprintf("%s %s %s belongs to %s; this %s report names %s", r.Channel, number, r.Number,
		ownerName(owner.OwnerKind, owner.OwnerNo), r.Kind, ownerName(r.Kind, r.OutNo))
}

// conflictAnomaly is the trade_conflict anomaly of r, whose number belongs to owner: once per
// channel + number, however many copies arrive. It names the order or recharge r asked for.
func conflictAnomaly(r Report, owner Claim) *anomaly.Anomaly {
	a := &anomaly.Anomaly{Kind: anomaly.TradeConflict, Channel: r.Channel, Space: r.space(), TradeNo: r.Number, Amount: r.Amount, Detail: conflictDetail(r, owner)}
	if id, ok := r.OwnerID(); ok {
		switch r.Kind {
		case Trade:
			a.OrderID = &id
		case Recharge:
			a.RechargeID = &id
		}
	}
	return a
}
