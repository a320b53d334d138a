package ledger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// history writes a small history and its books: trade T1 paid an order (1000), refund RF1
// took 400 of it back (posted), trade T2 credited user 7's recharge (300), and refund RF2 of
// 100 of T1 is still with the channel (pending).
func history(t *testing.T, db *gorm.DB, books *ledger.Books, gen *ids.Generator) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	t1, t2 := "T1", "T2"
	rf := func(no string, amount int64, status refund.Status) refund.Refund {
		return refund.Refund{ID: gen.Next(), UserID: 7, Channel: "sim", OutTradeNo: "1", TradeNo: &t1, OutRefundNo: no,
			Amount: amount, Status: status, CreatedAt: now, UpdatedAt: now}
	}
	r1, r2 := rf("RF1", 400, refund.Succeeded), rf("RF2", 100, refund.Submitted)
	booked := func(r refund.Refund) ledger.Refund {
		return ledger.Refund{Channel: r.Channel, OutRefundNo: r.OutRefundNo, Amount: r.Amount, TradeNo: r.TradeNo, From: ledger.Revenue}
	}
	rows := []any{
		&payment.Payment{ID: gen.Next(), Channel: "sim", TradeNo: t1, OrderID: 1, Amount: 1000, Status: "SUCCESS", CreatedAt: now},
		&account.Account{UserID: 7, Balance: 300, UpdatedAt: now},
		&account.Recharge{ID: gen.Next(), UserID: 7, Amount: 300, Status: account.RechargeSucceeded, Channel: new("sim"), TradeNo: &t2,
			CreatedAt: now, UpdatedAt: now, SucceededAt: &now},
		&r1, &r2,
	}
	for _, tr := range []ledger.Rows{
		books.CaptureTrade("sim", t1, 1000, ledger.Revenue),
		books.CaptureTrade("sim", t2, 300, ledger.CustomerAccount(7)),
		books.Hold(booked(r1)), books.End(booked(r1), true),
		books.Hold(booked(r2)),
	} {
		rows = append(rows, tr.Values()...)
	}
	for _, r := range rows {
		if err := db.Create(r).Error; err != nil {
			t.Fatalf("write %T: %v", r, err)
		}
	}
}

// TestCheckFindsEveryBrokenRule builds a history whose books hold, checks that Check finds
// nothing, then breaks each rule in a transaction of its own and requires Check to name it.
func TestCheckFindsEveryBrokenRule(t *testing.T) {
	testenv.OnBothDialects(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		gen := newIDs(t)
		history(t, db, ledger.New(gen), gen)
		if vs, err := ledger.Check(ctx, db); err != nil || len(vs) != 0 {
			t.Fatalf("the history's books: %v %v, want no violation", vs, err)
		}
		for _, c := range []struct {
			break_ string
			want   []string
		}{
			{"UPDATE ledger_postings SET amount = amount + 1 WHERE transfer_id = 'trade:sim:T1' AND account = 'merchant:revenue'",
				[]string{"transfer_unbalanced", "books_sum", "transfer_amount"}},
			{"UPDATE accounts SET balance = balance + 1 WHERE user_id = 7", []string{"customer_balance"}},
			{"UPDATE ledger_transfers SET amount = 700 WHERE id = 'refund:sim:RF2'", []string{"refunds_exceed_capture", "refund_pending", "transfer_amount"}},
			{"DELETE FROM ledger_transfers WHERE id = 'trade:sim:T1'", []string{"payment_capture"}},
			{"DELETE FROM ledger_transfers WHERE id = 'trade:sim:T2'", []string{"recharge_capture"}},
			{"DELETE FROM payments", []string{"capture_without_row"}},
			{"UPDATE refunds SET status = 'FAILED' WHERE out_refund_no = 'RF1'", []string{"refund_end_FAILED"}},
			{"UPDATE refunds SET status = 'SUCCEEDED' WHERE out_refund_no = 'RF2'", []string{"refund_end_SUCCEEDED"}},
		} {
			err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec(c.break_).Error; err != nil {
					t.Fatalf("%s: %v", c.break_, err)
				}
				vs, err := ledger.Check(ctx, tx)
				if err != nil {
					t.Fatalf("check after %s: %v", c.break_, err)
				}
				var rules []string
				for _, v := range vs {
					rules = append(rules, v.Rule)
				}
				for _, want := range c.want {
					if !slices.Contains(rules, want) {
						t.Errorf("after %s: violations %v, want %s among them", c.break_, vs, want)
					}
				}
				return errRollback
			})
			if err != errRollback {
				t.Fatal(err)
			}
		}
	})
}

// newIDs is an id generator for one test.
func newIDs(t *testing.T) *ids.Generator {
	gen, err := ids.New(1)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

var errRollback = &rollback{}

type rollback struct{}

func (*rollback) Error() string { return "rollback" }

// TestTransferIDsAreFences: a fact moves the books once. The same capture written again, or a
// refund ended the other way after it was posted, fails on the transfer's key — whatever the
// layers above let through.
func TestTransferIDsAreFences(t *testing.T) {
	testenv.OnBothDialects(t, func(t *testing.T, db *gorm.DB) {
		gen := newIDs(t)
		books := ledger.New(gen)
		history(t, db, books, gen)
		rf1 := ledger.Refund{Channel: "sim", OutRefundNo: "RF1", Amount: 400, From: ledger.Revenue}
		for name, rows := range map[string]ledger.Rows{
			"the capture again":            books.CaptureTrade("sim", "T1", 1000, ledger.Suspense),
			"a posted refund voided":       books.End(rf1, false),
			"a posted refund posted again": books.End(rf1, true),
			"a refund held again":          books.Hold(rf1),
		} {
			err := db.Create(rows.Transfer).Error
			if !database.IsDuplicateKey(err) {
				t.Errorf("%s: %v, want a duplicate key", name, err)
			}
		}
		if vs, err := ledger.Check(context.Background(), db); err != nil || len(vs) != 0 {
			t.Fatalf("the books: %v %v, want no violation", vs, err)
		}
	})
}

// TestBalances: posted and pending balances are the postings' sums; the channel's account is
// minus what the channel holds for oncepay.
func TestBalances(t *testing.T) {
	testenv.OnBothDialects(t, func(t *testing.T, db *gorm.DB) {
		gen := newIDs(t)
		history(t, db, ledger.New(gen), gen)
		for _, want := range []ledger.Balance{
			{Account: ledger.Revenue, Posted: 600, Pending: -100},
			{Account: ledger.ChannelAccount("sim"), Posted: -900, Pending: 100},
			{Account: ledger.CustomerAccount(7), Posted: 300},
			{Account: ledger.Suspense},
		} {
			got, err := ledger.BalanceOf(context.Background(), db, want.Account)
			if err != nil || got != want {
				t.Errorf("balance of %s: %+v %v, want %+v", want.Account, got, err, want)
			}
		}
	})
}
