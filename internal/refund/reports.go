package refund

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
)

// Reports applies the channel's refund reports (notify.Refund): the inbound half of refunds.
type Reports struct {
	orders    *order.Service
	anomalies *anomaly.Recorder
	events    *outbox.Writer
	books     *ledger.Books
}

// NewReports returns the applier of refund reports; events writes refund.succeeded and
// refund.failed in the report's transaction, books the refund's end.
func NewReports(orders *order.Service, anomalies *anomaly.Recorder, events *outbox.Writer, books *ledger.Books) *Reports {
	return &Reports{orders: orders, anomalies: anomalies, events: events, books: books}
}

// Apply ends the refund r names, in tx (the guard's, whose dedup record on channel +
// refund_no commits with it, and in which the port has claimed the refund_no for it). In
// order:
//
//  1. a status that is not final changes nothing (Ignored);
//  2. the refund, a plain read: one nobody issued, a different amount or another refund_no is
//     refused and stores nothing (the amount kept as an anomaly);
//  3. a refund that has already ended is answered from its state (ended): a duplicate when it
//     ended this way; the other way (FAILED, then SUCCESS) keeps its status — a terminal
//     status never moves silently — and the channel's word is kept on the row
//     (channel_status) and as an anomaly refund_status_conflict, for an operator;
//  4. otherwise one batch: the new rows — the event refund.succeeded or refund.failed, and
//     the refund's end in the books (internal/ledger: posted, or voided) — then the dedup
//     record, then the contended row: the refund's conditional move. A refund that
//     moved since step 2 fails it, and the guard runs it all again (idempotent.ErrStale);
//  5. when the SUCCEEDED refunds of an order (not the anomalies') reach its amount, the
//     order's move PAID → REFUNDED with its stock returned, after the record.
func (s *Reports) Apply(ctx context.Context, tx *gorm.DB, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	to, final := target(r.Status)
	if !final {
		return notify.Ignored, record(notify.Ignored)
	}
	var rf Refund
	err := tx.WithContext(ctx).Where("out_refund_no = ? AND channel = ?", r.OutNo, r.Channel).Take(&rf).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, notify.Refuse(ErrNotFound.Withf("no refund %q at channel %s", r.OutNo, r.Channel), nil)
	}
	if err != nil {
		return 0, err
	}
	if rf.Amount != r.Amount {
		detail := fmt.Sprintf("refund %d is %d, the channel reported %d", rf.ID, rf.Amount, r.Amount)
		return 0, notify.Refuse(ErrAmountMismatch.Withf("%s", detail), s.kept(anomaly.AmountMismatch, rf, r, detail))
	}
	if rf.RefundNo != nil && *rf.RefundNo != r.Number {
		// The channel answered this refund under another refund_no: one refund, one number.
		detail := fmt.Sprintf("refund %s is the channel's %s; this report names it %s", rf.OutRefundNo, *rf.RefundNo, r.Number)
		return 0, notify.Refuse(notify.ErrTradeConflict.Withf("%s", detail), s.kept(anomaly.TradeConflict, rf, r, detail))
	}
	if !slices.Contains(From(to), rf.Status) {
		return s.ended(ctx, tx, rf, to, r, record)
	}

	ended := endedAs(rf, to, r)
	ev, err := s.events.NewEvent(ctx, eventOf(ended), ViewOf(ended))
	if err != nil {
		return 0, err
	}
	b := database.Hold(tx)
	b.Insert(ctx, ev)
	b.Insert(ctx, s.books.End(booked(rf), to == Succeeded).Values()...)
	if err := record(notify.Applied); err != nil {
		return 0, err
	}
	b.UpdateRows(ctx, fmt.Errorf("refund %d: %w", rf.ID, idempotent.ErrStale), &Refund{},
		map[string]any{"status": to, "refund_no": r.Number, "channel_status": r.Status, "updated_at": ended.UpdatedAt},
		"id = ? AND status IN ?", rf.ID, From(to))
	if err := b.Send(ctx); err != nil {
		return 0, err
	}
	if to != Succeeded || rf.AnomalyID != nil || rf.OrderID == nil {
		return notify.Applied, nil
	}
	// Two partial refunds of one order that succeed at the same moment must not each count
	// only themselves and leave the order PAID (write skew, found by the chaos run, on one
	// server and again on Galera): once its refund moved, each report locks the order's row —
	// a write, which Galera certifies across the nodes — so the two take turns, and
	// completeOrder's sum is a current read that sees the other's commit.
	if err := s.lockOrder(ctx, tx, *rf.OrderID); err != nil {
		return 0, err
	}
	return notify.Applied, s.completeOrder(ctx, tx, *rf.OrderID)
}

