package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestWritesArePlanned reads each guarded write on the wire (a MySQL protocol proxy between
// the instance and MariaDB) and holds the rule of docs/architecture.md: a write sends its new
// rows, then its dedup record, then its contended rows — so the record's INSERT comes before
// every UPDATE and every locking read of the transaction, and a duplicate is refused before
// any hot row is locked. A new order also holds its round-trip budget: at most 4 MySQL round
// trips, BEGIN and COMMIT included, and no Redis command about its key on the request's path
// (its record is its fence; only its attempt log follows, pipelined off the path).
func TestWritesArePlanned(t *testing.T) {
	db, wire := testenv.DBOverWire(t)
	rc := testenv.Redis(t)
	redisLog := &singleCommands{}
	rc.Client.AddHook(redisLog)
	s := apptest.StartOn(t, app.Deps{DB: db, Redis: rc, Kafka: testenv.Kafka(t)}, func(c *config.Config) {
		c.CloseJobInterval, c.ReconcileJobInterval, c.RefundJobInterval, c.PurgeJobInterval = time.Hour, time.Hour, time.Hour, time.Hour
	})
	item := apptest.Item{SKU: "PLAN-" + apptest.RandHex(3), Quantity: 2}
	other := apptest.Item{SKU: "PLAN2-" + apptest.RandHex(3), Quantity: 1}
	s.PutInventory(t, item.SKU, 700, 100)
	s.PutInventory(t, other.SKU, 300, 100)

	// planOf runs do and returns the one transaction of it that wrote a dedup record.
	planOf := func(t *testing.T, do func()) []testenv.Command {
		t.Helper()
		wire.Reset()
		do()
		var found [][]testenv.Command
		for _, tx := range wire.Transactions() {
			if recordAt(testenv.Statements(tx)) >= 0 {
				found = append(found, tx)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d transactions wrote a dedup record, want 1", len(found))
		}
		return found[0]
	}
	recordFirst := func(t *testing.T, tx []testenv.Command) {
		t.Helper()
		stmts := testenv.Statements(tx)
		rec := recordAt(stmts)
		for i, st := range stmts {
			// A report's own number is not a contended row: the claim of a number already
			// claimed is read with a lock (notify.claim, a current read), and only copies of
			// the same number meet there — which the record's key serializes anyway.
			if strings.HasPrefix(st, "SELECT * FROM `report_claims`") {
				continue
			}
			contended := strings.HasPrefix(strings.ToUpper(st), "UPDATE") || strings.HasSuffix(strings.ToUpper(st), "FOR UPDATE")
			if contended && i < rec {
				t.Errorf("statement %d locks a row before the dedup record (statement %d):\n%s", i, rec, describe(stmts))
				return
			}
		}
	}

	// booksRide checks that the money's transfers travel in the batch that carries the dedup
	// record: the books cost a payment, a refund or a recharge no round trip of their own.
	booksRide := func(t *testing.T, tx []testenv.Command) {
		t.Helper()
		carried := false
		for _, c := range tx {
			stmts := testenv.Statements([]testenv.Command{c})
			books := testenv.Index(stmts, "INSERT INTO `ledger_transfers`") >= 0
			if books && recordAt(stmts) < 0 {
				t.Errorf("the books' rows take a round trip without the dedup record:\n%s", describeCmds(tx))
			}
			carried = carried || books
		}
		if !carried {
			t.Errorf("the write moved money and posted no transfer:\n%s", describeCmds(tx))
		}
	}

	var created order.View
	t.Run("create order", func(t *testing.T) {
		key := "plan-create-" + apptest.RandHex(4)
		redisLog.take()
		tx := planOf(t, func() {
			r := apptest.Must(t, s.PostOrder(apptest.AliceKey, key, item, other), http.StatusCreated)
			r.Decode(t, &created)
		})
		for _, cmd := range redisLog.take() {
			if strings.Contains(fmt.Sprint(cmd...), key) {
				t.Errorf("a new order sent Redis %v on its path, want no command about its key", cmd)
			}
		}
		recordFirst(t, tx)
		t.Logf("a new order of two SKUs:\n%s", describeCmds(tx))
		if len(tx) > 4 {
			t.Errorf("a new order took %d round trips, want at most 4:\n%s", len(tx), describeCmds(tx))
		}
	})

	t.Run("trade report", func(t *testing.T) {
		view := created
		if view.OrderID == "" {
			t.Fatal("no order was created")
		}
		tx := planOf(t, func() {
			apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(view, "alipay", "T-PLAN-"+view.OrderID))), http.StatusOK)
		})
		recordFirst(t, tx)
		booksRide(t, tx)
		t.Logf("a trade report:\n%s", describeCmds(tx))
	})

	t.Run("refund", func(t *testing.T) {
		// The order the trade report paid: a partial refund of it.
		tx := planOf(t, func() {
			apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+created.OrderID+"/refunds", apptest.AliceKey,
				map[string]any{"amount": 100}, apptest.IdemKey("plan-refund-"+apptest.RandHex(4))), http.StatusCreated)
		})
		recordFirst(t, tx)
		booksRide(t, tx)
		t.Logf("a refund:\n%s", describeCmds(tx))
	})

	t.Run("refund report", func(t *testing.T) {
		var rf struct {
			OutRefundNo, Channel, Status string
			Amount                       int64
		}
		if err := s.DB.Raw("SELECT out_refund_no, channel, status, amount FROM refunds WHERE order_id = ?", created.OrderID).Scan(&rf).Error; err != nil || rf.OutRefundNo == "" {
			t.Fatalf("the refund of order %s: %+v, %v", created.OrderID, rf, err)
		}
		// The refund as the channel's report finds it when it overtakes the call's answer:
		// PENDING, no refund_no yet. The report moves it (the event, the record, the refund's
		// row); a report the other way afterwards is kept as a conflict (the anomaly, the
		// record, the channel's word on the row).
		// The books go back with it: the refund's end (if the channel's answer ended it) is
		// undone too, else its key would refuse the report's (internal/ledger).
		end := ledger.RefundID(rf.Channel, rf.OutRefundNo) + ":end"
		for _, undo := range [][2]string{
			{"UPDATE refunds SET status = 'PENDING', refund_no = NULL WHERE out_refund_no = ?", rf.OutRefundNo},
			{"DELETE FROM ledger_postings WHERE transfer_id = ?", end},
			{"DELETE FROM ledger_transfers WHERE id = ?", end},
		} {
			if err := s.DB.Exec(undo[0], undo[1]).Error; err != nil {
				t.Fatal(err)
			}
		}
		number := "R-PLAN-" + apptest.RandHex(4)
		for _, status := range []string{"SUCCESS", "FAILED"} {
			report := notify.Report{Kind: notify.Refund, Channel: rf.Channel, Number: number, OutNo: rf.OutRefundNo, Amount: rf.Amount, Status: status}
			tx := planOf(t, func() {
				apptest.Must(t, s.SignedPost(apptest.RefundNotifyPath, report.Body()), http.StatusOK)
			})
			recordFirst(t, tx)
			if status == "SUCCESS" {
				booksRide(t, tx)
			}
			t.Logf("a refund report %s:\n%s", status, describeCmds(tx))
		}
	})

	t.Run("recharge report", func(t *testing.T) {
		rid := s.CreateRecharge(t, apptest.AliceKey, 700)
		tx := planOf(t, func() {
			apptest.Must(t, s.NotifyRecharge(apptest.RechargeReport(rid, "alipay", "T-PLAN-RC-"+apptest.RandHex(4), 700)), http.StatusOK)
		})
		recordFirst(t, tx)
		booksRide(t, tx)
		t.Logf("a recharge report:\n%s", describeCmds(tx))
	})

	t.Run("cancel", func(t *testing.T) {
		o := s.CreateOrder(t, apptest.AliceKey, "plan-cancel-"+apptest.RandHex(4), item)
		tx := planOf(t, func() {
			apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/cancel", apptest.AliceKey, nil,
				apptest.IdemKey("plan-cancel-it-"+apptest.RandHex(4))), http.StatusOK)
		})
		recordFirst(t, tx)
		t.Logf("a cancel:\n%s", describeCmds(tx))
	})

	t.Run("open a trade", func(t *testing.T) {
		o := s.CreateOrder(t, apptest.AliceKey, "plan-pay-"+apptest.RandHex(4), item)
		tx := planOf(t, func() {
			apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil,
				apptest.IdemKey("plan-pay-it-"+apptest.RandHex(4))), http.StatusCreated)
		})
		recordFirst(t, tx)
		t.Logf("opening a trade:\n%s", describeCmds(tx))
	})

	t.Run("recharge", func(t *testing.T) {
		tx := planOf(t, func() {
			apptest.Must(t, s.Do(http.MethodPost, "/v1/recharges", apptest.AliceKey, map[string]any{"amount": 500},
				apptest.IdemKey("plan-recharge-"+apptest.RandHex(4))), http.StatusCreated)
		})
		recordFirst(t, tx)
		if len(tx) > 4 {
			t.Errorf("a recharge took %d round trips, want at most 4:\n%s", len(tx), describeCmds(tx))
		}
		t.Logf("a recharge:\n%s", describeCmds(tx))
	})
}

