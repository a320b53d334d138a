// Package inventory owns stock per SKU. Every change is a conditional UPDATE whose WHERE
// clause carries its precondition (available >= q, reserved >= q), so concurrent buyers can
// never drive stock negative and a repeated movement is refused by inventory_movements'
// unique (order_id, sku, kind).
package inventory

import (
	"context"
	"errors"
	"net/http"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
)

// Item is the stock of one SKU. available + reserved + sold changes only through Put.
type Item struct {
	SKU       string `gorm:"column:sku;primaryKey"`
	Name      string
	Price     int64
	Available int64
	Reserved  int64
	Sold      int64
	Version   int64
	UpdatedAt time.Time
}

// TableName is the table of Item.
func (Item) TableName() string { return "inventory" }

// Errors of this package.
var (
	// ErrUnknownSKU is a SKU that is not in the catalog.
	ErrUnknownSKU = apperr.New(http.StatusBadRequest, "unknown_sku", "no such SKU")
	// ErrOutOfStock is a reservation larger than what is available.
	ErrOutOfStock = apperr.New(http.StatusConflict, "out_of_stock", "not enough stock available")
)

// MaxSKULen is the longest SKU (the width of the sku columns).
const MaxSKULen = 64

// ValidSKU reports whether sku matches [A-Za-z0-9._-]{1,64} (docs/contract.md). Anything else —
// spaces, slashes, non-ASCII, invalid UTF-8 — is refused before it reaches a store, where it
// could be truncated, folded or refused by a column's charset.
func ValidSKU(sku string) bool {
	if len(sku) == 0 || len(sku) > MaxSKULen {
		return false
	}
	for i := 0; i < len(sku); i++ {
		switch b := sku[i]; {
		case 'A' <= b && b <= 'Z', 'a' <= b && b <= 'z', '0' <= b && b <= '9', b == '.', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}

// CheckSKU returns invalid_request, naming field (such as "items[2].sku"), unless sku is
// ValidSKU. The SKU itself is quoted with %q, so that a hostile one cannot forge the detail.
func CheckSKU(field, sku string) error {
	if ValidSKU(sku) {
		return nil
	}
	return apperr.ErrInvalidRequest.Withf("%s must match [A-Za-z0-9._-]{1,%d}, got %q", field, MaxSKULen, sku)
}

// Store reads and changes stock.
type Store struct{ db *gorm.DB }

// NewStore returns the inventory store on db.
func NewStore(db *gorm.DB) *Store { return &Store{db: db} }

// Get returns the stock of sku, or ErrUnknownSKU.
func (s *Store) Get(ctx context.Context, sku string) (Item, error) {
	var it Item
	err := s.db.WithContext(ctx).Where("sku = ?", sku).Take(&it).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Item{}, ErrUnknownSKU.Withf("no such SKU %q", sku)
	}
	return it, err
}

// Put sets the price and available stock of sku to absolute values, creating the SKU when it
// is new. Absolute values make it naturally idempotent: sending it twice changes nothing more.
func (s *Store) Put(ctx context.Context, sku string, price, available int64) (Item, error) {
	now := clock.Now()
	it := Item{SKU: sku, Name: sku, Price: price, Available: available, UpdatedAt: now}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns: []clause.Column{{Name: "sku"}},
		DoUpdates: clause.Assignments(map[string]any{
			"price": price, "available": available, "updated_at": now,
			"version": gorm.Expr("version + 1"),
		}),
	}).Create(&it).Error
	if err != nil {
		return Item{}, err
	}
	return s.Get(ctx, sku)
}

// PutIfVersion is Put conditioned on the optimistic version (If-Match): it sets the price and
// available stock of sku only while its version is still one of versions, in one UPDATE whose
// WHERE clause carries the precondition — the number of rows it affected decides, never a
// SELECT before it. A stale or unknown version, or an unknown SKU, is ErrPreconditionFailed
// and changes nothing. An empty versions matches any version of an existing SKU (If-Match: *).
func (s *Store) PutIfVersion(ctx context.Context, sku string, price, available int64, versions []int64) (Item, error) {
	q := s.db.WithContext(ctx).Model(&Item{}).Where("sku = ?", sku)
	if len(versions) > 0 {
		q = q.Where("version IN ?", versions)
	}
	res := q.Updates(map[string]any{
		"price": price, "available": available, "updated_at": clock.Now(),
		"version": gorm.Expr("version + 1"),
	})
	if res.Error != nil {
		return Item{}, res.Error
	}
	if res.RowsAffected == 0 {
		return Item{}, apperr.ErrPreconditionFailed.Withf("%s changed since that version was read (or does not exist); read it again", sku)
	}
	return s.Get(ctx, sku)
}

// Ensure creates sku with its name, price and stock unless it exists; existing stock is left
// alone, so seeding is safe on every start.
func (s *Store) Ensure(ctx context.Context, it Item) error {
	it.UpdatedAt = clock.Now()
	return s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&it).Error
}
