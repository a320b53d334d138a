package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
)

// TestWorkPlacesItsRecord: the record is written where the work calls record, so the writes
// after it — the contended rows — run only for the attempt whose record went in; a duplicate
// is answered with the first attempt's outcome without reaching them.
func TestWorkPlacesItsRecord(t *testing.T) {
	e := newEnv(t)
	g := e.guard(idemlab.With(idempotent.Config{}, idemlab.Lab{NoCache: true, NoLock: true})) // the record alone decides
	ctx := context.Background()
	key := testKey(t, "user:1", "placed")
	var hot atomic.Int32
	work := func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		id, err := insertEffect(tx, key.BizKey)
		if err != nil {
			return err
		}
		if err := record(jsonResponse(http.StatusCreated, map[string]any{"id": id})); err != nil {
			return err
		}
		hot.Add(1) // the contended writes would go here
		return nil
	}
	first, err := g.Do(ctx, request(key, "a"), work)
	if err != nil || first.Outcome != idempotent.Executed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := g.Do(ctx, request(key, "a"), work)
	if err != nil || again.Outcome != idempotent.Replayed || string(again.Response.Body) != string(first.Response.Body) {
		t.Fatalf("again: %+v, %v; want the first answer replayed", again, err)
	}
	if n := hot.Load(); n != 1 {
		t.Errorf("the writes after the record ran %d times, want once", n)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("%d effects committed, want 1", n)
	}
}

// TestWorkMustRecordOnce: a work that returns nil without recording, or records twice, is a
// programming error: it rolls back, stores nothing, and says so.
func TestWorkMustRecordOnce(t *testing.T) {
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	for name, work := range map[string]idempotent.Work{
		"never": func(_ context.Context, tx *gorm.DB, _ func(idempotent.Response) error) error {
			_, err := insertEffect(tx, "never")
			return err
		},
		"twice": func(_ context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
			if _, err := insertEffect(tx, "twice"); err != nil {
				return err
			}
			if err := record(jsonResponse(http.StatusOK, nil)); err != nil {
				return err
			}
			return record(jsonResponse(http.StatusOK, nil))
		},
	} {
		key := testKey(t, "user:1", name)
		if _, err := g.Do(ctx, request(key, "a"), work); err == nil {
			t.Errorf("%s: no error", name)
		}
		if n, r := countEffects(t, e.db, name), countRecords(t, e.db, key); n != 0 || r != 0 {
			t.Errorf("%s: %d effects and %d records committed, want none", name, n, r)
		}
	}
}

// TestDefaultsReplay is the package doc's use with nothing set but the database and Redis:
// a storm of one key executes once and every other copy is answered with its outcome — the
// default Classify knows the record's own duplicate key on every dialect — never an error.
func TestDefaultsReplay(t *testing.T) {
	e := newEnv(t)
	g := idempotent.New(e.db, e.rdb, idempotent.Config{Registerer: prometheus.NewRegistry()})
	key := testKey(t, "user:1", "defaults")
	calls := storm(30, func(int) (idempotent.Result, error) {
		return g.Do(context.Background(), request(key, "a"), effectWork(key.BizKey, 0, http.StatusCreated))
	})
	executed := 0
	for _, c := range calls {
		switch {
		case c.err == nil && c.res.Outcome == idempotent.Executed:
			executed++
		case c.err == nil && c.res.Outcome == idempotent.Replayed:
		case errors.Is(c.err, idempotent.ErrKeyInUse):
		default:
			t.Errorf("a copy answered %+v, %v", c.res, c.err)
		}
	}
	if executed != 1 || countEffects(t, e.db, key.BizKey) != 1 {
		t.Errorf("%d executed, %d effects; want 1 and 1", executed, countEffects(t, e.db, key.BizKey))
	}
	// With the lock and the cache off the record alone must tell the copies apart.
	bare := idempotent.New(e.db, e.rdb, idemlab.With(idempotent.Config{Registerer: prometheus.NewRegistry()}, idemlab.Lab{NoLock: true, NoCache: true}))
	key = testKey(t, "user:1", "defaults-bare")
	for i := range 3 {
		res, err := bare.Do(context.Background(), request(key, "a"), effectWork(key.BizKey, 0, http.StatusCreated))
		want := idempotent.Replayed
		if i == 0 {
			want = idempotent.Executed
		}
		if err != nil || res.Outcome != want {
			t.Fatalf("copy %d with the defaults and no lock or cache: %+v, %v; want %s", i, res, err, want)
		}
	}
	// A copy that committed first while this attempt worked is recognised at this attempt's
	// record as a duplicate with the defaults, not a failure. (SQLite serializes write
	// transactions, so there a copy cannot commit while this one is open: the record of the
	// first is then found before the work, as above.)
	if e.db.Dialector.Name() == "sqlite" {
		return
	}
	key = testKey(t, "user:1", "defaults-race")
	res, err := bare.Do(context.Background(), request(key, "a"), func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		first := idempotent.New(e.db, e.rdb, idemlab.With(idempotent.Config{Registerer: prometheus.NewRegistry()}, idemlab.Lab{NoLock: true, NoCache: true}))
		done := make(chan error, 1)
		go func() {
			_, err := first.Do(context.Background(), request(key, "a"), effectWork(key.BizKey, 0, http.StatusCreated))
			done <- err
		}()
		if err := <-done; err != nil {
			return err
		}
		return record(jsonResponse(http.StatusCreated, map[string]any{"second": true}))
	})
	if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup {
		t.Errorf("the loser of a race, with the defaults: %+v, %v; want replayed from the dedup record", res, err)
	}
}
