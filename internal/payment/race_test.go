package payment_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestTwoTradesRaceForOneOrder: two different trades pay one order at the same moment (the
// buyer paid through two channels). One pays it; the other gets success too and is recorded as
// duplicate_payment — the order was paid, not closed. The test holds the order's row lock while
// both notifications read the order and queue on their conditional UPDATE, then lets them go.
//
// It runs twice, because MySQL/MariaDB plan that UPDATE differently by table contents:
//   - few pending orders: the planner would range-scan idx_orders_status_expires, and two
//     UPDATEs deadlocked on its next-key locks until the transition was forced onto the
//     primary key; a deadlock that still happens is run again by the idempotency layer, never
//     a 500;
//   - many pending orders: the planner uses the primary key.
//
// Either way the loser, which read the order PENDING_PAYMENT, meets the winner's stock
// movements (their unique key) or a transition that changes no row once the winner commits:
// its transaction runs again (idempotent.ErrStale), and its answer comes from the order's
// state then, not from the REPEATABLE READ snapshot it took before it waited.
func TestTwoTradesRaceForOneOrder(t *testing.T) {
	testenv.RequireMySQL(t)
	tests := []struct {
		name    string
		pending int // other PENDING_PAYMENT orders in the table
	}{
		{"notify200DuplicatePaymentFewPending", 0},
		{"notify200DuplicatePaymentManyPending", 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := apptest.StartOnly(t, apptest.Router)
			fillPending(t, s, tt.pending)
			raceTwoTrades(t, s)
		})
	}
}

// fillPending inserts n inert PENDING_PAYMENT orders (no items, expiring in a day) and
// refreshes the table statistics, so that the planner sees a realistic orders table.
func fillPending(t *testing.T, s *apptest.Server, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	now := time.Now().UTC()
	rows := make([]order.Order, n)
	for i := range rows {
		rows[i] = order.Order{ID: int64(1_000_000 + i), UserID: 1, Status: order.PendingPayment, Amount: 1,
			Currency: order.Currency, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
	}
	if err := s.DB.CreateInBatches(rows, 250).Error; err != nil {
		t.Fatalf("insert filler orders: %v", err)
	}
	if err := s.DB.Exec("ANALYZE TABLE orders").Error; err != nil {
		t.Fatalf("analyze orders: %v", err)
	}
}

// raceTwoTrades pays one new order with two trades released at once and checks the outcome.
func raceTwoTrades(t *testing.T, s *apptest.Server) {
	t.Helper()
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "two-trades", basket...)
	id := s.Order(t, o.OrderID).ID

	hold := s.DB.Begin()
	t.Cleanup(func() { hold.Rollback() }) // a failed test must not keep the row (and DROP DATABASE) waiting
	if err := hold.Exec("SELECT id FROM orders WHERE id = ? FOR UPDATE", id).Error; err != nil {
		t.Fatalf("lock the order row: %v", err)
	}
	trades := []string{"T-A-" + o.OrderID, "T-B-" + o.OrderID}
	answers := make([]apptest.Response, len(trades))
	var wg sync.WaitGroup
	for i, trade := range trades {
		wg.Go(func() { answers[i] = s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, "alipay", trade))) })
	}
	waitForUpdates(t, s, 2)
	if err := hold.Commit().Error; err != nil {
		t.Fatalf("release the order row: %v", err)
	}
	wg.Wait()

	for i, r := range answers {
		if r.Status != http.StatusOK || r.Code() != "" {
			t.Errorf("trade %s: %s, want 200 success", trades[i], r)
		}
	}
	got := s.Order(t, o.OrderID)
	if got.Status != order.Paid || got.TradeNo == nil {
		t.Fatalf("order is %s, want PAID", got.Status)
	}
	loser := trades[0]
	if loser == *got.TradeNo {
		loser = trades[1]
	}
	if dup := s.AnomaliesOf(t, anomaly.DuplicatePayment, o.OrderID); len(dup) != 1 || dup[0].TradeNo != loser {
		t.Errorf("duplicate_payment anomalies %+v, want one for the losing trade %s", dup, loser)
	}
	if pac := s.AnomaliesOf(t, anomaly.PaidAfterClose, o.OrderID); len(pac) != 0 {
		t.Errorf("paid_after_close anomalies %+v, want none: the order was never closed", pac)
	}
	for _, it := range o.Items {
		if a := s.Inventory(t, it.SKU); a.Sold != before[it.SKU].Sold+it.Quantity {
			t.Errorf("%s: sold %d, want %d", it.SKU, a.Sold, before[it.SKU].Sold+it.Quantity)
		}
	}
	if n := s.Count(t, "payments", "order_id = ?", id); n != 1 {
		t.Errorf("payments rows: %d, want 1", n)
	}
}

// waitForUpdates waits until n connections of the test's database are running a transition of
// orders (its primary-key locking read, or the UPDATE), that is until they queue on the row
// lock the test holds. It reads the processlist,
// filtered here because other packages' tests share the server.
func waitForUpdates(t *testing.T, s *apptest.Server, n int) {
	t.Helper()
	var dbName string
	if err := s.DB.Raw("SELECT DATABASE()").Scan(&dbName).Error; err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 10*time.Second, "the payments queue on the order's row lock", func() (bool, string) {
		var rows []struct{ DB, Info string }
		var seen []string
		err := s.DB.Raw("SELECT COALESCE(db, '') AS db, COALESCE(info, '') AS info FROM information_schema.processlist").Scan(&rows).Error
		waiting := 0
		for _, r := range rows {
			// Each payment is one batch (database.Batch): the first waits on the held order
			// row in its UPDATE orders, the second on the first's stock movements, whose
			// unique key it meets before the order row.
			if r.DB == dbName && (strings.HasPrefix(r.Info, "UPDATE orders FORCE INDEX") || strings.HasPrefix(r.Info, "INSERT INTO `inventory_movements`")) {
				waiting++
			}
			if r.DB == dbName && r.Info != "" {
				seen = append(seen, r.Info[:min(len(r.Info), 60)])
			}
		}
		return err == nil && waiting == n, fmt.Sprintf("%d waiting (err %v): %q", waiting, err, seen)
	})
}
