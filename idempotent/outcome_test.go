package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/idempotent/idemtest"
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
		{"first outcome only in the database", idemlab.With(idempotent.Config{}, idemlab.Lab{NoCache: true}), idempotent.LayerDedup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := e.guard(tt.cfg)
			key := testKey(t, "user:1", "k")
			work := effectWork(key.BizKey, 0, http.StatusCreated)
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
	work := effectWork("same-key", 0, http.StatusCreated)

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
// 408, 429, a returned error that no Reject renders, a panic) rolls back with the side
// effect and stores nothing, so a retry with the same key runs again — at once: the lock of
// the failed attempt is released too, even when its work panicked.
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
		{"403", http.StatusForbidden, nil, false},
		{"408", http.StatusRequestTimeout, nil, false},
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
			failing := idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
				if _, err := insertEffect(tx, key.BizKey); err != nil {
					return idempotent.Response{}, err
				}
				if tt.panics {
					panic("work panicked")
				}
				if tt.err != nil {
					return idempotent.Response{}, tt.err
				}
				return jsonResponse(tt.status, map[string]string{"error": "try later"}), nil
			})

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
				if err != nil || res.Response.Status != tt.status || res.Outcome != idempotent.Executed {
					t.Fatalf("Do = %d %q, %v; want the work's %d passed through, executed", res.Response.Status, res.Outcome, err, tt.status)
				}
			}
			if n, _ := e.rdb.Exists(context.Background(), g.LeaseKey(key), g.CacheKey(key)).Result(); n != 0 {
				t.Errorf("after a %s the lock or a cached outcome is left in Redis (%d keys)", tt.name, n)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 0 {
				t.Errorf("side_effects rows = %d after a %s, want 0 (rolled back)", n, tt.name)
			}
			if n := countRecords(t, e.db, key); n != 0 {
				t.Errorf("idempotency_records rows = %d after a %s, want 0", n, tt.name)
			}

			mustExecute(t, g, req, effectWork(key.BizKey, 0, http.StatusCreated))
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

// TestBusinessResponseCommitsWithTheWork: a 4xx Response returned with a nil error is a
// deterministic business answer that must leave a trace (an anomaly recorded for refund): it
// commits WITH the work's writes and is stored and replayed, never run again. Writes the work
// undid in its own savepoint (a nested transaction on tx) stay undone.
func TestBusinessResponseCommitsWithTheWork(t *testing.T) {
	for _, placement := range []struct {
		name string
		cfg  idempotent.Config
	}{
		{"record last", idemlab.With(idempotent.Config{}, idemlab.Lab{NoCache: true})},
		{"record first", idemlab.With(idempotent.Config{}, idemlab.Lab{NoCache: true, RecordFirst: true})},
	} {
		t.Run(placement.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := e.guard(placement.cfg)
			key := testKey(t, "user:1", "k")
			req := request(key, `{"sku":"SKU-1"}`)
			var calls atomic.Int32
			reject := countingWork(&calls, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
				// The refusal itself is recorded (like an anomaly row): it commits with the record.
				id, err := insertEffect(tx, "anomaly")
				if err != nil {
					return idempotent.Response{}, err
				}
				// The partial reservation is undone by its own savepoint.
				err = tx.Transaction(func(sp *gorm.DB) error {
					if _, err := insertEffect(sp, "reservation"); err != nil {
						return err
					}
					return errOutOfStock
				})
				if !errors.Is(err, errOutOfStock) {
					return idempotent.Response{}, err
				}
				return jsonResponse(http.StatusConflict, map[string]any{"code": "out_of_stock", "id": id}), nil
			}))

			first := mustExecute(t, g, req, reject)
			if first.Response.Status != http.StatusConflict || first.Rejection != nil {
				t.Fatalf("first answer %d (rejection %v), want a 409 response", first.Response.Status, first.Rejection)
			}
			for range 3 {
				res, err := g.Do(context.Background(), req, reject)
				if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup {
					t.Fatalf("copy: outcome %q layer %q err %v, want replayed from the dedup record", res.Outcome, res.Layer, err)
				}
				if res.Response.Status != http.StatusConflict || !bytes.Equal(res.Response.Body, first.Response.Body) {
					t.Errorf("copy answered %d %s, want 409 %s", res.Response.Status, res.Response.Body, first.Response.Body)
				}
			}
			if n := countEffects(t, e.db, "anomaly"); n != 1 {
				t.Errorf("anomaly rows = %d, want 1 (the 409 committed with its writes, once)", n)
			}
			if n := countEffects(t, e.db, "reservation"); n != 0 {
				t.Errorf("reservation rows = %d, want 0 (undone by the work's savepoint)", n)
			}
			if idemlab.Of(placement.cfg).RecordFirst {
				// Record first, every copy stops at the record's insert and never runs the work.
				if n := calls.Load(); n != 1 {
					t.Errorf("the work ran %d times with the record first, want 1", n)
				}
			}
		})
	}
}

