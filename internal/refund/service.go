// Package refund returns money through the payment channel, with recovery points (I8: a
// refund call timed out, was retried under a new number, and the channel refunded twice).
//
// A refund is a row before it is a call. It is committed PENDING with a fresh out_refund_no
// before the channel hears of it; it becomes SUBMITTED when the channel answered (its
// refund_no stored), and SUCCEEDED or FAILED by the channel's report or by a query, through
// the inbound port (internal/notify): the same key (channel + refund_no) and the same work,
// Reports.Apply. A call whose outcome is
// unknown — a timeout, a 5xx, an instance stopped between the commit and the call — leaves
// the row PENDING, and resume-refunds calls again with the SAME out_refund_no, which the
// channel is idempotent by: the number is the row's, never the call's, so the channel refunds
// once. When an order's SUCCEEDED refunds reach its amount it moves PAID → REFUNDED and its
// stock goes back. Payments that could not be applied (anomalies paid_after_close and
// duplicate_payment) are refunded too, once each — their refund row is keyed by the anomaly
// — through the channel that took them and by its trade_no, whether they paid an order or a
// recharge.
package refund

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/channel"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Service runs the outbound half of refunds: it commits them, submits them to the channel
// that took the payment, and resumes them from their recovery points.
type Service struct {
	db        *gorm.DB
	ids       *ids.Generator
	orders    *order.Service
	clients   map[string]*channel.Client
	notifyURL string
	settle    notify.SettleFunc
	events    *outbox.Writer
	books     *ledger.Books
}

// NewService returns the refund service: clients are the configured channels by name, each
// refunding what it took; notifyURL is the refunds' notify_url (ONCEPAY_PUBLIC_URL +
// /v1/refunds/notify); settle is the inbound port's Settle, which applies a refund the
// channel answered SUCCESS exactly as its report would be; events writes refund.failed with a
// refusal.
func NewService(db *gorm.DB, gen *ids.Generator, orders *order.Service, clients map[string]*channel.Client, notifyURL string, settle notify.SettleFunc, events *outbox.Writer) *Service {
	return &Service{db: db, ids: gen, orders: orders, clients: clients, notifyURL: notifyURL, settle: settle, events: events, books: ledger.New(gen)}
}

// Create commits the first recovery point of a refund of userID's PAID order id, in tx (the
// guard's), in the order it runs:
//
//  1. the order and what its refunds take already, plain reads that lock nothing: an order
//     that is not PAID is ErrIllegalState, and an amount over what is left ErrExceedsPaid —
//     the amount defaults to what is left; a FAILED refund the channel later reported SUCCESS
//     counts as taken (refund_status_conflict: the money went back);
//  2. one batch: the refund row, PENDING with its fresh out_refund_no, and its pending
//     transfer out of the merchant's revenue (internal/ledger), then the dedup record of it
//     (record);
//  3. the contended row last: the order locked (order.Service.Lock, certified on Galera), so
//     that concurrent refunds of one order are counted one after the other, and what its
//     refunds take counted again with this one, a current read that sees every refund
//     committed while this one waited for the lock. Over the order's amount is
//     idempotent.ErrStale: the guard runs the transaction again, and step 1 answers.
//
// The channel is not called here: Submit does, after the commit, so that the number exists
// before any call can have used it (I8).
func (s *Service) Create(ctx context.Context, tx *gorm.DB, userID, id int64, amount *int64, reason string, record func(Refund) error) (Refund, error) {
	o, err := s.orders.Lookup(ctx, tx, id)
	switch {
	case err != nil:
		return Refund{}, err
	case o.UserID != userID:
		return Refund{}, order.ErrNotFound
	case o.Status != order.Paid:
		return Refund{}, order.ErrIllegalState.Withf("order %d is %s; only %s orders can be refunded", id, o.Status, order.Paid)
	}
	refunded, err := taken(tx.WithContext(ctx), o.ID)
	if err != nil {
		return Refund{}, err
	}
	left := o.Amount - refunded
	want := left
	if amount != nil {
		want = *amount
	}
	if want < 1 || want > left {
		return Refund{}, ErrExceedsPaid.Withf("order %d was paid %d and has %d refunded or in progress; %d cannot be refunded", o.ID, o.Amount, refunded, want)
	}
	r := s.newRow(o.UserID, want, reason)
	r.OrderID, r.OutTradeNo = &o.ID, ids.Format(o.ID)
	if o.Channel != nil {
		r.Channel = *o.Channel
	}
	r.TradeNo = o.TradeNo

	b := database.Hold(tx)
	b.Insert(ctx, &r)
	b.Insert(ctx, s.books.Hold(booked(r)).Values()...)
	if err := record(r); err != nil {
		return Refund{}, err
	}
	if err := b.Send(ctx); err != nil {
		return Refund{}, err
	}

	if err := s.orders.Lock(ctx, tx, id); err != nil {
		return Refund{}, err
	}
	// A current read (FOR UPDATE on MySQL): under REPEATABLE READ a plain SUM would answer
	// from this transaction's snapshot, older than the refund that committed while it waited
	// for the order's lock. A PAID order only moves on by its refunds (to REFUNDED), which
	// this sum counts.
	if refunded, err = taken(database.ForUpdate(tx.WithContext(ctx)), o.ID); err != nil {
		return Refund{}, err
	}
	if refunded > o.Amount {
		return Refund{}, fmt.Errorf("%w: order %d: %d taken by its refunds, this one included, over %d paid", idempotent.ErrStale, o.ID, refunded, o.Amount)
	}
	return r, nil
}

