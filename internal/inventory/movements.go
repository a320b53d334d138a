package inventory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// Kinds of stock movement; each happens at most once per order and SKU.
const (
	// Reserve: available → reserved, when an order is created.
	Reserve = "RESERVE"
	// Confirm: reserved → sold, when the order is paid.
	Confirm = "CONFIRM"
	// Release: reserved → available, when the order is cancelled or closed.
	Release = "RELEASE"
	// Return: sold → available, when a paid order is refunded in full.
	Return = "RETURN"
)

// Line is a quantity of one SKU in an order.
type Line struct {
	SKU      string
	Quantity int64
}

// Movement is a row of inventory_movements. Its unique (order_id, sku, kind) is the
// backstop against a stock movement applied twice for one order, whichever path repeated it
// (I1: the triple delivery deducted stock three times).
type Movement struct {
	ID        int64
	OrderID   int64
	SKU       string `gorm:"column:sku"`
	Kind      string
	Quantity  int64
	CreatedAt time.Time
}

// TableName is the table of Movement.
func (Movement) TableName() string { return "inventory_movements" }

// Movements applies stock movements for orders. Every method runs in the caller's
// transaction, next to the order change it belongs to.
type Movements struct {
	ids *ids.Generator
}

// NewMovements returns the movement writer.
func NewMovements(gen *ids.Generator) *Movements { return &Movements{ids: gen} }

// updates are the conditional UPDATE of each kind: the WHERE clause is the precondition, so
// stock can never go negative however many buyers race (rows affected decides).
var updates = map[string]struct {
	set   map[string]string // column → expression of the quantity
	guard string
}{
	Reserve: {map[string]string{"available": "available - ?", "reserved": "reserved + ?"}, "available >= ?"},
	Confirm: {map[string]string{"reserved": "reserved - ?", "sold": "sold + ?"}, "reserved >= ?"},
	Release: {map[string]string{"reserved": "reserved - ?", "available": "available + ?"}, "reserved >= ?"},
	Return:  {map[string]string{"sold": "sold - ?", "available": "available + ?"}, "sold >= ?"},
}

// Prices returns the current price of each SKU in lines, or ErrUnknownSKU naming the first
// SKU that is not in the catalog. It is a plain read: it locks nothing.
func (m *Movements) Prices(ctx context.Context, tx *gorm.DB, lines []Line) (map[string]int64, error) {
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = l.SKU
	}
	var items []Item
	if err := tx.WithContext(ctx).Select("sku", "price").Where("sku IN ?", skus).Find(&items).Error; err != nil {
		return nil, err
	}
	prices := make(map[string]int64, len(items))
	for _, it := range items {
		prices[it.SKU] = it.Price
	}
	for _, s := range skus {
		if _, ok := prices[s]; !ok {
			return nil, ErrUnknownSKU.Withf("no such SKU %q", s)
		}
	}
	return prices, nil
}

// Apply moves stock of kind for every line of orderID, in tx. The movement rows go first, in
// one statement: their unique (order_id, sku, kind) turns a repeated movement into a no-op
// (I1). The stock rows — the contended ones — are updated last, in SKU order, so that two
// orders touching the same SKUs lock them in the same order and cannot deadlock, and each
// is held for as few round trips as possible. A reservation larger than what is available is
// ErrOutOfStock; the caller's transaction must then roll back.
func (m *Movements) Apply(ctx context.Context, tx *gorm.DB, kind string, orderID int64, lines []Line) error {
	if _, ok := updates[kind]; !ok {
		return fmt.Errorf("unknown movement kind %q", kind)
	}
	sorted := slices.Clone(lines)
	slices.SortFunc(sorted, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	fresh, err := m.record(tx.WithContext(ctx), kind, orderID, sorted)
	if err != nil {
		return err
	}
	return m.Move(ctx, tx, kind, fresh)
}

// Rows returns the movement rows of kind for lines of orderID, for a caller that inserts them
// with its other new rows (see database.Insert) and then calls Move.
func (m *Movements) Rows(kind string, orderID int64, lines []Line) []Movement {
	now := clock.Now()
	rows := make([]Movement, len(lines))
	for i, l := range lines {
		rows[i] = Movement{ID: m.ids.Next(), OrderID: orderID, SKU: l.SKU, Kind: kind, Quantity: l.Quantity, CreatedAt: now}
	}
	return rows
}

// Move applies the conditional stock UPDATEs of kind for lines — the contended rows — in SKU
// order, so that two orders touching the same SKUs lock them in the same order and cannot
// deadlock. Their movement rows must be in tx already.
func (m *Movements) Move(ctx context.Context, tx *gorm.DB, kind string, lines []Line) error {
	u, ok := updates[kind]
	if !ok {
		return fmt.Errorf("unknown movement kind %q", kind)
	}
	sorted := slices.Clone(lines)
	slices.SortFunc(sorted, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	tx = tx.WithContext(ctx)
	now := clock.Now()
	for _, l := range sorted {
		set := map[string]any{"version": gorm.Expr("version + 1"), "updated_at": now}
		for col, expr := range u.set {
			set[col] = gorm.Expr(expr, l.Quantity)
		}
		res := tx.Model(&Item{}).Where("sku = ? AND "+u.guard, l.SKU, l.Quantity).Updates(set)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			if kind == Reserve {
				return ErrOutOfStock.Withf("not enough %s in stock for %d", l.SKU, l.Quantity)
			}
			return fmt.Errorf("inventory %s of %d %s: precondition failed", kind, l.Quantity, l.SKU)
		}
	}
	return nil
}

// record inserts the movement rows of lines, skipping those that already happened, and
// returns the lines whose movement is new. One statement in the common case; a unique-key
// violation (a repeated movement) falls back to one row at a time.
func (m *Movements) record(tx *gorm.DB, kind string, orderID int64, lines []Line) ([]Line, error) {
	rows := m.Rows(kind, orderID, lines)
	err := tx.Create(&rows).Error
	if err == nil || !database.IsDuplicateKey(err) {
		return lines, err
	}
	var fresh []Line
	for i := range rows {
		err := tx.Create(&rows[i]).Error
		switch {
		case database.IsDuplicateKey(err):
			continue // this movement already happened
		case err != nil:
			return nil, err
		}
		fresh = append(fresh, lines[i])
	}
	return fresh, nil
}
