// Package payment pays orders: it applies the channel's trade reports (notify.Trade) to
// them, and opens, asks about and closes the channel trades that orders are paid through.
//
// Every copy of a trade report — the channel's HTTP callback and its retries, a gateway's
// retry, the payment.notifications topic, oncepay's own query — reaches Service.Apply through
// the one inbound port (internal/notify), under one key, channel + trade_no (I1). The order's
// state precondition holds when the dedup record is gone (I6, I13): the report of the trade
// that paid an order is a duplicate whatever the order's status since (paid, partially or
// fully refunded), and a payment that cannot be applied is kept as an anomaly for refund (I5).
package payment

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// ErrAmountMismatch is a report whose amount differs from the order's.
var ErrAmountMismatch = apperr.New(http.StatusBadRequest, "amount_mismatch", "the paid amount differs from the order's amount")

// Payment is a row of payments.
type Payment struct {
	ID        int64
	Channel   string
	TradeNo   string
	OrderID   int64
	Amount    int64
	Status    string
	RequestID string
	CreatedAt time.Time
}

// Service applies trade reports to orders.
type Service struct {
	ids       *ids.Generator
	orders    *order.Service
	anomalies *anomaly.Recorder
	books     *ledger.Books
}

// NewService returns the payment service.
func NewService(gen *ids.Generator, orders *order.Service, anomalies *anomaly.Recorder) *Service {
	return &Service{ids: gen, orders: orders, anomalies: anomalies, books: ledger.New(gen)}
}

// Apply applies r, a trade report, in tx — the guard's transaction, whose dedup record on
// channel + trade_no commits with it (I3), and in which the port has already claimed the
// trade number for r's order (a number another owner holds never gets here). In order:
//
//  1. a status other than SUCCESS changes nothing (Ignored);
//  2. the order, a plain read: one nobody issued, or a different amount, is refused — nothing
//     is stored under the key, so the channel's correct report still applies; the amount is
//     kept as an anomaly;
//  3. an order that had moved on is answered from its state (refuse);
//  4. otherwise one batch: the new rows — the payments row, whose unique (channel, trade_no)
//     is the last line against one trade paying twice, the trade's capture into the
//     merchant's revenue (internal/ledger, whose transfer id is a fence of its own), the
//     order.paid event and the stock confirmations — then the dedup record, then the contended rows: the conditional
//     PENDING_PAYMENT → PAID and the stock. An order that moved on since step 2 fails the
//     transition, and the guard runs it all again (idempotent.ErrStale).
func (s *Service) Apply(ctx context.Context, tx *gorm.DB, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	if !r.Final() {
		return notify.Ignored, record(notify.Ignored)
	}
	id, ok := r.OwnerID()
	if !ok {
		return 0, notify.Refuse(order.ErrNotFound.Withf("no order %q", r.OutNo), nil)
	}
	o, err := s.orders.Lookup(ctx, tx, id)
	if errors.Is(err, order.ErrNotFound) {
		return 0, notify.Refuse(err, nil)
	}
	if err != nil {
		return 0, err
	}
	if o.Amount != r.Amount {
		detail := fmt.Sprintf("order %d costs %d, channel reported %d", o.ID, o.Amount, r.Amount)
		return 0, notify.Refuse(ErrAmountMismatch.Withf("%s", detail), kept(anomaly.AmountMismatch, o.ID, r, detail))
	}
	if o.Status != order.PendingPayment {
		return s.refuse(ctx, tx, o, r, record)
	}

	b := database.Hold(tx)
	b.Insert(ctx, &Payment{ID: s.ids.Next(), Channel: r.Channel, TradeNo: r.Number, OrderID: o.ID,
		Amount: r.Amount, Status: notify.StatusSuccess, RequestID: requestid.From(ctx), CreatedAt: clock.Now()})
	b.Insert(ctx, s.books.CaptureTrade(r.Channel, r.Number, r.Amount, ledger.Revenue).Values()...)
	paid, err := s.orders.PayRows(ctx, b, o, r.Channel, r.Number)
	if err != nil {
		return 0, err
	}
	if err := record(notify.Applied); err != nil {
		return 0, err
	}
	s.orders.PayUpdates(ctx, b, paid)
	if err := b.Send(ctx); database.IsDuplicateKey(err) {
		// Another trade's payment of the order committed first: its stock confirmations hold
		// the movements' unique key. Run again, and find the order paid (refuse).
		return 0, fmt.Errorf("%w: %w", idempotent.ErrStale, err)
	} else if err != nil {
		return 0, err
	}
	return notify.Applied, nil
}

// refuse answers a report for order o, which had moved on. The channel gets success either
// way, so that it stops retrying.
//
// The report of the trade that paid o is a duplicate whatever o's status since — PAID,
// partially refunded, REFUNDED — and changes nothing: a copy that outlived its dedup record
// must never be taken for a payment after close and refunded a second time (I13). Another
// trade paying a paid order is a duplicate_payment; a payment of a cancelled or closed order a
// paid_after_close: kept as anomalies — new rows, before the record: the anomaly and the
// trade's capture into suspense, which its refund takes out — each refunded once through its
// channel (I5).
func (s *Service) refuse(ctx context.Context, tx *gorm.DB, o order.Order, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	var a *anomaly.Anomaly
	switch {
	case o.PaidBy(r.Channel, r.Number):
		return notify.Duplicate, record(notify.Duplicate)
	case o.Status == order.Paid || o.Status == order.Refunded:
		a = kept(anomaly.DuplicatePayment, o.ID, r, fmt.Sprintf("order %d was already paid by another trade; refund this one", o.ID))
	default:
		a = kept(anomaly.PaidAfterClose, o.ID, r, fmt.Sprintf("order %d is %s; refund the payment", o.ID, o.Status))
	}
	b := database.Hold(tx)
	b.InsertOrSkip(ctx, s.anomalies.Row(ctx, *a))
	b.InsertOrSkip(ctx, s.books.CaptureTrade(r.Channel, r.Number, r.Amount, ledger.Suspense).Values()...)
	if err := record(notify.Kept); err != nil {
		return 0, err
	}
	return notify.Kept, b.Send(ctx)
}

// kept is the anomaly of kind that keeps r, a report about order id.
func kept(kind string, id int64, r notify.Report, detail string) *anomaly.Anomaly {
	return &anomaly.Anomaly{Kind: kind, OrderID: &id, Channel: r.Channel, TradeNo: r.Number, Amount: r.Amount, Detail: detail}
}
