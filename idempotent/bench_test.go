package idempotent_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// benchParallelism is goroutines per GOMAXPROCS in the benchmarks, standing for a server's
// concurrent requests.
const benchParallelism = 8

// benchEnv is newEnv for benchmarks, which only mean something against a real MySQL and a
// real Redis: without them the benchmark is skipped (failed in CI).
func benchEnv(b *testing.B) *env {
	b.Helper()
	idemtest.RequireMySQL(b)
	if os.Getenv(idemtest.EnvRedis) == "" {
		if idemtest.InCI() {
			b.Fatalf("%s is not set but CI=true", idemtest.EnvRedis)
		}
		b.Skipf("needs a real Redis: set %s", idemtest.EnvRedis)
	}
	return newEnv(b)
}

// benchWork is a typical small use case: one INSERT and one UPDATE through the transaction
// the work receives.
func benchWork(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
	row := sideEffect{K: "bench"}
	if err := tx.Create(&row).Error; err != nil {
		return idempotent.Response{}, err
	}
	if err := tx.Model(&sideEffect{}).Where("id = ?", row.ID).Update("k", "bench-done").Error; err != nil {
		return idempotent.Response{}, err
	}
	return jsonResponse(http.StatusCreated, map[string]int64{"id": row.ID}), nil
}

// reportRate adds ops/s, the figure a capacity plan uses.
func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// benchNewKeys runs benchWork under a fresh key per operation through a guard with cfg, each
// request passed through shape when one is given.
func benchNewKeys(b *testing.B, cfg idempotent.Config, shape ...func(idempotent.Request) idempotent.Request) {
	e := benchEnv(b)
	g := e.guard(cfg)
	fingerprint := fp("/bench", `{"amount":100}`)
	var seq atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			key := idempotent.Key{Scope: "user:1", BizType: "bench", BizKey: strconv.FormatInt(seq.Add(1), 10)}
			req := idempotent.Request{Key: key, Fingerprint: fingerprint}
			for _, f := range shape {
				req = f(req)
			}
			res, err := g.Do(ctx, req, idempotent.Respond(benchWork))
			if err != nil || res.Outcome != idempotent.Executed {
				b.Errorf("Do: outcome %q err %v", res.Outcome, err)
				return
			}
		}
	})
	reportRate(b)
}

// BenchmarkNewKeyAllLayers is the cost of a first request with the defaults: a request with
// no work outside its transaction asks the guard's memory (no round trip), runs the work and
// inserts the finished dedup record after it, commits, and keeps its answer; the attempt log
// goes to Redis off its path.
func BenchmarkNewKeyAllLayers(b *testing.B) { benchNewKeys(b, idempotent.Config{}) }

// BenchmarkNewKeyLeased is BenchmarkNewKeyAllLayers for a request with work outside its
// transaction (an empty Before): one Lua round trip for the cache miss and the lease
// (watchdog armed) before the work, one to fill the cache and release after it.
func BenchmarkNewKeyLeased(b *testing.B) { benchNewKeys(b, idempotent.Config{}, leased) }

// BenchmarkNewKeyRecordFirst is BenchmarkNewKeyAllLayers with the record inserted
// PROCESSING before the work and completed after it: the placement the default replaced.
func BenchmarkNewKeyRecordFirst(b *testing.B) {
	benchNewKeys(b, idemlab.With(idempotent.Config{}, idemlab.Lab{RecordFirst: true}))
}

// BenchmarkNewKeyRedsync is BenchmarkNewKeyAllLayers with a redsync mutex instead of the
// one-script lease: a cache read, a lock, a cache write and an unlock.
func BenchmarkNewKeyRedsync(b *testing.B) {
	benchNewKeys(b, idemlab.With(idempotent.Config{}, idemlab.Lab{RedsyncLock: true}))
}

// BenchmarkNewKeyDedupOnly is BenchmarkNewKeyAllLayers with the Redis layers off: what the
// dedup record alone costs, to split the overhead between Redis and the database.
func BenchmarkNewKeyDedupOnly(b *testing.B) {
	benchNewKeys(b, idemlab.With(idempotent.Config{}, idemlab.Lab{NoLock: true, NoCache: true}))
}

// BenchmarkNewKeyNoLayers is the same work in a plain transaction: the baseline.
func BenchmarkNewKeyNoLayers(b *testing.B) {
	e := benchEnv(b)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				_, err := benchWork(ctx, tx)
				return err
			})
			if err != nil {
				b.Errorf("transaction: %v", err)
				return
			}
		}
	})
	reportRate(b)
}

// BenchmarkReplayFromCache is the cost of a duplicate at the guard that answered it: one key,
// answered from the guard's memory, no round trip.
func BenchmarkReplayFromCache(b *testing.B) { benchReplay(b) }

// BenchmarkReplayLeased is BenchmarkReplayFromCache for a request with work outside its
// transaction: answered from the Redis cache by the claim script, one round trip.
func BenchmarkReplayLeased(b *testing.B) { benchReplay(b, leased) }

// benchReplay replays one key at the guard that executed it, each request passed through
// shape when one is given.
func benchReplay(b *testing.B, shape ...func(idempotent.Request) idempotent.Request) {
	e := benchEnv(b)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	req := idempotent.Request{Key: idempotent.Key{Scope: "user:1", BizType: "bench", BizKey: "replay"}, Fingerprint: fp("/bench", `{}`)}
	for _, f := range shape {
		req = f(req)
	}
	if res, err := g.Do(ctx, req, idempotent.Respond(benchWork)); err != nil || res.Outcome != idempotent.Executed {
		b.Fatalf("first Do: outcome %q err %v", res.Outcome, err)
	}
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := g.Do(ctx, req, idempotent.Respond(benchWork))
			if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerCache {
				b.Errorf("Do: outcome %q layer %q err %v", res.Outcome, res.Layer, err)
				return
			}
		}
	})
	reportRate(b)
}

// BenchmarkReplayAtAnotherInstance is the cost of the first copy of a key at an instance that
// did not answer it: each operation replays, at a second guard, a key the first one executed
// before the timer started. Its transaction runs the work and meets the committed record,
// which it replays and keeps; this is what a replay costs once per instance and key.
func BenchmarkReplayAtAnotherInstance(b *testing.B) {
	e := benchEnv(b)
	first, other := e.guard(idempotent.Config{}), e.guard(idempotent.Config{})
	fingerprint := fp("/bench", `{"amount":100}`)
	keys := make([]idempotent.Key, b.N)
	var next atomic.Int64
	run := func(each func(idempotent.Key)) {
		var wg sync.WaitGroup
		for range benchParallelism {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
					each(keys[i])
				}
			})
		}
		wg.Wait()
		next.Store(0)
	}
	for i := range keys {
		keys[i] = idempotent.Key{Scope: "user:1", BizType: "bench-elsewhere", BizKey: strconv.Itoa(b.N) + "-" + strconv.Itoa(i)}
	}
	ctx := context.Background()
	run(func(k idempotent.Key) {
		if res, err := first.Do(ctx, idempotent.Request{Key: k, Fingerprint: fingerprint}, idempotent.Respond(benchWork)); err != nil || res.Outcome != idempotent.Executed {
			b.Errorf("first Do: outcome %q err %v", res.Outcome, err)
		}
	})
	b.ResetTimer()
	run(func(k idempotent.Key) {
		res, err := other.Do(ctx, idempotent.Request{Key: k, Fingerprint: fingerprint}, idempotent.Respond(benchWork))
		if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup {
			b.Errorf("Do at the other instance: outcome %q layer %q err %v", res.Outcome, res.Layer, err)
		}
	})
	reportRate(b)
}
