package account

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/ledger"
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
	books     *ledger.Books
}

// NewRecharges returns the recharge service on db; credits go through credits and payments
// that cannot be applied are kept by anomalies.
func NewRecharges(db *gorm.DB, gen *ids.Generator, credits *Ledger, anomalies *anomaly.Recorder, events *outbox.Writer) *Recharges {
	return &Recharges{db: db, ids: gen, ledger: credits, anomalies: anomalies, events: events, books: ledger.New(gen)}
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
// (a number that paid an order, or another recharge, never gets here). In order:
//
//  1. a status other than SUCCESS changes nothing (Ignored);
//  2. the recharge, a plain read: one nobody issued, or a different amount, is refused and
//     stores nothing, the amount kept as an anomaly;
//  3. a recharge already paid is answered from its state (refuse): by this trade a duplicate,
//     by another a duplicate_payment kept for refund;
//  4. otherwise one batch: the new rows — the event recharge.succeeded (I17) and the trade's
//     capture into the customer's account (internal/ledger) — then the dedup record, then the contended rows: the conditional PENDING → SUCCEEDED, whose rows
//     affected decide between copies (a recharge that moved since step 2 fails it, and the
//     guard runs it all again: idempotent.ErrStale), then the credit — the balance in place
//     and the ledger row whose unique (biz_type, biz_id) is the last line should anything get
//     past the transition.
func (s *Recharges) Apply(ctx context.Context, tx *gorm.DB, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	if !r.Final() {
		return notify.Ignored, record(notify.Ignored)
	}
	id, ok := r.OwnerID()
	if !ok {
		return 0, notify.Refuse(ErrRechargeNotFound, nil)
	}
	var rc Recharge
	err := tx.WithContext(ctx).Where("id = ?", id).Take(&rc).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, notify.Refuse(ErrRechargeNotFound, nil)
	}
	if err != nil {
		return 0, err
	}
	if rc.Amount != r.Amount || rc.Status != RechargePending {
		return s.refuse(ctx, tx, rc, r, record)
	}

	now := clock.Now().Truncate(time.Microsecond)
	paid := rc
	paid.Status, paid.Channel, paid.TradeNo, paid.SucceededAt, paid.UpdatedAt = RechargeSucceeded, &r.Channel, &r.Number, &now, now
	ev, err := s.events.NewEvent(ctx, outbox.RechargeSucceeded, rechargeView(paid))
	if err != nil {
		return 0, err
	}
	b := database.Hold(tx)
	b.Insert(ctx, ev)
	b.Insert(ctx, s.books.CaptureTrade(r.Channel, r.Number, r.Amount, ledger.CustomerAccount(rc.UserID)).Values()...)
	if err := record(notify.Applied); err != nil {
		return 0, err
	}
	b.UpdateRows(ctx, fmt.Errorf("recharge %d: %w", rc.ID, idempotent.ErrStale), &Recharge{},
		map[string]any{"status": RechargeSucceeded, "channel": r.Channel, "trade_no": r.Number, "succeeded_at": now, "updated_at": now},
		"id = ? AND status IN ? AND amount = ?", rc.ID, rechargeFrom[RechargeSucceeded], r.Amount)
	if err := b.Send(ctx); database.IsDuplicateKey(err) {
		// The claim makes this unreachable; the unique (channel, trade_no) is the last line.
		return 0, notify.Refuse(ErrTradeNoTaken.Withf("channel %q trade_no %q already paid another recharge", r.Channel, r.Number), nil)
	} else if err != nil {
		return 0, err
	}
	_, err = s.ledger.Credit(ctx, tx, rc.UserID, rc.Amount, BizTypeRecharge, ids.Format(rc.ID))
	if errors.Is(err, ErrAlreadyCredited) {
		slog.ErrorContext(ctx, "recharge: the ledger's unique key caught a second credit (I2)",
			"recharge_id", r.OutNo, "channel", r.Channel, "trade_no", r.Number, "err", err)
	}
	if err != nil {
		return 0, err
	}
	return notify.Applied, nil
}

// refuse answers a report about rc that the recharge as read cannot take: another amount, or
// a recharge already paid.
func (s *Recharges) refuse(ctx context.Context, tx *gorm.DB, rc Recharge, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	kept := func(kind, detail string) anomaly.Anomaly {
		return anomaly.Anomaly{Kind: kind, RechargeID: &rc.ID, Channel: r.Channel, TradeNo: r.Number, Amount: r.Amount, Detail: detail}
	}
	switch {
	case rc.Amount != r.Amount:
		detail := fmt.Sprintf("recharge %d asked for %d cents; the channel reported %d", rc.ID, rc.Amount, r.Amount)
		a := kept(anomaly.AmountMismatch, detail)
		return 0, notify.Refuse(ErrAmountMismatch.Withf("%s", detail), &a)
	case rc.Status == RechargeSucceeded && rc.paidBy(r.Channel, r.Number):
		return notify.Duplicate, record(notify.Duplicate)
	case rc.Status == RechargeSucceeded:
		detail := fmt.Sprintf("recharge %d was already paid by %s %s; refund this payment", rc.ID, deref(rc.Channel), deref(rc.TradeNo))
		b := database.Hold(tx)
		b.InsertOrSkip(ctx, s.anomalies.Row(ctx, kept(anomaly.DuplicatePayment, detail)))
		b.InsertOrSkip(ctx, s.books.CaptureTrade(r.Channel, r.Number, r.Amount, ledger.Suspense).Values()...)
		if err := record(notify.Kept); err != nil {
			return 0, err
		}
		return notify.Kept, b.Send(ctx)
	}
	return 0, fmt.Errorf("recharge %d is %s, which no report can move", rc.ID, rc.Status)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
