package refund

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/idemhttp"
	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// Service runs the refund use cases.
type Service struct {
	db        *gorm.DB
	ids       *ids.Generator
	guard     *idempotent.Guard
	orders    *order.Service
	client    *channel.Client
	channel   string
	notifyURL string
}

// NewService returns the refund service: client is the channel called name, notifyURL the
// refunds' notify_url (ONCEPAY_PUBLIC_URL + /v1/refunds/notify).
func NewService(db *gorm.DB, gen *ids.Generator, guard *idempotent.Guard, orders *order.Service, client *channel.Client, name, notifyURL string) *Service {
	return &Service{db: db, ids: gen, guard: guard, orders: orders, client: client, channel: name, notifyURL: notifyURL}
}

// Create commits the first recovery point of a refund of userID's PAID order id, in tx (the
// guard's): the order row is locked so that concurrent refunds of one order are counted one
// after the other, the amount defaults to what is left and may not exceed it
// (ErrExceedsPaid), and the row is inserted PENDING with its fresh out_refund_no. The channel
// is not called here: Submit does, after the commit, so that the number exists before any
// call can have used it (I8).
func (s *Service) Create(ctx context.Context, tx *gorm.DB, userID, id int64, amount *int64, reason string) (Refund, error) {
	o, err := s.orders.LockPaid(ctx, tx, userID, id)
	if err != nil {
		return Refund{}, err
	}
	var refunded int64
	// A current read (FOR UPDATE on MySQL): under REPEATABLE READ a plain SUM would answer
	// from this transaction's snapshot, older than the refund that committed while it waited
	// for the order's lock.
	err = database.ForUpdate(tx.WithContext(ctx)).Model(&Refund{}).Select("COALESCE(SUM(amount), 0)").
		Where("order_id = ? AND anomaly_id IS NULL AND status <> ?", o.ID, Failed).Scan(&refunded).Error
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
	r := s.newRow(o, want, reason, nil)
	return r, tx.WithContext(ctx).Create(&r).Error
}

