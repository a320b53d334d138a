package database_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
)

// TestNowIsTheDatabasesClock: database.Now reads the server's clock, in UTC, inside a
// transaction too, and the instance's clock running ten minutes ahead does not move it; a
// stored time compares with it in SQL on both dialects.
func TestNowIsTheDatabasesClock(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		prev := clock.SetOffset(10 * time.Minute)
		t.Cleanup(func() { clock.SetOffset(prev) })
		ctx := context.Background()
		now, err := database.Now(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(now); d < -2*time.Second || d > 2*time.Second || now.Location() != time.UTC {
			t.Fatalf("database.Now = %s, %s off the machine's clock; want within 2 s, in UTC", now, d)
		}
		err = db.Transaction(func(tx *gorm.DB) error {
			in, err := database.Now(ctx, tx)
			if err == nil && in.Before(now.Add(-time.Second)) {
				t.Errorf("database.Now in a transaction = %s, before %s", in, now)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// A time stored as gorm stores it compares with the database's now as a parameter.
		past, future := now.Add(-time.Minute), now.Add(time.Minute)
		if err := db.Create(&user{ID: 1, Name: "past", CreatedAt: past}).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Create(&user{ID: 2, Name: "future", CreatedAt: future}).Error; err != nil {
			t.Fatal(err)
		}
		var names []string
		if err := db.Model(&user{}).Where("created_at <= ?", now).Pluck("name", &names).Error; err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != "past" {
			t.Errorf("rows at or before the database's now: %v, want [past]", names)
		}
	})
}
