package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestRedisPrefixAndDB runs two deployments on one Redis, each with its own
// ONCEPAY_REDIS_PREFIX, both on the ONCEPAY_REDIS_DB the test picked, and each opening Redis
// itself from its configuration. After tokens, orders and the background jobs of both, every
// key of that database starts with one of the two prefixes (none with the default
// "oncepay:"), each deployment wrote some, and nothing of theirs landed in database 0.
func TestRedisPrefixAndDB(t *testing.T) {
	shared := testenv.Redis(t)
	addr, db := shared.Addrs()[0], shared.DB()
	if shared.Embedded != nil {
		db = 7 // a private miniredis: any database but 0 shows the setting is used
	}
	probe := redisx.NewClient(addr, db)
	t.Cleanup(func() { _ = probe.Close() })
	ctx := context.Background()
	if err := probe.FlushDB(ctx).Err(); err != nil {
		t.Fatalf("flush db %d: %v", db, err)
	}

	// Unique per run: database 0 of a shared Redis may hold other packages' keys.
	run := apptest.RandHex(4)
	prefixes := []string{"shop-a-" + run + ":", "shop-b-" + run + ":"}
	for _, prefix := range prefixes {
		s := startOwnRedis(t, func(c *config.Config) {
			c.RedisAddrs, c.RedisDB, c.RedisPrefix = []string{addr}, db, prefix
		})
		s.Token(t, apptest.AliceKey)
		s.CreateOrder(t, apptest.AliceKey, "order-1", apptest.Item{SKU: "SKU-1002", Quantity: 1})
		apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/jobs/close-expired-orders/run", apptest.AdminKey, nil, nil), http.StatusOK)
	}

	keys, err := probe.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("KEYS in db %d: %v", db, err)
	}
	perPrefix := map[string]int{}
	for _, k := range keys {
		matched := false
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				perPrefix[p]++
				matched = true
			}
		}
		if !matched {
			t.Errorf("key %q in db %d starts with neither configured prefix %v", k, db, prefixes)
		}
	}
	for _, p := range prefixes {
		if perPrefix[p] == 0 {
			t.Errorf("no key with prefix %q in db %d (keys: %q): the deployment did not use the configured database or prefix", p, db, keys)
		}
	}
	if db != 0 {
		zero := redisx.NewClient(addr, 0)
		t.Cleanup(func() { _ = zero.Close() })
		for _, p := range prefixes {
			if found := scanAll(t, zero, p+"*"); len(found) > 0 {
				t.Errorf("db 0 holds keys %q: the deployments wrote outside ONCEPAY_REDIS_DB=%d", found, db)
			}
		}
	}
}

// startOwnRedis starts an instance on a fresh database and Kafka but no Redis connection, so
// that it opens Redis from its configuration; the connection is closed once it has stopped.
func startOwnRedis(t *testing.T, opt apptest.Option) *apptest.Server {
	t.Helper()
	var s *apptest.Server
	// Registered before StartOn's own cleanup, so it runs after the instance has stopped.
	t.Cleanup(func() {
		if s != nil {
			s.App.Close()
		}
	})
	s = apptest.StartOn(t, app.Deps{DB: testenv.DB(t), Kafka: testenv.Kafka(t)}, opt)
	return s
}

// scanAll returns the keys of rdb that match pattern.
func scanAll(t *testing.T, rdb *redis.Client, pattern string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s: %v", pattern, err)
	}
	return out
}
