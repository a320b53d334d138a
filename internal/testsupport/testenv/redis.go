package testenv

import (
	"os"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent/idemtest"
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
	client := redisx.NewClient(addr, idemtest.LeaseRedisDB(tb, addr))
	tb.Cleanup(func() { _ = client.Close() })
	return &redisx.Conn{Client: client}
}

// Unreachable returns a client for an address where nothing listens, to stand for Redis down.
func Unreachable(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redisx.NewClient(Nowhere(tb), 0)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
