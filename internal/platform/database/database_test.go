package database_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
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

// sqliteErr stands for a SQLite driver's error: it carries the extended result code.
type sqliteErr struct{ code int }

func (e sqliteErr) Error() string { return fmt.Sprintf("sqlite error (%d)", e.code) }
func (e sqliteErr) Code() int     { return e.code }

// TestTranslateTyped: Translate decides by the driver's code — a MySQL error number, a SQLite
// extended result code — never by an error's text: a message that merely reads like a
// duplicate key or a busy database is returned unchanged.
func TestTranslateTyped(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		duplicate bool
		retryable bool
	}{
		{"mysql duplicate key", fmt.Errorf("insert: %w", &gomysql.MySQLError{Number: 1062}), true, false},
		{"mysql deadlock", &gomysql.MySQLError{Number: 1213}, false, true},
		{"galera error during commit", &gomysql.MySQLError{Number: 1180}, false, true},
		{"a serialization failure", &gomysql.MySQLError{Number: 9999, SQLState: [5]byte{'4', '0', '0', '0', '1'}}, false, true},
		{"galera node not ready is unavailable, not retryable", &gomysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}}, false, false},
		{"sqlite unique", fmt.Errorf("insert: %w", sqliteErr{2067}), true, false},
		{"sqlite primary key", sqliteErr{1555}, true, false},
		{"sqlite busy", sqliteErr{5}, false, true},
		{"sqlite busy snapshot", sqliteErr{5 | 2<<8}, false, true},
		{"sqlite locked", sqliteErr{6}, false, true},
		{"sqlite check constraint", sqliteErr{275}, false, false},
		{"a unique-looking text", errors.New("constraint failed: UNIQUE constraint failed: users.name (2067)"), false, false},
		{"a busy-looking text", errors.New("database is locked (5) (SQLITE_BUSY)"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := database.IsDuplicateKey(tt.err); got != tt.duplicate {
				t.Errorf("IsDuplicateKey(%v) = %v, want %v", tt.err, got, tt.duplicate)
			}
			if got := database.IsRetryable(tt.err); got != tt.retryable {
				t.Errorf("IsRetryable(%v) = %v, want %v", tt.err, got, tt.retryable)
			}
		})
	}
}

// TestGaleraParamsOnAPlainServer: a MariaDB server that is not a Galera node (wsrep_on OFF)
// is recognised as such, and Open with WsrepSyncWait leaves its connections' sessions alone;
// a DSN that names wsrep_sync_wait itself is never asked about or changed. The Galera side
// (the variable set on every connection of a node) is tested on a real cluster
// (internal/testsupport/galera).
func TestGaleraParamsOnAPlainServer(t *testing.T) {
	db := openMySQL(t)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	galera, err := database.IsGalera(context.Background(), sqlDB)
	if err != nil || galera {
		t.Fatalf("IsGalera on the test server = %v, %v; want false (wsrep_on is OFF)", galera, err)
	}
	dsn := os.Getenv(testenv.EnvMySQLDSN)
	pool, err := database.Open(database.Options{MySQLDSN: dsn, WsrepSyncWait: 1, MaxOpenConns: 1})
	if err != nil {
		t.Fatalf("Open with WsrepSyncWait on a plain server: %v", err)
	}
	defer database.Close(pool)
	var wait int
	if err := pool.Raw("SELECT @@session.wsrep_sync_wait").Row().Scan(&wait); err != nil || wait != 0 {
		t.Errorf("wsrep_sync_wait on a plain server = %d (%v), want the server's 0", wait, err)
	}
}
