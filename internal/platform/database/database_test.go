package database_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
)

// eachDialect runs fn once on a fresh SQLite database and once on a fresh MySQL one (skipped
// when no MySQL is configured, failed when CI=true), so that both dialects pass one suite.
func eachDialect(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, openSQLite(t)) })
	t.Run("mysql", func(t *testing.T) { fn(t, openMySQL(t)) })
}

// user is a row of the users table, the smallest one with both a primary key and a unique
// index, which these tests write to.
type user struct {
	ID        int64
	Name      string
	CreatedAt time.Time
}

func insertUser(db *gorm.DB, id int64, name string) error {
	return db.Create(&user{ID: id, Name: name, CreatedAt: time.Now().UTC()}).Error
}

// userNames returns the names in the users table, read outside any transaction.
func userNames(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var names []string
	if err := db.Model(&user{}).Order("name").Pluck("name", &names).Error; err != nil {
		t.Fatalf("read users: %v", err)
	}
	return names
}

func sameNames(got []string, want ...string) bool {
	return fmt.Sprint(got) == fmt.Sprint(want) && len(got) == len(want)
}

// TestTranslateDuplicateKey inserts duplicate rows for real and checks that both dialects'
// errors become ErrDuplicateKey while keeping the driver error inside.
func TestTranslateDuplicateKey(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		if err := insertUser(db, 1, "alice"); err != nil {
			t.Fatalf("first insert: %v", err)
		}
		tests := []struct {
			name string
			id   int64
			user string
		}{
			{"primary key", 1, "bob"},
			{"unique index", 2, "alice"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				raw := insertUser(db, tt.id, tt.user)
				if raw == nil {
					t.Fatal("duplicate insert succeeded")
				}
				err := database.Translate(raw)
				if !errors.Is(err, database.ErrDuplicateKey) {
					t.Errorf("Translate(%v) = %v, want ErrDuplicateKey", raw, err)
				}
				if errors.Is(err, database.ErrRetryable) {
					t.Errorf("Translate(%v) is also ErrRetryable", raw)
				}
				if !errors.Is(err, raw) {
					t.Errorf("Translate(%v) dropped the driver error", raw)
				}
				if !database.IsDuplicateKey(raw) {
					t.Errorf("IsDuplicateKey(%v) = false", raw)
				}
				if database.DialectOf(db) == database.MySQL {
					var me *gomysql.MySQLError
					if !errors.As(err, &me) || me.Number != 1062 {
						t.Errorf("Translate(%v) does not carry MySQL error 1062", raw)
					}
				}
			})
		}
	})
}

// TestTranslateRetryableLockWait makes a real lock wait timeout (1205) on MySQL: a second
// transaction waits for a row the first holds.
func TestTranslateRetryableLockWait(t *testing.T) {
	db := openMySQL(t)
	ctx := context.Background()
	if err := insertUser(db, 1, "alice"); err != nil {
		t.Fatal(err)
	}
	holder := db.WithContext(ctx).Begin()
	defer holder.Rollback()
	if err := holder.Exec("UPDATE users SET name = 'held' WHERE id = 1").Error; err != nil {
		t.Fatal(err)
	}
	waiter := db.WithContext(ctx).Begin()
	defer waiter.Rollback()
	if err := waiter.Exec("SET SESSION innodb_lock_wait_timeout = 1").Error; err != nil {
		t.Fatal(err)
	}
	raw := waiter.Exec("UPDATE users SET name = 'waited' WHERE id = 1").Error
	if raw == nil {
		t.Fatal("the second update did not wait for the row lock")
	}
	if !database.IsRetryable(raw) || database.IsDuplicateKey(raw) {
		t.Errorf("Translate(%v) = %v, want ErrRetryable only", raw, database.Translate(raw))
	}
}

// TestTranslateRetryableBusy makes a real SQLITE_BUSY: a writer holds the file's write lock
// while a connection that does not wait for it tries to write too.
func TestTranslateRetryableBusy(t *testing.T) {
	db := openSQLite(t)
	holder := db.Begin()
	defer holder.Rollback()
	if err := insertUser(holder, 1, "alice"); err != nil {
		t.Fatal(err)
	}
	raw := writeWithoutWaiting(t, db)
	if raw == nil {
		t.Fatal("a second writer got past the held write lock")
	}
	if !database.IsRetryable(raw) || database.IsDuplicateKey(raw) {
		t.Errorf("Translate(%v) = %v, want ErrRetryable only", raw, database.Translate(raw))
	}
}

