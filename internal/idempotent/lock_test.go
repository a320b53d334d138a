package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/idempotent"
)

// lockKey is the Redis key of the lock of k (redsync mutex name in lock.go).
func lockKey(k idempotent.Key) string { return "oncepay:idem:lock:" + k.String() }

// doAsync starts g.Do in a goroutine and returns a channel that delivers its answer.
func doAsync(ctx context.Context, g *idempotent.Guard, req idempotent.Request, work idempotent.Work) <-chan call {
	out := make(chan call, 1)
	go func() {
		res, err := g.Do(ctx, req, work)
		out <- call{res, err}
	}()
	return out
}

// TestI4WatchdogKeepsTheLock replays I4 with the fix: the lock lives 1 s, the work takes 3 s.
// The watchdog renews the lease, so a retry at +1.5 s finds the lock still held and is told
// the key is in progress; the work runs once.
func TestI4WatchdogKeepsTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{LockTTL: time.Second})
	ctx := context.Background()
	key := testKey(t, "user:1", "debit")
	req := request(key, `{"amount":100}`)
	work := effectWork(e.db, key.BizKey, 3*time.Second, http.StatusCreated)

	first := doAsync(ctx, g, req, work)
	time.Sleep(1500 * time.Millisecond)

	ttl, err := e.rdb.PTTL(ctx, lockKey(key)).Result()
	if err != nil || ttl <= 0 {
		t.Fatalf("at +1.5s the lock %q has PTTL %v (err %v): the watchdog did not keep it", lockKey(key), ttl, err)
	}
	res, err := g.Do(ctx, req, work)
	if !errors.Is(err, idempotent.ErrKeyInUse) || res.Outcome != idempotent.InProgress || res.Layer != idempotent.LayerLock {
		t.Errorf("retry at +1.5s: outcome %q layer %q err %v, want in_progress from the lock", res.Outcome, res.Layer, err)
	}

	c := <-first
	if c.err != nil || c.res.Outcome != idempotent.Executed {
		t.Fatalf("first attempt: outcome %q err %v, want executed", c.res.Outcome, c.err)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
	if n, _ := e.rdb.Exists(ctx, lockKey(key)).Result(); n != 0 {
		t.Errorf("the lock is still in Redis after the work finished: release did not delete it")
	}
}

// TestI4ExpiredLockDedupIsTheBackstop replays I4 as the articles had it: a fixed 1 s lease
// (no watchdog) and 3 s of work. At +1.5 s the lease has expired, so a retry takes the lock
// — and still must not execute: it reaches the dedup record, waits on the first attempt's
// uncommitted row and is answered from it (or told it is in progress).
func TestI4ExpiredLockDedupIsTheBackstop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{LockTTL: time.Second, NoWatchdog: true})
	ctx := context.Background()
	key := testKey(t, "user:1", "debit")
	req := request(key, `{"amount":100}`)
	work := effectWork(e.db, key.BizKey, 3*time.Second, http.StatusCreated)

	first := doAsync(ctx, g, req, work)
	time.Sleep(1500 * time.Millisecond)

	if n, err := e.rdb.Exists(ctx, lockKey(key)).Result(); err != nil || n != 0 {
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
}

// TestI4LockLostCancelsTheWork deletes the lock while the work runs (as an expiry or a
// failover would). The watchdog's next renewal fails, the work's context is cancelled with
// ErrLockLost, and nothing commits — even though the work ignores the cancellation and
// answers 201. A retry with the same key then runs once.
func TestI4LockLostCancelsTheWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{LockTTL: 600 * time.Millisecond})
	ctx := context.Background()
	key := testKey(t, "user:1", "debit")
	req := request(key, `{"amount":100}`)

	var (
		mu    sync.Mutex
		cause error
	)
	stubborn := func(ctx context.Context) (idempotent.Response, error) {
		id, err := insertEffect(ctx, e.db, key.BizKey)
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
	}

	start := time.Now()
	first := doAsync(ctx, g, req, stubborn)
	deleted := after(500*time.Millisecond, func() {
		if n, err := e.rdb.Del(ctx, lockKey(key)).Result(); err != nil || n != 1 {
			t.Errorf("DEL %s at +0.5s = %d, %v; want the held lock deleted", lockKey(key), n, err)
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

	res, err := g.Do(ctx, req, effectWork(e.db, key.BizKey, 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Executed {
		t.Fatalf("retry: outcome %q err %v, want executed", res.Outcome, err)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("side_effects rows = %d after the retry, want 1", n)
	}
}
