package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/galera"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// failover is one run of I14: an instance on a primary with one replica acknowledges orders,
// the primary is killed -9, the replica is promoted and a second instance on it — with a
// Redis of its own, since the replay cache is an optimisation that may be gone (restarted,
// evicted, past its day) — receives every acknowledged key again.
type failover struct {
	pair   *galera.Pair
	before *apptest.Server
	// acked are the orders the first instance acknowledged, by key.
	acked map[string]order.View
}

func startFailover(t *testing.T, semiSync bool) *failover {
	t.Helper()
	p := galera.PairForTest(t, semiSync)
	ctx := context.Background()
	if err := p.ExecPrimary(ctx, "CREATE DATABASE oncepay"); err != nil {
		t.Fatal(err)
	}
	pool := openPool(t, p.PrimaryDSN("oncepay"))
	if err := database.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := apptest.StartOn(t, app.Deps{DB: pool, Redis: testenv.Redis(t), Kafka: testenv.Kafka(t)}, func(c *config.Config) { c.NodeID = 1 })
	return &failover{pair: p, before: s, acked: map[string]order.View{}}
}

func openPool(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	pool, err := database.Open(database.Options{MySQLDSN: dsn, MaxOpenConns: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = database.Close(pool) })
	return pool
}

// order places and records one acknowledged order under key.
func (f *failover) order(t *testing.T, key string) {
	t.Helper()
	f.acked[key] = f.before.CreateOrder(t, apptest.AliceKey, key, apptest.Item{SKU: "SKU-1001", Quantity: 1})
}

// failOver kills the primary, promotes the replica and starts the second instance on it.
func (f *failover) failOver(t *testing.T) *apptest.Server {
	t.Helper()
	f.pair.KillPrimary()
	if err := f.pair.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
	pool := openPool(t, f.pair.ReplicaDSN("oncepay"))
	return apptest.StartOn(t, app.Deps{DB: pool, Redis: testenv.Redis(t), Kafka: testenv.Kafka(t)}, func(c *config.Config) {
		c.NodeID = 2
		c.SeedDemo = false // the demo data came with the replica
	})
}

// retry sends every acknowledged key again to after and counts the keys executed a second
// time: answered with another order than the one the client was told of.
func (f *failover) retry(t *testing.T, after *apptest.Server) (again int) {
	t.Helper()
	for key, first := range f.acked {
		r := after.PostOrder(apptest.AliceKey, key, apptest.Item{SKU: "SKU-1001", Quantity: 1})
		var v order.View
		if r.Status == http.StatusCreated {
			r.Decode(t, &v)
		}
		switch {
		case r.Status != http.StatusCreated:
			t.Errorf("the retry of %s after the failover: %s", key, r)
		case v.OrderID != first.OrderID:
			again++
			t.Logf("I14: key %s was acknowledged as order %s and now executed again as order %s (%s)", key, first.OrderID, v.OrderID, r.Outcome())
		case r.Outcome() != "replayed":
			t.Errorf("the retry of %s: %s with the acknowledged order, want it replayed", key, r.Outcome())
		}
	}
	return again
}

// TestFailoverThatForgets is I14 on real servers (make test-galera): a primary acknowledges
// orders, dies (kill -9), and its replica is promoted. With asynchronous replication, MariaDB's
// default, the replica had not received the last acknowledged commits — its link was cut before
// them, as a lagging replica's is — so the dedup records of those keys died with the primary
// and their retries execute a second time: another order for a key the client was already told
// was ordered. With semi-synchronous replication (AFTER_SYNC, no fallback to asynchronous) the
// primary acknowledges a commit only once the replica has it: every acknowledged key replays
// its first answer after the failover, and a write the cut-off replica could not receive is
// never acknowledged. Exactly-once is only as durable as the store's acknowledged writes.
func TestFailoverThatForgets(t *testing.T) {
	t.Run("asynchronous: the acknowledged key runs again", func(t *testing.T) {
		f := startFailover(t, false)
		prefix := "i14-async-" + apptest.RandHex(3)
		for i := range 5 {
			f.order(t, apptest.Key(prefix+"-synced", i))
		}
		if err := f.pair.WaitCaughtUp(context.Background(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := f.pair.CutReplica(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			f.order(t, apptest.Key(prefix+"-unsynced", i)) // acknowledged at once: nobody waits for the replica
		}
		after := f.failOver(t)
		if again := f.retry(t, after); again != 5 {
			t.Errorf("%d of the 5 keys acknowledged after the cut executed again on the promoted replica, want 5: the incident did not reproduce", again)
		}
	})

	t.Run("semi-synchronous AFTER_SYNC: oncepay holds", func(t *testing.T) {
		f := startFailover(t, true)
		prefix := "i14-semisync-" + apptest.RandHex(3)
		for i := range 10 {
			f.order(t, apptest.Key(prefix, i))
		}
		// Cut off, the replica can acknowledge nothing: the next order is not acknowledged
		// (the client gives up), and the primary dies with it unacknowledged.
		if err := f.pair.CutReplica(context.Background()); err != nil {
			t.Fatal(err)
		}
		unacked := apptest.Key(prefix+"-unacked", 0)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r := f.before.DoContext(ctx, http.MethodPost, "/v1/orders", apptest.AliceKey, apptest.OrderBody(apptest.Item{SKU: "SKU-1001", Quantity: 1}), apptest.IdemKey(unacked))
		cancel()
		if r.Status == http.StatusCreated {
			t.Fatalf("an order was acknowledged while the only replica was cut off: %s", r)
		}
		after := f.failOver(t)
		if again := f.retry(t, after); again != 0 {
			t.Errorf("%d acknowledged keys executed again after the failover, want 0", again)
		}
		// The unacknowledged order runs once on the new primary.
		apptest.Must(t, after.PostOrder(apptest.AliceKey, unacked, apptest.Item{SKU: "SKU-1001", Quantity: 1}), http.StatusCreated)
		if n := after.Count(t, "idempotency_records", "biz_key = ?", unacked); n != 1 {
			t.Errorf("%d records of the unacknowledged key, want 1", n)
		}
	})
}