// taken is what the refunds of order id take from its payment: every refund of it that is not
// FAILED, and the FAILED ones the channel reported SUCCESS, read on db.
func taken(db *gorm.DB, id int64) (int64, error) {
	var n int64
	err := db.Model(&Refund{}).Select("COALESCE(SUM(amount), 0)").
		Where("order_id = ? AND anomaly_id IS NULL AND (status <> ? OR channel_status = ?)", id, Failed, "SUCCESS").Scan(&n).Error
	return n, err
}

// newRow is a PENDING refund of amount for userID, with its own out_refund_no.
func (s *Service) newRow(userID, amount int64, reason string) Refund {
	now := clock.Now()
	id := s.ids.Next()
	return Refund{ID: id, UserID: userID, OutRefundNo: "RF" + ids.Format(id), Amount: amount, Reason: reason,
		Status: Pending, CreatedAt: now, UpdatedAt: now}
}

// Get returns refund id if it belongs to userID; another user's is ErrNotFound.
func (s *Service) Get(ctx context.Context, userID, id int64) (Refund, error) {
	var r Refund
	err := s.db.WithContext(ctx).Where("id = ? AND user_id = ?", id, userID).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Refund{}, ErrNotFound
	}
	return r, err
}

// Submit calls the channel that took r's payment for r, a committed PENDING refund, with r's
// own out_refund_no — the first time, and every time resume-refunds finds it still PENDING
// (I8). It names the trade by its trade_no when the row has one (Alipay and WeChat refund by
// either number), else by out_trade_no. An answer moves it to SUBMITTED (and a SUCCESS
// answer is settled at once, through the inbound port); a final refusal moves it to FAILED;
// an indefinite outcome leaves it PENDING, with the error kept for diagnosis. It reports
// whether the refund moved.
func (s *Service) Submit(ctx context.Context, r Refund) (bool, error) {
	client, ok := s.clients[r.Channel]
	if !ok {
		return s.fail(ctx, r, fmt.Sprintf("channel %q has no API in this deployment (not in ONCEPAY_CHANNELS, or no URL of its own beside the embedded simulator): an operator must refund it at the channel", r.Channel))
	}
	req := channel.RefundRequest{OutRefundNo: r.OutRefundNo, Amount: r.Amount, NotifyURL: s.notifyURL}
	if r.TradeNo != nil {
		req.TradeNo = *r.TradeNo
	} else {
		req.OutTradeNo = r.OutTradeNo
	}
	cr, err := client.Refund(ctx, req)
	switch {
	case errors.Is(err, channel.ErrIndefinite):
		s.note(ctx, r, err)
		return false, err
	case err != nil:
		return s.fail(ctx, r, err.Error())
	}
	moved, err := transition(ctx, s.db, r.ID, Submitted, map[string]any{"refund_no": cr.RefundNo})
	if err != nil {
		return false, err
	}
	if cr.Status == channel.RefundSuccess {
		settled, err := s.settle(ctx, reportOf(r, cr.RefundNo, cr.Amount, cr.Status), "query")
		return moved || settled, err
	}
	return moved, nil
}

// reportOf is the report the channel sends about refund r: the same five fields, so that a
// query's answer and the channel's report of one refund are the same request.
func reportOf(r Refund, refundNo string, amount int64, status string) notify.Report {
	return notify.Report{Kind: notify.Refund, Channel: r.Channel, Number: refundNo, OutNo: r.OutRefundNo, Amount: amount, Status: status}
}

