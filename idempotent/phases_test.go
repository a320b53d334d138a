package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// outside counts the calls of a Before phase: the work outside the transaction (a channel
// call) that must never run for a refused request or a replay (I12).
type outside struct{ calls atomic.Int64 }

func (o *outside) phase(err error) func(context.Context) error {
	return func(context.Context) error {
		o.calls.Add(1)
		return err
	}
}

// TestBeforeRunsOnlyForTheAttemptThatExecutes: the Before phase runs once, for the first
// attempt, after the key is claimed; a copy in flight (409), the same key with another request
// (422), a replay from the cache and a replay from the record once the cache is gone, and a
// refused token (400) never reach it.
func TestBeforeRunsOnlyForTheAttemptThatExecutes(t *testing.T) {
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	key := testKey(t, "user:1", "k")
	var o outside
	req := func(body string) idempotent.Request {
		r := request(key, body)
		r.Before = o.phase(nil)
		return r
	}

	// The first attempt holds the lease inside its work while a copy arrives.
	inWork, release := make(chan struct{}), make(chan struct{})
	done := after(0, func() {
		_, err := g.Do(ctx, req("a"), func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
			close(inWork)
			<-release
			return effectWork(key.BizKey, 0, http.StatusCreated)(ctx, tx, record)
		})
		if err != nil {
			t.Errorf("first attempt: %v", err)
		}
	})
	<-inWork
	if _, err := g.Do(ctx, req("a"), effectWork(key.BizKey, 0, http.StatusCreated)); !errors.Is(err, idempotent.ErrKeyInUse) {
		t.Errorf("a copy in flight: %v, want ErrKeyInUse", err)
	}
	close(release)
	<-done

	if _, err := g.Do(ctx, req("another body"), effectWork(key.BizKey, 0, http.StatusCreated)); !errors.Is(err, idempotent.ErrKeyReused) {
		t.Errorf("another request under the key: %v, want ErrKeyReused", err)
	}
	if res, err := g.Do(ctx, req("a"), effectWork(key.BizKey, 0, http.StatusCreated)); err != nil || res.Outcome != idempotent.Replayed {
		t.Errorf("a replay from the cache: %+v, %v", res, err)
	}
	if err := e.rdb.Del(ctx, g.CacheKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := g.Do(ctx, req("a"), effectWork(key.BizKey, 0, http.StatusCreated)); err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup {
		t.Errorf("a replay with the cache gone: %+v, %v; want replayed from the dedup record", res, err)
	}
	if err := e.rdb.Del(ctx, g.CacheKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, req("another body"), effectWork(key.BizKey, 0, http.StatusCreated)); !errors.Is(err, idempotent.ErrKeyReused) {
		t.Errorf("another request with the cache gone: %v, want ErrKeyReused", err)
	}
	token := request(idempotent.Key{Scope: "user:1", BizType: "test", BizKey: "tok_not-issued"}, "a")
	token.Before = o.phase(nil)
	if _, err := g.Do(ctx, token, effectWork(key.BizKey, 0, http.StatusCreated)); !errors.Is(err, idempotent.ErrTokenInvalid) {
		t.Errorf("a token never issued: %v, want ErrTokenInvalid", err)
	}
	if n := o.calls.Load(); n != 1 {
		t.Errorf("Before ran %d times, want once: for the attempt that executed", n)
	}
	if n := countEffects(t, e.db, key.BizKey); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

// TestBeforeRefusalIsStoredLikeTheWorks: a Before that refuses with a business error (404,
// 409 illegal_state) is stored and replayed without running Before again; one that fails
// otherwise (the channel did not answer) stores nothing, so the retry runs it again.
func TestBeforeRefusalIsStoredLikeTheWorks(t *testing.T) {
	e := newEnv(t)
	refusal := errors.New("illegal state")
	g := e.guard(idempotent.Config{Reject: func(_ context.Context, err error) (idempotent.Response, bool) {
		return jsonResponse(http.StatusConflict, map[string]string{"code": "illegal_state"}), errors.Is(err, refusal)
	}})
	ctx := context.Background()

	var refused outside
	key := testKey(t, "user:1", "refused")
	for range 3 {
		req := request(key, "a")
		req.Before = refused.phase(refusal)
		res, err := g.Do(ctx, req, effectWork(key.BizKey, 0, http.StatusOK))
		if err != nil || res.Response.Status != http.StatusConflict {
			t.Fatalf("refused Before: %+v, %v; want a stored 409", res, err)
		}
	}
	if n := refused.calls.Load(); n != 1 {
		t.Errorf("a refusing Before ran %d times, want once: the refusal replays", n)
	}

	var failing outside
	key = testKey(t, "user:1", "failing")
	unavailable := errors.New("the channel did not answer")
	for range 3 {
		req := request(key, "a")
		req.Before = failing.phase(unavailable)
		if _, err := g.Do(ctx, req, effectWork(key.BizKey, 0, http.StatusOK)); !errors.Is(err, unavailable) {
			t.Fatalf("failing Before: %v, want its error", err)
		}
	}
	if n, r := failing.calls.Load(), countRecords(t, e.db, key); n != 3 || r != 0 {
		t.Errorf("a failing Before ran %d times and left %d records, want 3 runs and none stored", n, r)
	}
	if n := countEffects(t, e.db, key.BizKey) + countEffects(t, e.db, testKey(t, "user:1", "refused").BizKey); n != 0 {
		t.Errorf("%d effects of refused attempts, want none", n)
	}
}

// TestBeforeNeedsTheLease: without Redis (degrade mode) there is no lease to run the outside
// work under, so an attempt with a Before is refused ErrUnavailable and calls nothing; an
// attempt without one still executes on the dedup record alone.
func TestBeforeNeedsTheLease(t *testing.T) {
	e := newEnv(t)
	g := e.guardWith(idemtest.Unreachable(t), idempotent.Config{})
	ctx := context.Background()
	var o outside
	key := testKey(t, "user:1", "down")
	req := request(key, "a")
	req.Before = o.phase(nil)
	if _, err := g.Do(ctx, req, effectWork(key.BizKey, 0, http.StatusOK)); !errors.Is(err, idempotent.ErrUnavailable) {
		t.Errorf("Redis down with a Before: %v, want ErrUnavailable", err)
	}
	if n := o.calls.Load(); n != 0 {
		t.Errorf("Before ran %d times without a lease", n)
	}
	plain := testKey(t, "user:1", "plain")
	if res, err := g.Do(ctx, request(plain, "a"), effectWork(plain.BizKey, 0, http.StatusOK)); err != nil || res.Outcome != idempotent.Executed {
		t.Errorf("Redis down without a Before: %+v, %v; want executed", res, err)
	}
}

// TestAfterRunsUnderTheLeaseOnceCommitted: After runs once, for the attempt that executed,
// after its transaction committed (it sees the row) and while its lease is still held (a copy
// is answered 409 meanwhile); a replay, a stored refusal and a failed attempt never run it.
func TestAfterRunsUnderTheLeaseOnceCommitted(t *testing.T) {
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	key := testKey(t, "user:1", "after")
	var runs atomic.Int64
	req := request(key, "a")
	req.After = func(ctx context.Context, res idempotent.Result) {
		runs.Add(1)
		if n := countEffects(t, e.db, key.BizKey); n != 1 {
			t.Errorf("After sees %d committed effects, want 1", n)
		}
		if ttl := e.rdb.PTTL(ctx, g.LeaseKey(key)).Val(); ttl <= 0 {
			t.Errorf("After runs with the lease's ttl %v, want it still held", ttl)
		}
		if _, err := g.Do(ctx, leased(request(key, "a")), effectWork(key.BizKey, 0, http.StatusOK)); !errors.Is(err, idempotent.ErrKeyInUse) {
			t.Errorf("a copy during After: %v, want ErrKeyInUse", err)
		}
	}
	for range 3 {
		if _, err := g.Do(ctx, req, effectWork(key.BizKey, 0, http.StatusOK)); err != nil {
			t.Fatal(err)
		}
	}
	failed := request(testKey(t, "user:1", "failed"), "a")
	failed.After = req.After
	_, _ = g.Do(ctx, failed, idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
		return idempotent.Response{}, errors.New("deadlock")
	}))
	if n := runs.Load(); n != 1 {
		t.Errorf("After ran %d times, want once", n)
	}
}
