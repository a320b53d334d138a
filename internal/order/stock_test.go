package order

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

// figures are a SKU's stock, for comparing without the bookkeeping columns.
type figures struct{ available, reserved, sold int64 }

// stockEnv is one test's database with two SKUs, A (10 available) and B (3 available).
type stockEnv struct {
	db    *gorm.DB
	store *inventory.Store
	moves stock
}

func newStockEnv(t *testing.T) *stockEnv {
	t.Helper()
	db := testenv.DB(t)
	gen, err := ids.New(3)
	if err != nil {
		t.Fatal(err)
	}
	e := &stockEnv{db: db, store: inventory.NewStore(db)}
	e.moves = stock{ids: gen}
	for sku, n := range map[string]int64{"A": 10, "B": 3} {
		if _, err := e.store.Put(context.Background(), sku, 100, n); err != nil {
			t.Fatalf("put %s: %v", sku, err)
		}
	}
	return e
}

// stockOf reads sku's figures on conn (a transaction, or the database).
func stockOf(t *testing.T, conn *gorm.DB, sku string) figures {
	t.Helper()
	var it inventory.Item
	if err := conn.Where("sku = ?", sku).Take(&it).Error; err != nil {
		t.Fatalf("read %s: %v", sku, err)
	}
	return figures{it.Available, it.Reserved, it.Sold}
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
func (e *stockEnv) apply(kind string, orderID int64, lines ...Line) error {
	return e.db.Transaction(func(tx *gorm.DB) error {
		return e.moves.apply(context.Background(), tx, kind, orderID, lines)
	})
}

// TestStockApplyLifecycle walks stock through each movement kind and its precondition, checking the
// three figures after every step, including the steps the precondition refuses.
func TestStockApplyLifecycle(t *testing.T) {
	e := newStockEnv(t)
	steps := []struct {
		name    string
		kind    string
		order   int64
		qty     int64
		wantErr error // nil, ErrOutOfStock, or errPrecondition for any other error
		want    figures
	}{
		{"reserve4", Reserve, 1, 4, nil, figures{6, 4, 0}},
		{"reserve6", Reserve, 2, 6, nil, figures{0, 10, 0}},
		{"reserve1OutOfStock", Reserve, 3, 1, inventory.ErrOutOfStock, figures{0, 10, 0}},
		{"confirm4", Confirm, 1, 4, nil, figures{0, 6, 4}},
		{"release6", Release, 2, 6, nil, figures{6, 0, 4}},
		{"confirmBeyondReserved", Confirm, 4, 1, errPrecondition, figures{6, 0, 4}},
		{"releaseBeyondReserved", Release, 5, 1, errPrecondition, figures{6, 0, 4}},
		{"unknownKind", "STEAL", 6, 1, errPrecondition, figures{6, 0, 4}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			err := e.apply(st.kind, st.order, Line{SKU: "A", Quantity: st.qty})
			switch {
			case st.wantErr == nil && err != nil:
				t.Fatalf("apply: %v, want success", err)
			case errors.Is(st.wantErr, inventory.ErrOutOfStock) && !errors.Is(err, inventory.ErrOutOfStock):
				t.Fatalf("apply: %v, want out_of_stock", err)
			case errors.Is(st.wantErr, errPrecondition) && (err == nil || errors.Is(err, inventory.ErrOutOfStock)):
				t.Fatalf("apply: %v, want a precondition error that is not out_of_stock", err)
			}
			if got := stockOf(t, e.db, "A"); got != st.want {
				t.Errorf("A = %+v, want %+v", got, st.want)
			}
		})
	}
}

// errPrecondition stands for "some error other than out_of_stock" in TestStockApplyLifecycle.
var errPrecondition = errors.New("precondition")

// TestApplyRepeatedIsNoop: the same movement of the same order twice moves stock once, because
// its movement row is unique per (order, sku, kind) — a retried use case cannot reserve, confirm
// or release twice.
func TestStockApplyRepeatedIsNoop(t *testing.T) {
	e := newStockEnv(t)
	lines := []Line{{SKU: "A", Quantity: 2}, {SKU: "B", Quantity: 1}}
	for _, kind := range []string{Reserve, Confirm} {
		for range 2 {
			if err := e.apply(kind, 42, lines...); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
		}
	}
	if a, b := stockOf(t, e.db, "A"), stockOf(t, e.db, "B"); a != (figures{8, 0, 2}) || b != (figures{2, 0, 1}) {
		t.Errorf("A %+v B %+v, want {8 0 2} {2 0 1}: each movement once", a, b)
	}
	if n := movements(t, e.db, 42); n != 4 {
		t.Errorf("%d movement rows, want 4 (2 SKUs × 2 kinds)", n)
	}
}

// TestApplyOutOfStockRollsBack: an order for A (available) and B (short) fails on B after A has
// already moved — apply takes lines in SKU order — so inside the transaction A is reserved; the
// caller's rollback is what leaves nothing behind, not even A's movement row.
func TestStockApplyOutOfStockRollsBack(t *testing.T) {
	e := newStockEnv(t)
	lines := []Line{{SKU: "B", Quantity: 4}, {SKU: "A", Quantity: 5}} // B listed first on purpose
	var insideA figures
	var insideMoves int64
	err := e.db.Transaction(func(tx *gorm.DB) error {
		err := e.moves.apply(context.Background(), tx, Reserve, 7, lines)
		insideA, insideMoves = stockOf(t, tx, "A"), movements(t, tx, 7)
		return err
	})
	if !errors.Is(err, inventory.ErrOutOfStock) {
		t.Fatalf("apply: %v, want out_of_stock", err)
	}
	if insideA != (figures{5, 5, 0}) || insideMoves != 2 {
		t.Errorf("inside the transaction A = %+v with %d movement rows, want {5 5 0} and 2: A moves before B fails", insideA, insideMoves)
	}
	if a, b := stockOf(t, e.db, "A"), stockOf(t, e.db, "B"); a != (figures{10, 0, 0}) || b != (figures{3, 0, 0}) {
		t.Errorf("after rollback A %+v B %+v, want them untouched", a, b)
	}
	if n := movements(t, e.db, 7); n != 0 {
		t.Errorf("%d movement rows after rollback, want 0", n)
	}
}

// TestApplySortsLines: lines are applied in SKU order whatever order the caller gave, so two
// orders touching the same SKUs lock their rows in the same order. The movement ids are
// snowflakes, increasing in the order the rows were written.
func TestStockApplySortsLines(t *testing.T) {
	e := newStockEnv(t)
	if err := e.apply(Reserve, 9, Line{SKU: "B", Quantity: 1}, Line{SKU: "A", Quantity: 1}); err != nil {
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
func TestStockPrices(t *testing.T) {
	e := newStockEnv(t)
	ctx := context.Background()
	prices, now, err := e.moves.prices(ctx, e.db, []Line{{SKU: "A"}, {SKU: "B"}})
	if err != nil || prices["A"] != 100 || prices["B"] != 100 || len(prices) != 2 {
		t.Errorf("prices = %v, %v; want A and B at 100", prices, err)
	}
	if dbNow, err := database.Now(ctx, e.db); err != nil || now.IsZero() || dbNow.Sub(now).Abs() > time.Minute {
		t.Errorf("prices read the clock %v; the database's clock is %v (%v)", now, dbNow, err)
	}
	if _, _, err := e.moves.prices(ctx, e.db, []Line{{SKU: "A"}, {SKU: "NOPE"}}); !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Errorf("prices with an unknown SKU: %v, want unknown_sku", err)
	}
}