// fail ends a PENDING refund that the channel refused for good.
func (s *Service) fail(ctx context.Context, r Refund, why string) (bool, error) {
	slog.WarnContext(ctx, "refund refused by the channel", "refund_id", r.ID, "out_refund_no", r.OutRefundNo, "why", why)
	var moved bool
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if moved, err = transition(ctx, tx, r.ID, Failed, map[string]any{"last_error": why}); err != nil || !moved {
			return err
		}
		r.Status, r.UpdatedAt = Failed, clock.Now()
		if err := tx.WithContext(ctx).Create(s.books.End(booked(r), false).Transfer).Error; err != nil {
			return err
		}
		return announce(ctx, tx, s.events, r)
	})
	return moved, err
}

// note keeps the error of an indefinite call on a refund that stays PENDING.
func (s *Service) note(ctx context.Context, r Refund, err error) {
	res := s.db.WithContext(ctx).Model(&Refund{}).Where("id = ? AND status = ?", r.ID, Pending).
		Updates(map[string]any{"attempts": gorm.Expr("attempts + 1"), "last_error": err.Error(), "updated_at": clock.Now()})
	if res.Error != nil {
		slog.WarnContext(ctx, "refund: recording an indefinite call", "refund_id", r.ID, "err", res.Error)
	}
}

// Resume is resume-refunds: it opens the refunds that anomalies call for, then finishes every
// refund left behind — PENDING ones are called again with their own out_refund_no (a timeout,
// a 503, an instance stopped after the commit: I8), SUBMITTED ones are queried and settled. It
// returns how many refunds moved. A refund the channel still cannot answer about is left for
// the next run.
func (s *Service) Resume(ctx context.Context) (int64, error) {
	if err := s.openAnomalyRefunds(ctx); err != nil {
		return 0, err
	}
	var open []Refund
	if err := s.db.WithContext(ctx).Where("status IN ?", []Status{Pending, Submitted}).Order("id").Limit(500).Find(&open).Error; err != nil {
		return 0, err
	}
	var resumed int64
	for _, r := range open {
		moved, err := s.resume(ctx, r)
		if err != nil {
			slog.WarnContext(ctx, "resume-refunds: refund left for the next run", "refund_id", r.ID, "status", r.Status, "err", err)
		}
		if moved {
			resumed++
		}
	}
	return resumed, ctx.Err()
}

// resume moves one refund on from where it stopped.
func (s *Service) resume(ctx context.Context, r Refund) (bool, error) {
	if r.Status == Pending {
		return s.Submit(ctx, r)
	}
	client, ok := s.clients[r.Channel]
	if !ok {
		return false, fmt.Errorf("refund %d: channel %q is not configured", r.ID, r.Channel)
	}
	cr, err := client.QueryRefund(ctx, r.OutRefundNo)
	if err != nil {
		return false, err
	}
	if _, final := target(cr.Status); !final {
		return false, nil
	}
	return s.settle(ctx, reportOf(r, cr.RefundNo, cr.Amount, cr.Status), "query")
}

