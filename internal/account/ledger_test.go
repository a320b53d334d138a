package account_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/app/apptest"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/testenv"
)

// TestLedgerCreditOncePerFact is the ledger's unique key as the last line of I2: a second
// credit of the same business fact is refused and its balance update rolled back.
func TestLedgerCreditOncePerFact(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	userID, _ := apptest.NewUser(t, db, "ledger")
	ledger := account.NewLedger(db, apptest.IDs(t))

	credit := func(userID, amount int64, bizID string) (account.Entry, error) {
		var e account.Entry
		err := db.Transaction(func(tx *gorm.DB) (err error) {
			e, err = ledger.Credit(ctx, tx, userID, amount, account.BizTypeRecharge, bizID)
			return err
		})
		return e, err
	}
	first, err := credit(userID, 700, "42")
	if err != nil || first.BalanceAfter != 700 {
		t.Fatalf("first credit: %+v, %v", first, err)
	}
	if _, err := credit(userID, 700, "42"); !errors.Is(err, account.ErrAlreadyCredited) {
		t.Fatalf("second credit of the same fact: %v, want ErrAlreadyCredited", err)
	}
	second, err := credit(userID, 300, "43")
	if err != nil || second.BalanceAfter != 1000 {
		t.Fatalf("credit of another fact: %+v, %v", second, err)
	}
	var acct account.Account
	must(t, db.Where("user_id = ?", userID).Take(&acct).Error)
	if acct.Balance != 1000 || acct.Version != 2 {
		t.Errorf("account = %+v, want balance 1000 version 2", acct)
	}
	invariant(t, db)
	if _, err := credit(userID+1, 1, "44"); err == nil {
		t.Errorf("credit of a user without an account succeeded")
	}
}

// TestNotifyRollsBackWithTheCallersTransaction checks the rollback path: Notify runs in the
// transaction it is given, so when that transaction rolls back (the guard's, on a 5xx
// or a lost lock) the status change and the credit are gone, and a retry credits once.
func TestNotifyRollsBackWithTheCallersTransaction(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	gen := apptest.IDs(t)
	userID, _ := apptest.NewUser(t, db, "rollback")
	recharges := account.NewRecharges(db, gen, account.NewLedger(db, gen), anomaly.NewRecorder(db, gen))
	var rc account.Recharge
	err := db.Transaction(func(tx *gorm.DB) (err error) {
		rc, err = recharges.Create(ctx, tx, userID, 900)
		return err
	})
	must(t, err)
	n := account.Notification{Channel: "alipay", TradeNo: "RB-1", OutTradeNo: ids.Format(rc.ID), Amount: 900, Status: account.ChannelStatusSuccess}

	boom := errors.New("the caller failed after the use case")
	err = db.Transaction(func(tx *gorm.DB) error {
		outcome, err := recharges.Notify(ctx, tx, n)
		if err != nil || outcome != account.NotifyCredited {
			t.Fatalf("notify inside the transaction: %s, %v", outcome, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("transaction: %v", err)
	}
	if got, _ := recharges.Get(ctx, userID, rc.ID); got.Status != account.RechargePending {
		t.Errorf("after rollback the recharge is %s, want PENDING", got.Status)
	}
	if bal, _ := recharges.Ledger().Balance(ctx, userID); bal != 0 {
		t.Errorf("after rollback the balance is %d, want 0", bal)
	}

	// The retry credits once; a copy after it is a duplicate.
	notify := func() (outcome account.NotifyOutcome, err error) {
		err = db.Transaction(func(tx *gorm.DB) error {
			outcome, err = recharges.Notify(ctx, tx, n)
			return err
		})
		return outcome, err
	}
	if outcome, err := notify(); err != nil || outcome != account.NotifyCredited {
		t.Fatalf("retry: %s, %v", outcome, err)
	}
	if outcome, err := notify(); err != nil || outcome != account.NotifyDuplicate {
		t.Fatalf("copy after the retry: %s, %v", outcome, err)
	}
	if bal, _ := recharges.Ledger().Balance(ctx, userID); bal != 900 {
		t.Errorf("balance %d, want 900", bal)
	}
	invariant(t, db)
}
