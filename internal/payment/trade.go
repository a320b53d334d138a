package payment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// Trade statuses, oncepay's side of a channel trade.
const (
	// TradeOpening: the row is committed, the channel call is under way or its answer was
	// lost. The trade may exist at the channel: the close job and reconciliation ask (I9).
	TradeOpening = "OPENING"
	// TradeOpen: the channel answered with its trade_no and pay_url.
	TradeOpen = "OPEN"
	// TradeClosed: before its order ended — a cancel, the close job — the trade was closed at
	// the channel, or found never to have reached it (makeUnpayable); it can no longer be
	// paid, and no new trade is opened for the order.
	TradeClosed = "CLOSED"
)

// Trade is a row of trades: the channel trade of one order, out_trade_no = the order id.
type Trade struct {
	OrderID    int64
	Channel    string
	OutTradeNo string
	TradeNo    *string
	Amount     int64
	PayURL     *string
	Status     string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// TradeView is the answer of POST /v1/orders/{order_id}/payments (docs/contract.md).
type TradeView struct {
	OrderID string `json:"order_id"`
	Channel string `json:"channel"`
	TradeNo string `json:"trade_no"`
	PayURL  string `json:"pay_url"`
	Status  string `json:"status"`
}

// ErrChannelUnavailable answers a channel call whose outcome is unknown (I8): 503, nothing
// stored, so that the client's retry with the same key runs again and asks again with the
// same out_trade_no.
var ErrChannelUnavailable = apperr.ErrUnavailable.Withf("the payment channel did not answer; retry with the same Idempotency-Key")

// ErrTradeOpening answers a cancel that met an order whose trade is being opened right now:
// the channel call may still create it. 503, nothing stored: the retry with the same key
// finds the trade at the channel and closes it, or finds the call over.
var ErrTradeOpening = apperr.ErrUnavailable.Withf("a payment is being opened for this order at the channel; retry with the same Idempotency-Key")

// Trades opens channel trades for orders, closes them when an order is cancelled, and
// settles what the channel says about them through the inbound port's own path (settle).
type Trades struct {
	db        *gorm.DB
	orders    *order.Service
	client    *channel.Client
	channel   string
	notifyURL string
	settle    notify.SettleFunc
}

// NewTrades returns the trade service: client is the channel called name, notifyURL its
// payment notify_url (ONCEPAY_PUBLIC_URL + /v1/payments/notify), and settle the port's
// Settle, which applies a paid trade exactly as its report would be.
func NewTrades(db *gorm.DB, orders *order.Service, client *channel.Client, name, notifyURL string, settle notify.SettleFunc) *Trades {
	return &Trades{db: db, orders: orders, client: client, channel: name, notifyURL: notifyURL, settle: settle}
}

// trade returns order id's trades row; found is false when it has none.
func (t *Trades) trade(ctx context.Context, db *gorm.DB, id int64) (row Trade, found bool, err error) {
	var rows []Trade
	err = db.WithContext(ctx).Where("order_id = ?", id).Limit(1).Find(&rows).Error
	if err != nil || len(rows) == 0 {
		return Trade{}, false, err
	}
	return rows[0], true, nil
}

// Open opens (or returns) the channel trade of userID's order id, which must be
// PENDING_PAYMENT and not expired. The channel call stays outside any transaction: the trades
// row is committed OPENING first — from then on the close job asks the channel before it
// closes the order (I9) — then the channel is called with out_trade_no = the order id, which
// it is idempotent by. The answer is recorded by Record, in the guard's transaction. An
// indefinite call is ErrChannelUnavailable (I8): the retry asks again with the same number.
func (t *Trades) Open(ctx context.Context, userID, id int64) (channel.Trade, error) {
	o, err := t.commitOpening(ctx, userID, id)
	if err != nil {
		return channel.Trade{}, err
	}
	ct, err := t.client.CreateTrade(ctx, channel.TradeRequest{
		OutTradeNo: ids.Format(o.ID), Amount: o.Amount, Subject: fmt.Sprintf("oncepay order %d", o.ID),
		NotifyURL: t.notifyURL, ExpiresAt: o.ExpiresAt.UTC(),
	})
	switch {
	case errors.Is(err, channel.ErrIndefinite):
		return channel.Trade{}, ErrChannelUnavailable
	case err != nil:
		return channel.Trade{}, fmt.Errorf("open trade for order %d: %w", o.ID, err)
	}
	return ct, nil
}

// commitOpening commits the OPENING trades row of userID's order id, once — a second Open finds it
// and only stamps updated_at, the start of its own call — while the order can be paid. It
// runs with the order row locked (order.Service.LockPayable), the row a cancel changes: an
// order cancelled first is refused here, and a cancel that comes second sees this row
// (CheckCancel). A trade a cancel closed is not opened again.
func (t *Trades) commitOpening(ctx context.Context, userID, id int64) (order.Order, error) {
	var o order.Order
	err := t.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if o, err = t.orders.LockPayable(ctx, tx, userID, id); err != nil {
			return err
		}
		row, found, err := t.trade(ctx, tx, id)
		if err != nil {
			return err
		}
		// The database's clock, which opening compares with (reconcile.go).
		now, err := database.Now(ctx, tx)
		switch {
		case err != nil:
			return err
		case !found:
			row = Trade{OrderID: o.ID, Channel: t.channel, OutTradeNo: ids.Format(o.ID), Amount: o.Amount,
				Status: TradeOpening, CreatedAt: now, UpdatedAt: now}
			return tx.Create(&row).Error
		case row.Status == TradeClosed:
			return order.ErrIllegalState.Withf("order %d: its channel trade was closed by a cancel; only the cancel can finish", id)
		default:
			return tx.Model(&Trade{}).Where("order_id = ?", id).Update("updated_at", now).Error
		}
	})
	return o, err
}

