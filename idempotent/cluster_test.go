package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/idempotent/idemops"
	"github.com/oncepay/oncepay/idempotent/idemtest"
	"github.com/oncepay/oncepay/idempotent/internal/testnet"
)

// clusterEnv is a guard's database and a real three-master Redis Cluster, with the map of
// which master serves each slot.
type clusterEnv struct {
	env
	cluster *redis.ClusterClient
	// owner is the address of the master that serves each of the 16384 slots.
	owner *[16384]string
}

// newClusterEnv starts a Redis Cluster (idemtest.RedisCluster) and a fresh database with the
// side_effects table. The client has the options a service gives it (testnet, as oncepay's redisx).
func newClusterEnv(t *testing.T) *clusterEnv {
	t.Helper()
	addrs := idemtest.RedisCluster(t)
	e := &clusterEnv{cluster: testnet.NewClusterClient(addrs)}
	t.Cleanup(func() { _ = e.cluster.Close() })
	e.db, e.dialect = idemtest.DB(t, idemtest.Default()), idemtest.Default()
	createSideEffects(t, e.db)
	e.owner = idemtest.SlotMasters(t, e.cluster)
	return e
}

// node returns the master that serves the idempotency key k, after checking with CLUSTER
// KEYSLOT that every Redis key of k — replay cache, lease, attempt log and consumer marker —
// is in one slot: the claim and release scripts touch three of them at once, and a Redis
// Cluster refuses a script whose keys span slots (CROSSSLOT).
func (e *clusterEnv) node(t *testing.T, g *idempotent.Guard, k idempotent.Key) string {
	t.Helper()
	ctx := context.Background()
	var slot int64 = -1
	for _, key := range []string{g.CacheKey(k), g.LeaseKey(k), g.LogKey(k), g.MarkerKey(k)} {
		s, err := e.cluster.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
		}
		if slot >= 0 && s != slot {
			t.Fatalf("%s is in slot %d, another key of %s in slot %d: one script could not touch both", key, s, k, slot)
		}
		slot = s
	}
	return e.owner[slot]
}