// recordAt is the position of the dedup record's INSERT in stmts (the kit's own statement,
// idempotent/guard.go), or -1.
func recordAt(stmts []string) int { return testenv.Index(stmts, "INSERT INTO idempotency_records") }

func describe(stmts []string) string {
	var b strings.Builder
	for i, s := range stmts {
		if len(s) > 110 {
			s = s[:110] + "…"
		}
		b.WriteString("  ")
		b.WriteString(strings.ReplaceAll(s, "\n", " "))
		if i < len(stmts)-1 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func describeCmds(cmds []testenv.Command) string {
	var b strings.Builder
	for i, c := range cmds {
		b.WriteString("round trip ")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(":\n")
		b.WriteString(describe(testenv.Statements([]testenv.Command{c})))
		b.WriteString("\n")
	}
	return b.String()
}

// singleCommands logs the Redis commands sent one at a time, as a request's path sends them;
// pipelines, which the guard sends off the path, pass unlogged.
type singleCommands struct {
	mu   sync.Mutex
	cmds [][]any
}

// DialHook passes dials through.
func (l *singleCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook logs the command.
func (l *singleCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.cmds = append(l.cmds, cmd.Args())
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook passes pipelines through.
func (l *singleCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the commands logged so far and empties the log.
func (l *singleCommands) take() [][]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmds := l.cmds
	l.cmds = nil
	return cmds
}
