package database_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
)

var errRefused = errors.New("refused")

// TestBatch holds a batch's promises on both dialects: every statement runs in order, in the
// transaction; a conditional UPDATE that changes no row is its refusal, wherever it stands in
// the batch; a duplicate key keeps its meaning (IsDuplicateKey); a statement executed on the
// transaction's connection while the batch is open (as the kit's record is) travels in it; a
// read while it is open is refused.
func TestBatch(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		run := func(plan func(tx *gorm.DB, b *database.Batch)) error {
			return db.Transaction(func(tx *gorm.DB) error {
				b := database.Hold(tx)
				plan(tx, b)
				return b.Send(ctx)
			})
		}
		users := func() int64 {
			var n int64
			if err := db.Table("users").Count(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}

		err := run(func(tx *gorm.DB, b *database.Batch) {
			b.Insert(ctx, &user{ID: 1, Name: "alice"}, &[]user{{ID: 2, Name: "bob"}, {ID: 3, Name: "carol"}})
			if err := tx.Exec("INSERT INTO users (id, name, created_at) VALUES (4, 'dave', CURRENT_TIMESTAMP)").Error; err != nil {
				t.Errorf("a statement on the held transaction: %v", err)
			}
			b.Update(ctx, errRefused, "UPDATE users SET name = 'alice2' WHERE id = 1 AND name = 'alice'")
			b.Update(ctx, errRefused, "UPDATE users SET name = 'dave2' WHERE id = 4")
		})
		if err != nil || users() != 4 {
			t.Fatalf("a batch that holds: %v, %d users; want nil, 4", err, users())
		}

		err = run(func(_ *gorm.DB, b *database.Batch) {
			b.Insert(ctx, &user{ID: 5, Name: "erin"})
			b.Update(ctx, errRefused, "UPDATE users SET name = 'x' WHERE id = 1 AND name = 'alice'")
			b.Update(ctx, errors.New("second"), "UPDATE users SET name = 'y' WHERE id = 2")
		})
		if !errors.Is(err, errRefused) || users() != 4 {
			t.Errorf("a precondition that failed: %v, %d users; want the refusal, and 4 users", err, users())
		}

		err = run(func(_ *gorm.DB, b *database.Batch) {
			b.Insert(ctx, &user{ID: 6, Name: "frank"}, &user{ID: 7, Name: "bob"})
			b.Update(ctx, errRefused, "UPDATE users SET name = 'z' WHERE id = 1")
		})
		if !database.IsDuplicateKey(err) || users() != 4 {
			t.Errorf("a duplicate in the batch: %v, %d users; want a duplicate key, and 4 users", err, users())
		}

		if database.DialectOf(db) == database.MySQL {
			err = run(func(tx *gorm.DB, _ *database.Batch) {
				var n int64
				if err := tx.Table("users").Count(&n).Error; err == nil {
					t.Error("a read while the batch is held ran")
				}
			})
			if err != nil {
				t.Errorf("an empty batch: %v", err)
			}
		}
	})
}
