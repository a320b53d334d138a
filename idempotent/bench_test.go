package idempotent_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
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

// benchNewKeys runs benchWork under a fresh key per operation through a guard with cfg.
func benchNewKeys(b *testing.B, cfg idempotent.Config) {
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
			res, err := g.Do(ctx, idempotent.Request{Key: key, Fingerprint: fingerprint}, idempotent.Respond(benchWork))
			if err != nil || res.Outcome != idempotent.Executed {
				b.Errorf("Do: outcome %q err %v", res.Outcome, err)
				return
			}
		}
	})
	reportRate(b)
}

// BenchmarkNewKeyAllLayers is the cost of a first request through every layer with the
// defaults: one Lua round trip for the cache miss and the lease (watchdog armed), the work,
// the finished dedup record inserted once after it, commit, one Lua round trip to fill the
// cache and release.
func BenchmarkNewKeyAllLayers(b *testing.B) { benchNewKeys(b, idempotent.Config{}) }

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

// BenchmarkReplayFromCache is the cost of a duplicate: one key, answered from Redis.
func BenchmarkReplayFromCache(b *testing.B) {
	e := benchEnv(b)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	req := idempotent.Request{Key: idempotent.Key{Scope: "user:1", BizType: "bench", BizKey: "replay"}, Fingerprint: fp("/bench", `{}`)}
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
