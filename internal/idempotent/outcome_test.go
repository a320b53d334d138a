package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/database"
)

// mustExecute runs req through g and fails the test unless the work executed.
func mustExecute(t *testing.T, g *idempotent.Guard, req idempotent.Request, work idempotent.Work) idempotent.Result {
	t.Helper()
	res, err := g.Do(context.Background(), req, work)
	if err != nil || res.Outcome != idempotent.Executed {
		t.Fatalf("Do(%s): outcome %q layer %q err %v, want executed", req.Key, res.Outcome, res.Layer, err)
	}
	return res
}

// TestKeyReusedWithAnotherRequest: the same key with another body is refused with
// idempotency_key_reused (422), whether the first outcome is answered from the replay cache
// or, with the cache off, from the dedup record; the work does not run again.
func TestKeyReusedWithAnotherRequest(t *testing.T) {
	tests := []struct {
		name  string
		cfg   idempotent.Config
		layer idempotent.Layer
	}{
		{"first outcome in the cache", idempotent.Config{}, idempotent.LayerCache},
		{"first outcome only in the database", idempotent.Config{NoCache: true}, idempotent.LayerDedup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := e.guard(tt.cfg)
			key := testKey(t, "user:1", "k")
			work := effectWork(e.db, key.BizKey, 0, http.StatusCreated)
			mustExecute(t, g, request(key, `{"amount":100}`), work)

			res, err := g.Do(context.Background(), request(key, `{"amount":999}`), work)
			if !errors.Is(err, idempotent.ErrKeyReused) || res.Outcome != idempotent.Mismatch {
				t.Fatalf("another body: outcome %q err %v, want mismatch / ErrKeyReused", res.Outcome, err)
			}
			if code(err) != "idempotency_key_reused" {
				t.Errorf("error code %q, want idempotency_key_reused", code(err))
			}
			if res.Layer != tt.layer {
				t.Errorf("answered by layer %q, want %q", res.Layer, tt.layer)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d, want 1", n)
			}
		})
	}
}

// TestScopesAreIndependent: two users sending the same key are two writes.
func TestScopesAreIndependent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	alice := idempotent.Key{Scope: "user:1", BizType: "test", BizKey: "same-key"}
	bob := idempotent.Key{Scope: "user:2", BizType: "test", BizKey: "same-key"}
	work := effectWork(e.db, "same-key", 0, http.StatusCreated)

	a := mustExecute(t, g, request(alice, `{"amount":100}`), work)
	b := mustExecute(t, g, request(bob, `{"amount":100}`), work)
	if bytes.Equal(a.Response.Body, b.Response.Body) {
		t.Errorf("both users got %s: the second was answered with the first's outcome", a.Response.Body)
	}
	if n := countEffects(t, e.db, "same-key"); n != 2 {
		t.Errorf("side_effects rows = %d, want 2 (one per user)", n)
	}
}

// errUpstream stands for a failure of the work.
var errUpstream = errors.New("upstream failed")

// TestNotStoredOutcomes: an outcome about the moment rather than the write (5xx, 401, 403,
// 408, 429, a returned error, a panic) rolls back with the side effect and stores nothing,
// so a retry with the same key runs again.
func TestNotStoredOutcomes(t *testing.T) {
	tests := []struct {
		name   string
		status int   // answered by the work when err is nil
		err    error // returned by the work
		panics bool
	}{
		{"500", http.StatusInternalServerError, nil, false},
		{"503", http.StatusServiceUnavailable, nil, false},
		{"401", http.StatusUnauthorized, nil, false},
		{"429", http.StatusTooManyRequests, nil, false},
		{"error", 0, errUpstream, false},
		{"panic", 0, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := e.guard(idempotent.Config{})
			key := testKey(t, "user:1", "k")
			req := request(key, `{"amount":100}`)
			failing := func(ctx context.Context) (idempotent.Response, error) {
				if _, err := insertEffect(ctx, e.db, key.BizKey); err != nil {
					return idempotent.Response{}, err
				}
				if tt.panics {
					panic("work panicked")
				}
				if tt.err != nil {
					return idempotent.Response{}, tt.err
				}
				return jsonResponse(tt.status, map[string]string{"error": "try later"}), nil
			}

			res, panicked, err := doRecovering(g, req, failing)
			switch {
			case tt.panics:
				if !panicked {
					t.Fatalf("the work's panic did not reach the caller (outcome %q err %v)", res.Outcome, err)
				}
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("Do error = %v, want the work's error", err)
				}
			default:
				if err != nil || res.Response.Status != tt.status {
					t.Fatalf("Do = %d, %v; want the work's %d passed through", res.Response.Status, err, tt.status)
				}
			}
			if n := countEffects(t, e.db, key.BizKey); n != 0 {
				t.Errorf("side_effects rows = %d after a %s, want 0 (rolled back)", n, tt.name)
			}
			if n := countRecords(t, e.db, key); n != 0 {
				t.Errorf("idempotency_records rows = %d after a %s, want 0", n, tt.name)
			}

			mustExecute(t, g, req, effectWork(e.db, key.BizKey, 0, http.StatusCreated))
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d after the retry, want 1", n)
			}
		})
	}
}

