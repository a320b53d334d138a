package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/idemtest"
	"github.com/oncepay/oncepay/idempotent/internal/testnet"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
)

// throughProxy opens db's database again through a fault proxy of its own, and returns
// the proxy with the new handle. Each option adjusts the new handle's driver settings.
func throughProxy(t *testing.T, db *gorm.DB, options ...func(*gomysql.Config)) (*testnet.Proxy, *gorm.DB) {
	t.Helper()
	cfg, err := gomysql.ParseDSN(db.Dialector.(*mysql.Dialector).DSN)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range options {
		o(cfg)
	}
	p, err := testnet.Listen(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cfg.Addr = p.Addr()
	via, err := gorm.Open(mysql.Open(cfg.FormatDSN()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := via.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return p, via
}

// proxiedGuard is a guard on MariaDB through a fault proxy of its own (throughProxy, with
// options), classifying errors with mysqlerr and counting into reg. The test's env reaches the
// same database directly, to look at what was written. It skips without MariaDB.
func proxiedGuard(t *testing.T, options ...func(*gomysql.Config)) (e *env, p *testnet.Proxy, g *idempotent.Guard, reg *prometheus.Registry) {
	t.Helper()
	idemtest.RequireMySQL(t)
	e = newEnvOn(t, idemtest.MySQL)
	p, via := throughProxy(t, e.db, options...)
	reg = prometheus.NewRegistry()
	g = idempotent.New(via, e.rdb, idempotent.Config{Classify: mysqlerr.Classify, Registerer: reg})
	return e, p, g, reg
}

// TestCommitAnswerLost: the connection breaks the moment the dedup transaction's COMMIT has
// gone out, before its answer comes back (a proxy cuts it: testnet.Proxy.CutAfterCommit). The
// server commits; the guard cannot know that from the connection, so it asks the record on
// another one (resolveCommit) and answers the attempt as executed — not 503, and never by
// running the work a second time. The next copy of the request replays it. Without the
// resolution the attempt answers the driver's "invalid connection", a 503 to the client.
func TestCommitAnswerLost(t *testing.T) {
	e, p, g, reg := proxiedGuard(t)
	key := testKey(t, "u1", "k1")
	ctx := context.Background()

	var cuts atomic.Int32
	defer p.CutAfterCommit(1, func() { cuts.Add(1) })()
	res, err := g.Do(ctx, request(key, "a"), effectWork(key.BizKey, 0, http.StatusCreated))
	if cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d COMMITs, want 1", cuts.Load())
	}
	wantExecutedOnce(t, e, key, "Do after a lost COMMIT answer", res, err)
	if got := metricValue(t, reg, "idempotency_tx_indefinite_total"); got != 1 {
		t.Errorf("idempotency_tx_indefinite_total = %v, want 1", got)
	}

	again, err := g.Do(ctx, request(key, "a"), effectWork(key.BizKey, 0, http.StatusCreated))
	if err != nil || again.Outcome != idempotent.Replayed || string(again.Response.Body) != string(res.Response.Body) {
		t.Fatalf("the copy after = %+v, %v; want the first answer replayed", again, err)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Fatalf("%d side effects after the copy, want 1", n)
	}
}

// TestCommitLandsAfterItsAnswerWasLost: the client gives up on its COMMIT (its read timeout,
// 150 ms) while the COMMIT is still on its way (the proxy holds it back 400 ms, then cuts the
// connection). Asked at once, the record is not there yet, so the guard runs the transaction
// again; the rerun's record waits on the first transaction's lock until the COMMIT lands, then
// meets it as a duplicate. That record is this call's own (its id), and the guard answers the
// call executed with one effect — not replayed, which a CI run once answered when the record
// was read before the server had applied the COMMIT, and never a second effect.
func TestCommitLandsAfterItsAnswerWasLost(t *testing.T) {
	e, p, g, _ := proxiedGuard(t, func(c *gomysql.Config) { c.ReadTimeout = 150 * time.Millisecond })
	key := testKey(t, "u1", "k1")
	var cuts atomic.Int32
	defer p.CommitLate(1, 400*time.Millisecond, func() { cuts.Add(1) })()
	res, err := g.Do(context.Background(), request(key, "a"), effectWork(key.BizKey, 0, http.StatusCreated))
	if cuts.Load() != 1 {
		t.Fatalf("the proxy held back %d COMMITs, want 1", cuts.Load())
	}
	wantExecutedOnce(t, e, key, "Do after a COMMIT that landed late", res, err)
}

// wantExecutedOnce fails the test unless what — a Do of key through effectWork — answered
// executed 201 and left one side effect and one record.
func wantExecutedOnce(t *testing.T, e *env, key idempotent.Key, what string, res idempotent.Result, err error) {
	t.Helper()
	if err != nil || res.Outcome != idempotent.Executed || res.Response.Status != http.StatusCreated {
		t.Fatalf("%s = %+v, %v; want executed 201", what, res, err)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Fatalf("%d side effects, want 1", n)
	}
	if n := countRecords(t, e.db, key); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
}

// TestConnectionLostInTheWork: the connection is reset while the work's transaction runs,
// before any COMMIT (the answer of the work's insert is lost). The server rolls the
// transaction back; the guard runs it again on another connection and the write happens
// once.
func TestConnectionLostInTheWork(t *testing.T) {
	e, p, g, _ := proxiedGuard(t)
	key := testKey(t, "u1", "k1")
	var runs, failed atomic.Int32
	work := idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		if runs.Add(1) == 1 {
			// The first run's connection is reset at the insert's answer.
			defer p.ResetAfterSend()()
		}
		id, err := insertEffect(tx, key.BizKey)
		if err != nil {
			failed.Add(1)
			return idempotent.Response{}, err
		}
		return jsonResponse(http.StatusCreated, map[string]any{"id": id}), nil
	})
	res, err := g.Do(context.Background(), request(key, "a"), work)
	if err != nil || res.Outcome != idempotent.Executed {
		t.Fatalf("Do = %+v, %v; want executed after a rerun", res, err)
	}
	if failed.Load() != 1 || runs.Load() != 2 {
		t.Fatalf("the work ran %d times and failed %d; want a reset first run and one rerun", runs.Load(), failed.Load())
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Fatalf("%d side effects, want 1", n)
	}
}