// Record stores the channel's answer on the order's trades row in tx — the guard's
// transaction of POST /v1/orders/{order_id}/payments — in one batch: the dedup record of the
// API's view of the trade, written by record, then the trades row, the contended one. A trade
// a cancel closed meanwhile stays closed: the answer is then 409 illegal_state, and the batch
// rolls back with it.
func (t *Trades) Record(ctx context.Context, tx *gorm.DB, id int64, ct channel.Trade, record func(TradeView) error) error {
	b := database.Hold(tx)
	view := TradeView{OrderID: ids.Format(id), Channel: t.channel, TradeNo: ct.TradeNo, PayURL: ct.PayURL, Status: ct.Status}
	if err := record(view); err != nil {
		return err
	}
	b.Update(ctx, order.ErrIllegalState.Withf("order %d: its channel trade was closed by a cancel", id),
		"UPDATE trades SET trade_no = ?, pay_url = ?, status = ?, updated_at = ? WHERE order_id = ? AND status <> ?",
		ct.TradeNo, ct.PayURL, TradeOpen, clock.Now(), id, TradeClosed)
	return b.Send(ctx)
}

// PendingWithTrade returns up to limit ids, after the id after, of PENDING_PAYMENT orders that
// have a trade, in id order.
func (t *Trades) PendingWithTrade(ctx context.Context, after int64, limit int) ([]int64, error) {
	var out []int64
	err := t.db.WithContext(ctx).Table("trades").Joins("JOIN orders ON orders.id = trades.order_id").
		Where("orders.status = ? AND trades.order_id > ?", order.PendingPayment, after).
		Order("trades.order_id").Limit(limit).Pluck("trades.order_id", &out).Error
	return out, err
}

// BeforeCancel makes sure that userID's order id, about to be cancelled, can no longer be paid
// at the channel. It runs before the cancel's transaction, because it calls the channel, and
// asks what the close job asks (makeUnpayable, I9): a trade the buyer already paid is applied
// as a payment (Settle) — the cancel then finds the order PAID and answers 409 illegal_state
// — and any other trade is closed at the channel and marked CLOSED. Without this, a buyer
// could pay a cancelled order, and were every notification of that payment lost, nothing but
// the daily bill would find the money. An order that is not PENDING_PAYMENT, or has no trade,
// needs nothing. A trade whose opening call may still be under way is ErrTradeOpening, a payment not
// applicable yet ErrPaymentSettling and an indefinite channel ErrChannelUnavailable: 503,
// nothing stored, the retry asks again.
func (t *Trades) BeforeCancel(ctx context.Context, userID, id int64) error {
	o, err := t.orders.Get(ctx, userID, id)
	switch {
	case errors.Is(err, order.ErrNotFound):
		return nil // the cancel's transaction answers 404
	case err != nil:
		return err
	case o.Status != order.PendingPayment:
		return nil // the cancel's transaction answers 409 illegal_state
	}
	row, found, err := t.trade(ctx, t.db, id)
	if err != nil || !found || row.Status == TradeClosed {
		return err
	}
	_, err = t.makeUnpayable(ctx, id, row)
	return err
}

// CheckCancel runs in the cancel's transaction, after the order row was locked and moved to
// CANCELLED: it refuses the cancel (ErrTradeOpening, rolled back, nothing stored) when order
// id has a trade that BeforeCancel did not close — one opened since. Opening a trade locks
// the same order row (commitOpening), so no trade can appear after this check either. The
// read is a locking one: under REPEATABLE READ a plain SELECT could answer from a snapshot
// older than the trade's commit.
func (t *Trades) CheckCancel(ctx context.Context, tx *gorm.DB, id int64) error {
	row, found, err := t.trade(ctx, database.ForUpdate(tx), id)
	if err == nil && found && row.Status != TradeClosed {
		return ErrTradeOpening
	}
	return err
}