// TestSQLiteTransactionsBeginImmediate checks that a SQLite transaction takes the write lock
// at BEGIN, before its first write. Otherwise two use cases that read before they write
// (the dedup lookup, then the business UPDATE) fail to upgrade their read locks instead of
// queueing on busy_timeout.
func TestSQLiteTransactionsBeginImmediate(t *testing.T) {
	db := openSQLite(t)
	holder := db.Begin()
	defer holder.Rollback()
	var n int64
	if err := holder.Model(&user{}).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	if err := writeWithoutWaiting(t, db); !database.IsRetryable(err) {
		t.Errorf("a write beside a transaction that has only read: %v; want SQLITE_BUSY, since BEGIN must have taken the write lock (_txlock=immediate)", err)
	}
}

// writeWithoutWaiting inserts a user on a connection of db's pool whose busy_timeout is 0,
// so that it fails at once instead of waiting for a held write lock.
func writeWithoutWaiting(t *testing.T, db *gorm.DB) error {
	t.Helper()
	ctx := context.Background()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	// Restore the pool's setting before the connection goes back to it.
	defer func() { _, _ = conn.ExecContext(ctx, "PRAGMA busy_timeout = 10000") }()
	_, err = conn.ExecContext(ctx, "INSERT INTO users (id, name, created_at) VALUES (99, 'nowait', '2026-01-01 00:00:00')")
	return err
}

// TestSQLiteTimeFormat checks that times are stored as text SQLite's own date functions and
// ORDER BY understand, and read back as the same UTC instant.
func TestSQLiteTimeFormat(t *testing.T) {
	db := openSQLite(t)
	at := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	if err := db.Create(&user{ID: 1, Name: "alice", CreatedAt: at}).Error; err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := db.Raw("SELECT CAST(created_at AS TEXT) FROM users WHERE id = 1").Scan(&stored).Error; err != nil {
		t.Fatal(err)
	}
	if want := "2026-03-04 05:06:07.891011+00:00"; stored != want {
		t.Errorf("stored created_at = %q, want %q", stored, want)
	}
	var back user
	if err := db.Take(&back, 1).Error; err != nil {
		t.Fatal(err)
	}
	if !back.CreatedAt.Equal(at) {
		t.Errorf("read back %v, want %v", back.CreatedAt, at)
	}
}

// TestTranslateLeavesOtherErrors checks the errors Translate must not reclassify.
func TestTranslateLeavesOtherErrors(t *testing.T) {
	other := errors.New("connection refused")
	syntax := &gomysql.MySQLError{Number: 1064, Message: "syntax error"}
	tests := []struct {
		name string
		in   error
	}{
		{"nil", nil},
		{"plain error", other},
		{"not found", gorm.ErrRecordNotFound},
		{"other MySQL error", syntax},
		{"wrapped MySQL error", fmt.Errorf("insert: %w", syntax)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := database.Translate(tt.in); got != tt.in {
				t.Errorf("Translate(%v) = %v, want it unchanged", tt.in, got)
			}
		})
	}
	deadlock := fmt.Errorf("update: %w", &gomysql.MySQLError{Number: 1213, Message: "Deadlock found"})
	if !database.IsRetryable(deadlock) {
		t.Errorf("IsRetryable(%v) = false, want true", deadlock)
	}
}

// TestConnWithoutTx checks that Conn runs on the pool when ctx carries no transaction, so a
// write is visible at once.
func TestConnWithoutTx(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		if database.InTx(ctx) {
			t.Fatal("InTx(background) = true")
		}
		if err := insertUser(database.Conn(ctx, db), 1, "alice"); err != nil {
			t.Fatal(err)
		}
		if got := userNames(t, db); !sameNames(got, "alice") {
			t.Errorf("users = %v, want [alice]", got)
		}
	})
}