// metricValue is the value of the registered counter named name.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestDuplicateWhileTheRecordCannotBeRead: the work's transaction meets a duplicate key after
// it recorded (its own unique key here; in a batch it may be the record's), and the database
// goes out of reach before the guard can read the record to tell whose it was. The answer is
// the read's failure — a database out of reach, which a service answers 503 and the guard
// runs again while RetryFor lasts — never the duplicate, which would reach the service as an
// unexpected error (a 500 in the chaos run) although the key may well be another copy's.
func TestDuplicateWhileTheRecordCannotBeRead(t *testing.T) {
	e, p, g, _ := proxiedGuard(t)
	key := testKey(t, "u1", "k1")
	taken, err := insertEffect(e.db, "taken")
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Do(context.Background(), request(key, "a"), func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		if err := record(idempotent.Response{Status: http.StatusCreated}); err != nil {
			return err
		}
		dup := tx.Create(&sideEffect{ID: taken, K: key.BizKey}).Error
		p.Close() // the database goes out of reach: the record cannot be read
		return dup
	})
	if err == nil {
		t.Fatal("Do answered no error with the database out of reach")
	}
	if class := mysqlerr.Classify(err); class == dberr.DuplicateKey {
		t.Fatalf("Do = %v: classified as a duplicate key; want the failure of the record's read", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Do = %v: want the refused connection of the record's read in the chain", err)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 0 {
		t.Errorf("%d side effects, want none", n)
	}
}
