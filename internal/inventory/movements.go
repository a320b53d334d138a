package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

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
)

// Line is a quantity of one SKU in an order.
type Line struct {
	SKU      string
	Quantity int64
}

// movement is a row of inventory_movements.
type movement struct {
	ID        int64
	OrderID   int64
	SKU       string `gorm:"column:sku"`
	Kind      string
	Quantity  int64
	CreatedAt time.Time
}

func (movement) TableName() string { return "inventory_movements" }

// Movements applies stock movements for orders. Every method must run inside the caller's
// transaction (ctx carries it), next to the order change it belongs to.
type Movements struct {
	store *Store
	ids   *ids.Generator
}

// NewMovements returns the movement writer over store.
func NewMovements(store *Store, gen *ids.Generator) *Movements {
	return &Movements{store: store, ids: gen}
}

// updates are the conditional UPDATE of each kind: the WHERE clause is the precondition, so
// stock can never go negative however many buyers race (rows affected decides).
var updates = map[string]struct {
	set   map[string]string // column → expression of the quantity
	guard string
}{
	Reserve: {map[string]string{"available": "available - ?", "reserved": "reserved + ?"}, "available >= ?"},
	Confirm: {map[string]string{"reserved": "reserved - ?", "sold": "sold + ?"}, "reserved >= ?"},
	Release: {map[string]string{"reserved": "reserved - ?", "available": "available + ?"}, "reserved >= ?"},
}

// Prices returns the current price of each SKU in lines, or ErrUnknownSKU naming the first
// SKU that is not in the catalog.
func (m *Movements) Prices(ctx context.Context, lines []Line) (map[string]int64, error) {
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = l.SKU
	}
	var items []Item
	if err := database.Conn(ctx, m.store.db).Where("sku IN ?", skus).Find(&items).Error; err != nil {
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

// Apply moves stock of kind for every line of orderID. Lines are taken in SKU order so two
// orders touching the same SKUs lock their rows in the same order and cannot deadlock. Each
// movement row is inserted first: its unique (order_id, sku, kind) turns a repeated movement
// into a no-op. A reservation larger than what is available is ErrOutOfStock; the caller's
// transaction must then roll back the lines already moved.
func (m *Movements) Apply(ctx context.Context, kind string, orderID int64, lines []Line) error {
	u, ok := updates[kind]
	if !ok {
		return fmt.Errorf("unknown movement kind %q", kind)
	}
	sorted := slices.Clone(lines)
	slices.SortFunc(sorted, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	conn := database.Conn(ctx, m.store.db)
	now := time.Now().UTC()
	for _, l := range sorted {
		mv := movement{ID: m.ids.Next(), OrderID: orderID, SKU: l.SKU, Kind: kind, Quantity: l.Quantity, CreatedAt: now}
		if err := database.Translate(conn.Create(&mv).Error); err != nil {
			if errors.Is(err, database.ErrDuplicateKey) {
				continue // this movement already happened
			}
			return err
		}
		set := map[string]any{"version": gorm.Expr("version + 1"), "updated_at": now}
		for col, expr := range u.set {
			set[col] = gorm.Expr(expr, l.Quantity)
		}
		res := conn.Model(&Item{}).Where("sku = ? AND "+u.guard, l.SKU, l.Quantity).Updates(set)
		if res.Error != nil {
			return database.Translate(res.Error)
		}
		if res.RowsAffected == 0 {
			if kind == Reserve {
				return ErrOutOfStock.Withf("not enough %s in stock for %d", l.SKU, l.Quantity)
			}
			return fmt.Errorf("inventory %s of %d %s for order %d: precondition failed", kind, l.Quantity, l.SKU, orderID)
		}
	}
	return nil
}
