package inventory_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// stock is a SKU's figures, for comparing without the bookkeeping columns.
type stock struct{ available, reserved, sold int64 }

// env is one test's database with two SKUs, A (10 available) and B (3 available).
type env struct {
	db    *gorm.DB
	store *inventory.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := testenv.DB(t)
	e := &env{db: db, store: inventory.NewStore(db)}
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
