package lab

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestWriteRetriesWhileBusy: a lab write that meets a transaction holding what it writes is
// run again until it goes through, once that transaction has committed; a write that fails
// for another reason (a duplicate key) is not run again. It runs on SQLite, where the holder
// keeps the file's write lock and the write does not wait (busy_timeout 0), and on MySQL when
// ONCEPAY_TEST_MYSQL_DSN is set, where the holder keeps the row and the write waits 1 s for it
// (innodb_lock_wait_timeout 1).
func TestWriteRetriesWhileBusy(t *testing.T) {
	dialects := []struct {
		name string
		open func(testing.TB) *gorm.DB
		// noWait makes the connection's statements fail at once, or soon, on a held lock;
		// restore puts the pool's setting back.
		noWait, restore string
		hold            time.Duration
	}{
		{"sqlite", testenv.SQLite, "PRAGMA busy_timeout = 0", "PRAGMA busy_timeout = 10000", 300 * time.Millisecond},
		{"mysql", testenv.DB, "SET SESSION innodb_lock_wait_timeout = 1", "SET SESSION innodb_lock_wait_timeout = DEFAULT", 1500 * time.Millisecond},
	}
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			if d.name == "mysql" && !testenv.UsingMySQL() {
				t.Skipf("%s is not set", testenv.EnvMySQLDSN)
			}
			db := d.open(t)
			if err := db.Exec("CREATE TABLE lab_write_test (id INT PRIMARY KEY, n INT NOT NULL)").Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Exec("INSERT INTO lab_write_test (id, n) VALUES (1, 0)").Error; err != nil {
				t.Fatal(err)
			}
			l := &Lab{db: db}
			var (
				mu       sync.Mutex
				attempts int
				errs     []error
			)
			// add runs stmt on one connection that does not wait for a held lock.
			add := func(stmt string) func(db *gorm.DB) error {
				return func(db *gorm.DB) error {
					err := db.Connection(func(conn *gorm.DB) error {
						if err := conn.Exec(d.noWait).Error; err != nil {
							return err
						}
						defer conn.Exec(d.restore)
						return conn.Exec(stmt).Error
					})
					mu.Lock()
					attempts++
					errs = append(errs, err)
					mu.Unlock()
					return err
				}
			}

			holder := db.Begin()
			if err := holder.Exec("UPDATE lab_write_test SET n = n + 1 WHERE id = 1").Error; err != nil {
				holder.Rollback()
				t.Fatal(err)
			}
			committed := make(chan error, 1)
			go func() {
				time.Sleep(d.hold)
				committed <- holder.Commit().Error
			}()
			err := l.write(context.Background(), add("UPDATE lab_write_test SET n = n + 10 WHERE id = 1"))
			if cerr := <-committed; cerr != nil {
				t.Fatalf("the holder's commit: %v", cerr)
			}
			if err != nil {
				t.Fatalf("write: %v, want it through once the holder committed", err)
			}
			if attempts < 2 || !database.IsRetryable(errs[0]) {
				t.Fatalf("%d attempts, the first failing with %v: want the busy write run again", attempts, errs[0])
			}
			var n int
			if err := db.Raw("SELECT n FROM lab_write_test WHERE id = 1").Scan(&n).Error; err != nil || n != 11 {
				t.Errorf("n = %d (%v), want 11: the holder's 1 and the write's 10, once", n, err)
			}

			attempts, errs = 0, nil
			err = l.write(context.Background(), add("INSERT INTO lab_write_test (id, n) VALUES (1, 0)"))
			if !database.IsDuplicateKey(err) || attempts != 1 {
				t.Errorf("a duplicate key: %v after %d attempts, want it returned after one", err, attempts)
			}
			if errors.Is(err, database.ErrRetryable) {
				t.Errorf("a duplicate key reads as retryable: %v", err)
			}
		})
	}
}
