package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/refund"
)

// Mismatch is one disagreement between the channel's bill and oncepay's books.
type Mismatch struct {
	// Kind is the anomaly kind it is recorded as: reconcile_missing_payment (the channel was
	// paid, oncepay knows no such payment), reconcile_missing_recharge (the channel was paid
	// for a recharge oncepay never credited), reconcile_payment_amount, reconcile_unbilled_payment
	// (oncepay recorded a payment the bill lacks), reconcile_unbilled_recharge (oncepay credited
	// a recharge by a trade the bill lacks), reconcile_missing_refund,
	// reconcile_refund_amount, reconcile_unbilled_refund; and where the books disagree with the
	// bill, reconcile_ledger_trade, reconcile_ledger_refund, reconcile_ledger_unbilled_trade and
	// reconcile_ledger_unbilled_refund (compareBooks).
	Kind    string `json:"kind"`
	Channel string `json:"channel"`
	// TradeNo is the trade_no, or the refund_no of a refund.
	TradeNo string `json:"trade_no"`
	OrderID string `json:"order_id,omitempty"`
	// ChannelAmount and OncepayAmount are 0 where that side has nothing.
	ChannelAmount int64  `json:"channel_amount"`
	OncepayAmount int64  `json:"oncepay_amount"`
	Detail        string `json:"detail"`
	// Settled says, for reconcile_missing_payment and reconcile_missing_recharge, what
	// applying the billed trade through the report's path did: "applied" (the order is PAID
	// now, the recharge credited), "recorded" (the order had moved on: kept as an anomaly for
	// refund), or why it could not be applied yet.
	Settled string `json:"settled,omitempty"`
}

// BillReport is the answer of reconcile-bills.
type BillReport struct {
	Date       string     `json:"date"`
	Matched    int64      `json:"matched"`
	Mismatches []Mismatch `json:"mismatches"`
}

// Bills reconciles the channel's daily bill against payments and refunds (I9: the last net
// under a payment whose notifications never arrived and that no query caught).
type Bills struct {
	db        *gorm.DB
	client    *channel.Client
	channel   string
	anomalies *anomaly.Recorder
	trades    *payment.Trades
}

// NewBills returns the bill reconciliation of the channel called name; trades applies a billed
// payment that oncepay never heard of.
func NewBills(db *gorm.DB, client *channel.Client, name string, anomalies *anomaly.Recorder, trades *payment.Trades) *Bills {
	return &Bills{db: db, client: client, channel: name, anomalies: anomalies, trades: trades}
}

// Reconcile fetches the bill of day (UTC) and compares it, entry by entry, with what oncepay
// recorded: every paid trade must be a payment (or an anomaly kept for refund) of the same
// amount, every refund a SUCCEEDED refund of the same amount, and the reverse for what oncepay
// recorded that day. Each mismatch is recorded as an anomaly reconcile_<what>, once per kind,
// channel and trade or refund number, however often the day is reconciled. A paid trade that
// oncepay knows nothing of is also applied, through the notification's own path and key
// (payment.Trades.SettlePaid): its order is paid if it still waits, and otherwise the
// payment is kept as paid_after_close, which is refunded automatically — money the channel
// took is never left where only a person reading anomalies would find it.
func (b *Bills) Reconcile(ctx context.Context, day time.Time) (BillReport, error) {
	date := day.UTC().Format(time.DateOnly)
	bill, err := b.client.Bill(ctx, date)
	if err != nil {
		return BillReport{}, err
	}
	rep := BillReport{Date: date, Mismatches: []Mismatch{}}
	from, to := day.UTC().Truncate(24*time.Hour), day.UTC().Truncate(24*time.Hour).Add(24*time.Hour)
	if err := b.compareTrades(ctx, bill.Trades, from, to, &rep); err != nil {
		return BillReport{}, err
	}
	if err := b.compareRefunds(ctx, bill.Refunds, from, to, &rep); err != nil {
		return BillReport{}, err
	}
	if err := b.compareBooks(ctx, bill, from, to, &rep); err != nil {
		return BillReport{}, err
	}
	for _, m := range rep.Mismatches {
		a := anomaly.Anomaly{Kind: m.Kind, Channel: m.Channel, TradeNo: m.TradeNo, Amount: max(m.ChannelAmount, m.OncepayAmount), Detail: m.Detail}
		if strings.Contains(m.Kind, "refund") {
			a.Space = "refund" // TradeNo holds the refund_no
		}
		if id, ok := ids.Parse(m.OrderID); ok {
			a.OrderID = &id
		}
		if err := b.anomalies.RecordAlone(ctx, a); err != nil {
			return BillReport{}, err
		}
	}
	return rep, nil
}

