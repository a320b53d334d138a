package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/idempotent/idemops"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// doAsync starts g.Do in a goroutine and returns a channel that delivers its answer.
func doAsync(ctx context.Context, g *idempotent.Guard, req idempotent.Request, work idempotent.Work) <-chan call {
	out := make(chan call, 1)
	go func() {
		res, err := g.Do(ctx, req, work)
		out <- call{res, err}
	}()
	return out
}

// lockKinds are the two ways the request path takes its lock: the default lease (cache read
// and lock in one Lua script) and a redsync mutex. Both carry the watchdog (I4).
var lockKinds = []struct {
	name string
	cfg  idempotent.Config
}{
	{"lease", idempotent.Config{}},
	{"redsync", idemlab.With(idempotent.Config{}, idemlab.Lab{RedsyncLock: true})},
}

// TestI4WatchdogKeepsTheLock replays I4 with the fix: the lock lives 1 s, the work takes 3 s.
// The watchdog renews the lease, so a retry at +1.5 s finds the lock still held and is told
// the key is in progress; the work runs once.
func TestI4WatchdogKeepsTheLock(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := kind.cfg
			cfg.LockTTL = time.Second
			g := e.guard(cfg)
			ctx := context.Background()
			key := testKey(t, "user:1", "debit")
			req := leased(request(key, `{"amount":100}`))
			work := effectWork(key.BizKey, 3*time.Second, http.StatusCreated)

			first := doAsync(ctx, g, req, work)
			time.Sleep(1500 * time.Millisecond)

			ttl, err := e.rdb.PTTL(ctx, g.LeaseKey(key)).Result()
			if err != nil || ttl <= 0 {
				t.Fatalf("at +1.5s the lock %q has PTTL %v (err %v): the watchdog did not keep it", g.LeaseKey(key), ttl, err)
			}
			res, err := g.Do(ctx, req, work)
			if !errors.Is(err, idempotent.ErrKeyInUse) || res.Outcome != idempotent.InProgress || res.Layer != idempotent.LayerLock {
				t.Errorf("retry at +1.5s: outcome %q layer %q err %v, want in_progress from the lock", res.Outcome, res.Layer, err)
			}
			if code(err) != "idempotency_key_in_use" {
				t.Errorf("retry at +1.5s: code %q, want idempotency_key_in_use", code(err))
			}

			c := <-first
			if c.err != nil || c.res.Outcome != idempotent.Executed {
				t.Fatalf("first attempt: outcome %q err %v, want executed", c.res.Outcome, c.err)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d, want 1", n)
			}
			if n, _ := e.rdb.Exists(ctx, g.LeaseKey(key)).Result(); n != 0 {
				t.Errorf("the lock is still in Redis after the work finished: release did not delete it")
			}
		})
	}
}

// TestI4ExpiredLockDedupIsTheBackstop replays I4 as the articles had it: a fixed 1 s lease
// (no watchdog) and 3 s of work. At +1.5 s the lease has expired, so a retry takes the lock
// — and still must not execute: it reaches the dedup record and is answered from it, or
// told it is in progress. Both placements of the record are the backstop: inserted first,
// the retry's insert waits on the first attempt's uncommitted row; inserted last, the retry
// runs its own copy of the work and its insert fails on the committed one, rolling it back.
func TestI4ExpiredLockDedupIsTheBackstop(t *testing.T) {
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
			g := e.guard(idemlab.With(idempotent.Config{LockTTL: time.Second}, idemlab.Lab{NoWatchdog: true, RecordFirst: placement.recordFirst}))
			ctx := context.Background()
			key := testKey(t, "user:1", "debit")
			req := leased(request(key, `{"amount":100}`))
			work := effectWork(key.BizKey, 3*time.Second, http.StatusCreated)

			first := doAsync(ctx, g, req, work)
			time.Sleep(1500 * time.Millisecond)

			if n, err := e.rdb.Exists(ctx, g.LeaseKey(key)).Result(); err != nil || n != 0 {
				t.Fatalf("at +1.5s the 1s lock still exists (n=%d, err %v): the scenario needs it expired", n, err)
			}
			res, err := g.Do(ctx, req, work)
			if res.Layer != idempotent.LayerDedup {
				t.Errorf("retry at +1.5s answered by layer %q (outcome %q, err %v), want the dedup record", res.Layer, res.Outcome, err)
			}
			c := <-first
			if c.err != nil || c.res.Outcome != idempotent.Executed {
				t.Fatalf("first attempt: outcome %q err %v, want executed", c.res.Outcome, c.err)
			}
			switch {
			case err == nil && res.Outcome == idempotent.Replayed:
				if !bytes.Equal(res.Response.Body, c.res.Response.Body) {
					t.Errorf("retry replayed %s, want the first body %s", res.Response.Body, c.res.Response.Body)
				}
			case errors.Is(err, idempotent.ErrKeyInUse) && res.Outcome == idempotent.InProgress:
			default:
				t.Errorf("retry at +1.5s: outcome %q err %v, want replayed or in_progress", res.Outcome, err)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d with an expired lock, want 1: the dedup record must be the backstop", n)
			}
		})
	}
}