// doRecovering is g.Do that reports a panic of the work instead of crashing the test.
func doRecovering(g *idempotent.Guard, req idempotent.Request, work idempotent.Work) (res idempotent.Result, panicked bool, err error) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	res, err = g.Do(context.Background(), req, work)
	return res, false, err
}

// TestBusinessRejectionIsStored: a 409 is a deterministic business answer (out_of_stock,
// illegal_state); it is stored with what the work committed and replayed, never run again.
// Writes the work undid in its own savepoint stay undone.
func TestBusinessRejectionIsStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{NoCache: true})
	key := testKey(t, "user:1", "k")
	req := request(key, `{"sku":"SKU-1"}`)
	errOutOfStock := errors.New("out of stock")
	reject := func(ctx context.Context) (idempotent.Response, error) {
		// The rejection itself is recorded (like an anomaly row): it commits with the record.
		id, err := insertEffect(ctx, e.db, "rejection")
		if err != nil {
			return idempotent.Response{}, err
		}
		// The partial reservation is undone by its own savepoint.
		err = database.Transaction(ctx, e.db, func(ctx context.Context, _ *gorm.DB) error {
			if _, err := insertEffect(ctx, e.db, "reservation"); err != nil {
				return err
			}
			return errOutOfStock
		})
		if !errors.Is(err, errOutOfStock) {
			return idempotent.Response{}, err
		}
		return jsonResponse(http.StatusConflict, map[string]any{"code": "out_of_stock", "id": id}), nil
	}

	first := mustExecute(t, g, req, reject)
	if first.Response.Status != http.StatusConflict {
		t.Fatalf("first answer %d, want 409", first.Response.Status)
	}
	for range 3 {
		res, err := g.Do(context.Background(), req, reject)
		if err != nil || res.Outcome != idempotent.Replayed {
			t.Fatalf("copy: outcome %q err %v, want replayed", res.Outcome, err)
		}
		if res.Response.Status != http.StatusConflict || !bytes.Equal(res.Response.Body, first.Response.Body) {
			t.Errorf("copy answered %d %s, want 409 %s", res.Response.Status, res.Response.Body, first.Response.Body)
		}
	}
	if n := countEffects(t, e.db, "rejection"); n != 1 {
		t.Errorf("rejection rows = %d, want 1 (the 409 ran once)", n)
	}
	if n := countEffects(t, e.db, "reservation"); n != 0 {
		t.Errorf("reservation rows = %d, want 0 (undone by the work's savepoint)", n)
	}
}

// TestCancelMidTransaction: a caller that goes away while the work runs leaves nothing
// behind (no record, no side effect, no lock), even though the work itself ignores the
// cancellation; the retry runs.
func TestCancelMidTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	key := testKey(t, "user:1", "k")
	req := request(key, `{"amount":100}`)

	ctx, cancel := context.WithCancel(context.Background())
	first := doAsync(ctx, g, req, effectWork(e.db, key.BizKey, 600*time.Millisecond, http.StatusCreated))
	time.Sleep(200 * time.Millisecond)
	cancel()
	c := <-first

	if !errors.Is(c.err, context.Canceled) {
		t.Fatalf("Do after cancel: outcome %q err %v, want context.Canceled", c.res.Outcome, c.err)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 0 {
		t.Errorf("side_effects rows = %d after cancel, want 0", n)
	}
	if n := countRecords(t, e.db, key); n != 0 {
		t.Errorf("idempotency_records rows = %d after cancel, want 0", n)
	}
	mustExecute(t, g, req, effectWork(e.db, key.BizKey, 0, http.StatusCreated))
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d after the retry, want 1", n)
	}
}

// abortOnce makes the first completion of a dedup record in db fail as a deadlock would
// (MySQL error 1213, which database.Translate calls retryable), once: a database that
// aborts the transaction after the work ran, as InnoDB or a Galera certification failure
// may at the last statement or at commit.
func abortOnce(t *testing.T, db *gorm.DB) *atomic.Bool {
	t.Helper()
	var fired atomic.Bool
	err := db.Callback().Update().Before("gorm:update").Register("test:abort_once", func(tx *gorm.DB) {
		if tx.Statement.Table == "idempotency_records" && fired.CompareAndSwap(false, true) {
			_ = tx.AddError(&gomysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock (injected by the test)"})
		}
	})
	if err != nil {
		t.Fatalf("register callback: %v", err)
	}
	return &fired
}

// TestDoRetriesAnAbortedTransaction: a transaction the database aborted left nothing behind,
// so Do runs it again; the effect still happens exactly once.
func TestDoRetriesAnAbortedTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fired := abortOnce(t, e.db)
	g := e.guard(idempotent.Config{})
	key := testKey(t, "user:1", "k")
	var calls atomic.Int32
	work := countingWork(&calls, effectWork(e.db, key.BizKey, 0, http.StatusCreated))

	mustExecute(t, g, request(key, `{}`), work)
	if !fired.Load() || calls.Load() != 2 {
		t.Fatalf("abort injected %v, work ran %d times; want the aborted attempt run again", fired.Load(), calls.Load())
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
	if n := countRecords(t, e.db, key); n != 1 {
		t.Errorf("idempotency_records rows = %d, want 1", n)
	}
}