// compareTrades compares the bill's paid trades with the payments (and anomalies) of the day.
func (b *Bills) compareTrades(ctx context.Context, billed []channel.Trade, from, to time.Time, rep *BillReport) error {
	seen := map[string]bool{}
	for _, t := range billed {
		if t.Status != channel.TradeSuccess {
			continue
		}
		seen[t.TradeNo] = true
		amount, found, err := b.knownPayment(ctx, t.TradeNo)
		switch {
		case err != nil:
			return err
		case !found:
			recharge, err := b.pendingRecharge(ctx, t.OutTradeNo)
			if err != nil {
				return err
			}
			if recharge {
				rep.add("reconcile_missing_recharge", b.channel, t.TradeNo, t.OutTradeNo, t.Amount, 0, "the channel was paid for this recharge; oncepay never credited it")
			} else {
				rep.add("reconcile_missing_payment", b.channel, t.TradeNo, t.OutTradeNo, t.Amount, 0, "the channel was paid; oncepay has no payment or anomaly for this trade")
			}
			rep.Mismatches[len(rep.Mismatches)-1].Settled = b.settle(ctx, t, recharge)
		case amount != t.Amount:
			rep.add("reconcile_payment_amount", b.channel, t.TradeNo, t.OutTradeNo, t.Amount, amount, "the amounts differ")
		default:
			rep.Matched++
		}
	}
	var ours []payment.Payment
	if err := b.db.WithContext(ctx).Where("channel = ? AND created_at >= ? AND created_at < ?", b.channel, from, to).Find(&ours).Error; err != nil {
		return err
	}
	for _, p := range ours {
		if !seen[p.TradeNo] {
			rep.add("reconcile_unbilled_payment", b.channel, p.TradeNo, ids.Format(p.OrderID), 0, p.Amount, "oncepay recorded this payment; the channel's bill of the day lacks it")
		}
	}
	// Recharges are credited by the channel's reports alone: a credit the bill lacks is money
	// oncepay gave that the channel never took.
	var credited []struct {
		ID      int64
		TradeNo string
		Amount  int64
	}
	err := b.db.WithContext(ctx).Table("recharges").Select("id, trade_no, amount").
		Where("channel = ? AND status = ? AND succeeded_at >= ? AND succeeded_at < ?", b.channel, "SUCCEEDED", from, to).Scan(&credited).Error
	if err != nil {
		return err
	}
	for _, rc := range credited {
		if !seen[rc.TradeNo] {
			rep.add("reconcile_unbilled_recharge", b.channel, rc.TradeNo, "", 0, rc.Amount,
				fmt.Sprintf("oncepay credited recharge %d by this trade; the channel's bill of the day lacks it", rc.ID))
		}
	}
	return nil
}

// pendingRecharge reports whether outTradeNo is a recharge of oncepay's still PENDING: its
// billed trade is credited as a recharge report, not applied as a payment.
func (b *Bills) pendingRecharge(ctx context.Context, outTradeNo string) (bool, error) {
	id, ok := ids.Parse(outTradeNo)
	if !ok {
		return false, nil
	}
	var n int64
	err := b.db.WithContext(ctx).Table("recharges").Where("id = ? AND status = ?", id, account.RechargePending).Count(&n).Error
	return n > 0, err
}

// settle applies the billed trade t that oncepay never heard of — as a payment, or as the
// credit of recharge — and says what it did.
func (b *Bills) settle(ctx context.Context, t channel.Trade, recharge bool) string {
	settle := b.trades.SettlePaid
	if recharge {
		settle = b.trades.SettleRecharge
	}
	applied, err := settle(ctx, t)
	switch {
	case err != nil:
		slog.WarnContext(ctx, "reconcile-bills: a billed payment could not be applied; the next run tries again", "trade_no", t.TradeNo, "err", err)
		return "not applied yet: " + err.Error()
	case applied:
		return "applied"
	}
	return "recorded"
}

// knownPayment returns the amount oncepay recorded for trade tradeNo: its payment, the
// recharge it credited, or the anomaly that keeps a payment it could not apply.
func (b *Bills) knownPayment(ctx context.Context, tradeNo string) (int64, bool, error) {
	var amounts []int64
	err := b.db.WithContext(ctx).Model(&payment.Payment{}).Where("channel = ? AND trade_no = ?", b.channel, tradeNo).Pluck("amount", &amounts).Error
	if err == nil && len(amounts) == 0 {
		err = b.db.WithContext(ctx).Table("recharges").Where("channel = ? AND trade_no = ?", b.channel, tradeNo).Pluck("amount", &amounts).Error
	}
	if err == nil && len(amounts) == 0 {
		err = b.db.WithContext(ctx).Model(&anomaly.Anomaly{}).
			Where("channel = ? AND trade_no = ? AND kind IN ?", b.channel, tradeNo, []string{anomaly.PaidAfterClose, anomaly.DuplicatePayment, anomaly.AmountMismatch}).
			Limit(1).Pluck("amount", &amounts).Error
	}
	if err != nil || len(amounts) == 0 {
		return 0, false, err
	}
	return amounts[0], true, nil
}