// openAnomalyRefunds inserts a PENDING refund for every paid_after_close or
// duplicate_payment anomaly that has none — of an order or of a recharge, of any channel —
// naming the trade by the anomaly's trade_no, so that the payment kept is the one given back
// and never the order's own. The unique anomaly_id makes it once per anomaly, however many
// instances run the job; its pending transfer out of suspense is written with it. A refund the
// channel refuses ends FAILED, and the anomaly's resolution is then needs_operator.
func (s *Service) openAnomalyRefunds(ctx context.Context) error {
	var list []anomaly.Anomaly
	err := s.db.WithContext(ctx).Model(&anomaly.Anomaly{}).
		Where("kind IN ? AND (order_id IS NOT NULL OR recharge_id IS NOT NULL)", anomaly.Refundable).
		Where("NOT EXISTS (SELECT 1 FROM refunds WHERE refunds.anomaly_id = anomalies.id)").
		Order("id").Limit(500).Find(&list).Error
	if err != nil {
		return err
	}
	for _, a := range list {
		r, err := s.anomalyRow(ctx, a)
		if err != nil {
			return err
		}
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&r)
			if res.Error != nil || res.RowsAffected == 0 {
				return res.Error
			}
			rows := s.books.Hold(booked(r))
			if err := tx.Create(rows.Transfer).Error; err != nil {
				return err
			}
			return tx.Create(rows.Postings).Error
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// anomalyRow is the PENDING refund of anomaly a: its amount, by its channel and trade_no, to
// the user who owns the order or recharge it names.
func (s *Service) anomalyRow(ctx context.Context, a anomaly.Anomaly) (Refund, error) {
	var (
		userID int64
		owner  int64
		err    error
	)
	if a.OrderID != nil {
		owner = *a.OrderID
		var o order.Order
		if o, err = s.orders.Lookup(ctx, s.db, owner); err != nil {
			return Refund{}, err
		}
		userID = o.UserID
	} else {
		owner = *a.RechargeID
		err = s.db.WithContext(ctx).Table("recharges").Select("user_id").Where("id = ?", owner).Scan(&userID).Error
		if err != nil {
			return Refund{}, err
		}
	}
	r := s.newRow(userID, a.Amount, "anomaly "+a.Kind)
	r.AnomalyID, r.OrderID, r.RechargeID = &a.ID, a.OrderID, a.RechargeID
	r.Channel, r.OutTradeNo, r.TradeNo = a.Channel, ids.Format(owner), &a.TradeNo
	return r, nil
}

// The refund: its statuses (the recovery points), its row and how the books see it.

// Status is a refund's recovery point.
type Status string

// The refund statuses (docs/contract.md).
const (
	Pending   Status = "PENDING"
	Submitted Status = "SUBMITTED"
	Succeeded Status = "SUCCEEDED"
	Failed    Status = "FAILED"
)

// transitions lists, for each status, the statuses a refund may come from: the preconditions
// of its conditional UPDATEs. A notification may overtake the answer of the call (the call
// timed out after the channel applied it), so the final statuses are reachable from PENDING.
var transitions = map[Status][]Status{
	Submitted: {Pending},
	Succeeded: {Pending, Submitted},
	Failed:    {Pending, Submitted},
}

// From returns the statuses a refund may reach to from.
func From(to Status) []Status { return transitions[to] }

// Errors of this package.
var (
	// ErrExceedsPaid is a refund that would take an order's refunds beyond what was paid.
	ErrExceedsPaid = apperr.New(http.StatusConflict, "refund_exceeds_paid", "the refunds of an order cannot exceed what was paid")
	// ErrNotFound is an unknown refund or another user's.
	ErrNotFound = apperr.ErrNotFound.Withf("no such refund")
	// ErrInvalidAmount is a requested refund amount out of range.
	ErrInvalidAmount = apperr.ErrInvalidRequest.Withf("amount must be 1..10^10 cents")
	// ErrAmountMismatch is a notification whose amount differs from the refund's.
	ErrAmountMismatch = apperr.New(http.StatusBadRequest, "amount_mismatch", "the refunded amount differs from the refund's amount")
)

// Refund is a row of refunds.
type Refund struct {
	ID int64
	// OrderID is the order refunded, or whose payment kept as an anomaly is given back.
	OrderID *int64
	// RechargeID is the recharge whose second payment (an anomaly) is given back.
	RechargeID *int64
	UserID     int64
	// AnomalyID is the anomaly (paid_after_close, duplicate_payment) this refund gives back;
	// nil for a refund a user asked for.
	AnomalyID *int64
	// Channel is the channel that took the payment, and refunds it.
	Channel    string
	OutTradeNo string
	// TradeNo is the channel's trade refunded, when known: an anomaly's refund names the
	// trade by it, so that a second trade of one order is refunded on its own.
	TradeNo     *string
	OutRefundNo string
	RefundNo    *string
	Amount      int64
	Reason      string
	Status      Status
	// ChannelStatus is what the channel said last about the refund: its report's status, or
	// the contradicting one (refund_status_conflict) that did not move Status.
	ChannelStatus *string
	Attempts      int
	LastError     *string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// target is the status a report's channel status ends a refund in, if any.
func target(status string) (Status, bool) {
	switch status {
	case "SUCCESS":
		return Succeeded, true
	case "FAILED", "CLOSED":
		return Failed, true
	}
	return "", false
}

// booked is r as the books see it: the money of a refund a customer asked for goes back out
// of the merchant's revenue, that of a payment kept as an anomaly out of suspense.
func booked(r Refund) ledger.Refund {
	return ledger.Refund{Channel: r.Channel, OutRefundNo: r.OutRefundNo, Amount: r.Amount, TradeNo: r.TradeNo, From: ledger.RefundFrom(r.AnomalyID != nil)}
}

// Reports: the inbound half of refunds, the channel's refund reports applied through
// the port (notify.Refund).

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

// View is the JSON form of a refund (docs/contract.md).
type View struct {
	RefundID    string  `json:"refund_id"`
	OrderID     string  `json:"order_id,omitempty"`
	RechargeID  string  `json:"recharge_id,omitempty"`
	Amount      int64   `json:"amount"`
	Reason      string  `json:"reason"`
	Status      Status  `json:"status"`
	OutRefundNo string  `json:"out_refund_no"`
	RefundNo    *string `json:"refund_no"`
	// ChannelStatus is what the channel said last about the refund (Refund.ChannelStatus).
	ChannelStatus *string `json:"channel_status,omitempty"`
	CreatedAt     string  `json:"created_at"`
	UpdatedAt     string  `json:"updated_at"`
}

// ViewOf renders r for the API.
func ViewOf(r Refund) View {
	v := View{
		RefundID: ids.Format(r.ID), Amount: r.Amount, Reason: r.Reason, Status: r.Status,
		OutRefundNo: r.OutRefundNo, RefundNo: r.RefundNo, ChannelStatus: r.ChannelStatus,
		CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339), UpdatedAt: r.UpdatedAt.UTC().Format(time.RFC3339),
	}
	if r.OrderID != nil {
		v.OrderID = ids.Format(*r.OrderID)
	}
	if r.RechargeID != nil {
		v.RechargeID = ids.Format(*r.RechargeID)
	}
	return v
}

// Handler serves the refund routes.
type Handler struct {
	refunds *Service
	idem    httpkey.Handler
}

// NewHandler returns the refund HTTP handler; idem makes its writes exactly-once.
func NewHandler(refunds *Service, idem httpkey.Handler) *Handler {
	return &Handler{refunds: refunds, idem: idem}
}

// Routes serves GET /{refund_id} behind user authentication (requireUser) and POST /notify,
// the inbound port's handler of refund reports, marked idempotent by the report's own number
// (idem.ReportKeyed), mounted at /v1/refunds.
func (h *Handler) Routes(requireUser func(http.Handler) http.Handler, reports http.Handler) chi.Router {
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/notify", idem.ReportKeyed(reports))
	r.With(requireUser).Get("/{refund_id}", h.get)
	return r
}

type createRequest struct {
	Amount *int64 `json:"amount"`
	Reason string `json:"reason"`
}

// Create is POST /v1/orders/{order_id}/refunds, mounted with idem.KeyRequired, which reads its
// key. Top to bottom: the key, the body decoded and validated, then the guard's transaction
// that commits the refund PENDING with its out_refund_no (the recovery point, I8) and stores
// the 201; only after that commit, still under the key's lease (After), is the channel called
// (Submit). The answer is the stored one — the refund as committed — so a replay answers the
// same bytes and calls nothing; GET /v1/refunds/{refund_id} shows where it went since.
func (h *Handler) Create(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, req, err := decodeCreate(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	userID, _ := web.UserID(r.Context())
	var created Refund
	guarded := h.idem.Request(r, key, body)
	guarded.After = func(ctx context.Context, _ idempotent.Result) {
		// Committed: now, and only now, the channel hears of it. A failure here is not the
		// client's: the row stays PENDING and resume-refunds calls again with its number.
		if _, err := h.refunds.Submit(context.WithoutCancel(ctx), created); err != nil {
			slog.WarnContext(ctx, "refund submitted later by resume-refunds", "refund_id", created.ID, "err", err)
		}
	}
	_, _ = h.idem.Run(w, r, guarded, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		id, ok := ids.Parse(chi.URLParam(r, "order_id"))
		if !ok {
			return order.ErrNotFound
		}
		rf, err := h.refunds.Create(ctx, tx, userID, id, req.Amount, req.Reason, func(rf Refund) error {
			return record(idem.JSON(http.StatusCreated, ViewOf(rf), "Location", "/v1/refunds/"+ids.Format(rf.ID)))
		})
		created = rf
		return err
	})
}

// decodeCreate reads and validates the body of POST /v1/orders/{order_id}/refunds; an empty
// body asks for the whole remaining amount.
func decodeCreate(r *http.Request) ([]byte, createRequest, error) {
	var req createRequest
	body, err := web.ReadBody(r)
	if err != nil {
		return nil, req, err
	}
	if len(body) > 0 {
		if err := web.DecodeBytes(body, &req); err != nil {
			return nil, req, err
		}
	}
	switch {
	case req.Amount != nil && (*req.Amount < 1 || *req.Amount > order.MaxAmount):
		return nil, req, ErrInvalidAmount
	case len(req.Reason) > 255 || !utf8.ValidString(req.Reason):
		return nil, req, apperr.ErrInvalidRequest.Withf("reason must be at most 255 bytes of UTF-8")
	}
	return body, req, nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "refund_id"))
	if !ok {
		web.WriteError(w, r, ErrNotFound)
		return
	}
	userID, _ := web.UserID(r.Context())
	rf, err := h.refunds.Get(r.Context(), userID, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, ViewOf(rf))
}
