package payment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// Trade statuses, oncepay's side of a channel trade.
const (
	// TradeOpening: the row is committed, the channel call is under way or its answer was
	// lost. The trade may exist at the channel: the close job and reconciliation ask (I9).
	TradeOpening = "OPENING"
	// TradeOpen: the channel answered with its trade_no and pay_url.
	TradeOpen = "OPEN"
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

// TradeView is the answer of POST /v1/orders/{order_id}/payments (CONTRACT.md).
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

// Trades opens channel trades for orders and settles what the channel reports about them
// through the notification's own path.
type Trades struct {
	db        *gorm.DB
	guard     *idempotent.Guard
	orders    *order.Service
	payments  *Service
	client    *channel.Client
	channel   string
	notifyURL string
}

// NewTrades returns the trade service: client is the channel called name, notifyURL its
// payment notify_url (ONCEPAY_PUBLIC_URL + /v1/payments/notify).
func NewTrades(db *gorm.DB, guard *idempotent.Guard, orders *order.Service, payments *Service, client *channel.Client, name, notifyURL string) *Trades {
	return &Trades{db: db, guard: guard, orders: orders, payments: payments, client: client, channel: name, notifyURL: notifyURL}
}

// Open opens (or returns) the channel trade of userID's order id, which must be
// PENDING_PAYMENT and not expired. The channel call stays outside any transaction: the trades
// row is committed OPENING first — from then on the close job asks the channel before it
// closes the order (I9) — then the channel is called with out_trade_no = the order id, which
// it is idempotent by. The answer is recorded by Record, in the guard's transaction. An
// indefinite call is ErrChannelUnavailable (I8): the retry asks again with the same number.
func (t *Trades) Open(ctx context.Context, userID, id int64) (channel.Trade, error) {
	o, err := t.orders.Get(ctx, userID, id)
	if err != nil {
		return channel.Trade{}, err
	}
	if o.Status != order.PendingPayment || !time.Now().Before(o.ExpiresAt) {
		return channel.Trade{}, order.ErrIllegalState.Withf("order %d is %s (expires %s); only an unexpired %s order can be paid",
			id, o.Status, o.ExpiresAt.UTC().Format(time.RFC3339), order.PendingPayment)
	}
	if err := t.commitOpening(ctx, o); err != nil {
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

// commitOpening commits the OPENING trades row of o, once: a second Open finds it.
func (t *Trades) commitOpening(ctx context.Context, o order.Order) error {
	now := time.Now().UTC()
	row := Trade{OrderID: o.ID, Channel: t.channel, OutTradeNo: ids.Format(o.ID), Amount: o.Amount,
		Status: TradeOpening, CreatedAt: now, UpdatedAt: now}
	return t.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error
}

// Record stores the channel's answer on the order's trades row in tx — the guard's
// transaction of POST /v1/orders/{order_id}/payments — and returns the API's view of it.
func (t *Trades) Record(ctx context.Context, tx *gorm.DB, id int64, ct channel.Trade) (TradeView, error) {
	err := tx.WithContext(ctx).Model(&Trade{}).Where("order_id = ?", id).
		Updates(map[string]any{"trade_no": ct.TradeNo, "pay_url": ct.PayURL, "status": TradeOpen, "updated_at": time.Now().UTC()}).Error
	if err != nil {
		return TradeView{}, err
	}
	return TradeView{OrderID: ids.Format(id), Channel: t.channel, TradeNo: ct.TradeNo, PayURL: ct.PayURL, Status: ct.Status}, nil
}

// HasTrade reports whether order id has a trades row: whether the channel may know it.
func (t *Trades) HasTrade(ctx context.Context, id int64) (bool, error) {
	var n int64
	err := t.db.WithContext(ctx).Model(&Trade{}).Where("order_id = ?", id).Count(&n).Error
	return n > 0, err
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
