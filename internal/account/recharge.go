package account

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// RechargeStatus is where a recharge stands.
type RechargeStatus string

// The recharge statuses: a recharge is created PENDING and a channel's success notification
// moves it to SUCCEEDED, once.
const (
	RechargePending   RechargeStatus = "PENDING"
	RechargeSucceeded RechargeStatus = "SUCCEEDED"
)

// rechargeFrom is the transition table: for each status, the statuses a recharge may reach
// it from. Every status change is a conditional UPDATE whose precondition is read from here.
var rechargeFrom = map[RechargeStatus][]RechargeStatus{
	RechargeSucceeded: {RechargePending},
}

// MaxAmount is the largest amount, in cents, a recharge may ask for (10^10).
const MaxAmount = 10_000_000_000

// Errors of the recharge routes.
var (
	// ErrAmountMismatch answers a report whose amount differs from the recharge's. It is
	// refused and stores nothing under the report's key, so that the channel's corrected
	// report still credits; the amount is kept as an anomaly.
	ErrAmountMismatch = apperr.New(http.StatusBadRequest, "amount_mismatch", "the notified amount differs from the recharge's amount")
	// ErrRechargeNotFound is an unknown or malformed recharge id, or another user's recharge.
	ErrRechargeNotFound = apperr.ErrNotFound.Withf("no such recharge")
	// ErrInvalidAmount is an amount outside 1..10^10 cents.
	ErrInvalidAmount = apperr.ErrInvalidRequest.Withf("amount must be an integer number of cents in 1..10^10")
	// ErrTradeNoTaken is a channel trade_no that already paid another recharge: 422
	// trade_conflict, recorded as an anomaly (docs/contract.md).
	ErrTradeNoTaken = anomaly.ErrTradeConflict.Withf("this channel trade_no already paid another recharge")
)

// Recharge is a row of recharges: a top-up a user asked for and a channel will pay.
type Recharge struct {
	ID     int64
	UserID int64
	Amount int64
	Status RechargeStatus
	// Channel and TradeNo name the payment that succeeded it. They stay NULL while PENDING,
	// so that the unique index on (channel, trade_no) only binds paid recharges.
	Channel     *string
	TradeNo     *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	SucceededAt *time.Time
}

// TableName is the table of Recharge.
func (Recharge) TableName() string { return "recharges" }

// paidBy reports whether the recharge was succeeded by this channel payment.
func (rc Recharge) paidBy(channel, tradeNo string) bool {
	return rc.Channel != nil && rc.TradeNo != nil && *rc.Channel == channel && *rc.TradeNo == tradeNo
}

// Recharges creates recharges and applies the channels' notifications about them.
type Recharges struct {
	db        *gorm.DB
	ids       *ids.Generator
	ledger    *Ledger
	events    *outbox.Writer
	anomalies *anomaly.Recorder
}

// NewRecharges returns the recharge service on db; credits go through ledger and payments
// that cannot be applied are kept by anomalies.
func NewRecharges(db *gorm.DB, gen *ids.Generator, ledger *Ledger, anomalies *anomaly.Recorder, events *outbox.Writer) *Recharges {
	return &Recharges{db: db, ids: gen, ledger: ledger, anomalies: anomalies, events: events}
}

// Ledger is the ledger the recharges credit.
func (s *Recharges) Ledger() *Ledger { return s.ledger }

// Create records a PENDING recharge of amount cents for userID in tx (the guard's, so that
// a retried POST returns this same recharge).
func (s *Recharges) Create(ctx context.Context, tx *gorm.DB, userID, amount int64, record func(Recharge) error) (Recharge, error) {
	if amount < 1 || amount > MaxAmount {
		return Recharge{}, ErrInvalidAmount
	}
	// The database's clock, which reconcile-payments compares created_at with when it picks
	// the pending recharges to ask the channel about (payment.Trades.ReconcileRecharges): a
	// recharge stamped ten minutes ahead by a skewed instance was skipped for ten minutes.
	now, err := database.Now(ctx, tx)
	if err != nil {
		return Recharge{}, err
	}
	now = now.Truncate(time.Microsecond)
	rc := Recharge{ID: s.ids.Next(), UserID: userID, Amount: amount, Status: RechargePending, CreatedAt: now, UpdatedAt: now}
	b := database.Hold(tx)
	b.Insert(ctx, &rc)
	if err := record(rc); err != nil {
		return Recharge{}, err
	}
	return rc, b.Send(ctx)
}

// Get returns the user's recharge id; another user's recharge is ErrRechargeNotFound.
func (s *Recharges) Get(ctx context.Context, userID, id int64) (Recharge, error) {
	var rc Recharge
	err := s.db.WithContext(ctx).Where("id = ? AND user_id = ?", id, userID).Take(&rc).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Recharge{}, ErrRechargeNotFound
	}
	return rc, err
}

// Apply applies r, a channel's recharge report, in tx: a success moves the recharge PENDING →
// SUCCEEDED and credits the balance, exactly once however many copies arrive and however
// concurrently. This is the defense against I2, where two concurrent callbacks both read
// "pending" and the top-up was credited twice.
//
// tx is the guard's transaction, whose dedup record on channel + trade_no commits with the
// credit (I3), and in which the port has already claimed the trade number for this recharge
// (a number that paid an order, or another recharge, never gets here). A recharge nobody
// issued, or a different amount, is refused and stores nothing, the amount kept as an
// anomaly; a recharge already paid by this trade is a duplicate, by another trade a
// duplicate_payment kept for refund.
func (s *Recharges) Apply(ctx context.Context, tx *gorm.DB, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	o, err := s.apply(ctx, tx, r)
	if err != nil {
		return 0, err
	}
	return o, record(o)
}