// newRow is a PENDING refund of amount against o's trade, with its own out_refund_no.
func (s *Service) newRow(o order.Order, amount int64, reason string, anomalyID *int64) Refund {
	now := time.Now().UTC()
	id := s.ids.Next()
	ch := s.channel
	if o.Channel != nil {
		ch = *o.Channel
	}
	return Refund{
		ID: id, OrderID: o.ID, UserID: o.UserID, AnomalyID: anomalyID, Channel: ch,
		OutTradeNo: ids.Format(o.ID), OutRefundNo: "RF" + ids.Format(id), Amount: amount, Reason: reason,
		Status: Pending, CreatedAt: now, UpdatedAt: now,
	}
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

// Submit calls the channel for r, a committed PENDING refund, with r's own out_refund_no —
// the first time, and every time resume-refunds finds it still PENDING (I8). An answer moves
// it to SUBMITTED (and a SUCCESS answer is settled at once); a final refusal moves it to
// FAILED; an indefinite outcome leaves it PENDING, with the error kept for diagnosis. It
// reports whether the refund moved.
func (s *Service) Submit(ctx context.Context, r Refund) (bool, error) {
	if r.Channel != s.channel {
		return s.fail(ctx, r, fmt.Sprintf("channel %q is not the configured channel %q", r.Channel, s.channel))
	}
	cr, err := s.client.Refund(ctx, channel.RefundRequest{
		OutRefundNo: r.OutRefundNo, OutTradeNo: r.OutTradeNo, Amount: r.Amount, NotifyURL: s.notifyURL,
	})
	switch {
	case errors.Is(err, channel.ErrIndefinite):
		s.note(ctx, r, err)
		return false, err
	case err != nil:
		return s.fail(ctx, r, err.Error())
	}
	moved, err := s.transition(ctx, s.db, r.ID, Submitted, map[string]any{"refund_no": cr.RefundNo})
	if err != nil {
		return false, err
	}
	if cr.Status == channel.RefundSuccess {
		settled, err := s.Settle(ctx, Notification{Channel: s.channel, RefundNo: cr.RefundNo, OutRefundNo: cr.OutRefundNo, Amount: cr.Amount, Status: cr.Status})
		return moved || settled, err
	}
	return moved, nil
}

// fail ends a PENDING refund that the channel refused for good.
func (s *Service) fail(ctx context.Context, r Refund, why string) (bool, error) {
	slog.WarnContext(ctx, "refund refused by the channel", "refund_id", r.ID, "out_refund_no", r.OutRefundNo, "why", why)
	return s.transition(ctx, s.db, r.ID, Failed, map[string]any{"last_error": why})
}

// note keeps the error of an indefinite call on a refund that stays PENDING.
func (s *Service) note(ctx context.Context, r Refund, err error) {
	res := s.db.WithContext(ctx).Model(&Refund{}).Where("id = ? AND status = ?", r.ID, Pending).
		Updates(map[string]any{"attempts": gorm.Expr("attempts + 1"), "last_error": err.Error(), "updated_at": time.Now().UTC()})
	if res.Error != nil {
		slog.WarnContext(ctx, "refund: recording an indefinite call", "refund_id", r.ID, "err", res.Error)
	}
}

// transition moves refund id to status to from one of From(to), setting the extra columns.
// Rows affected decides.
func (s *Service) transition(ctx context.Context, db *gorm.DB, id int64, to Status, set map[string]any) (bool, error) {
	cols := map[string]any{"status": to, "updated_at": time.Now().UTC()}
	for k, v := range set {
		cols[k] = v
	}
	res := db.WithContext(ctx).Model(&Refund{}).Where("id = ? AND status IN ?", id, From(to)).Updates(cols)
	return res.RowsAffected == 1, res.Error
}

// Result says what a refund notification did.
type Result string

// The results of Apply.
const (
	Applied Result = "applied"
	Already Result = "already"
	Ignored Result = "ignored"
)

// Apply ends the refund n names, in tx (the guard's, whose dedup record on channel +
// refund_no commits with it): the conditional move to SUCCEEDED or FAILED, then — when the
// SUCCEEDED refunds of an order (not the anomalies') reach its amount — the order's move
// PAID → REFUNDED with its stock returned, the contended rows last.
func (s *Service) Apply(ctx context.Context, tx *gorm.DB, n Notification) (Result, error) {
	to, final := n.target()
	if !final {
		return Ignored, nil
	}
	var r Refund
	err := tx.WithContext(ctx).Where("out_refund_no = ? AND channel = ?", n.OutRefundNo, n.Channel).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", ErrNotFound.Withf("no refund %q at channel %s", n.OutRefundNo, n.Channel)
	}
	if err != nil {
		return "", err
	}
	if r.Amount != n.Amount {
		return "", ErrAmountMismatch.Withf("refund %d is %d, the channel reported %d", r.ID, r.Amount, n.Amount)
	}
	completes := to == Succeeded && r.AnomalyID == nil
	if completes {
		// Two partial refunds of one order that succeed at the same moment must not each
		// count only themselves and leave the order PAID (write skew, found by the chaos
		// run): the order's row is locked before the refund moves, so the two notifications
		// take turns, and completeOrder's sum is a current read that sees the other's commit.
		if err := s.lockOrder(ctx, tx, r.OrderID); err != nil {
			return "", err
		}
	}
	moved, err := s.transition(ctx, tx, r.ID, to, map[string]any{"refund_no": n.RefundNo})
	if err != nil || !moved {
		return Already, err
	}
	if !completes {
		return Applied, nil
	}
	return Applied, s.completeOrder(ctx, tx, r.OrderID)
}

// lockOrder takes the row lock of order id in tx (a no-op read on SQLite, whose write
// transactions are serialized already).
func (s *Service) lockOrder(ctx context.Context, tx *gorm.DB, id int64) error {
	var locked struct{ ID int64 }
	err := database.ForUpdate(tx.WithContext(ctx)).Model(&order.Order{}).Select("id").Where("id = ?", id).Take(&locked).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return order.ErrNotFound
	}
	return err
}

