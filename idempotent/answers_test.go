package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemops"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestAnswersAcrossInstances: a write fenced by its record keeps its answer in the guard's
// memory. Two guards on one database and Redis stand for two instances: the first executes, a
// copy at the second is answered by the committed record (its transaction meets it) and
// keeps it, and from then on both answer copies from memory; the work ran once.
func TestAnswersAcrossInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.guard(idempotent.Config{}), e.guard(idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")
	first := mustExecute(t, a, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))

	for _, step := range []struct {
		name  string
		g     *idempotent.Guard
		layer idempotent.Layer
	}{
		{"a copy at the first instance", a, idempotent.LayerCache},
		{"a copy at the second instance", b, idempotent.LayerDedup},
		{"the second instance again", b, idempotent.LayerCache},
	} {
		res, err := step.g.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
		if err != nil || res.Outcome != idempotent.Replayed || res.Layer != step.layer || string(res.Response.Body) != string(first.Response.Body) {
			t.Errorf("%s: %q layer %q %s err %v, want replayed by the %s layer with %s", step.name, res.Outcome, res.Layer, res.Response.Body, err, step.layer, first.Response.Body)
		}
	}
	if res, err := b.Do(ctx, request(k, `{"other":1}`), effectWork(k.BizKey, 0, http.StatusCreated)); err == nil || res.Outcome != idempotent.Mismatch {
		t.Errorf("the key with another body: %q err %v, want %v", res.Outcome, err, idempotent.ErrKeyReused)
	}
	if n := countEffects(t, e.db, k.BizKey); n != 1 {
		t.Errorf("%d side effects, want 1", n)
	}
}

// TestPurgeMakesEveryInstanceForget: once Purge returns — run at a third instance — neither
// instance that kept the answer in memory replays it: a redelivery reaches the work, as it
// would with every dedup record and cache entry gone (I6). Without the purge's epoch, both
// would replay the purged answer from memory.
func TestPurgeMakesEveryInstanceForget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b, purger := e.guard(idempotent.Config{}), e.guard(idempotent.Config{}), e.guard(idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")
	mustExecute(t, a, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
	if res, err := b.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated)); err != nil || res.Outcome != idempotent.Replayed {
		t.Fatalf("a copy at the second instance: %q err %v, want replayed", res.Outcome, err)
	}

	if n, err := purger.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Minute}); err != nil || n == 0 {
		t.Fatalf("purge: %d records, err %v", n, err)
	}
	// The work's own fence is absent here, so the first redelivery runs it, and the next one,
	// at the other instance, meets its new record: what matters is that no instance answered
	// from memory.
	for _, step := range []struct {
		name    string
		g       *idempotent.Guard
		outcome idempotent.Outcome
		layer   idempotent.Layer
	}{
		{"the first instance", a, idempotent.Executed, idempotent.LayerWork},
		{"the second instance", b, idempotent.Replayed, idempotent.LayerDedup},
	} {
		res, err := step.g.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
		if err != nil || res.Outcome != step.outcome || res.Layer != step.layer {
			t.Errorf("%s, after the purge: %q layer %q err %v, want %q by the %s layer", step.name, res.Outcome, res.Layer, err, step.outcome, step.layer)
		}
	}
	if n := countEffects(t, e.db, k.BizKey); n != 2 {
		t.Errorf("%d side effects, want 2: the first and the redelivery after the purge", n)
	}
}

// TestEvictMakesEveryInstanceForget: a stored client error that another instance keeps in
// memory runs again there once Evict returns.
func TestEvictMakesEveryInstanceForget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.guard(idempotent.Config{}), e.guard(idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")
	mustExecute(t, a, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusConflict))
	for range 2 { // from the record, then from memory
		if res, err := b.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated)); err != nil || res.Outcome != idempotent.Replayed || res.Response.Status != http.StatusConflict {
			t.Fatalf("a copy at the second instance: %q %d err %v, want the 409 replayed", res.Outcome, res.Response.Status, err)
		}
	}
	if _, err := idemops.Evict(ctx, a, k); err != nil {
		t.Fatalf("Evict: %v", err)
	}
	res, err := b.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Executed || res.Response.Status != http.StatusCreated {
		t.Errorf("the second instance after the eviction: %q %d err %v, want the work run, 201", res.Outcome, res.Response.Status, err)
	}
}

