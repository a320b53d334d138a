package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// stock is a SKU's figures, for comparing without the bookkeeping columns.
type stock struct{ available, reserved, sold int64 }

// env is one test's database with two SKUs, A (10 available) and B (3 available).
type env struct {
	db    *gorm.DB
	store *inventory.Store
	moves *inventory.Movements
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := testenv.DB(t)
	gen, err := ids.New(3)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{db: db, store: inventory.NewStore(db)}
	e.moves = inventory.NewMovements(gen)
	for sku, n := range map[string]int64{"A": 10, "B": 3} {
		if _, err := e.store.Put(context.Background(), sku, 100, n); err != nil {
			t.Fatalf("put %s: %v", sku, err)
		}
	}
	return e
}

// stockOf reads sku's figures on conn (a transaction, or the database).
func stockOf(t *testing.T, conn *gorm.DB, sku string) stock {
	t.Helper()
	var it inventory.Item
	if err := conn.Where("sku = ?", sku).Take(&it).Error; err != nil {
		t.Fatalf("read %s: %v", sku, err)
	}
	return stock{it.Available, it.Reserved, it.Sold}
}

// movements counts the movement rows of order on conn.
func movements(t *testing.T, conn *gorm.DB, orderID int64) int64 {
	t.Helper()
	var n int64
	if err := conn.Table("inventory_movements").Where("order_id = ?", orderID).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// apply runs one movement in its own transaction.
func (e *env) apply(kind string, orderID int64, lines ...inventory.Line) error {
	return e.db.Transaction(func(tx *gorm.DB) error {
		return e.moves.Apply(context.Background(), tx, kind, orderID, lines)
	})
}

// TestApplyLifecycle walks stock through each movement kind and its precondition, checking the
// three figures after every step, including the steps the precondition refuses.
func TestApplyLifecycle(t *testing.T) {
	e := newEnv(t)
	steps := []struct {
		name    string
		kind    string
		order   int64
		qty     int64
		wantErr error // nil, ErrOutOfStock, or errPrecondition for any other error
		want    stock
	}{
		{"reserve4", inventory.Reserve, 1, 4, nil, stock{6, 4, 0}},
		{"reserve6", inventory.Reserve, 2, 6, nil, stock{0, 10, 0}},
		{"reserve1OutOfStock", inventory.Reserve, 3, 1, inventory.ErrOutOfStock, stock{0, 10, 0}},
		{"confirm4", inventory.Confirm, 1, 4, nil, stock{0, 6, 4}},
		{"release6", inventory.Release, 2, 6, nil, stock{6, 0, 4}},
		{"confirmBeyondReserved", inventory.Confirm, 4, 1, errPrecondition, stock{6, 0, 4}},
		{"releaseBeyondReserved", inventory.Release, 5, 1, errPrecondition, stock{6, 0, 4}},
		{"unknownKind", "STEAL", 6, 1, errPrecondition, stock{6, 0, 4}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			err := e.apply(st.kind, st.order, inventory.Line{SKU: "A", Quantity: st.qty})
			switch {
			case st.wantErr == nil && err != nil:
				t.Fatalf("Apply: %v, want success", err)
			case errors.Is(st.wantErr, inventory.ErrOutOfStock) && !errors.Is(err, inventory.ErrOutOfStock):
				t.Fatalf("Apply: %v, want out_of_stock", err)
			case errors.Is(st.wantErr, errPrecondition) && (err == nil || errors.Is(err, inventory.ErrOutOfStock)):
				t.Fatalf("Apply: %v, want a precondition error that is not out_of_stock", err)
			}
			if got := stockOf(t, e.db, "A"); got != st.want {
				t.Errorf("A = %+v, want %+v", got, st.want)
			}
		})
	}
}

// errPrecondition stands for "some error other than out_of_stock" in TestApplyLifecycle.
var errPrecondition = errors.New("precondition")

// TestApplyRepeatedIsNoop: the same movement of the same order twice moves stock once, because
// its movement row is unique per (order, sku, kind) — a retried use case cannot reserve, confirm
// or release twice.
func TestApplyRepeatedIsNoop(t *testing.T) {
	e := newEnv(t)
	lines := []inventory.Line{{SKU: "A", Quantity: 2}, {SKU: "B", Quantity: 1}}
	for _, kind := range []string{inventory.Reserve, inventory.Confirm} {
		for range 2 {
			if err := e.apply(kind, 42, lines...); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
		}
	}
	if a, b := stockOf(t, e.db, "A"), stockOf(t, e.db, "B"); a != (stock{8, 0, 2}) || b != (stock{2, 0, 1}) {
		t.Errorf("A %+v B %+v, want {8 0 2} {2 0 1}: each movement once", a, b)
	}
	if n := movements(t, e.db, 42); n != 4 {
		t.Errorf("%d movement rows, want 4 (2 SKUs × 2 kinds)", n)
	}
}