// apply is the change of Apply, which records its outcome after it.
func (s *Recharges) apply(ctx context.Context, tx *gorm.DB, r notify.Report) (notify.Outcome, error) {
	if !r.Final() {
		return notify.Ignored, nil
	}
	id, ok := r.OwnerID()
	if !ok {
		return 0, notify.Refuse(ErrRechargeNotFound, nil)
	}
	tx = tx.WithContext(ctx)
	// 1. The state precondition (I2): PENDING → SUCCEEDED for the amount asked, in one
	//    conditional UPDATE. The database serializes copies on the row, so only one of them
	//    can match; rows affected decides, never a SELECT made before it.
	moved, err := s.markSucceeded(tx, id, r)
	if err != nil {
		return 0, err
	}
	rc, err := lockRecharge(tx, id)
	if errors.Is(err, ErrRechargeNotFound) {
		return 0, notify.Refuse(err, nil)
	}
	if err != nil {
		return 0, err
	}
	if moved {
		// 2. Credit once: the balance in place, plus the ledger row whose unique
		//    (biz_type, biz_id) is the last line should anything get past step 1.
		_, err := s.ledger.Credit(ctx, tx, rc.UserID, rc.Amount, BizTypeRecharge, ids.Format(rc.ID))
		if errors.Is(err, ErrAlreadyCredited) {
			slog.ErrorContext(ctx, "recharge: the ledger's unique key caught a second credit (I2)",
				"recharge_id", r.OutNo, "channel", r.Channel, "trade_no", r.Number, "err", err)
		}
		if err != nil {
			return 0, err
		}
		// 3. The merchant's recharge.succeeded, in the same transaction as the credit (I17).
		return notify.Applied, s.events.Announce(ctx, tx, outbox.RechargeSucceeded, rechargeView(rc))
	}
	// No row matched: the recharge is for another amount, or has moved on.
	return s.refuse(ctx, tx, rc, r)
}

// refuse explains why the conditional UPDATE matched no row, from the recharge as it stands.
func (s *Recharges) refuse(ctx context.Context, tx *gorm.DB, rc Recharge, r notify.Report) (notify.Outcome, error) {
	kept := func(kind, detail string) anomaly.Anomaly {
		return anomaly.Anomaly{Kind: kind, RechargeID: &rc.ID, Channel: r.Channel, TradeNo: r.Number, Amount: r.Amount, Detail: detail}
	}
	switch {
	case rc.Amount != r.Amount:
		detail := fmt.Sprintf("recharge %d asked for %d cents; the channel reported %d", rc.ID, rc.Amount, r.Amount)
		a := kept(anomaly.AmountMismatch, detail)
		return 0, notify.Refuse(ErrAmountMismatch.Withf("%s", detail), &a)
	case rc.Status == RechargeSucceeded && rc.paidBy(r.Channel, r.Number):
		return notify.Duplicate, nil
	case rc.Status == RechargeSucceeded:
		detail := fmt.Sprintf("recharge %d was already paid by %s %s; refund this payment", rc.ID, deref(rc.Channel), deref(rc.TradeNo))
		return notify.Kept, s.anomalies.Record(ctx, tx, kept(anomaly.DuplicatePayment, detail))
	}
	// A locking read after the UPDATE cannot see PENDING with the same amount.
	return 0, fmt.Errorf("recharge %d is %s after its conditional update matched nothing", rc.ID, rc.Status)
}

// markSucceeded is the conditional UPDATE of Notify: it reports whether this notification
// moved the recharge to SUCCEEDED.
func (s *Recharges) markSucceeded(tx *gorm.DB, id int64, n notify.Report) (bool, error) {
	now := clock.Now().Truncate(time.Microsecond)
	res := tx.Model(&Recharge{}).
		Where("id = ? AND status IN ? AND amount = ?", id, rechargeFrom[RechargeSucceeded], n.Amount).
		Updates(map[string]any{
			"status":       RechargeSucceeded,
			"channel":      n.Channel,
			"trade_no":     n.Number,
			"succeeded_at": now,
			"updated_at":   now,
		})
	if err := database.Translate(res.Error); err != nil {
		if errors.Is(err, database.ErrDuplicateKey) {
			// The claim makes this unreachable; the unique (channel, trade_no) is the last line.
			return false, notify.Refuse(ErrTradeNoTaken.Withf("channel %q trade_no %q already paid another recharge", n.Channel, n.Number), nil)
		}
		return false, err
	}
	return res.RowsAffected == 1, nil
}

// lockRecharge reads the recharge as it stands now. It is a locking read on purpose
// (database.ForUpdate): under REPEATABLE READ a plain SELECT may answer from a snapshot older
// than the copy that just won the row, and see PENDING where the UPDATE saw SUCCEEDED.
func lockRecharge(tx *gorm.DB, id int64) (Recharge, error) {
	var rc Recharge
	err := database.ForUpdate(tx).Where("id = ?", id).Take(&rc).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Recharge{}, ErrRechargeNotFound
	}
	return rc, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