// direct returns a plain client of the node at addr, to look at what it holds itself.
func direct(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := testnet.NewClient(addr)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterKeys returns n keys of the test and the master each one lives on, and fails unless
// they cover all three masters.
func (e *clusterEnv) clusterKeys(t *testing.T, g *idempotent.Guard, n int) ([]idempotent.Key, map[idempotent.Key]string) {
	t.Helper()
	keys := make([]idempotent.Key, n)
	nodes := map[idempotent.Key]string{}
	perNode := map[string]int{}
	for i := range keys {
		keys[i] = testKey(t, fmt.Sprintf("user:%d", i), fmt.Sprintf("k%d", i))
		nodes[keys[i]] = e.node(t, g, keys[i])
		perNode[nodes[keys[i]]]++
	}
	if len(perNode) != 3 {
		t.Fatalf("the %d keys land on %d masters %v, want all 3", n, len(perNode), perNode)
	}
	t.Logf("%d keys per master: %v", n, perNode)
	return keys, nodes
}

// TestClusterStorm runs storms of concurrent copies of many keys at once through a guard on a
// real Redis Cluster, with the keys spread over all three masters, in both lock modes: the
// one-script lease (claim and release scripts, each touching the cache, lease and log keys of
// one hash tag) and redsync. Each key's work commits exactly once; every copy is answered
// executed, replayed with the executed body or in_progress; later copies are replayed from the
// cache byte for byte (the guard's memory, for a write fenced by its record); and the cache
// entry and the attempt log the scripts wrote are on the master that owns the key's slot.
func TestClusterStorm(t *testing.T) {
	e := newClusterEnv(t)
	for _, mode := range []struct {
		name  string
		cfg   idempotent.Config
		lease bool // the request has work outside its transaction, under the lease
	}{
		{"fenced by the record", idempotent.Config{}, false},
		{"lease", idempotent.Config{}, true},
		{"redsync", idemlab.With(idempotent.Config{}, idemlab.Lab{RedsyncLock: true}), true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			const nKeys, copies = 24, 16
			g := e.guardWith(e.cluster, mode.cfg)
			ctx := context.Background()
			keys, nodes := e.clusterKeys(t, g, nKeys)
			request := func(k idempotent.Key, body string) idempotent.Request {
				if mode.lease {
					return leased(request(k, body))
				}
				return request(k, body)
			}

			calls := storm(nKeys*copies, func(i int) (idempotent.Result, error) {
				k := keys[i%nKeys]
				return g.Do(ctx, request(k, `{"amount":100}`), effectWork(k.BizKey, 20*time.Millisecond, http.StatusCreated))
			})

			for ki, k := range keys {
				var mine []call
				for i := ki; i < len(calls); i += nKeys {
					mine = append(mine, calls[i])
				}
				executed := checkStormAnswers(t, mine)
				if n := countEffects(t, e.db, k.BizKey); n != 1 {
					t.Fatalf("%s: %d side_effects rows after %d concurrent copies, want exactly 1", k, n, copies)
				}
				for range 3 {
					res, err := g.Do(ctx, request(k, `{"amount":100}`), effectWork(k.BizKey, 0, http.StatusCreated))
					if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerCache {
						t.Fatalf("%s: later copy: outcome %q layer %q err %v, want replayed from the cache", k, res.Outcome, res.Layer, err)
					}
					if !bytes.Equal(res.Response.Body, executed) {
						t.Fatalf("%s: replayed %s, want the executed body %s byte for byte", k, res.Response.Body, executed)
					}
				}
				owner := direct(t, nodes[k])
				// The attempt log is written off the request's path: wait until what the storm
				// and the replays queued has been sent before looking for it on the master.
				g.DrainAttemptLog()
				// A write fenced by its record keeps its answer in the guard's memory, not in
				// Redis.
				if n, err := owner.Exists(ctx, g.CacheKey(k)).Result(); err != nil || (n == 1) != mode.lease {
					t.Errorf("%s: %d replay cache entries on its master %s (%v), want %d", k, n, nodes[k], err, map[bool]int{true: 1}[mode.lease])
				}
				if n, err := owner.XLen(ctx, g.LogKey(k)).Result(); err != nil || n == 0 {
					t.Errorf("%s: the attempt log is not on its master %s: %d entries, %v", k, nodes[k], n, err)
				}
			}
		})
	}
}

