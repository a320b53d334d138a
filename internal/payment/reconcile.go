package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// reportOf is the report the channel sends for its paid trade ct: the same five fields, so
// that a query and a report of one payment are the same request (notify.Port.Settle).
func (t *Trades) reportOf(ct channel.Trade) notify.Report {
	return notify.Report{Kind: notify.Trade, Channel: t.channel, Number: ct.TradeNo, OutNo: ct.OutTradeNo, Amount: ct.Amount, Status: notify.StatusSuccess}
}

// settleIfPaid asks the channel about order id's trade and settles it when it is paid. paid
// reports whether the channel says SUCCESS; applied whether this call moved the order.
func (t *Trades) settleIfPaid(ctx context.Context, id int64) (paid, applied bool, err error) {
	ct, err := t.client.QueryTrade(ctx, ids.Format(id))
	if err != nil || ct.Status != channel.TradeSuccess {
		return false, false, err
	}
	applied, err = t.SettlePaid(ctx, ct)
	return true, applied, err
}

// SettlePaid applies ct, a trade the channel says is paid — its query's answer, or a line of
// its bill that oncepay never heard of — exactly as its report would have been: the order is
// paid if it still waits (applied = true), and otherwise the payment is kept as an anomaly
// for refund.
func (t *Trades) SettlePaid(ctx context.Context, ct channel.Trade) (applied bool, err error) {
	return t.settle(ctx, t.reportOf(ct), "reconcile")
}

// Reconcile asks the channel about every PENDING_PAYMENT order that has a trade and applies a
// SUCCESS through the notification's own path and key (Settle): a payment whose notifications
// were all lost still ends PAID (I9). checked counts the orders asked about, applied those
// that moved to PAID. A trade the channel cannot answer about now is left for the next run.
func (t *Trades) Reconcile(ctx context.Context) (checked, applied int64, err error) {
	const batch = 100
	var after int64
	for {
		pending, err := t.PendingWithTrade(ctx, after, batch)
		if err != nil {
			return checked, applied, err
		}
		for _, id := range pending {
			after = id
			checked++
			_, moved, err := t.settleIfPaid(ctx, id)
			switch {
			case errors.Is(err, channel.ErrNotFound):
				// The OPENING row of a call that never reached the channel: nothing to apply.
			case err != nil:
				slog.WarnContext(ctx, "reconcile-payments: trade left for the next run", "order_id", id, "err", err)
			case moved:
				applied++
			}
		}
		if len(pending) < batch || ctx.Err() != nil {
			return checked, applied, ctx.Err()
		}
	}
}

// BeforeClose is the close job's question to the channel for expired order id (I9: the money
// sat at the channel while the order was closed locally). An order without a trade closes as
// before. For one with a trade: a SUCCESS at the channel is applied as a payment (Settle) and
// the order is not closed; otherwise the trade is closed at the channel first, and a close
// refused with trade_paid (the buyer paid in between) is queried and applied. Only when the
// channel confirmed that the trade cannot be paid any more does it report close = true. An
// indefinite answer reports false with no error: the order stays PENDING_PAYMENT and the next
// run asks again.
func (t *Trades) BeforeClose(ctx context.Context, id int64) (closeIt bool, err error) {
	row, has, err := t.trade(ctx, t.db, id)
	if err != nil || !has {
		return err == nil, err
	}
	paid, err := t.makeUnpayable(ctx, id, row)
	if err != nil {
		return t.later(ctx, id, err)
	}
	return !paid, nil
}

// makeUnpayable makes order id's trade, described by row, one the buyer can no longer pay:
// the question the close job and a cancel both ask before an order ends (I9). It queries the
// trade and applies a SUCCESS as a payment (Settle): paid, the order must not end. Otherwise
// it closes the trade at the channel — a trade_paid answer (the buyer paid in between) is
// queried and applied — and marks the row CLOSED; a trade the channel does not know is gone
// too, unless the call opening it may still be under way (ErrTradeOpening). Any other failure
// is an error the caller answers (settleFailed): the close job asks again at its next run, a
// cancel answers 503.
func (t *Trades) makeUnpayable(ctx context.Context, id int64, row Trade) (paid bool, err error) {
	paid, _, err = t.settleIfPaid(ctx, id)
	switch {
	case errors.Is(err, channel.ErrNotFound):
		switch opening, err := t.opening(ctx, row); {
		case err != nil:
			return false, err
		case opening:
			return false, ErrTradeOpening
		}
		return false, t.markClosed(ctx, id) // the call that would have opened it is over and never reached the channel
	case err != nil:
		return paid, settleFailed(id, paid, err)
	case paid:
		return true, nil
	}
	_, err = t.client.CloseTrade(ctx, ids.Format(id))
	switch {
	case err == nil, errors.Is(err, channel.ErrNotFound):
		return false, t.markClosed(ctx, id)
	case errors.Is(err, channel.ErrTradePaid):
		if paid, _, err = t.settleIfPaid(ctx, id); err == nil && !paid {
			err = errors.New("the channel answered trade_paid, then its query did not say SUCCESS")
		}
		if err != nil {
			return paid, settleFailed(id, paid, err)
		}
		return true, nil
	default:
		return false, settleFailed(id, false, err)
	}
}

// ErrPaymentSettling answers a cancel of an order the buyer has paid at the channel, whose
// payment could not be applied just now (a copy of its notification holds the key, say).
var ErrPaymentSettling = apperr.ErrUnavailable.Withf("the buyer has paid this order at the channel and the payment is being applied; retry with the same Idempotency-Key")

// settleFailed is the error of a trade makeUnpayable could not settle: the database down as
// such; a payment that could not be applied yet ErrPaymentSettling; anything else the
// channel's ErrChannelUnavailable. The cause is kept in the message but not in the chain, so
// that an error of the payment's own key (its lease in use) is never taken for one of the
// caller's (a cancel's 409 idempotency_key_in_use).
func settleFailed(id int64, paid bool, err error) error {
	switch {
	case database.IsUnavailable(err):
		return err
	case paid:
		return fmt.Errorf("%w (order %d: %v)", ErrPaymentSettling, id, err)
	}
	return fmt.Errorf("%w (order %d: %v)", ErrChannelUnavailable, id, err)
}

// markClosed marks order id's trade CLOSED: the channel confirmed that it cannot be paid.
func (t *Trades) markClosed(ctx context.Context, id int64) error {
	return t.db.WithContext(ctx).Model(&Trade{}).Where("order_id = ?", id).
		Updates(map[string]any{"status": TradeClosed, "updated_at": clock.Now()}).Error
}

// opening reports whether a call that opens row's trade at the channel may still be under
// way: the row is OPENING and its last Open began less than the longest call ago. Until that
// call is over, "the channel knows no such trade" may not stay true. Both times are the
// database's (commitOpening stamps updated_at with it): on the instances' own clocks, one
// running ten minutes behind stamped an opening that the others took for one long over.
func (t *Trades) opening(ctx context.Context, row Trade) (bool, error) {
	if row.Status != TradeOpening {
		return false, nil
	}
	now, err := database.Now(ctx, t.db)
	if err != nil {
		return false, err
	}
	return now.Sub(row.UpdatedAt) < t.client.CallBound(), nil
}

// later logs why order id stays open until the next run of the close job.
func (t *Trades) later(ctx context.Context, id int64, err error) (bool, error) {
	slog.WarnContext(ctx, "close job: the channel did not settle the trade; the order stays open until the next run", "order_id", id, "err", err)
	return false, nil
}