// errOutOfStock is the business refusal of the Reject tests.
var errOutOfStock = errors.New("out of stock")

// renderOutOfStock is a Config.Reject that renders errOutOfStock as a stored 409 and refuses
// to render anything else.
func renderOutOfStock(_ context.Context, err error) (idempotent.Response, bool) {
	if errors.Is(err, errOutOfStock) {
		return jsonResponse(http.StatusConflict, map[string]string{"code": "out_of_stock"}), true
	}
	return idempotent.Response{}, false
}

// TestRejectionIsStoredAlone: a work error that Reject renders as a storable 4xx is a
// deterministic business refusal. The work's transaction rolls back — its partial writes are
// gone — and the rendered answer is stored alone; Do reports it executed with the error as
// Result.Rejection, and every copy is replayed the same answer without running the work,
// from the replay cache or, with the cache off, from the dedup record.
func TestRejectionIsStoredAlone(t *testing.T) {
	tests := []struct {
		name  string
		cfg   idempotent.Config
		layer idempotent.Layer
		runs  int32 // the most times the work may run for the first attempt and 3 copies
	}{
		{"cache on", idempotent.Config{Reject: renderOutOfStock}, idempotent.LayerCache, 1},
		// With nothing in Redis to answer them and the record inserted after the work, the
		// copies run the work too; its refusal is rolled back, the insert of the refusal
		// meets the stored one, and that is replayed.
		{"cache off", idemlab.With(idempotent.Config{Reject: renderOutOfStock}, idemlab.Lab{NoCache: true}), idempotent.LayerDedup, 4},
		{"cache off, record first", idemlab.With(idempotent.Config{Reject: renderOutOfStock}, idemlab.Lab{NoCache: true, RecordFirst: true}), idempotent.LayerDedup, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := e.guard(tt.cfg)
			key := testKey(t, "user:1", "k")
			req := request(key, `{"sku":"SKU-1","quantity":3}`)
			var calls atomic.Int32
			work := countingWork(&calls, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
				// Two of the three units were reserved before the third was missing.
				for range 2 {
					if _, err := insertEffect(tx, "reservation"); err != nil {
						return idempotent.Response{}, err
					}
				}
				return idempotent.Response{}, fmt.Errorf("reserve SKU-1: %w", errOutOfStock)
			}))

			first, err := g.Do(context.Background(), req, work)
			if err != nil || first.Outcome != idempotent.Executed || first.Layer != idempotent.LayerWork {
				t.Fatalf("first attempt: outcome %q layer %q err %v, want executed by the work", first.Outcome, first.Layer, err)
			}
			if !errors.Is(first.Rejection, errOutOfStock) {
				t.Errorf("Result.Rejection = %v, want the work's out-of-stock error", first.Rejection)
			}
			if first.Response.Status != http.StatusConflict || !bytes.Contains(first.Response.Body, []byte("out_of_stock")) {
				t.Errorf("first answer %d %s, want the rendered 409", first.Response.Status, first.Response.Body)
			}
			if n := countEffects(t, e.db, "reservation"); n != 0 {
				t.Errorf("reservation rows = %d after the refusal, want 0: the partial writes must roll back", n)
			}
			if n := countRecords(t, e.db, key); n != 1 {
				t.Errorf("idempotency_records rows = %d, want 1: the refusal is stored", n)
			}
			if rec, _, _ := g.Lookup(context.Background(), key); rec.Status != idempotent.StatusCompleted || rec.ResponseStatus != http.StatusConflict {
				t.Errorf("stored record %s %d, want COMPLETED 409", rec.Status, rec.ResponseStatus)
			}

			for i := range 3 {
				res, err := g.Do(context.Background(), req, work)
				if err != nil || res.Outcome != idempotent.Replayed || res.Layer != tt.layer {
					t.Fatalf("copy %d: outcome %q layer %q err %v, want replayed from %s", i, res.Outcome, res.Layer, err, tt.layer)
				}
				if res.Response.Status != http.StatusConflict || !bytes.Equal(res.Response.Body, first.Response.Body) {
					t.Errorf("copy %d answered %d %s, want 409 %s", i, res.Response.Status, res.Response.Body, first.Response.Body)
				}
			}
			if n := calls.Load(); n < 1 || n > tt.runs {
				t.Errorf("the work ran %d times, want 1..%d", n, tt.runs)
			}
			if n := countEffects(t, e.db, "reservation"); n != 0 {
				t.Errorf("reservation rows = %d after the copies, want 0", n)
			}
		})
	}
}

