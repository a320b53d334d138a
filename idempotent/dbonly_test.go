package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemops"
)

// TestDatabaseOnly runs a guard built without a Redis client: every layer that needs Redis
// says so instead of panicking or pretending, and what the record alone can do still holds —
// a write once, its replay from the record (undegraded), a stored 4xx evicted, a message, a
// job, a purge.
func TestDatabaseOnly(t *testing.T) {
	e := newEnv(t)
	g := e.guardWith(nil, idempotent.Config{})
	ctx := context.Background()

	key := testKey(t, "user:1", "db-only")
	first := mustExecute(t, g, request(key, `{}`), effectWork(key.BizKey, 0, http.StatusCreated))
	res, err := g.Do(ctx, request(key, `{}`), effectWork(key.BizKey, 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup || len(res.Degraded) > 0 {
		t.Fatalf("copy: outcome %q layer %q degraded %v err %v, want replayed from the record, nothing degraded", res.Outcome, res.Layer, res.Degraded, err)
	}
	if string(res.Response.Body) != string(first.Response.Body) {
		t.Errorf("replay body %q, want %q", res.Response.Body, first.Response.Body)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
	if attempts, err := idemops.Attempts(ctx, g, key); err != nil || len(attempts) != 0 {
		t.Errorf("Attempts = %v, %v; want none and no error (no attempt log without Redis)", attempts, err)
	}
	if inFlight, _, err := idemops.InFlight(ctx, g, key); err != nil || inFlight {
		t.Errorf("InFlight = %v, %v; want false, nil", inFlight, err)
	}

	t.Run("a one-time token is unavailable", func(t *testing.T) {
		if _, _, err := g.IssueToken(ctx, "user:1"); !errors.Is(err, idempotent.ErrUnavailable) {
			t.Errorf("IssueToken: %v, want ErrUnavailable", err)
		}
		tok := idempotent.Key{Scope: "user:1", BizType: "db-only", BizKey: idempotent.TokenPrefix + "0123456789abcdef0123456789abcdef"}
		if _, err := g.Do(ctx, request(tok, `{}`), effectWork(tok.BizKey, 0, http.StatusCreated)); !errors.Is(err, idempotent.ErrUnavailable) {
			t.Errorf("a tok_ key: %v, want ErrUnavailable", err)
		}
	})

	t.Run("work outside the transaction is refused", func(t *testing.T) {
		k := testKey(t, "user:1", "db-only-before")
		req := request(k, `{}`)
		var called atomic.Bool
		req.Before = func(context.Context) error { called.Store(true); return nil }
		if _, err := g.Do(ctx, req, effectWork(k.BizKey, 0, http.StatusCreated)); !errors.Is(err, idempotent.ErrUnavailable) || called.Load() {
			t.Errorf("Before: %v (called %v), want ErrUnavailable and Before never called", err, called.Load())
		}
	})

	t.Run("a stored 4xx is evicted", func(t *testing.T) {
		k := testKey(t, "user:1", "db-only-evict")
		mustExecute(t, g, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusConflict))
		if _, err := idemops.Evict(ctx, g, k); err != nil {
			t.Fatalf("Evict: %v", err)
		}
		if _, found, err := g.Lookup(ctx, k); err != nil || found {
			t.Errorf("after Evict: found %v, %v; want no record", found, err)
		}
		if _, err := idemops.Evict(ctx, g, key); !errors.Is(err, idemops.ErrEffectCommitted) {
			t.Errorf("Evict of a stored 201: %v, want ErrEffectCommitted", err)
		}
	})

	t.Run("a message, a job, a purge", func(t *testing.T) {
		k := testKey(t, "user:1", "db-only-msg")
		for i := range 2 {
			res, err := g.Message(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusOK))
			want := idempotent.Executed
			if i == 1 {
				want = idempotent.Replayed
			}
			if err != nil || res.Outcome != want {
				t.Errorf("message copy %d: %q %v, want %q", i, res.Outcome, err, want)
			}
		}
		ran := false
		if ok, err := idemops.RunLocked(ctx, g, "db-only-job", func(context.Context) error { ran = true; return nil }); !ok || err != nil || !ran {
			t.Errorf("RunLocked = %v, %v (ran %v), want the job run", ok, err, ran)
		}
		time.Sleep(10 * time.Millisecond)
		if n, err := g.Purge(ctx, idempotent.PurgeOptions{OlderThan: time.Nanosecond}); err != nil || n < 2 {
			t.Errorf("Purge = %d, %v; want the records purged", n, err)
		}
	})
}
