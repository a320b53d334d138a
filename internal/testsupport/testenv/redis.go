package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/internal/platform/redisx"
)

// Redis returns an isolated Redis for one test. Against ONCEPAY_TEST_REDIS_ADDR it leases one
// of the logical databases 1..15 (the lease is a key in database 0, so test packages running
// in parallel never share one), flushes it, and releases it when the test ends. Without the
// variable it starts a miniredis on a free TCP port.
func Redis(tb testing.TB) *redisx.Conn {
	tb.Helper()
	addr := os.Getenv(EnvRedisAddr)
	if addr == "" {
		if InCI() {
			tb.Fatalf("%s is not set but CI=true: the suite must run against a real Redis", EnvRedisAddr)
		}
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // expire keys on the wall clock, like the real Redis CI uses
		if err := m.Start(); err != nil {
			tb.Fatalf("start miniredis: %v", err)
		}
		c := &redisx.Conn{Client: redisx.NewClient(m.Addr(), 0), Embedded: m}
		tb.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := context.Background()
	leases := redisx.NewClient(addr, 0)
	defer leases.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for db := 1; db <= 15; db++ {
			key := fmt.Sprintf("oncepay:test:lease:%d", db)
			ok, err := leases.SetNX(ctx, key, os.Getpid(), 10*time.Minute).Result()
			if err != nil {
				tb.Fatalf("Redis at %s is unreachable: %v", addr, err)
			}
			if !ok {
				continue
			}
			client := redisx.NewClient(addr, db)
			if err := client.FlushDB(ctx).Err(); err != nil {
				tb.Fatalf("flush Redis db %d: %v", db, err)
			}
			tb.Cleanup(func() {
				_ = client.FlushDB(context.Background()).Err()
				_ = client.Close()
				release := redisx.NewClient(addr, 0)
				_ = release.Del(context.Background(), key).Err()
				_ = release.Close()
			})
			return &redisx.Conn{Client: client}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no free Redis database on %s after 2m: 15 are leased", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Unreachable returns a client for an address where nothing listens, to stand for Redis down.
func Unreachable(tb testing.TB) *redis.Client {
	tb.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		tb.Fatalf("start miniredis: %v", err)
	}
	addr := m.Addr()
	m.Close()
	c := redisx.NewClient(addr, 0)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