// TestI4LockLostCancelsTheWork deletes the lock while the work runs (as an expiry or a
// failover would). The watchdog's next renewal fails, the work's context is cancelled with
// ErrLockLost, and nothing commits — even though the work ignores the cancellation and
// answers 201. A retry with the same key then runs once.
func TestI4LockLostCancelsTheWork(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := kind.cfg
			cfg.LockTTL = 600 * time.Millisecond
			g := e.guard(cfg)
			ctx := context.Background()
			key := testKey(t, "user:1", "debit")
			req := leased(request(key, `{"amount":100}`))

			var (
				mu    sync.Mutex
				cause error
			)
			stubborn := idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
				id, err := insertEffect(tx, key.BizKey)
				if err != nil {
					return idempotent.Response{}, err
				}
				select {
				case <-ctx.Done():
					mu.Lock()
					cause = context.Cause(ctx)
					mu.Unlock()
				case <-time.After(3 * time.Second):
				}
				return jsonResponse(http.StatusCreated, map[string]any{"id": id}), nil
			})

			start := time.Now()
			first := doAsync(ctx, g, req, stubborn)
			deleted := after(500*time.Millisecond, func() {
				if n, err := e.rdb.Del(ctx, g.LeaseKey(key)).Result(); err != nil || n != 1 {
					t.Errorf("DEL %s at +0.5s = %d, %v; want the held lock deleted", g.LeaseKey(key), n, err)
				}
			})
			c := <-first
			<-deleted
			elapsed := time.Since(start)

			if c.err == nil {
				t.Fatalf("Do returned outcome %q with no error after its lock was lost", c.res.Outcome)
			}
			if !errors.Is(c.err, idempotent.ErrLockLost) && !errors.Is(c.err, context.Canceled) {
				t.Errorf("Do error = %v, want context.Canceled or ErrLockLost", c.err)
			}
			t.Logf("lock lost after %v; Do error: %v", elapsed.Round(time.Millisecond), c.err)
			mu.Lock()
			if !errors.Is(cause, idempotent.ErrLockLost) {
				t.Errorf("the work's context cause = %v, want ErrLockLost", cause)
			}
			mu.Unlock()
			if elapsed > 2*time.Second {
				t.Errorf("Do took %v: the work was not cancelled when the renewal failed", elapsed)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 0 {
				t.Errorf("side_effects rows = %d after the lock was lost, want 0 (rolled back)", n)
			}
			if n := countRecords(t, e.db, key); n != 0 {
				t.Errorf("idempotency_records rows = %d after the lock was lost, want 0", n)
			}

			res, err := g.Do(ctx, req, effectWork(key.BizKey, 0, http.StatusCreated))
			if err != nil || res.Outcome != idempotent.Executed {
				t.Fatalf("retry: outcome %q err %v, want executed", res.Outcome, err)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d after the retry, want 1", n)
			}
		})
	}
}

// jobKey is the Key whose lease key names RunLocked's redsync mutex for a job.
func jobKey(name string) idempotent.Key {
	return idempotent.Key{Scope: "jobs", BizType: "job", BizKey: name}
}

