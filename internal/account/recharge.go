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
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
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

// ChannelStatusSuccess is the notification status that means the channel took the money.
// Any other status is acknowledged and changes nothing (CONTRACT.md).
const ChannelStatusSuccess = "SUCCESS"

// Errors of the recharge routes.
var (
	// ErrAmountMismatch answers a notification whose amount differs from the recharge's. It
	// is a deterministic 4xx, so the idempotency layer stores it and replays it to copies.
	ErrAmountMismatch = apperr.New(http.StatusBadRequest, "amount_mismatch", "the notified amount differs from the recharge's amount")
	// ErrRechargeNotFound is an unknown or malformed recharge id, or another user's recharge.
	ErrRechargeNotFound = apperr.ErrNotFound.Withf("no such recharge")
	// ErrInvalidAmount is an amount outside 1..10^10 cents.
	ErrInvalidAmount = apperr.ErrInvalidRequest.Withf("amount must be an integer number of cents in 1..10^10")
	// ErrTradeNoTaken is a channel trade_no that already paid another recharge: 422
	// trade_conflict, recorded as an anomaly (CONTRACT.md).
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

// Notification is what a channel reports about a recharge it was asked to collect.
type Notification struct {
	Channel string `json:"channel"`
	TradeNo string `json:"trade_no"`
	// OutTradeNo is the recharge id oncepay gave the channel.
	OutTradeNo string `json:"out_trade_no"`
	Amount     int64  `json:"amount"`
	Status     string `json:"status"`
}

// Validate checks the channel's canonical form (web.CheckChannel, the rule the payment
// notifications follow too), then the other fields' presence and lengths (the columns'
// widths), so that nothing is truncated or refused by the database, and the amount, 1..10^10
// cents whatever the status, as the payments path does. The handler calls it before the key is claimed, so that a
// malformed copy stores nothing and the channel's correct copy still credits.
func (n Notification) Validate() error {
	if err := web.CheckChannel("channel", n.Channel); err != nil {
		return err
	}
	if err := web.CheckStatus("status", n.Status); err != nil {
		return err
	}
	switch {
	case n.TradeNo == "" || len(n.TradeNo) > 128:
		return apperr.ErrInvalidRequest.Withf("trade_no is required, 1..128 characters")
	case n.OutTradeNo == "":
		return apperr.ErrInvalidRequest.Withf("out_trade_no is required: the recharge_id")
	case n.Amount < 1 || n.Amount > MaxAmount:
		return ErrInvalidAmount
	}
	return nil
}

// NotifyOutcome says what a notification did.
type NotifyOutcome string

// The outcomes of Recharges.Notify.
const (
	// NotifyCredited: this notification moved the recharge to SUCCEEDED and credited it.
	NotifyCredited NotifyOutcome = "credited"
	// NotifyDuplicate: the recharge was already SUCCEEDED by this same payment.
	NotifyDuplicate NotifyOutcome = "duplicate"
	// NotifyDuplicatePayment: the recharge was already SUCCEEDED by another payment; this
	// one is recorded as a duplicate_payment anomaly for refund.
	NotifyDuplicatePayment NotifyOutcome = "duplicate_payment"
	// NotifyIgnored: the status was not SUCCESS; nothing changed.
	NotifyIgnored NotifyOutcome = "ignored"
)

// StateRejected reports whether the recharge's state precondition turned the notification
// away (the recharge had already moved on).
func (o NotifyOutcome) StateRejected() bool {
	return o == NotifyDuplicate || o == NotifyDuplicatePayment
}

// Recharges creates recharges and applies the channels' notifications about them.
type Recharges struct {
	db        *gorm.DB
	ids       *ids.Generator
	ledger    *Ledger
	anomalies *anomaly.Recorder
}

// NewRecharges returns the recharge service on db; credits go through ledger and payments
// that cannot be applied are kept by anomalies.
func NewRecharges(db *gorm.DB, gen *ids.Generator, ledger *Ledger, anomalies *anomaly.Recorder) *Recharges {
	return &Recharges{db: db, ids: gen, ledger: ledger, anomalies: anomalies}
}

// Ledger is the ledger the recharges credit.
func (s *Recharges) Ledger() *Ledger { return s.ledger }

// Create records a PENDING recharge of amount cents for userID in tx (the guard's, so that
// a retried POST returns this same recharge).
func (s *Recharges) Create(ctx context.Context, tx *gorm.DB, userID, amount int64) (Recharge, error) {
	if amount < 1 || amount > MaxAmount {
		return Recharge{}, ErrInvalidAmount
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	rc := Recharge{ID: s.ids.Next(), UserID: userID, Amount: amount, Status: RechargePending, CreatedAt: now, UpdatedAt: now}
	if err := tx.WithContext(ctx).Create(&rc).Error; err != nil {
		return Recharge{}, err
	}
	return rc, nil
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

// Notify applies a channel's notification about a recharge in tx: a success moves it
// PENDING → SUCCEEDED and credits the balance, exactly once however many copies arrive and
// however concurrently. This is the defense against I2, where two concurrent callbacks both
// read "pending" and the top-up was credited twice.
//
// tx is the guard's transaction, whose dedup record on channel + trade_no commits with the
// credit (I3). A rejected notification records its anomaly in tx and returns its error: an
// amount mismatch is answered 400 and committed with its anomaly (see Answer).
func (s *Recharges) Notify(ctx context.Context, tx *gorm.DB, n Notification) (NotifyOutcome, error) {
	if n.Status != ChannelStatusSuccess {
		return NotifyIgnored, nil
	}
	id, ok := ids.Parse(n.OutTradeNo)
	if !ok {
		return "", ErrRechargeNotFound
	}
	tx = tx.WithContext(ctx)
	// 1. The state precondition (I2): PENDING → SUCCEEDED for the amount asked, in one
	//    conditional UPDATE. The database serializes copies on the row, so only one of them
	//    can match; rows affected decides, never a SELECT made before it.
	moved, err := s.markSucceeded(tx, id, n)
	if errors.Is(err, ErrTradeNoTaken) {
		// The trade already paid another recharge (a copy that outlived its dedup record,
		// I6): refused with its trade_conflict anomaly, committed with the answer.
		return "", s.refuseConflict(ctx, tx, n, err)
	}
	if err != nil {
		return "", err
	}
	rc, err := lockRecharge(tx, id)
	if err != nil {
		return "", err
	}
	if moved {
		// 2. Credit once: the balance in place, plus the ledger row whose unique
		//    (biz_type, biz_id) is the last line should anything get past step 1.
		_, err := s.ledger.Credit(ctx, tx, rc.UserID, rc.Amount, BizTypeRecharge, ids.Format(rc.ID))
		if errors.Is(err, ErrAlreadyCredited) {
			slog.ErrorContext(ctx, "recharge: the ledger's unique key caught a second credit (I2)",
				"recharge_id", n.OutTradeNo, "channel", n.Channel, "trade_no", n.TradeNo, "err", err)
		}
		return NotifyCredited, err
	}
	// 3. No row matched: the recharge is for another amount, or has moved on. The anomaly
	//    commits with the answer.
	outcome, found, err := rejection(rc, n)
	if found != nil {
		if rerr := s.anomalies.Record(ctx, tx, *found); rerr != nil {
			return "", rerr
		}
	}
	return outcome, err
}

// TradeConflict reports whether n, a notification the guard refused because its key
// (channel + trade_no) was stored with another body, names another recharge than the one
// the trade already belongs to — the recharge it paid, or the one named by an anomaly
// recorded when it could not pay. It then records the anomaly trade_conflict in its own
// small transaction (once per channel + trade_no) and the caller answers 422
// trade_conflict; a copy for the same recharge with another body is an ordinary key reuse.
func (s *Recharges) TradeConflict(ctx context.Context, n Notification) (bool, error) {
	owner, found, err := tradeOwner(s.db.WithContext(ctx), n)
	if err != nil || !found {
		return false, err
	}
	if id, ok := ids.Parse(n.OutTradeNo); ok && id == owner {
		return false, nil
	}
	return true, s.anomalies.RecordAlone(ctx, conflictAnomaly(n, owner))
}

// refuseConflict records the trade_conflict anomaly of n in tx and returns cause, the
// refusal to answer with.
func (s *Recharges) refuseConflict(ctx context.Context, tx *gorm.DB, n Notification, cause error) error {
	owner, _, err := tradeOwner(tx, n)
	if err != nil {
		return err
	}
	if err := s.anomalies.Record(ctx, tx, conflictAnomaly(n, owner)); err != nil {
		return err
	}
	return cause
}

// tradeOwner returns the recharge that n's channel + trade_no belongs to: the recharge it
// paid, or else the recharge named by an anomaly recorded for it. found is false for a trade
// seen nowhere.
func tradeOwner(db *gorm.DB, n Notification) (owner int64, found bool, err error) {
	var rechargeIDs []int64
	err = db.Model(&Recharge{}).Where("channel = ? AND trade_no = ?", n.Channel, n.TradeNo).
		Limit(1).Pluck("id", &rechargeIDs).Error
	if err == nil && len(rechargeIDs) == 0 {
		err = db.Model(&anomaly.Anomaly{}).
			Where("channel = ? AND trade_no = ? AND recharge_id IS NOT NULL AND kind IN ?", n.Channel, n.TradeNo,
				[]string{anomaly.AmountMismatch, anomaly.DuplicatePayment}).
			Order("id").Limit(1).Pluck("recharge_id", &rechargeIDs).Error
	}
	if err != nil || len(rechargeIDs) == 0 {
		return 0, false, err
	}
	return rechargeIDs[0], true, nil
}

// conflictAnomaly is the trade_conflict anomaly of n, whose trade belongs to recharge owner
// (0 when unknown). It names the recharge n asked for, when out_trade_no is a recharge id.
func conflictAnomaly(n Notification, owner int64) anomaly.Anomaly {
	a := anomaly.Anomaly{Kind: anomaly.TradeConflict, Channel: n.Channel, TradeNo: n.TradeNo, Amount: n.Amount,
		Detail: fmt.Sprintf("%s trade %s belongs to recharge %d; out_trade_no %q names another", n.Channel, n.TradeNo, owner, n.OutTradeNo)}
	if id, ok := ids.Parse(n.OutTradeNo); ok {
		a.RechargeID = &id
	}
	return a
}

// markSucceeded is the conditional UPDATE of Notify: it reports whether this notification
// moved the recharge to SUCCEEDED.
func (s *Recharges) markSucceeded(tx *gorm.DB, id int64, n Notification) (bool, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	res := tx.Model(&Recharge{}).
		Where("id = ? AND status IN ? AND amount = ?", id, rechargeFrom[RechargeSucceeded], n.Amount).
		Updates(map[string]any{
			"status":       RechargeSucceeded,
			"channel":      n.Channel,
			"trade_no":     n.TradeNo,
			"succeeded_at": now,
			"updated_at":   now,
		})
	if err := database.Translate(res.Error); err != nil {
		if errors.Is(err, database.ErrDuplicateKey) {
			return false, ErrTradeNoTaken.Withf("channel %q trade_no %q already paid another recharge", n.Channel, n.TradeNo)
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

// rejection explains why the conditional UPDATE matched no row, from the recharge as it
// stands, and names the anomaly to record, if any.
func rejection(rc Recharge, n Notification) (NotifyOutcome, *anomaly.Anomaly, error) {
	record := func(kind, detail string) *anomaly.Anomaly {
		return &anomaly.Anomaly{Kind: kind, RechargeID: &rc.ID, Channel: n.Channel, TradeNo: n.TradeNo, Amount: n.Amount, Detail: detail}
	}
	switch {
	case rc.Amount != n.Amount:
		detail := fmt.Sprintf("recharge %d asked for %d cents; the channel reported %d", rc.ID, rc.Amount, n.Amount)
		return "", record(anomaly.AmountMismatch, detail), ErrAmountMismatch.Withf("%s", detail)
	case rc.Status == RechargeSucceeded && rc.paidBy(n.Channel, n.TradeNo):
		return NotifyDuplicate, nil, nil
	case rc.Status == RechargeSucceeded:
		detail := fmt.Sprintf("recharge %d was already paid by %s %s; refund this payment", rc.ID, deref(rc.Channel), deref(rc.TradeNo))
		return NotifyDuplicatePayment, record(anomaly.DuplicatePayment, detail), nil
	default:
		// A locking read after the UPDATE cannot see PENDING with the same amount.
		return "", nil, fmt.Errorf("recharge %d is %s after its conditional update matched nothing", rc.ID, rc.Status)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