// completeOrder moves the order to REFUNDED once its SUCCEEDED refunds reach its amount.
func (s *Service) completeOrder(ctx context.Context, tx *gorm.DB, orderID int64) error {
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

// successBody is the answer the channel expects, for first deliveries and duplicates alike.
var successBody = []byte(`{"result":"success"}` + "\n")

// Work is the guarded work of one refund notification, the same for the HTTP notification and
// for a query's answer (Settle).
func (s *Service) Work(n Notification) idempotent.Work {
	return func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		if _, err := s.Apply(ctx, tx, n); err != nil {
			return idempotent.Response{}, err
		}
		return idempotent.Response{Status: http.StatusOK, Header: map[string]string{"Content-Type": "application/json"}, Body: successBody}, nil
	}
}

// Settle applies what a query or a call's answer said about a refund exactly as the channel's
// notification would: same key, same fingerprint, same work, so whichever comes first applies
// it and the others replay. It reports whether this call moved the refund.
func (s *Service) Settle(ctx context.Context, n Notification) (bool, error) {
	body, err := json.Marshal(n)
	if err != nil {
		return false, err
	}
	req := idempotent.Request{
		Key: n.Key(), Fingerprint: idempotent.Fingerprint(http.MethodPost, Route, body),
		Via: "query", Reject: idemhttp.StoredProblemAt(Route),
	}
	res, err := s.guard.Do(ctx, req, s.Work(n))
	if err != nil {
		return false, fmt.Errorf("settle refund %s: %w", n.OutRefundNo, err)
	}
	return res.Outcome == idempotent.Executed && res.Response.Status == http.StatusOK, nil
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
	cr, err := s.client.QueryRefund(ctx, r.OutRefundNo)
	if err != nil {
		return false, err
	}
	if _, final := (Notification{Status: cr.Status}).target(); !final {
		return false, nil
	}
	return s.Settle(ctx, Notification{Channel: r.Channel, RefundNo: cr.RefundNo, OutRefundNo: r.OutRefundNo, Amount: cr.Amount, Status: cr.Status})
}

// refundable reports whether a duplicate payment can be refunded through the channel's
// refund API, which names the trade by out_trade_no (the order id): only when the trade the
// channel holds under it is the duplicate itself. Otherwise the refund would take back the
// order's own, legitimate payment; the anomaly stays listed for an operator to refund at the
// channel by its trade number.
func (s *Service) refundable(ctx context.Context, o order.Order, a anomaly.Anomaly) bool {
	ct, err := s.client.QueryTrade(ctx, ids.Format(o.ID))
	if err != nil || ct.TradeNo != a.TradeNo {
		slog.WarnContext(ctx, "duplicate payment not refunded automatically: the channel's trade for the order is another one",
			"order_id", o.ID, "anomaly_id", a.ID, "trade_no", a.TradeNo, "channel_trade_no", ct.TradeNo, "err", err)
		return false
	}
	return true
}

// refundedKinds are the anomalies whose money goes back to the buyer automatically.
var refundedKinds = []string{anomaly.PaidAfterClose, anomaly.DuplicatePayment}

// openAnomalyRefunds inserts a PENDING refund for every paid_after_close or
// duplicate_payment anomaly of this channel that has none. The unique anomaly_id makes it
// once per anomaly, however many instances run the job.
func (s *Service) openAnomalyRefunds(ctx context.Context) error {
	var list []anomaly.Anomaly
	err := s.db.WithContext(ctx).Model(&anomaly.Anomaly{}).
		Where("kind IN ? AND channel = ? AND order_id IS NOT NULL", refundedKinds, s.channel).
		Where("NOT EXISTS (SELECT 1 FROM refunds WHERE refunds.anomaly_id = anomalies.id)").
		Order("id").Limit(500).Find(&list).Error
	if err != nil {
		return err
	}
	for _, a := range list {
		o, err := s.orders.Lookup(ctx, s.db, *a.OrderID)
		if err != nil {
			return err
		}
		if a.Kind == anomaly.DuplicatePayment && !s.refundable(ctx, o, a) {
			continue
		}
		r := s.newRow(o, a.Amount, "anomaly "+a.Kind, &a.ID)
		r.Channel = a.Channel
		if err := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&r).Error; err != nil {
			return err
		}
	}
	return nil
}
