// Package account owns users, their API keys, their balances and the ledger behind every
// balance change. Balances live here rather than in internal/payment because a balance is the
// account's invariant (balance == sum of its ledger rows), whatever business fact credits it:
// a recharge today, a refund or a purchase by balance tomorrow.
//
// Recharges are where incident I2 happened: two concurrent channel callbacks both read
// "pending" and credited one top-up twice. Recharges.Notify is the defense, in layers: the
// idempotency record on channel + trade_no (idempotent), the conditional UPDATE
// PENDING → SUCCEEDED whose rows affected decides, and the ledger's unique (biz_type, biz_id),
// with the Redis lock in front as a fast path. docs/recharge-strategies.md measures the
// alternatives the articles rank and says why this combination.
package account

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// User is a customer of the shop.
type User struct {
	ID        int64
	Name      string
	CreatedAt time.Time
}

// APIKey is the SHA-256 of a user's API key; the key itself is never stored.
type APIKey struct {
	KeyHash   string `gorm:"primaryKey"`
	UserID    int64
	CreatedAt time.Time
}

// Account is a user's balance in cents.
type Account struct {
	UserID    int64 `gorm:"primaryKey"`
	Balance   int64
	Version   int64
	UpdatedAt time.Time
}

// Users authenticates API keys and creates users.
type Users struct {
	db  *gorm.DB
	ids *ids.Generator
	// keys caches positive lookups: a key's owner never changes, so a hit needs no query.
	keys sync.Map
}

// NewUsers returns the user store on db.
func NewUsers(db *gorm.DB, gen *ids.Generator) *Users { return &Users{db: db, ids: gen} }

// HashKey returns the stored form of an API key.
func HashKey(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])
}

// Authenticate returns the id of the user owning apiKey, or apperr.ErrUnauthorized.
func (u *Users) Authenticate(ctx context.Context, apiKey string) (int64, error) {
	hash := HashKey(apiKey)
	if id, ok := u.keys.Load(hash); ok {
		return id.(int64), nil
	}
	var k APIKey
	err := u.db.WithContext(ctx).Where("key_hash = ?", hash).Take(&k).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, apperr.ErrUnauthorized
	}
	if err != nil {
		return 0, err
	}
	u.keys.Store(hash, k.UserID)
	return k.UserID, nil
}

// Ensure creates the user name with apiKey and an empty account unless they exist, and
// returns the user's id. Every insert is conflict-tolerant, so it is safe on every start and
// from several instances at once.
func (u *Users) Ensure(ctx context.Context, name, apiKey string) (int64, error) {
	var user User
	err := u.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := clock.Now()
		candidate := User{ID: u.ids.Next(), Name: name, CreatedAt: now}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&candidate).Error; err != nil {
			return err
		}
		if err := tx.Where("name = ?", name).Take(&user).Error; err != nil {
			return err
		}
		key := APIKey{KeyHash: HashKey(apiKey), UserID: user.ID, CreatedAt: now}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&key).Error; err != nil {
			return err
		}
		acct := Account{UserID: user.ID, UpdatedAt: now}
		return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&acct).Error
	})
	return user.ID, err
}