// TestApplyOutOfStockRollsBack: an order for A (available) and B (short) fails on B after A has
// already moved — Apply takes lines in SKU order — so inside the transaction A is reserved; the
// caller's rollback is what leaves nothing behind, not even A's movement row.
func TestApplyOutOfStockRollsBack(t *testing.T) {
	e := newEnv(t)
	lines := []inventory.Line{{SKU: "B", Quantity: 4}, {SKU: "A", Quantity: 5}} // B listed first on purpose
	var insideA stock
	var insideMoves int64
	err := e.db.Transaction(func(tx *gorm.DB) error {
		err := e.moves.Apply(context.Background(), tx, inventory.Reserve, 7, lines)
		insideA, insideMoves = stockOf(t, tx, "A"), movements(t, tx, 7)
		return err
	})
	if !errors.Is(err, inventory.ErrOutOfStock) {
		t.Fatalf("Apply: %v, want out_of_stock", err)
	}
	if insideA != (stock{5, 5, 0}) || insideMoves != 2 {
		t.Errorf("inside the transaction A = %+v with %d movement rows, want {5 5 0} and 2: A moves before B fails", insideA, insideMoves)
	}
	if a, b := stockOf(t, e.db, "A"), stockOf(t, e.db, "B"); a != (stock{10, 0, 0}) || b != (stock{3, 0, 0}) {
		t.Errorf("after rollback A %+v B %+v, want them untouched", a, b)
	}
	if n := movements(t, e.db, 7); n != 0 {
		t.Errorf("%d movement rows after rollback, want 0", n)
	}
}

// TestApplySortsLines: lines are applied in SKU order whatever order the caller gave, so two
// orders touching the same SKUs lock their rows in the same order. The movement ids are
// snowflakes, increasing in the order the rows were written.
func TestApplySortsLines(t *testing.T) {
	e := newEnv(t)
	if err := e.apply(inventory.Reserve, 9, inventory.Line{SKU: "B", Quantity: 1}, inventory.Line{SKU: "A", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	var skus []string
	if err := e.db.Table("inventory_movements").Where("order_id = ?", 9).Order("id").Pluck("sku", &skus).Error; err != nil {
		t.Fatal(err)
	}
	if len(skus) != 2 || skus[0] != "A" || skus[1] != "B" {
		t.Errorf("movements written in order %v, want [A B]", skus)
	}
}

// TestPrices: known SKUs get their price, with the database's clock read in the same query;
// one unknown SKU fails the whole request with unknown_sku.
func TestPrices(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	prices, now, err := e.moves.Prices(ctx, e.db, []inventory.Line{{SKU: "A"}, {SKU: "B"}})
	if err != nil || prices["A"] != 100 || prices["B"] != 100 || len(prices) != 2 {
		t.Errorf("Prices = %v, %v; want A and B at 100", prices, err)
	}
	if dbNow, err := database.Now(ctx, e.db); err != nil || now.IsZero() || dbNow.Sub(now).Abs() > time.Minute {
		t.Errorf("Prices read the clock %v; the database's clock is %v (%v)", now, dbNow, err)
	}
	if _, _, err := e.moves.Prices(ctx, e.db, []inventory.Line{{SKU: "A"}, {SKU: "NOPE"}}); !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Errorf("Prices with an unknown SKU: %v, want unknown_sku", err)
	}
}

// TestPutAndEnsure: Put sets absolute values, so repeating it changes nothing more; Ensure
// creates a missing SKU and never overwrites an existing one.
func TestPutAndEnsure(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for range 2 {
		it, err := e.store.Put(ctx, "A", 250, 7)
		if err != nil || it.Price != 250 || it.Available != 7 {
			t.Fatalf("Put = %+v, %v; want price 250 available 7", it, err)
		}
	}
	if err := e.store.Ensure(ctx, inventory.Item{SKU: "A", Name: "A", Price: 1, Available: 1}); err != nil {
		t.Fatal(err)
	}
	if got := stockOf(t, e.db, "A"); got != (stock{7, 0, 0}) {
		t.Errorf("Ensure overwrote A: %+v", got)
	}
	if err := e.store.Ensure(ctx, inventory.Item{SKU: "C", Name: "C", Price: 5, Available: 9}); err != nil {
		t.Fatal(err)
	}
	if got := stockOf(t, e.db, "C"); got != (stock{9, 0, 0}) {
		t.Errorf("Ensure created C as %+v, want {9 0 0}", got)
	}
	if _, err := e.store.Get(ctx, "NOPE"); !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Errorf("Get unknown: %v, want unknown_sku", err)
	}
}