// compareRefunds compares the bill's refunds with the SUCCEEDED refunds of the day.
func (b *Bills) compareRefunds(ctx context.Context, billed []channel.Refund, from, to time.Time, rep *BillReport) error {
	seen := map[string]bool{}
	for _, r := range billed {
		if r.Status != channel.RefundSuccess {
			continue
		}
		seen[r.OutRefundNo] = true
		var ours []refund.Refund
		if err := b.db.WithContext(ctx).Where("out_refund_no = ?", r.OutRefundNo).Limit(1).Find(&ours).Error; err != nil {
			return err
		}
		switch {
		case len(ours) == 0 || ours[0].Status != refund.Succeeded:
			rep.add("reconcile_missing_refund", b.channel, r.RefundNo, r.OutTradeNo, r.Amount, 0, "the channel refunded; oncepay has no SUCCEEDED refund "+r.OutRefundNo)
		case ours[0].Amount != r.Amount:
			rep.add("reconcile_refund_amount", b.channel, r.RefundNo, r.OutTradeNo, r.Amount, ours[0].Amount, "the amounts differ")
		default:
			rep.Matched++
		}
	}
	var ours []refund.Refund
	err := b.db.WithContext(ctx).Where("channel = ? AND status = ? AND updated_at >= ? AND updated_at < ?", b.channel, refund.Succeeded, from, to).Find(&ours).Error
	if err != nil {
		return err
	}
	for _, r := range ours {
		if !seen[r.OutRefundNo] {
			no := r.OutRefundNo
			if r.RefundNo != nil {
				no = *r.RefundNo
			}
			orderID := ""
			if r.OrderID != nil {
				orderID = ids.Format(*r.OrderID)
			}
			rep.add("reconcile_unbilled_refund", b.channel, no, orderID, 0, r.Amount, "oncepay recorded this refund as SUCCEEDED; the channel's bill of the day lacks it")
		}
	}
	return nil
}

// compareBooks compares the bill with the books (internal/ledger), after compareTrades has
// applied what it could: the channel's account must move, day by day, exactly as its bill
// does. Each billed trade must be its trade's capture and each billed refund posted, at the
// billed amount (reconcile_ledger_trade, reconcile_ledger_refund); each transfer that moved
// the channel's account that day must be on the bill (reconcile_ledger_unbilled_trade,
// reconcile_ledger_unbilled_refund).
func (b *Bills) compareBooks(ctx context.Context, bill channel.Bill, from, to time.Time, rep *BillReport) error {
	db := b.db.WithContext(ctx)
	moving := []string{ledger.Capture, ledger.Post, ledger.Late}
	billed := map[string]bool{}
	for _, t := range bill.Trades {
		if t.Status == channel.TradeSuccess {
			billed[ledger.TradeID(b.channel, t.TradeNo)] = true
		}
	}
	for _, r := range bill.Refunds {
		if r.Status == channel.RefundSuccess {
			id := ledger.RefundID(b.channel, r.OutRefundNo)
			billed[id+":end"], billed[id+":late"] = true, true
		}
	}
	// The transfers the bill names, read a thousand ids at a time rather than one per line.
	moved := map[string]ledger.Transfer{}
	named := slices.Collect(maps.Keys(billed))
	for chunk := range slices.Chunk(named, 1000) {
		var ts []ledger.Transfer
		if err := db.Where("id IN ? AND kind IN ?", chunk, moving).Find(&ts).Error; err != nil {
			return err
		}
		for _, t := range ts {
			moved[t.ID] = t
		}
	}
	for _, t := range bill.Trades {
		if t.Status != channel.TradeSuccess {
			continue
		}
		if tr, ok := moved[ledger.TradeID(b.channel, t.TradeNo)]; !ok || tr.Amount != t.Amount {
			rep.add("reconcile_ledger_trade", b.channel, t.TradeNo, t.OutTradeNo, t.Amount, tr.Amount, "the books have no capture of this billed trade, or another amount")
		}
	}
	for _, r := range bill.Refunds {
		if r.Status != channel.RefundSuccess {
			continue
		}
		id := ledger.RefundID(b.channel, r.OutRefundNo)
		tr, ok := moved[id+":end"]
		if !ok {
			tr, ok = moved[id+":late"]
		}
		if !ok || tr.Amount != r.Amount {
			rep.add("reconcile_ledger_refund", b.channel, r.RefundNo, r.OutTradeNo, r.Amount, tr.Amount, "the books have not posted this billed refund "+r.OutRefundNo+", or another amount")
		}
	}
	var day []ledger.Transfer
	err := db.Where("channel = ? AND kind IN ? AND created_at >= ? AND created_at < ?", b.channel, moving, from, to).Find(&day).Error
	if err != nil {
		return err
	}
	for _, t := range day {
		if billed[t.ID] {
			continue
		}
		kind := "reconcile_ledger_unbilled_refund"
		if t.Kind == ledger.Capture {
			kind = "reconcile_ledger_unbilled_trade"
		}
		rep.add(kind, b.channel, t.Number, "", 0, t.Amount, "the books moved the channel's account by transfer "+t.ID+"; the channel's bill of the day lacks it")
	}
	return nil
}

func (r *BillReport) add(kind, ch, no, orderID string, channelAmount, oncepayAmount int64, detail string) {
	r.Mismatches = append(r.Mismatches, Mismatch{Kind: kind, Channel: ch, TradeNo: no, OrderID: orderID,
		ChannelAmount: channelAmount, OncepayAmount: oncepayAmount, Detail: fmt.Sprintf("%s (bill of %s)", detail, r.Date)})
}
