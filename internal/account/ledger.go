package account

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// BizTypeRecharge is the ledger's biz_type for a recharge; its biz_id is the recharge id.
const BizTypeRecharge = "recharge"

// Entry is a row of account_ledger: one balance change for one business fact. The unique
// index on (biz_type, biz_id) means a fact can move a balance once, whatever got past the
// layers above it.
type Entry struct {
	ID           int64
	UserID       int64
	BizType      string
	BizID        string
	Amount       int64
	BalanceAfter int64
	CreatedAt    time.Time
}

// TableName is the table of Entry.
func (Entry) TableName() string { return "account_ledger" }

// ErrAlreadyCredited means the ledger already holds a row for this business fact: the
// balance change was rolled back instead of applied a second time (I2's last line).
var ErrAlreadyCredited = errors.New("account: this business fact already moved the balance")

// errNoAccount means the user has no accounts row; Users.Ensure creates one with every user.
var errNoAccount = errors.New("account: the user has no account row")

// Ledger changes balances. Every change is an atomic increment of accounts.balance together
// with a ledger row, so that balance == sum(ledger amounts) for every user.
type Ledger struct {
	db  *gorm.DB
	ids *ids.Generator
}

// NewLedger returns the ledger on db.
func NewLedger(db *gorm.DB, gen *ids.Generator) *Ledger { return &Ledger{db: db, ids: gen} }

// Credit adds amount to the user's balance for the business fact (bizType, bizID) in tx and
// returns the ledger row. A second credit of the same fact is refused by the ledger's unique
// (biz_type, biz_id) — the last line against I2 — with ErrAlreadyCredited, after the balance
// update: the caller's transaction must then roll back, which undoes it.
//
// The balance is updated in place (balance = balance + ?), never read-modified-written, so
// two credits of different facts cannot overwrite each other; the row lock it takes is held
// until commit, which makes balance_after exact.
func (l *Ledger) Credit(ctx context.Context, tx *gorm.DB, userID, amount int64, bizType, bizID string) (Entry, error) {
	tx = tx.WithContext(ctx)
	e := Entry{ID: l.ids.Next(), UserID: userID, BizType: bizType, BizID: bizID, Amount: amount}
	now := clock.Now()
	res := tx.Model(&Account{}).Where("user_id = ?", userID).Updates(map[string]any{
		"balance":    gorm.Expr("balance + ?", amount),
		"version":    gorm.Expr("version + 1"),
		"updated_at": now,
	})
	if res.Error != nil {
		return Entry{}, res.Error
	}
	if res.RowsAffected != 1 {
		return Entry{}, fmt.Errorf("%w: user %d", errNoAccount, userID)
	}
	// Our own update is visible to us and the row stays locked until commit.
	if err := tx.Model(&Account{}).Select("balance").Where("user_id = ?", userID).Scan(&e.BalanceAfter).Error; err != nil {
		return Entry{}, err
	}
	e.CreatedAt = now
	err := database.Translate(tx.Create(&e).Error)
	if errors.Is(err, database.ErrDuplicateKey) {
		return Entry{}, fmt.Errorf("%w: %s %s", ErrAlreadyCredited, bizType, bizID)
	}
	if err != nil {
		return Entry{}, err
	}
	return e, nil
}

// Balance returns the user's balance; a user without an accounts row has 0.
func (l *Ledger) Balance(ctx context.Context, userID int64) (int64, error) {
	var acct Account
	err := l.db.WithContext(ctx).Where("user_id = ?", userID).Take(&acct).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, nil
	}
	return acct.Balance, err
}
