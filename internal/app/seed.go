package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
)

// DemoUsers are the demo users and their public API keys (docs/contract.md, demo data). The
// public keys are seeded on the embedded database only; a real database gets random keys.
var DemoUsers = []struct{ Name, APIKey string }{
	{"alice", "demo-alice-key"},
	{"bob", "demo-bob-key"},
}

// DemoSKUs are the demo catalog (docs/contract.md, demo data).
var DemoSKUs = []inventory.Item{
	{SKU: "SKU-1001", Name: "Mechanical keyboard", Price: 49900, Available: 100},
	{SKU: "SKU-1002", Name: "USB-C cable", Price: 1999, Available: 1000},
	{SKU: "SKU-1003", Name: "Noise-cancelling headphones", Price: 89900, Available: 5},
}

// SeededUser is a demo user and the key this start gave it, for the banner: the public demo
// key on the embedded database, a random one — shown this once, stored only as its hash — on a
// real database.
type SeededUser struct {
	Name, APIKey string
	// Public says the key is the documented demo key.
	Public bool
}

// seedDemo creates the demo users and SKUs unless they exist. Every insert tolerates a
// conflict, so it is safe on every start and from several instances at once.
//
// On a real database (ONCEPAY_MYSQL_DSN) the public demo keys would let anyone who reads the
// README in (issue 27): each demo user gets a random key instead, made by the start that
// finds the user without a key and printed by that start only; a public demo key left by an
// earlier version is revoked.
func (a *App) seedDemo(ctx context.Context) error {
	a.Seeded = nil
	for _, u := range DemoUsers {
		if a.Config.EmbeddedDB() {
			if _, err := a.users.Ensure(ctx, u.Name, u.APIKey); err != nil {
				return err
			}
			a.Seeded = append(a.Seeded, SeededUser{Name: u.Name, APIKey: u.APIKey, Public: true})
			continue
		}
		key, err := a.seedRandomKey(ctx, u.Name, u.APIKey)
		if err != nil {
			return err
		}
		if key != "" {
			a.Seeded = append(a.Seeded, SeededUser{Name: u.Name, APIKey: key})
		}
	}
	for _, it := range DemoSKUs {
		if err := a.inventory.Ensure(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// seedRandomKey creates user name unless it exists, revokes its public key, and gives it a
// random key when it has none, in one transaction under the user's row lock (so that two
// instances starting at once mint one key). It returns the new key, or "" when the user
// already had one.
func (a *App) seedRandomKey(ctx context.Context, name, publicKey string) (string, error) {
	var key string
	err := a.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := clock.Now()
		candidate := account.User{ID: a.IDs.Next(), Name: name, CreatedAt: now}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&candidate).Error; err != nil {
			return err
		}
		var user account.User
		if err := database.ForUpdate(tx.Model(&account.User{})).Where("name = ?", name).Take(&user).Error; err != nil {
			return err
		}
		if err := tx.Where("key_hash = ?", account.HashKey(publicKey)).Delete(&account.APIKey{}).Error; err != nil {
			return err
		}
		var keys int64
		if err := tx.Model(&account.APIKey{}).Where("user_id = ?", user.ID).Count(&keys).Error; err != nil || keys > 0 {
			return err
		}
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		key = "key_" + hex.EncodeToString(b)
		if err := tx.Create(&account.APIKey{KeyHash: account.HashKey(key), UserID: user.ID, CreatedAt: now}).Error; err != nil {
			return err
		}
		return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&account.Account{UserID: user.ID, UpdatedAt: now}).Error
	})
	if err != nil {
		key = ""
	}
	return key, err
}
