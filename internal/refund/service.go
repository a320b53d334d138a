package refund

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
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