// endedAs is rf as its move to `to` on report r left it.
func endedAs(rf Refund, to Status, r notify.Report) Refund {
	rf.Status, rf.RefundNo, rf.ChannelStatus = to, &r.Number, &r.Status
	rf.UpdatedAt = clock.Now()
	return rf
}

// eventOf is the type of the event of rf's end: refund.succeeded or refund.failed.
func eventOf(rf Refund) string {
	if rf.Status == Succeeded {
		return outbox.RefundSucceeded
	}
	return outbox.RefundFailed
}

// announce writes the event of rf's end, the refund as it ended, in tx: the transaction of
// the move (I17).
func announce(ctx context.Context, tx *gorm.DB, events *outbox.Writer, rf Refund) error {
	return events.Announce(ctx, tx, eventOf(rf), ViewOf(rf))
}

// ended answers a report about refund rf, which had already ended (a terminal status, read
// plainly, does not move): a duplicate when it ended the way r says; the other way, a
// refund_status_conflict — the anomaly, a new row, then the dedup record, then the channel's
// word kept on the refund's row. When the refund had been voided and the channel now says its
// money left after all, the books move it out of suspense (ledger.Books.LateRefund), so that
// the channel's account still equals its bill.
func (s *Reports) ended(ctx context.Context, tx *gorm.DB, rf Refund, to Status, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	if rf.Status == to {
		return notify.Duplicate, record(notify.Duplicate)
	}
	detail := fmt.Sprintf("refund %d is %s; the channel now reports %s (%s %s): check the money at the channel", rf.ID, rf.Status, r.Status, r.Channel, r.Number)
	b := database.Hold(tx)
	b.InsertOrSkip(ctx, s.anomalies.Row(ctx, *s.kept(anomaly.RefundStatusConflict, rf, r, detail)))
	if to == Succeeded {
		b.InsertOrSkip(ctx, s.books.LateRefund(booked(rf)).Values()...)
	}
	if err := record(notify.Kept); err != nil {
		return 0, err
	}
	b.Exec(ctx, "UPDATE refunds SET channel_status = ?, updated_at = ? WHERE id = ? AND (channel_status IS NULL OR channel_status <> ?)",
		r.Status, clock.Now(), rf.ID, r.Status)
	return notify.Kept, b.Send(ctx)
}

// kept is the anomaly of kind that keeps r, a report about refund rf.
func (s *Reports) kept(kind string, rf Refund, r notify.Report, detail string) *anomaly.Anomaly {
	return &anomaly.Anomaly{Kind: kind, OrderID: rf.OrderID, RechargeID: rf.RechargeID, Channel: r.Channel, Space: "refund", TradeNo: r.Number, Amount: r.Amount, Detail: detail}
}

// lockOrder takes the row lock of order id in tx — a write, so that two reports on two nodes
// of a Galera cluster conflict too (order.Store.Lock).
func (s *Reports) lockOrder(ctx context.Context, tx *gorm.DB, id int64) error {
	return s.orders.Lock(ctx, tx, id)
}

// completeOrder moves the order to REFUNDED once its SUCCEEDED refunds reach its amount.
func (s *Reports) completeOrder(ctx context.Context, tx *gorm.DB, orderID int64) error {
	o, err := s.orders.Lookup(ctx, tx, orderID)
	if err != nil {
		return err
	}
	var refunded int64
	// A current read (FOR UPDATE on MySQL): under REPEATABLE READ a plain SUM would answer
	// from this transaction's snapshot, older than the refund that committed while it waited
	// for the order's lock.
	err = database.ForUpdate(tx.WithContext(ctx)).Model(&Refund{}).Select("COALESCE(SUM(amount), 0)").
		Where("order_id = ? AND anomaly_id IS NULL AND status = ?", orderID, Succeeded).Scan(&refunded).Error
	if err != nil || refunded < o.Amount {
		return err
	}
	_, err = s.orders.Refund(ctx, tx, orderID)
	return err
}

// transition moves refund id to status to from one of From(to), setting the extra columns.
// Rows affected decides.
func transition(ctx context.Context, db *gorm.DB, id int64, to Status, set map[string]any) (bool, error) {
	cols := map[string]any{"status": to, "updated_at": clock.Now()}
	for k, v := range set {
		cols[k] = v
	}
	res := db.WithContext(ctx).Model(&Refund{}).Where("id = ? AND status IN ?", id, From(to)).Updates(cols)
	return res.RowsAffected == 1, res.Error
}
