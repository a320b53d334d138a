package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// abortRecords makes MariaDB abort, with error 1213 as a deadlock or a Galera certification
// conflict does, every insert of a finished dedup record of bizKey whose id is at most upTo
// (the records are numbered 1, 2, 3 … by the returned Config.NewID): the first upTo attempts
// of the key are aborted after their work ran, the later ones commit. upTo < 0 aborts every
// attempt.
func abortRecords(t *testing.T, db *gorm.DB, bizKey string, upTo int) func() int64 {
	t.Helper()
	when := fmt.Sprintf("NEW.biz_key = '%s' AND (%d < 0 OR NEW.id <= %d)", bizKey, upTo, upTo)
	ddl := "CREATE TRIGGER test_abort_records BEFORE INSERT ON idempotency_records FOR EACH ROW BEGIN IF " + when + " THEN " +
		"SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'Deadlock: wsrep aborted transaction (injected by the test)', MYSQL_ERRNO = 1213; END IF; END"
	if err := db.Exec(ddl).Error; err != nil {
		t.Fatalf("create trigger: %v", err)
	}
	var next atomic.Int64
	return func() int64 { return next.Add(1) }
}

// TestDoOutlastsAConflictStreak: on a Galera cluster a transaction on a hot row may lose
// certification several times in a row. The guard runs it again, with backoff, past the four
// quick attempts it once gave up after (answering 500): aborted six times, the seventh attempt
// commits, and the effect happens once (issue 21).
func TestDoOutlastsAConflictStreak(t *testing.T) {
	idemtest.RequireMySQL(t)
	e := newEnvOn(t, idemtest.MySQL)
	key := testKey(t, "user:1", "streak")
	g := e.guard(idempotent.Config{NewID: abortRecords(t, e.db, key.BizKey, 6)})
	var calls atomic.Int32
	start := time.Now()
	mustExecute(t, g, request(key, `{}`), countingWork(&calls, effectWork(key.BizKey, 0, http.StatusCreated)))
	if calls.Load() != 7 {
		t.Errorf("the work ran %d times, want 7 (6 aborted, then the commit)", calls.Load())
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
	t.Logf("6 aborts outlasted in %s", time.Since(start).Round(time.Millisecond))
}

// TestDoAnswersBusyWhenAbortsLast: a transaction the database aborts every time is run
// again for Config.RetryFor, then answered ErrDatabaseBusy — the code unavailable, a 503 to
// retry — never the raw deadlock (a 500), and nothing is stored: once the conflicts end, the
// same key executes (issue 21).
func TestDoAnswersBusyWhenAbortsLast(t *testing.T) {
	idemtest.RequireMySQL(t)
	e := newEnvOn(t, idemtest.MySQL)
	key := testKey(t, "user:1", "busy")
	const budget = 400 * time.Millisecond
	g := e.guard(idempotent.Config{NewID: abortRecords(t, e.db, key.BizKey, -1), RetryFor: budget})
	var calls atomic.Int32
	work := countingWork(&calls, effectWork(key.BizKey, 0, http.StatusCreated))

	start := time.Now()
	res, err := g.Do(context.Background(), request(key, `{}`), work)
	took := time.Since(start)
	if !errors.Is(err, idempotent.ErrDatabaseBusy) || !errors.Is(err, idempotent.ErrUnavailable) || res.Outcome != idempotent.Unavailable {
		t.Fatalf("Do on a transaction aborted every time: outcome %q err %v, want unavailable ErrDatabaseBusy", res.Outcome, err)
	}
	if calls.Load() < 5 || took > budget+300*time.Millisecond {
		t.Errorf("the work ran %d times in %s, want more than 4 reruns within the %s budget", calls.Load(), took, budget)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 0 {
		t.Errorf("side_effects rows = %d after the 503, want 0", n)
	}
	if n := countRecords(t, e.db, key); n != 0 {
		t.Errorf("idempotency_records rows = %d after the 503, want 0", n)
	}

	if err := e.db.Exec("DROP TRIGGER test_abort_records").Error; err != nil {
		t.Fatal(err)
	}
	mustExecute(t, g, request(key, `{}`), work)
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d after the conflicts ended, want 1", n)
	}
}

// TestDoRetriesARealDeadlock: two writes lock two rows in opposite orders, so that InnoDB
// sees a real deadlock (error 1213, no trigger) and rolls one of them back; the guard runs the
// victim again and both writes end executed, each effect once.
func TestDoRetriesARealDeadlock(t *testing.T) {
	idemtest.RequireMySQL(t)
	e := newEnvOn(t, idemtest.MySQL)
	for _, stmt := range []string{
		"CREATE TABLE hot_rows (id INT PRIMARY KEY, n INT NOT NULL)",
		"INSERT INTO hot_rows VALUES (1, 0), (2, 0)",
	} {
		if err := e.db.Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	g := e.guard(idempotent.Config{})
	// Each first attempt locks its first row, then waits for the other's first lock, so
	// that their second locks cross.
	var locked sync.WaitGroup
	locked.Add(2)
	var calls atomic.Int32
	crossing := func(first, second int, k string) idempotent.Work {
		var attempt atomic.Int32
		return idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
			calls.Add(1)
			if err := tx.Exec("UPDATE hot_rows SET n = n + 1 WHERE id = ?", first).Error; err != nil {
				return idempotent.Response{}, err
			}
			if attempt.Add(1) == 1 {
				locked.Done()
				waitGroupTimeout(&locked, 5*time.Second)
			}
			if err := tx.Exec("UPDATE hot_rows SET n = n + 1 WHERE id = ?", second).Error; err != nil {
				return idempotent.Response{}, err
			}
			id, err := insertEffect(tx, k)
			return jsonResponse(http.StatusCreated, map[string]any{"id": id}), err
		})
	}
	keys := []idempotent.Key{testKey(t, "user:1", "a"), testKey(t, "user:1", "b")}
	answers := make([]call, 2)
	var wg sync.WaitGroup
	for i, order := range [][2]int{{1, 2}, {2, 1}} {
		wg.Go(func() {
			answers[i].res, answers[i].err = g.Do(context.Background(), request(keys[i], `{}`), crossing(order[0], order[1], keys[i].BizKey))
		})
	}
	wg.Wait()
	for i, a := range answers {
		if a.err != nil || a.res.Outcome != idempotent.Executed {
			t.Errorf("write %d: outcome %q err %v, want executed", i, a.res.Outcome, a.err)
		}
		if n := countEffects(t, e.db, keys[i].BizKey); n != 1 {
			t.Errorf("write %d: side_effects rows = %d, want 1", i, n)
		}
	}
	if calls.Load() != 3 {
		t.Errorf("the works ran %d times, want 3: the deadlock's victim once more", calls.Load())
	}
	var n1, n2 int
	if err := e.db.Raw("SELECT (SELECT n FROM hot_rows WHERE id = 1), (SELECT n FROM hot_rows WHERE id = 2)").Row().Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	if n1 != 2 || n2 != 2 {
		t.Errorf("hot rows = %d, %d; want 2, 2 (each write once, the victim's first attempt rolled back)", n1, n2)
	}
}

