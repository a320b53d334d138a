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
// stock can never go negative however many buyers race (rows changed decide). Each ? is the
// quantity.
var updates = map[string]struct{ set, guard string }{
	Reserve: {"available = available - ?, reserved = reserved + ?", "available >= ?"},
	Confirm: {"reserved = reserved - ?, sold = sold + ?", "reserved >= ?"},
	Release: {"reserved = reserved - ?, available = available + ?", "reserved >= ?"},
	Return:  {"sold = sold - ?, available = available + ?", "sold >= ?"},
}

// Prices returns the current price of each SKU in lines and the database's clock (see
// database.Now), read in one plain query that locks nothing — a write that needs both pays
// one round trip — or ErrUnknownSKU naming the first SKU that is not in the catalog.
func (m *Movements) Prices(ctx context.Context, tx *gorm.DB, lines []Line) (map[string]int64, time.Time, error) {
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = l.SKU
	}
	var items []struct {
		SKU   string `gorm:"column:sku"`
		Price int64
		Now   database.Clock
	}
	err := tx.WithContext(ctx).Model(&Item{}).Select("sku, price, "+database.NowSQL(tx)+" AS now").
		Where("sku IN ?", skus).Find(&items).Error
	if err != nil {
		return nil, time.Time{}, err
	}
	prices := make(map[string]int64, len(items))
	for _, it := range items {
		prices[it.SKU] = it.Price
	}
	for _, s := range skus {
		if _, ok := prices[s]; !ok {
			return nil, time.Time{}, ErrUnknownSKU.Withf("no such SKU %q", s)
		}
	}
	return prices, items[0].Now.Time, nil
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
	b := database.Hold(tx)
	m.Move(ctx, b, kind, fresh)
	return b.Send(ctx)
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

// Move adds to b the conditional stock UPDATEs of kind for lines — the contended rows — in
// SKU order, so that two orders touching the same SKUs lock them in the same order and cannot
// deadlock. Their movement rows must be in the transaction already, or earlier in b. When b
// is sent, a reservation larger than what is available is ErrOutOfStock.
func (m *Movements) Move(ctx context.Context, b *database.Batch, kind string, lines []Line) {
	u := updates[kind]
	sorted := slices.Clone(lines)
	slices.SortFunc(sorted, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	now := clock.Now()
	for _, l := range sorted {
		refusal := fmt.Errorf("inventory %s of %d %s: precondition failed", kind, l.Quantity, l.SKU)
		if kind == Reserve {
			refusal = ErrOutOfStock.Withf("not enough %s in stock for %d", l.SKU, l.Quantity)
		}
		b.Update(ctx, refusal,
			"UPDATE inventory SET "+u.set+", version = version + 1, updated_at = ? WHERE sku = ? AND "+u.guard,
			l.Quantity, l.Quantity, now, l.SKU, l.Quantity)
	}
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
