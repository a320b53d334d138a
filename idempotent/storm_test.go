package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// stormSize is how many copies of one write a storm fires at once.
const stormSize = 200

// TestStorm fires 200 concurrent copies of one slow write (200 ms inside the transaction)
// and counts the business effect in the database: exactly one row, whichever layers are on
// and wherever the dedup record is placed (inserted finished after the work, the default, or
// PROCESSING before it with RecordFirst), with the one-script lease or a redsync mutex.
// Every copy is answered Executed/Replayed with the first body or InProgress; 200 sequential
// copies afterwards are all replayed with that body. A request with no work outside its
// transaction is fenced by its record: its copies wait for the first one's answer instead of
// running the work. With Redis unreachable in degrade mode the Redis layers step aside and the
// dedup record alone keeps it exactly-once; so it does on a guard built without a Redis client
// (database only), with no layer degraded.
func TestStorm(t *testing.T) {
	modes := []struct {
		name       string
		cfg        idempotent.Config
		redisDown  bool
		replayFrom idempotent.Layer // the layer that answers the sequential copies
		noRedis    bool             // the guard is built with a nil client: the database alone
		lease      bool             // the request has work outside its transaction: it takes the lease
		waits      bool             // the copies at the guard wait for the first (flights)
	}{
		{"fenced by the record", idempotent.Config{}, false, idempotent.LayerCache, false, false, true},
		{"lease", idempotent.Config{}, false, idempotent.LayerCache, false, true, false},
		{"lease, record first", idemlab.With(idempotent.Config{}, idemlab.Lab{RecordFirst: true}), false, idempotent.LayerCache, false, false, false},
		{"redsync lock", idemlab.With(idempotent.Config{}, idemlab.Lab{RedsyncLock: true}), false, idempotent.LayerCache, false, false, false},
		{"redsync lock, record first", idemlab.With(idempotent.Config{}, idemlab.Lab{RedsyncLock: true, RecordFirst: true}), false, idempotent.LayerCache, false, false, false},
		{"no lock", idemlab.With(idempotent.Config{}, idemlab.Lab{NoLock: true}), false, idempotent.LayerCache, false, false, false},
		{"no lock, record first", idemlab.With(idempotent.Config{}, idemlab.Lab{NoLock: true, RecordFirst: true}), false, idempotent.LayerCache, false, false, false},
		{"redis down degrade", idempotent.Config{}, true, idempotent.LayerDedup, false, false, true},
		{"redis down degrade, record first", idemlab.With(idempotent.Config{}, idemlab.Lab{RecordFirst: true}), true, idempotent.LayerDedup, false, false, false},
		{"database only", idempotent.Config{}, true, idempotent.LayerDedup, true, false, true},
		{"database only, record first", idemlab.With(idempotent.Config{}, idemlab.Lab{RecordFirst: true}), true, idempotent.LayerDedup, true, false, false},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var rdb redis.UniversalClient = e.rdb
			switch {
			case m.noRedis:
				rdb = nil
			case m.redisDown:
				rdb = idemtest.Unreachable(t)
			}
			g := e.guardWith(rdb, m.cfg)
			ctx := context.Background()
			key := testKey(t, "user:1", "storm")
			req := request(key, `{"amount":100}`)
			if m.lease {
				req = leased(req)
			}
			var runs atomic.Int32
			work := countingWork(&runs, effectWork(key.BizKey, stormHold(m.cfg, m.redisDown), http.StatusCreated))

			began := time.Now()
			calls := storm(stormSize, func(int) (idempotent.Result, error) { return g.Do(ctx, req, work) })
			t.Logf("storm of %d took %v; the work ran %d times, one of them committed", stormSize, time.Since(began).Round(time.Millisecond), runs.Load())

			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Fatalf("side_effects rows = %d after %d concurrent copies, want exactly 1", n, stormSize)
			}
			body := checkStormAnswers(t, calls)
			if m.waits && runs.Load() > stormSize/10 {
				// Without a lease the copies at one guard wait for the first one's answer
				// (flights) instead of each running the work and meeting the record at its end.
				t.Errorf("the work ran %d times for %d copies at one guard without a lease, want the copies to wait for the first", runs.Load(), stormSize)
			}
			for i, c := range calls {
				if m.noRedis && len(c.res.Degraded) > 0 {
					t.Fatalf("copy %d says the layers %v were degraded, on a guard built without Redis", i, c.res.Degraded)
				}
			}
			if n := countRecords(t, e.db, key); n != 1 {
				t.Errorf("idempotency_records rows = %d, want 1", n)
			}
			if rec, found, err := g.Lookup(ctx, key); err != nil || !found || rec.Status != idempotent.StatusCompleted {
				t.Errorf("Lookup = %+v, %v, %v; want the COMPLETED record", rec.Status, found, err)
			}

			// The sequential copies are not about overlap: their work does not hold the
			// transaction open. With no Redis layer to answer them and the record inserted
			// last, each one runs the work and rolls it back when its insert meets the record.
			runs.Store(0)
			work = countingWork(&runs, effectWork(key.BizKey, 0, http.StatusCreated))
			for i := range stormSize {
				res, err := g.Do(ctx, req, work)
				want := m.replayFrom
				if i == 0 && want != idempotent.LayerDedup && res.Layer == idempotent.LayerDedup {
					// The cache fill after the storm is best effort (a Redis timeout under the
					// storm's load only costs a database read); the dedup answer refills it.
					t.Logf("first sequential copy answered from the dedup record: the cache fill had failed")
					want = idempotent.LayerDedup
				}
				if err != nil || res.Outcome != idempotent.Replayed || res.Layer != want {
					t.Fatalf("sequential copy %d: outcome %q layer %q err %v, want replayed from %s",
						i, res.Outcome, res.Layer, err, want)
				}
				if !bytes.Equal(res.Response.Body, body) || res.Response.Status != http.StatusCreated {
					t.Fatalf("sequential copy %d answered %d %s, want 201 %s", i, res.Response.Status, res.Response.Body, body)
				}
			}
			t.Logf("storm and %d sequential copies took %v; the sequential copies ran the work %d times", stormSize, time.Since(began).Round(time.Millisecond), runs.Load())
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d after the sequential copies, want 1", n)
			}
		})
	}
}

