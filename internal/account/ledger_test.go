package account_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
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

// TestNotifyRollsBackWithTheCallersTransaction checks the rollback path: Apply runs in the
// transaction it is given, so when that transaction rolls back (the guard's, on a 5xx
// or a lost lock) the status change and the credit are gone, and a retry credits once.
func TestNotifyRollsBackWithTheCallersTransaction(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	gen := apptest.IDs(t)
	userID, _ := apptest.NewUser(t, db, "rollback")
	recharges := account.NewRecharges(db, gen, account.NewLedger(db, gen), anomaly.NewRecorder(db, gen), outbox.NewWriter(gen))
	var rc account.Recharge
	err := db.Transaction(func(tx *gorm.DB) (err error) {
		rc, err = recharges.Create(ctx, tx, userID, 900, func(account.Recharge) error { return nil })
		return err
	})
	must(t, err)
	n := apptest.RechargeReport(ids.Format(rc.ID), "alipay", "RB-1", 900)

	boom := errors.New("the caller failed after the use case")
	err = db.Transaction(func(tx *gorm.DB) error {
		outcome, err := recharges.Apply(ctx, tx, n, func(notify.Outcome) error { return nil })
		if err != nil || outcome != notify.Applied {
			t.Fatalf("apply inside the transaction: %v, %v", outcome, err)
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
	apply := func() (outcome notify.Outcome, err error) {
		err = db.Transaction(func(tx *gorm.DB) error {
			outcome, err = recharges.Apply(ctx, tx, n, func(notify.Outcome) error { return nil })
			return err
		})
		return outcome, err
	}
	if outcome, err := apply(); err != nil || outcome != notify.Applied {
		t.Fatalf("retry: %v, %v", outcome, err)
	}
	if outcome, err := apply(); err != nil || outcome != notify.Duplicate {
		t.Fatalf("copy after the retry: %v, %v", outcome, err)
	}
	if bal, _ := recharges.Ledger().Balance(ctx, userID); bal != 900 {
		t.Errorf("balance %d, want 900", bal)
	}
	invariant(t, db)
}

// TestApplyOutcomes is Recharges.Apply's every answer, in the caller's transaction: a status
// that ends nothing is Ignored; the recharge's amount through a new trade is Applied; the
// same trade again a Duplicate; another trade for the paid recharge Kept, with its
// duplicate_payment anomaly in the same transaction. An amount that differs and a recharge
// nobody issued are refusals (*notify.Refusal, which unwraps to the client-facing error):
// they change nothing, and only the amount keeps an anomaly, for the port to record alone.
func TestApplyOutcomes(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	gen := apptest.IDs(t)
	userID, _ := apptest.NewUser(t, db, "outcomes")
	recharges := account.NewRecharges(db, gen, account.NewLedger(db, gen), anomaly.NewRecorder(db, gen), outbox.NewWriter(gen))
	var rc account.Recharge
	must(t, db.Transaction(func(tx *gorm.DB) (err error) {
		rc, err = recharges.Create(ctx, tx, userID, 1200, func(account.Recharge) error { return nil })
		return err
	}))
	rid := ids.Format(rc.ID)
	apply := func(r notify.Report) (outcome notify.Outcome, err error) {
		err = db.Transaction(func(tx *gorm.DB) error {
			outcome, err = recharges.Apply(ctx, tx, r, func(notify.Outcome) error { return nil })
			return err
		})
		return outcome, err
	}
	with := func(f func(*notify.Report)) notify.Report {
		r := apptest.RechargeReport(rid, "alipay", "AO-1", 1200)
		f(&r)
		return r
	}

	refusals := []struct {
		name    string
		report  notify.Report
		is      error
		anomaly string
	}{
		{"amountMismatch", with(func(r *notify.Report) { r.Amount = 1199 }), account.ErrAmountMismatch, anomaly.AmountMismatch},
		{"unknownRecharge", with(func(r *notify.Report) { r.OutNo = "123456789" }), account.ErrRechargeNotFound, ""},
		{"malformedRechargeID", with(func(r *notify.Report) { r.OutNo = "not-an-id" }), account.ErrRechargeNotFound, ""},
	}
	for _, tt := range refusals {
		before := takeSnapshot(t, db)
		outcome, err := apply(tt.report)
		var refused *notify.Refusal
		if !errors.As(err, &refused) || !errors.Is(err, tt.is) || outcome != 0 {
			t.Errorf("%s: %v, %v; want a refusal wrapping %v", tt.name, outcome, err, tt.is)
			continue
		}
		switch {
		case tt.anomaly == "" && refused.Anomaly != nil:
			t.Errorf("%s: refusal keeps anomaly %+v, want none", tt.name, refused.Anomaly)
		case tt.anomaly != "" && (refused.Anomaly == nil || refused.Anomaly.Kind != tt.anomaly ||
			refused.Anomaly.RechargeID == nil || *refused.Anomaly.RechargeID != rc.ID ||
			refused.Anomaly.TradeNo != tt.report.Number || refused.Anomaly.Amount != tt.report.Amount):
			t.Errorf("%s: refusal keeps anomaly %+v, want %s for recharge %s, trade %s, amount %d",
				tt.name, refused.Anomaly, tt.anomaly, rid, tt.report.Number, tt.report.Amount)
		}
		wantUnchanged(t, before, takeSnapshot(t, db), nil)
	}

	steps := []struct {
		name      string
		report    notify.Report
		want      notify.Outcome
		balance   int64
		anomalies map[string]int64
	}{
		{"notPaidYet", with(func(r *notify.Report) { r.Status = "WAIT_BUYER_PAY" }), notify.Ignored, 0, nil},
		{"paid", with(func(*notify.Report) {}), notify.Applied, 1200, nil},
		{"sameTradeAgain", with(func(*notify.Report) {}), notify.Duplicate, 1200, nil},
		{"anotherTrade", with(func(r *notify.Report) { r.Number = "AO-2" }), notify.Kept, 1200, map[string]int64{anomaly.DuplicatePayment: 1}},
		{"anotherTradeAgain", with(func(r *notify.Report) { r.Number = "AO-2" }), notify.Kept, 1200, nil},
	}
	for _, st := range steps {
		before := takeSnapshot(t, db)
		outcome, err := apply(st.report)
		if err != nil || outcome != st.want {
			t.Errorf("%s: %v, %v; want %v", st.name, outcome, err, st.want)
		}
		after := takeSnapshot(t, db)
		if after.Balances[userID] != st.balance {
			t.Errorf("%s: balance %d, want %d", st.name, after.Balances[userID], st.balance)
		}
		if st.want != notify.Applied {
			wantUnchanged(t, before, after, st.anomalies)
		}
	}
	creditedOnce(t, db, rid, "AO-1")
	invariant(t, db)
}