// TestDoAnswersBusyOnALockWaitTimeout: a work's statement that waited out the lock wait
// timeout behind another transaction is answered ErrDatabaseBusy (503) at once — running it
// again would only wait as long again — with nothing stored; once the row is free the same
// key executes.
func TestDoAnswersBusyOnALockWaitTimeout(t *testing.T) {
	idemtest.RequireMySQL(t)
	e := newEnvOn(t, idemtest.MySQL)
	for _, stmt := range []string{
		"CREATE TABLE hot_rows (id INT PRIMARY KEY, n INT NOT NULL)",
		"INSERT INTO hot_rows VALUES (1, 0)",
	} {
		if err := e.db.Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	sqlDB, err := e.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	holder, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT n FROM hot_rows WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	g := e.guard(idempotent.Config{})
	key := testKey(t, "user:1", "wait")
	var calls atomic.Int32
	work := idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		calls.Add(1)
		if err := tx.Exec("SET SESSION innodb_lock_wait_timeout = 1").Error; err != nil {
			return idempotent.Response{}, err
		}
		if err := tx.Exec("UPDATE hot_rows SET n = n + 1 WHERE id = 1").Error; err != nil {
			return idempotent.Response{}, err
		}
		id, err := insertEffect(tx, key.BizKey)
		return jsonResponse(http.StatusCreated, map[string]any{"id": id}), err
	})
	res, err := g.Do(ctx, request(key, `{}`), work)
	if !errors.Is(err, idempotent.ErrDatabaseBusy) || res.Outcome != idempotent.Unavailable {
		t.Fatalf("Do behind a held row: outcome %q err %v, want unavailable ErrDatabaseBusy", res.Outcome, err)
	}
	if calls.Load() != 1 {
		t.Errorf("the work ran %d times, want 1 (a lock wait is not run again)", calls.Load())
	}
	if n := countRecords(t, e.db, key); n != 0 {
		t.Errorf("idempotency_records rows = %d after the 503, want 0", n)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	mustExecute(t, g, request(key, `{}`), work)
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d after the row was freed, want 1", n)
	}
}

// waitGroupTimeout waits for wg, or d at most.
func waitGroupTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}