// TestRejectRules: Request.Reject overrides Config.Reject; an error that Reject declines
// (ok=false), or renders as an answer that must not be stored (5xx), is returned with
// nothing stored, and a retry runs.
func TestRejectRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{Reject: renderOutOfStock})
	ctx := context.Background()
	outOfStock := idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		if _, err := insertEffect(tx, "reservation"); err != nil {
			return idempotent.Response{}, err
		}
		return idempotent.Response{}, errOutOfStock
	})

	// Declined by Config.Reject: returned as it is.
	key := testKey(t, "user:1", "declined")
	req := request(key, `{}`)
	if res, err := g.Do(ctx, req, idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
		return idempotent.Response{}, errUpstream
	})); !errors.Is(err, errUpstream) || res.Outcome != "" {
		t.Errorf("declined error: outcome %q err %v, want the work's error and no outcome", res.Outcome, err)
	}
	if n := countRecords(t, e.db, key); n != 0 {
		t.Errorf("a declined error stored %d records, want 0", n)
	}

	// Request.Reject renders it as a 503: not storable, so the error is returned.
	key = testKey(t, "user:1", "unstorable")
	req = request(key, `{}`)
	req.Reject = func(context.Context, error) (idempotent.Response, bool) {
		return jsonResponse(http.StatusServiceUnavailable, map[string]string{"code": "unavailable"}), true
	}
	if _, err := g.Do(ctx, req, outOfStock); !errors.Is(err, errOutOfStock) {
		t.Errorf("a refusal rendered as 503: err %v, want the work's error returned", err)
	}
	if n := countRecords(t, e.db, key); n != 0 {
		t.Errorf("a refusal rendered as 503 stored %d records, want 0", n)
	}

	// Request.Reject overrides Config.Reject with its own stored answer.
	key = testKey(t, "user:1", "override")
	req = request(key, `{}`)
	req.Reject = func(_ context.Context, err error) (idempotent.Response, bool) {
		return jsonResponse(http.StatusUnprocessableEntity, map[string]string{"code": "per_request"}), errors.Is(err, errOutOfStock)
	}
	res, err := g.Do(ctx, req, outOfStock)
	if err != nil || res.Response.Status != http.StatusUnprocessableEntity || !errors.Is(res.Rejection, errOutOfStock) {
		t.Errorf("Request.Reject: %d rejection %v err %v, want its 422 stored", res.Response.Status, res.Rejection, err)
	}
	if n := countEffects(t, e.db, "reservation"); n != 0 {
		t.Errorf("reservation rows = %d, want 0", n)
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
	first := doAsync(ctx, g, req, effectWork(key.BizKey, 600*time.Millisecond, http.StatusCreated))
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
	mustExecute(t, g, req, effectWork(key.BizKey, 0, http.StatusCreated))
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d after the retry, want 1", n)
	}
}

// abortFirstRecord makes the database abort the statement that finishes the dedup record
// numbered 1 — its INSERT with the default placement, the UPDATE that completes it with
// RecordFirst — as a deadlock would, after the work ran: InnoDB, or a Galera certification
// failure, may abort a transaction at its last statement. Triggers do it, so that it holds
// whatever way the guard writes the record (gorm or its own SQL): MySQL's signals error 1213
// and PostgreSQL's SQLSTATE 40P01, which mysqlerr and pgerr call aborted. A SQLite trigger can
// only RAISE a constraint error, so on SQLite abortedClassify calls that one aborted. It
// returns the Config.NewID that numbers the records 1, 2, 3 …, so that only the first
// attempt's record is aborted.
func abortFirstRecord(t *testing.T, db *gorm.DB) func() int64 {
	t.Helper()
	const when = "NEW.id = 1 AND NEW.status = 'COMPLETED'"
	var ddl []string
	switch db.Dialector.Name() {
	case idemtest.Postgres:
		ddl = []string{
			`CREATE FUNCTION test_abort_first() RETURNS trigger AS $$ BEGIN IF ` + when +
				` THEN RAISE EXCEPTION 'deadlock detected (injected by the test)' USING ERRCODE = '40P01'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`,
			`CREATE TRIGGER test_abort_first BEFORE INSERT OR UPDATE ON idempotency_records FOR EACH ROW EXECUTE FUNCTION test_abort_first()`,
		}
	case idemtest.MySQL:
		for _, op := range []string{"INSERT", "UPDATE"} {
			ddl = append(ddl, "CREATE TRIGGER test_abort_first_"+strings.ToLower(op)+" BEFORE "+op+
				" ON idempotency_records FOR EACH ROW BEGIN IF "+when+" THEN "+
				"SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'Deadlock found when trying to get lock (injected by the test)', MYSQL_ERRNO = 1213; "+
				"END IF; END")
		}
	default:
		for _, op := range []string{"INSERT", "UPDATE"} {
			ddl = append(ddl, "CREATE TRIGGER test_abort_first_"+strings.ToLower(op)+" BEFORE "+op+
				" ON idempotency_records WHEN "+when+
				" BEGIN SELECT RAISE(ABORT, 'database is locked (injected by the test)'); END")
		}
	}
	for _, stmt := range ddl {
		if err := db.Exec(stmt).Error; err != nil {
			t.Fatalf("create trigger: %v", err)
		}
	}
	var next atomic.Int64
	return func() int64 { return next.Add(1) }
}