// TestClusterLayers runs the other Redis paths of the guard on a real Redis Cluster, each on
// keys spread over the three masters: one-time tokens, consumer markers, the attempt log,
// eviction (a DEL of two keys of one hash tag), purge (many hash tags in one batch, which a
// single DEL would have the cluster refuse with CROSSSLOT) and the job lock.
func TestClusterLayers(t *testing.T) {
	e := newClusterEnv(t)
	ctx := context.Background()
	g := e.guardWith(e.cluster, idempotent.Config{})

	t.Run("token", func(t *testing.T) {
		tokens := map[string]bool{}
		for len(tokens) < 12 {
			tok, _, err := g.IssueToken(ctx, "user:7")
			if err != nil {
				t.Fatalf("IssueToken: %v", err)
			}
			tokens[tok] = true
		}
		for tok := range tokens {
			k := idempotent.Key{Scope: "user:7", BizType: "test", BizKey: tok}
			calls := storm(8, func(int) (idempotent.Result, error) {
				return g.Do(ctx, request(k, `{}`), effectWork(tok, 10*time.Millisecond, http.StatusCreated))
			})
			checkStormAnswers(t, calls)
			if n := countEffects(t, e.db, tok); n != 1 {
				t.Fatalf("token %s: %d effects, want 1", tok, n)
			}
			other := idempotent.Key{Scope: "user:8", BizType: "test", BizKey: tok}
			if _, err := g.Do(ctx, request(other, `{}`), effectWork(tok, 0, http.StatusCreated)); !errors.Is(err, idempotent.ErrTokenInvalid) {
				t.Errorf("token %s of user:7 used by user:8: err %v, want ErrTokenInvalid", tok, err)
			}
		}
	})

	t.Run("message", func(t *testing.T) {
		keys, _ := e.clusterKeys(t, g, 12)
		for _, k := range keys {
			req := request(k, `{"trade_no":"T"}`)
			calls := storm(6, func(int) (idempotent.Result, error) {
				return g.Message(ctx, req, effectWork(k.BizKey, 10*time.Millisecond, http.StatusOK))
			})
			for i, c := range calls {
				if c.err != nil && !errors.Is(c.err, idempotent.ErrKeyInUse) {
					t.Errorf("%s copy %d: %v", k, i, c.err)
				}
			}
			if n := countEffects(t, e.db, k.BizKey); n != 1 {
				t.Fatalf("%s: %d effects after 6 concurrent deliveries, want 1", k, n)
			}
			res, err := g.Message(ctx, req, effectWork(k.BizKey, 0, http.StatusOK))
			if err != nil || res.Outcome != idempotent.Replayed {
				t.Errorf("%s redelivered: outcome %q layer %q err %v, want replayed", k, res.Outcome, res.Layer, err)
			}
			attempts, err := idemops.Attempts(ctx, g, k)
			if err != nil || len(attempts) == 0 {
				t.Errorf("%s: attempt log %v, %v; want the logged attempts", k, attempts, err)
			}
		}
	})

	t.Run("evict", func(t *testing.T) {
		keys, nodes := e.clusterKeys(t, g, 9)
		for _, k := range keys {
			req := request(k, `{}`)
			mustExecute(t, g, req, effectWork(k.BizKey, 0, http.StatusConflict))
			if _, err := idemops.Evict(ctx, g, k); err != nil {
				t.Fatalf("Evict %s: %v", k, err)
			}
			if n, err := direct(t, nodes[k]).Exists(ctx, g.CacheKey(k)).Result(); err != nil || n != 0 {
				t.Errorf("%s: the replay cache entry survived the eviction on %s: %d, %v", k, nodes[k], n, err)
			}
			mustExecute(t, g, req, effectWork(k.BizKey, 0, http.StatusCreated))
			if _, err := idemops.Evict(ctx, g, k); !errors.Is(err, idemops.ErrEffectCommitted) {
				t.Errorf("Evict of a stored 201 %s: %v, want ErrEffectCommitted", k, err)
			}
		}
	})

	t.Run("purge", func(t *testing.T) {
		keys, nodes := e.clusterKeys(t, g, 15)
		for _, k := range keys {
			mustExecute(t, g, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
		}
		if _, err := g.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Minute}); err != nil {
			t.Fatalf("Purge: %v", err)
		}
		for _, k := range keys {
			if n, err := direct(t, nodes[k]).Exists(ctx, g.CacheKey(k)).Result(); err != nil || n != 0 {
				t.Errorf("%s: the replay cache entry survived the purge on %s: %d, %v", k, nodes[k], n, err)
			}
		}
	})

	t.Run("job lock", func(t *testing.T) {
		for i := range 6 {
			job := fmt.Sprintf("cluster-job-%d", i)
			ran := false
			ok, err := idemops.RunLocked(ctx, g, job, func(ctx context.Context) error {
				ran = true
				inner, err := idemops.RunLocked(ctx, g, job, func(context.Context) error { return errors.New("ran twice") })
				if inner || err != nil {
					return fmt.Errorf("a second holder of %s: ok=%v err=%v, want refused", job, inner, err)
				}
				return nil
			})
			if !ok || err != nil || !ran {
				t.Errorf("RunLocked %s: ok=%v ran=%v err=%v", job, ok, ran, err)
			}
		}
	})
}
