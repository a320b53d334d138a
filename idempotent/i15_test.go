package idempotent_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
)

// TestI15TwoHoldersAfterAFailover models the failover of I15 with idemlab's Lab.ForgetLease: the first
// copy's lease is deleted right after it was taken, as a promoted replica that never saw it
// has no lease at all, and the first copy then works on for 600 ms (idemlab's Lab.BeforeWork). A second
// copy 200 ms later is granted the lease too and executes: two holders at once. The first
// holder's transaction then meets the second's dedup record, rolls back, and is answered the
// second's result byte for byte; the effect exists once. The watchdog (on, with the default
// lease) would only notice at its first renewal, long after.
func TestI15TwoHoldersAfterAFailover(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			key := testKey(t, "channel:simpay", "T-I15")
			type holderKey struct{}
			lab := idemlab.Of(kind.cfg)
			lab.ForgetLease = func(ctx context.Context, _ idempotent.Key) bool { return ctx.Value(holderKey{}) != nil }
			lab.BeforeWork = func(ctx context.Context, _ idempotent.Key) error {
				if ctx.Value(holderKey{}) != nil {
					time.Sleep(600 * time.Millisecond)
				}
				return nil
			}
			g := e.guard(idemlab.With(kind.cfg, lab))
			req := request(key, `{"trade_no":"T-I15"}`)
			work := effectWork(key.BizKey, 0, http.StatusOK)

			first := doAsync(context.WithValue(context.Background(), holderKey{}, true), g, req, work)
			time.Sleep(200 * time.Millisecond)
			if kind.name == "lease" {
				if n, _ := e.rdb.Exists(context.Background(), g.LeaseKey(key)).Result(); n != 0 {
					t.Fatalf("the first holder's lease is still in Redis: ForgetLease did not delete it")
				}
			}
			second, err := g.Do(context.Background(), req, work)
			if err != nil || second.Outcome != idempotent.Executed {
				t.Fatalf("the second copy, granted the lease again: outcome %q layer %q err %v, want executed", second.Outcome, second.Layer, err)
			}
			c := <-first
			if c.err != nil || c.res.Outcome != idempotent.Replayed || !bytes.Equal(c.res.Response.Body, second.Response.Body) {
				t.Fatalf("the first holder: outcome %q layer %q err %v body %s, want the second's body %s replayed",
					c.res.Outcome, c.res.Layer, c.err, c.res.Response.Body, second.Response.Body)
			}
			if n := countEffects(t, e.db, key.BizKey); n != 1 {
				t.Errorf("side_effects rows = %d after two holders, want 1 (the dedup record is the fence)", n)
			}
		})
	}
}