// abortedClassify is the dialect's classifier, except that on SQLite the error the test's
// trigger raises (abortFirstRecord) is an aborted transaction.
func abortedClassify(dialect string) func(error) dberr.Class {
	classify := idemtest.Classify(dialect)
	if dialect != idemtest.SQLite {
		return classify
	}
	return func(err error) dberr.Class {
		if strings.Contains(err.Error(), "(injected by the test)") {
			return dberr.Aborted
		}
		return classify(err)
	}
}

// TestDoRetriesAnAbortedTransaction: a transaction the database aborted left nothing behind,
// so Do runs it again; the effect still happens exactly once, whichever placement.
func TestDoRetriesAnAbortedTransaction(t *testing.T) {
	for _, placement := range []struct {
		name        string
		recordFirst bool
	}{
		{"record last", false},
		{"record first", true},
	} {
		t.Run(placement.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			newID := abortFirstRecord(t, e.db)
			g := e.guard(idemlab.With(idempotent.Config{NewID: newID, Classify: abortedClassify(e.dialect)}, idemlab.Lab{RecordFirst: placement.recordFirst}))
			key := testKey(t, "user:1", "k")
			var calls atomic.Int32
			work := countingWork(&calls, effectWork(key.BizKey, 0, http.StatusCreated))

			mustExecute(t, g, request(key, `{}`), work)
			rec, _, err := g.Lookup(context.Background(), key)
			if err != nil || rec.ID == 1 || calls.Load() != 2 {
				t.Fatalf("committed record %d (err %v), work ran %d times; want record 1 aborted and the attempt run again", rec.ID, err, calls.Load())
			}
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d, want 1", n)
			}
			if n := countRecords(t, e.db, key); n != 1 {
				t.Errorf("idempotency_records rows = %d, want 1", n)
			}
		})
	}
}

// TestARefusalWaitsForTheRecord: the replay cache lost a committed key's answer (Redis
// restarted empty, an entry evicted) while its record remains, so the next copy runs the work,
// and the work refuses without storing (Request.Refused: a channel report with a wrong amount).
// The answer is still the record's — the first answer replayed for the same body,
// idempotency_key_reused for another — never the work's refusal, on which the caller would act
// (a report records its anomaly): nothing happens before the key.
func TestARefusalWaitsForTheRecord(t *testing.T) {
	errWrongAmount := errors.New("the amount does not match")
	tests := []struct {
		name    string
		body    string
		outcome idempotent.Outcome
		err     error
	}{
		{"the same body", `{"amount":100}`, idempotent.Replayed, nil},
		{"another body", `{"amount":999}`, idempotent.Mismatch, idempotent.ErrKeyReused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := e.guard(idempotent.Config{})
			key := testKey(t, "user:1", "k")
			mustExecute(t, g, request(key, `{"amount":100}`), effectWork(key.BizKey, 0, http.StatusCreated))
			if err := e.rdb.Del(context.Background(), g.CacheKey(key)).Err(); err != nil {
				t.Fatal(err)
			}

			req := request(key, tt.body)
			req.Refused = func(err error) bool { return errors.Is(err, errWrongAmount) }
			ran := false
			res, err := g.Do(context.Background(), req, func(context.Context, *gorm.DB, func(idempotent.Response) error) error {
				ran = true
				return errWrongAmount
			})
			if res.Outcome != tt.outcome || !errors.Is(err, tt.err) || errors.Is(err, errWrongAmount) {
				t.Fatalf("with the cache entry lost (work ran: %v): outcome %q err %v, want %q / %v", ran, res.Outcome, err, tt.outcome, tt.err)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d, want 1", n)
			}
		})
	}
}
