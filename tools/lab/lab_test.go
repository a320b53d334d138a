package lab

import (
	"context"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestFixedLeaseRunsOutUnrenewed is the lab lock of I4 on its own: a second taker is refused
// while the lease runs, takes the lock once it has run out although the first holder never
// let go, and the first holder's late release leaves the second one's lease alone. It runs on
// a real Redis (ONCEPAY_TEST_REDIS_ADDR) and on miniredis, whose TTLs do not count down by
// themselves: the lease must run out on both.
func TestFixedLeaseRunsOutUnrenewed(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t).Client
	const key, lease = "oncepay:lab:test", 300 * time.Millisecond

	first, err := takeFixedLease(ctx, rdb, key, lease)
	if err != nil || first == "" {
		t.Fatalf("first take: %q, %v", first, err)
	}
	if v, err := takeFixedLease(ctx, rdb, key, lease); err != nil || v != "" {
		t.Fatalf("a second taker got the lock while the lease ran: %q, %v", v, err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	second, err := takeFixedLease(ctx, rdb, key, lease)
	if err != nil || second == "" {
		t.Fatalf("the lease did not run out: %q, %v", second, err)
	}
	releaseFixedLease(ctx, rdb, key, first)
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != second {
		t.Errorf("after the first holder's late release the lock holds %q (%v), want the second taker's %q", got, err, second)
	}
	releaseFixedLease(ctx, rdb, key, second)
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("the holder's release left the lock (exists %d, %v)", n, err)
	}
}
