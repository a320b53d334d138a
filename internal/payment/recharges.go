package payment

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// The window of ReconcileRecharges: a PENDING recharge is asked about once its report had
// rechargeGrace to arrive by itself, and no longer than rechargeWindow after it was asked for
// (one the user never paid stays PENDING; the daily bill is the net beyond the window).
const (
	rechargeGrace  = 10 * time.Second
	rechargeWindow = 24 * time.Hour
	rechargeBatch  = 200
)

// ReconcileRecharges asks the channel about the PENDING recharges of the window and applies a
// SUCCESS through the recharge report's own path and key (Settle, a notify.Recharge report
// of the same five fields): a recharge the channel took whose every report was lost — refused
// by an instance with a skewed clock, timed out at the gateway, given up by the channel — is
// credited once, as the payments of Reconcile are paid (I9). checked counts the recharges
// asked about, applied those it credited. A recharge the channel does not know (never paid)
// or cannot answer about now is left for the next run.
func (t *Trades) ReconcileRecharges(ctx context.Context) (checked, applied int64, err error) {
	now, err := database.Now(ctx, t.db)
	if err != nil {
		return 0, 0, err
	}
	var pending []int64
	err = t.db.WithContext(ctx).Table("recharges").
		Where("status = ? AND created_at >= ? AND created_at < ?", account.RechargePending, now.Add(-rechargeWindow), now.Add(-rechargeGrace)).
		Order("id").Limit(rechargeBatch).Pluck("id", &pending).Error
	if err != nil {
		return 0, 0, err
	}
	for _, id := range pending {
		checked++
		ct, err := t.client.QueryTrade(ctx, ids.Format(id))
		switch {
		case errors.Is(err, channel.ErrNotFound):
			continue // not paid (yet): nothing to credit
		case err != nil:
			slog.WarnContext(ctx, "reconcile-recharges: recharge left for the next run", "recharge_id", id, "err", err)
			continue
		case ct.Status != channel.TradeSuccess:
			continue
		}
		moved, err := t.SettleRecharge(ctx, ct)
		switch {
		case err != nil:
			slog.WarnContext(ctx, "reconcile-recharges: recharge left for the next run", "recharge_id", id, "err", err)
		case moved:
			applied++
		}
		if ctx.Err() != nil {
			return checked, applied, ctx.Err()
		}
	}
	return checked, applied, nil
}

// SettleRecharge credits the recharge of ct, a trade the channel says is paid — its query's
// answer, or a line of its bill — exactly as its recharge report would have (the same key,
// fingerprint and work): applied reports whether this call credited it.
func (t *Trades) SettleRecharge(ctx context.Context, ct channel.Trade) (applied bool, err error) {
	r := notify.Report{Kind: notify.Recharge, Channel: t.channel, Number: ct.TradeNo, OutNo: ct.OutTradeNo, Amount: ct.Amount, Status: notify.StatusSuccess}
	return t.settle(ctx, r, "reconcile")
}