// TestRunLocked: one instance at a time runs a job under RunLocked's redsync mutex. The
// watchdog keeps the mutex past its TTL while the job runs, a second caller is turned away
// at once (ok=false, no error, fn not run), the mutex is deleted afterwards, and the next
// run takes it again.
func TestRunLocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{LockTTL: 600 * time.Millisecond})
	ctx := context.Background()
	const job = "close-expired"

	entered, release := make(chan struct{}), make(chan struct{})
	type answer struct {
		ok  bool
		err error
	}
	first := make(chan answer, 1)
	go func() {
		ok, err := idemops.RunLocked(ctx, g, job, func(ctx context.Context) error {
			close(entered)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		first <- answer{ok, err}
	}()
	<-entered
	time.Sleep(900 * time.Millisecond) // past the 600 ms TTL: only the watchdog keeps it

	if ttl, err := e.rdb.PTTL(ctx, g.LeaseKey(jobKey(job))).Result(); err != nil || ttl <= 0 {
		t.Fatalf("at +0.9s the job's mutex has PTTL %v (err %v): the watchdog did not keep it", ttl, err)
	}
	ok, err := idemops.RunLocked(ctx, g, job, func(context.Context) error {
		t.Error("a second instance ran the job while the first held the mutex")
		return nil
	})
	if ok || err != nil {
		t.Errorf("second RunLocked while held = %v, %v; want false, nil", ok, err)
	}
	close(release)
	if a := <-first; !a.ok || a.err != nil {
		t.Fatalf("first RunLocked = %v, %v; want true, nil", a.ok, a.err)
	}
	if n, _ := e.rdb.Exists(ctx, g.LeaseKey(jobKey(job))).Result(); n != 0 {
		t.Errorf("the job's mutex is still in Redis after the job finished")
	}
	ran := false
	ok, err = idemops.RunLocked(ctx, g, job, func(context.Context) error { ran = true; return nil })
	if !ok || err != nil || !ran {
		t.Errorf("RunLocked after release = %v, %v (ran %v); want the job run", ok, err, ran)
	}
}

// TestRunLockedLockLost: a job whose mutex disappears (expiry, failover) is cancelled with
// ErrLockLost at the next renewal instead of running on unguarded.
func TestRunLockedLockLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{LockTTL: 600 * time.Millisecond})
	ctx := context.Background()
	const job = "relay"
	deleted := after(300*time.Millisecond, func() {
		if n, err := e.rdb.Del(ctx, g.LeaseKey(jobKey(job))).Result(); err != nil || n != 1 {
			t.Errorf("DEL the job's mutex = %d, %v; want it deleted", n, err)
		}
	})
	start := time.Now()
	ok, err := idemops.RunLocked(ctx, g, job, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(3 * time.Second):
			return nil
		}
	})
	<-deleted
	if !ok || !errors.Is(err, idempotent.ErrLockLost) {
		t.Errorf("RunLocked = %v, %v; want true and the job's ErrLockLost", ok, err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("the job ran %v after its mutex was gone, want it cancelled at the next renewal", elapsed)
	}
}

// TestRunLockedWithoutRedis: with Redis unreachable, a job runs on its database
// preconditions alone in degrade mode, and is refused with unavailable in reject mode.
func TestRunLockedWithoutRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()

	ran := false
	ok, err := idemops.RunLocked(ctx, e.guardWith(idemtest.Unreachable(t), idempotent.Config{}), "job", func(context.Context) error {
		ran = true
		return nil
	})
	if !ok || err != nil || !ran {
		t.Errorf("degrade: RunLocked = %v, %v (ran %v); want the job run", ok, err, ran)
	}

	ran = false
	ok, err = idemops.RunLocked(ctx, e.guardWith(idemtest.Unreachable(t), idempotent.Config{RejectWithoutRedis: true}), "job", func(context.Context) error {
		ran = true
		return nil
	})
	if ok || ran || code(err) != "unavailable" {
		t.Errorf("reject: RunLocked = %v, %v (ran %v); want false and unavailable", ok, err, ran)
	}
}