// TestAnswersNeedTheEpoch: an instance that cannot read the answers' epoch — Redis
// unreachable — does not answer from memory, since it could not see a purge: the record
// answers, and the cache layer is reported as stepped aside.
func TestAnswersNeedTheEpoch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")
	mustExecute(t, g, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))

	down := e.guardWith(idemtest.Unreachable(t), idempotent.Config{})
	for range 2 {
		res, err := down.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
		if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup || !slices.Contains(res.Degraded, idempotent.LayerCache) {
			t.Errorf("Redis down: %q layer %q degraded %v err %v, want replayed from the record, the cache stepped aside", res.Outcome, res.Layer, res.Degraded, err)
		}
	}
	reject := e.guardWith(idemtest.Unreachable(t), idempotent.Config{RejectWithoutRedis: true})
	if _, err := reject.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated)); err == nil {
		t.Error("Redis down, RejectWithoutRedis: answered, want ErrUnavailable")
	}
	if n := countEffects(t, e.db, k.BizKey); n != 1 {
		t.Errorf("%d side effects, want 1", n)
	}
}

// TestACancelledRequestIsNotRedisDown: the read of the answers' epoch serves every request of
// the instance, so the request that happens to make it must not lend it its cancellation. A
// client that went away while the read was due left the instance refusing every fenced
// request for a second (503 in reject mode) with its memory dropped.
func TestACancelledRequestIsNotRedisDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{RejectWithoutRedis: true})
	k := testKey(t, "user:1", "k")
	mustExecute(t, g, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
	time.Sleep(1100 * time.Millisecond) // the last read of the epoch lapses

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	other := testKey(t, "user:2", "other")
	_, _ = g.Do(gone, request(other, `{}`), effectWork(other.BizKey, 0, http.StatusCreated))

	res, err := g.Do(context.Background(), request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerCache || len(res.Degraded) != 0 {
		t.Errorf("the next request: %q layer %q degraded %v err %v, want replayed from memory", res.Outcome, res.Layer, res.Degraded, err)
	}
}

// TestARerunPurgeFinishesTheForgetting: a purge that deleted its records but could not set the
// epoch returns ErrPurgeIncomplete, and its rerun, which finds nothing left to delete, must
// still make the instances forget: before, it returned 0 and no error, and the purged key was
// replayed from memory.
func TestARerunPurgeFinishesTheForgetting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.guard(idempotent.Config{})
	var failing atomic.Bool
	client := redis.NewClient(e.rdb.Options())
	t.Cleanup(func() { _ = client.Close() })
	client.AddHook(failEpoch{&failing})
	purger := e.guardWith(client, idempotent.Config{})
	ctx := context.Background()
	k := testKey(t, "user:1", "k")
	mustExecute(t, a, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))

	failing.Store(true)
	if n, err := purger.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Minute}); n == 0 || !errors.Is(err, idempotent.ErrPurgeIncomplete) {
		t.Fatalf("the purge that cannot set the epoch: %d records, err %v, want some and ErrPurgeIncomplete", n, err)
	}
	failing.Store(false)
	if n, err := purger.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Minute}); n != 0 || err != nil {
		t.Fatalf("its rerun: %d records, err %v, want 0 and no error", n, err)
	}
	res, err := a.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Executed {
		t.Errorf("after the rerun: %q layer %q err %v, want the work run: its record is purged", res.Outcome, res.Layer, err)
	}
}

// failEpoch fails every command on the answers' epoch while on is set, as a Redis that went
// away between a purge's DELETE and its last step would.
type failEpoch struct{ on *atomic.Bool }

// DialHook passes dials through.
func (failEpoch) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook fails a command on the epoch.
func (h failEpoch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if key, _ := cmd.Args()[min(1, len(cmd.Args())-1)].(string); h.on.Load() && strings.HasSuffix(key, "idem:answers-epoch") {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook passes pipelines through.
func (failEpoch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