// stormHold is how long the storm's work holds its transaction open: 200 ms, long enough for
// every copy to overlap the first on MySQL. On SQLite every transaction takes the write lock
// at BEGIN (IMMEDIATE), so copies never overlap inside the database whatever the hold; and
// when no Redis lock turns the copies away and the record is inserted after the work (the
// default placement), every copy — storm and sequential — runs the work before its insert
// fails, one at a time: 200 ms each would be minutes of waiting that prove nothing more.
func stormHold(cfg idempotent.Config, redisDown bool) time.Duration {
	lockless := idemlab.Of(cfg).NoLock || redisDown
	if !(idemtest.Default() == idemtest.MySQL) && lockless && !idemlab.Of(cfg).RecordFirst {
		return 10 * time.Millisecond
	}
	return 200 * time.Millisecond
}

// checkStormAnswers checks that exactly one copy executed and every other one was replayed
// with the executed body or told the key is in use; it returns the executed body.
func checkStormAnswers(t *testing.T, calls []call) []byte {
	t.Helper()
	var (
		executed []byte
		counts   = map[idempotent.Outcome]int{}
	)
	for i, c := range calls {
		counts[c.res.Outcome]++
		switch {
		case c.err == nil && c.res.Outcome == idempotent.Executed:
			executed = c.res.Response.Body
		case c.err == nil && c.res.Outcome == idempotent.Replayed:
		case errors.Is(c.err, idempotent.ErrKeyInUse) && c.res.Outcome == idempotent.InProgress:
		default:
			t.Errorf("copy %d: outcome %q layer %q err %v, want executed, replayed or in_progress", i, c.res.Outcome, c.res.Layer, c.err)
		}
	}
	t.Logf("answers: %v", counts)
	if counts[idempotent.Executed] != 1 {
		t.Fatalf("%d copies executed, want exactly 1", counts[idempotent.Executed])
	}
	for i, c := range calls {
		if c.res.Outcome == idempotent.Replayed && !bytes.Equal(c.res.Response.Body, executed) {
			t.Errorf("copy %d replayed %s, want the executed body %s", i, c.res.Response.Body, executed)
		}
	}
	return executed
}

// TestStormRejectWithoutRedis: with ONCEPAY_REDIS_FAILURE_MODE=reject and Redis unreachable,
// every copy is refused with 503 unavailable and nothing is written.
func TestStormRejectWithoutRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guardWith(idemtest.Unreachable(t), idempotent.Config{RejectWithoutRedis: true})
	key := testKey(t, "user:1", "reject")
	req := request(key, `{"amount":100}`)
	work := effectWork(key.BizKey, 0, http.StatusCreated)

	calls := storm(stormSize, func(int) (idempotent.Result, error) { return g.Do(context.Background(), req, work) })

	for i, c := range calls {
		if code(c.err) != "unavailable" || c.res.Outcome != idempotent.Unavailable {
			t.Fatalf("copy %d: outcome %q err %v, want unavailable", i, c.res.Outcome, c.err)
		}
	}
	if n := countEffects(t, e.db, key.BizKey); n != 0 {
		t.Errorf("side_effects rows = %d, want 0", n)
	}
	if n := countRecords(t, e.db, key); n != 0 {
		t.Errorf("idempotency_records rows = %d, want 0", n)
	}
}