// TestWithTx checks that Conn joins the transaction a context carries: its write is undone
// with that transaction.
func TestWithTx(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		tx := db.Begin()
		ctx := database.WithTx(context.Background(), tx)
		if !database.InTx(ctx) {
			t.Fatal("InTx(WithTx(...)) = false")
		}
		if err := insertUser(database.Conn(ctx, db), 1, "alice"); err != nil {
			t.Fatal(err)
		}
		var inside int64
		if err := database.Conn(ctx, db).Model(&user{}).Count(&inside).Error; err != nil || inside != 1 {
			t.Fatalf("inside the transaction: count %d, err %v; want 1", inside, err)
		}
		if err := tx.Rollback().Error; err != nil {
			t.Fatal(err)
		}
		if got := userNames(t, db); len(got) != 0 {
			t.Errorf("users after rollback = %v, want none: Conn did not use the transaction", got)
		}
	})
}

// TestTransaction checks commit, rollback on error and rollback on panic.
func TestTransaction(t *testing.T) {
	errBusiness := errors.New("out of stock")
	tests := []struct {
		name    string
		fn      func(ctx context.Context, tx *gorm.DB) error
		wantErr error
		panics  bool
		want    []string
	}{
		{
			name: "commit",
			fn:   func(ctx context.Context, tx *gorm.DB) error { return insertUser(tx, 1, "alice") },
			want: []string{"alice"},
		},
		{
			name: "rollback on error",
			fn: func(ctx context.Context, tx *gorm.DB) error {
				if err := insertUser(tx, 1, "alice"); err != nil {
					return err
				}
				return errBusiness
			},
			wantErr: errBusiness,
		},
		{
			name: "rollback on panic",
			fn: func(ctx context.Context, tx *gorm.DB) error {
				if err := insertUser(tx, 1, "alice"); err != nil {
					return err
				}
				panic("boom")
			},
			panics: true,
		},
		{
			name: "ctx carries the transaction",
			fn: func(ctx context.Context, _ *gorm.DB) error {
				if !database.InTx(ctx) {
					return errors.New("fn's ctx carries no transaction")
				}
				return nil
			},
		},
	}
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if err := db.Exec("DELETE FROM users").Error; err != nil {
					t.Fatal(err)
				}
				var err error
				panicked := func() (p bool) {
					defer func() { p = recover() != nil }()
					err = database.Transaction(context.Background(), db, tt.fn)
					return false
				}()
				if panicked != tt.panics {
					t.Fatalf("panicked = %v, want %v", panicked, tt.panics)
				}
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Errorf("Transaction = %v, want %v", err, tt.wantErr)
				}
				if got := userNames(t, db); !sameNames(got, tt.want...) {
					t.Errorf("users = %v, want %v", got, tt.want)
				}
			})
		}
	})
}

// TestNestedTransaction checks that a Transaction on a ctx carrying one runs in a savepoint:
// a failing inner use case undoes its own writes only, and the outer one decides the rest.
func TestNestedTransaction(t *testing.T) {
	errInner := errors.New("inner failed")
	tests := []struct {
		name     string
		innerErr error
		outerErr error
		want     []string
	}{
		{"inner fails, outer commits", errInner, nil, []string{"after", "before"}},
		{"both commit", nil, nil, []string{"after", "before", "inner"}},
		{"inner commits, outer fails", nil, errors.New("outer failed"), nil},
	}
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if err := db.Exec("DELETE FROM users").Error; err != nil {
					t.Fatal(err)
				}
				err := database.Transaction(context.Background(), db, func(ctx context.Context, tx *gorm.DB) error {
					if err := insertUser(database.Conn(ctx, db), 1, "before"); err != nil {
						return err
					}
					innerErr := database.Transaction(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
						if err := insertUser(database.Conn(ctx, db), 2, "inner"); err != nil {
							return err
						}
						return tt.innerErr
					})
					if !errors.Is(innerErr, tt.innerErr) || (tt.innerErr == nil && innerErr != nil) {
						return fmt.Errorf("inner Transaction = %v, want %v", innerErr, tt.innerErr)
					}
					if err := insertUser(database.Conn(ctx, db), 3, "after"); err != nil {
						return err
					}
					return tt.outerErr
				})
				if !errors.Is(err, tt.outerErr) || (tt.outerErr == nil && err != nil) {
					t.Fatalf("outer Transaction = %v, want %v", err, tt.outerErr)
				}
				if got := userNames(t, db); !sameNames(got, tt.want...) {
					t.Errorf("users = %v, want %v", got, tt.want)
				}
			})
		}
	})
}
