package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemops"
)

// TestEvictStoredClientError: a stored 4xx is evicted — record and replay cache — so the next
// attempt with the key runs the work again; the record Evict returns is the one it deleted.
func TestEvictStoredClientError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")
	req := request(k, `{}`)

	mustExecute(t, g, req, effectWork(k.BizKey, 0, http.StatusConflict))
	if res, err := g.Do(ctx, req, effectWork(k.BizKey, 0, http.StatusCreated)); err != nil || res.Outcome != idempotent.Replayed {
		t.Fatalf("second attempt before the eviction: outcome %q err %v, want replayed", res.Outcome, err)
	}

	rec, err := idemops.Evict(ctx, g, k)
	if err != nil {
		t.Fatalf("Evict: %v", err)
	}
	if rec.ResponseStatus != http.StatusConflict || rec.Scope != k.Scope || rec.BizKey != k.BizKey {
		t.Errorf("Evict returned %+v, want the 409 record of %s", rec, k)
	}
	if n := countRecords(t, e.db, k); n != 0 {
		t.Errorf("%d records left after the eviction, want 0", n)
	}
	if n, _ := e.rdb.Exists(ctx, g.CacheKey(k)).Result(); n != 0 {
		t.Error("the replay cache entry survived the eviction")
	}

	res := mustExecute(t, g, req, effectWork(k.BizKey, 0, http.StatusCreated))
	if res.Response.Status != http.StatusCreated {
		t.Errorf("the attempt after the eviction answered %d, want 201 from running the work", res.Response.Status)
	}
	if n := countEffects(t, e.db, k.BizKey); n != 2 {
		t.Errorf("%d side effects, want 2 (the 409's committed trace and the 201)", n)
	}
}

// TestEvictRefusesSuccess: a stored 2xx is never evicted — its write committed with the
// record — and the record stays; an unknown key is ErrRecordNotFound.
func TestEvictRefusesSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")

	mustExecute(t, g, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
	rec, err := idemops.Evict(ctx, g, k)
	if !errors.Is(err, idemops.ErrEffectCommitted) {
		t.Fatalf("Evict of a 201: err %v, want ErrEffectCommitted", err)
	}
	if rec.ResponseStatus != http.StatusCreated {
		t.Errorf("Evict returned the record %+v, want the 201 it refused", rec)
	}
	if n := countRecords(t, e.db, k); n != 1 {
		t.Errorf("%d records after a refused eviction, want 1", n)
	}
	if res, err := g.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated)); err != nil || res.Outcome != idempotent.Replayed {
		t.Errorf("after the refused eviction: outcome %q err %v, want replayed", res.Outcome, err)
	}

	if _, err := idemops.Evict(ctx, g, testKey(t, "user:1", "unknown")); !errors.Is(err, idemops.ErrRecordNotFound) {
		t.Errorf("Evict of an unknown key: err %v, want ErrRecordNotFound", err)
	}
}

// TestEvictWhileInFlight: while an attempt holds the key's lock, Evict answers ErrKeyInUse
// and deletes nothing.
func TestEvictWhileInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")
	mustExecute(t, g, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusConflict))

	if err := e.rdb.Set(ctx, g.LeaseKey(k), "someone", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := idemops.Evict(ctx, g, k); !errors.Is(err, idempotent.ErrKeyInUse) {
		t.Errorf("Evict under another attempt's lock: err %v, want ErrKeyInUse", err)
	}
	if n := countRecords(t, e.db, k); n != 1 {
		t.Errorf("%d records, want the 409 kept", n)
	}
}

// TestPolicyDefaults: Policy reports the effective settings, defaults applied.
func TestPolicyDefaults(t *testing.T) {
	t.Parallel()
	p := newEnv(t).guard(idempotent.Config{}).Policy()
	if p.Retention != 720*time.Hour || p.TokenTTL != 10*time.Minute || p.CacheTTL != 24*time.Hour {
		t.Errorf("Policy() = %+v, want the documented defaults", p)
	}
	if want := []string{"Content-Type", "Location"}; !slices.Equal(p.ReplayedHeaders, want) {
		t.Errorf("ReplayedHeaders %v, want %v", p.ReplayedHeaders, want)
	}
}
