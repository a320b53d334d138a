package idempotent_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/testenv"
)

// benchParallelism is goroutines per GOMAXPROCS in the benchmarks, standing for a server's
// concurrent requests.
const benchParallelism = 8

// benchEnv is newEnv for benchmarks, which only mean something against a real MySQL and a
// real Redis: without them the benchmark is skipped (failed in CI).
func benchEnv(b *testing.B) *env {
	b.Helper()
	testenv.RequireMySQL(b)
	if os.Getenv(testenv.EnvRedisAddr) == "" {
		if testenv.InCI() {
			b.Fatalf("%s is not set but CI=true", testenv.EnvRedisAddr)
		}
		b.Skipf("needs a real Redis: set %s", testenv.EnvRedisAddr)
	}
	return newEnv(b)
}

// benchWork is a typical small use case: one INSERT and one UPDATE through database.Conn,
// so that it joins whatever transaction ctx carries.
func benchWork(db *gorm.DB) idempotent.Work {
	return func(ctx context.Context) (idempotent.Response, error) {
		row := sideEffect{K: "bench"}
		conn := database.Conn(ctx, db)
		if err := conn.Create(&row).Error; err != nil {
			return idempotent.Response{}, err
		}
		if err := conn.Model(&sideEffect{}).Where("id = ?", row.ID).Update("k", "bench-done").Error; err != nil {
			return idempotent.Response{}, err
		}
		return jsonResponse(http.StatusCreated, map[string]int64{"id": row.ID}), nil
	}
}

// reportRate adds ops/s, the figure a capacity plan uses.
func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// benchNewKeys runs work under a fresh key per operation through a guard with cfg.
func benchNewKeys(b *testing.B, cfg idempotent.Config) {
	e := benchEnv(b)
	g := e.guard(cfg)
	work := benchWork(e.db)
	fingerprint := fp("/bench", `{"amount":100}`)
	var seq atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			key := idempotent.Key{Scope: "user:1", BizType: "bench", BizKey: strconv.FormatInt(seq.Add(1), 10)}
			res, err := g.Do(ctx, idempotent.Request{Key: key, Fingerprint: fingerprint}, work)
			if err != nil || res.Outcome != idempotent.Executed {
				b.Errorf("Do: outcome %q err %v", res.Outcome, err)
				return
			}
		}
	})
	reportRate(b)
}

// BenchmarkNewKeyAllLayers is the cost of a first request through every layer: cache miss,
// lock with watchdog, dedup record inserted and completed in the work's transaction, cache
// fill, unlock.
func BenchmarkNewKeyAllLayers(b *testing.B) { benchNewKeys(b, idempotent.Config{}) }

// BenchmarkNewKeyDedupOnly is BenchmarkNewKeyAllLayers with the Redis layers off: what the
// dedup record alone costs, to split the overhead between Redis and the database.
func BenchmarkNewKeyDedupOnly(b *testing.B) {
	benchNewKeys(b, idempotent.Config{NoLock: true, NoCache: true})
}

// BenchmarkNewKeyNoLayers is the same work in a plain transaction: the baseline.
func BenchmarkNewKeyNoLayers(b *testing.B) {
	e := benchEnv(b)
	work := benchWork(e.db)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				_, err := work(database.WithTx(ctx, tx))
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
	work := benchWork(e.db)
	if res, err := g.Do(ctx, req, work); err != nil || res.Outcome != idempotent.Executed {
		b.Fatalf("first Do: outcome %q err %v", res.Outcome, err)
	}
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := g.Do(ctx, req, work)
			if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerCache {
				b.Errorf("Do: outcome %q layer %q err %v", res.Outcome, res.Layer, err)
				return
			}
		}
	})
	reportRate(b)
}
