package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
	"github.com/oncepay/oncepay/idempotent/internal/testnet"
)

// failoverInstances is how many service instances share the cluster and the database in the
// failover tests: each has its own cluster client (its own slot map) and its own guard.
const failoverInstances = 3

// failoverResume bounds how long after a replica's promotion every instance's claims on the
// promoted shard may still fail: the slot map's reload on a connection error, and at worst
// its periodic reload (testnet.clusterStateReload), must find the new master well within it.
const failoverResume = 3 * time.Second

// failoverEnv is a database, a Redis Cluster of three masters with a replica each, and
// failoverInstances instances on them.
type failoverEnv struct {
	env
	cluster *idemtest.Cluster
	clients []*redis.ClusterClient
	// guards step aside while Redis is unreachable (the default); probes answer
	// ErrUnavailable instead (RejectWithoutRedis), which makes a claim that did not reach
	// its master visible.
	guards, probes []*idempotent.Guard
}

func newFailoverEnv(t *testing.T) *failoverEnv {
	t.Helper()
	e := &failoverEnv{cluster: idemtest.RedisClusterWithReplicas(t)}
	e.db, e.dialect = idemtest.DB(t, idemtest.Default()), idemtest.Default()
	createSideEffects(t, e.db)
	for range failoverInstances {
		c := testnet.NewClusterClient(e.cluster.Addrs())
		t.Cleanup(func() { _ = c.Close() })
		e.clients = append(e.clients, c)
		e.guards = append(e.guards, e.guardWith(c, idempotent.Config{LockTTL: 2 * time.Second}))
		e.probes = append(e.probes, e.guardWith(c, idempotent.Config{LockTTL: 2 * time.Second, RejectWithoutRedis: true}))
	}
	return e
}

// keysOn returns n keys of the test whose Redis keys live on the master at master.
func (e *failoverEnv) keysOn(t *testing.T, master, name string, n int) []idempotent.Key {
	t.Helper()
	ctx := context.Background()
	owner := idemtest.SlotMasters(t, e.clients[0])
	var keys []idempotent.Key
	for i := 0; len(keys) < n; i++ {
		if i > 50*n {
			t.Fatalf("no %d keys on %s after %d tries", n, master, i)
		}
		k := testKey(t, "user:1", fmt.Sprintf("%s-%d", name, i))
		slot, err := e.clients[0].ClusterKeySlot(ctx, e.guards[0].LeaseKey(k)).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if owner[slot] == master {
			keys = append(keys, k)
		}
	}
	return keys
}

// probe is one claim of a probing instance: when it ended and whether it reached Redis.
type probe struct {
	at time.Time
	ok bool
}

// probeShard claims keys of one shard through every instance's probe guard, one claim every
// 20 ms per instance, until ctx ends, and returns each instance's probes in order. A probe
// fails only when its claim could not reach the shard's master (ErrUnavailable).
func (e *failoverEnv) probeShard(ctx context.Context, t *testing.T, keys []idempotent.Key) func() [][]probe {
	out := make([][]probe, failoverInstances)
	var wg sync.WaitGroup
	for i := range failoverInstances {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				k := keys[(n*failoverInstances+i)%len(keys)]
				_, err := e.probes[i].Do(context.Background(), request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated))
				if err != nil && !errors.Is(err, idempotent.ErrUnavailable) && !errors.Is(err, idempotent.ErrKeyInUse) && !lostLease(err) {
					t.Errorf("instance %d probe %s: %v", i+1, k, err)
				}
				out[i] = append(out[i], probe{at: time.Now(), ok: !errors.Is(err, idempotent.ErrUnavailable)})
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return func() [][]probe { wg.Wait(); return out }
}

// resumed returns, for each instance, when its claims on the shard came back after the
// failover began at since: its first successful probe after a failed one (since itself when
// none failed; zero when none succeeded again), how many probes failed before it and how many
// failed after it. A claim succeeds only once it reaches a master of the shard, so the first
// success after the kill is the moment the instance found the promoted replica; a failure
// after it is a timeout of a loaded machine, not a stale slot map.
func resumed(probes [][]probe, since time.Time) (at []time.Time, failed, later []int) {
	for _, ps := range probes {
		back, n, m := since, 0, 0
		for _, p := range ps {
			switch {
			case p.at.Before(since):
			case !p.ok && (n == 0 || back.IsZero()):
				n++
				back = time.Time{}
			case !p.ok:
				m++
			case back.IsZero():
				back = p.at
			}
		}
		at, failed, later = append(at, back), append(failed, n), append(later, m)
	}
	return at, failed, later
}

// holders counts the copies of one key whose work runs at this moment, and the most that
// ever ran at once: two means two instances held the key's lease together (or stepped
// aside together) and only the dedup record kept the second from committing.
type holders struct{ now, peak atomic.Int32 }

// work is effectWork of k, counted in h.
func (h *holders) work(k string, hold time.Duration) idempotent.Work {
	inner := effectWork(k, hold, http.StatusCreated)
	return func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		n := h.now.Add(1)
		defer h.now.Add(-1)
		for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
		}
		return inner(ctx, tx, record)
	}
}

// stormed is one key stormed through every instance at once, and its answers.
type stormed struct {
	key   idempotent.Key
	calls []call
	peak  int32
}

// stormShard storms fresh keys of the shard, one after another, until ctx ends: each storm
// sends 8 copies of its key through each instance at once, and each copy holds its
// transaction for 100 ms, so that the failover falls into the middle of several storms.
func (e *failoverEnv) stormShard(ctx context.Context, keys []idempotent.Key) func() []stormed {
	var out []stormed
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, k := range keys {
			if ctx.Err() != nil {
				return
			}
			var h holders
			calls := storm(8*failoverInstances, func(i int) (idempotent.Result, error) {
				return e.guards[i%failoverInstances].Do(context.Background(), request(k, `{"amount":100}`), h.work(k.BizKey, 100*time.Millisecond))
			})
			out = append(out, stormed{key: k, calls: calls, peak: h.peak.Load()})
		}
	}()
	return func() []stormed { <-done; return out }
}

// lostLease reports whether err ended a copy whose lease could not be renewed: its master
// died under it, and the watchdog cancelled the work, which then stored nothing (I4).
func lostLease(err error) bool {
	return errors.Is(err, idempotent.ErrLockLost) || errors.Is(err, context.Canceled)
}

// checkStorms checks every stormed key: at most one copy executed, every other one was
// replayed with the executed body, told the key is in progress, or lost its lease with the
// master that held it; after the failover every instance replays one body byte for byte (the
// first of them executes the key if its only executing copy lost its lease and rolled back);
// and the key has one effect in the database.
func (e *failoverEnv) checkStorms(t *testing.T, storms []stormed) {
	t.Helper()
	twice, cancelled := 0, 0
	for _, s := range storms {
		var executed []byte
		n := 0
		for i, c := range s.calls {
			switch {
			case c.err == nil && c.res.Outcome == idempotent.Executed:
				n++
				executed = c.res.Response.Body
			case c.err == nil && c.res.Outcome == idempotent.Replayed:
			case errors.Is(c.err, idempotent.ErrKeyInUse) && c.res.Outcome == idempotent.InProgress:
			case lostLease(c.err):
				cancelled++
			default:
				t.Errorf("%s copy %d: outcome %q layer %q err %v, want executed, replayed, in_progress or a lost lease", s.key, i, c.res.Outcome, c.res.Layer, c.err)
			}
		}
		if n > 1 {
			t.Fatalf("%s: %d copies executed across the failover, want at most 1", s.key, n)
		}
		for i, c := range s.calls {
			if c.err == nil && c.res.Outcome == idempotent.Replayed && !bytes.Equal(c.res.Response.Body, executed) {
				t.Errorf("%s copy %d replayed %s, want the executed body %s", s.key, i, c.res.Response.Body, executed)
			}
		}
		for i, g := range e.guards {
			res, err := g.Do(context.Background(), request(s.key, `{"amount":100}`), effectWork(s.key.BizKey, 0, http.StatusCreated))
			if err == nil && res.Outcome == idempotent.Executed && executed == nil {
				executed = res.Response.Body // the storm's only executing copy had rolled back
				continue
			}
			if err != nil || res.Outcome != idempotent.Replayed || !bytes.Equal(res.Response.Body, executed) {
				t.Fatalf("%s: instance %d after the failover: outcome %q layer %q err %v body %s, want the executed body %s replayed",
					s.key, i+1, res.Outcome, res.Layer, err, res.Response.Body, executed)
			}
		}
		if n := countEffects(t, e.db, s.key.BizKey); n != 1 {
			t.Fatalf("%s: %d side_effects rows after a storm across the failover, want exactly 1", s.key, n)
		}
		if s.peak > 1 {
			twice++
		}
	}
	t.Logf("%d storms of %d copies across the failover: each executed once; %d of them had two or more holders working at once (fenced by the dedup record); %d copies lost their lease with its master",
		len(storms), 8*failoverInstances, twice, cancelled)
}

// TestClusterFailover kills a master of a real Redis Cluster (three masters, a replica each)
// with SIGKILL while three instances claim keys of its shard, and then, with the killed node
// back as a replica, forces it to take its slots back with CLUSTER FAILOVER FORCE.
//
// Across each failover, storms of one key through all three instances at once execute it
// exactly once, and every instance replays its body byte for byte afterwards, although
// during the failover the lease was off, or granted again by a promoted replica that never
// saw it (I15): the dedup record in the database is the fence. And every instance's claims
// reach the promoted replica within failoverResume of its promotion: without the slot map's
// reload on a connection error (testnet), the instances kept sending the dead master's slots
// to the dead node for as long as go-redis's 60 s reload interval.
func TestClusterFailover(t *testing.T) {
	e := newFailoverEnv(t)
	ctx := context.Background()
	victim := e.cluster.Masters(ctx, e.cluster.Addrs()[0])[0]
	replica := e.cluster.ReplicaOf(ctx, victim)
	probeKeys := e.keysOn(t, victim, "probe", 30)
	stormKeys := e.keysOn(t, victim, "storm", 200)
	for i, g := range e.probes { // every instance has loaded the slot map and reached the shard
		k := probeKeys[i]
		if _, err := g.Do(ctx, request(k, `{}`), effectWork(k.BizKey, 0, http.StatusCreated)); err != nil {
			t.Fatalf("instance %d before the failover: %v", i+1, err)
		}
	}

	t.Run("master killed", func(t *testing.T) {
		traffic, stop := context.WithCancel(ctx)
		probes := e.probeShard(traffic, t, probeKeys)
		storms := e.stormShard(traffic, stormKeys[:100])
		time.Sleep(500 * time.Millisecond)
		killed := time.Now()
		e.cluster.Kill(victim)
		wait, cancel := context.WithTimeout(ctx, 15*time.Second)
		promoted := e.cluster.WaitMaster(wait, replica)
		cancel()
		time.Sleep(failoverResume + time.Second)
		stop()
		back, failed, later := resumed(probes(), killed)
		t.Logf("master %s killed -9; replica %s promoted %s later", victim, replica, promoted.Sub(killed).Round(time.Millisecond))
		for i := range back {
			if back[i].IsZero() {
				t.Errorf("instance %d: its claims on the shard never came back within %s of the promotion (%d failed)", i+1, failoverResume+time.Second, failed[i])
				continue
			}
			after := back[i].Sub(promoted)
			t.Logf("instance %d: %d claims failed; claims back %s after the kill, %s after the promotion (%d failed later)", i+1, failed[i],
				back[i].Sub(killed).Round(time.Millisecond), after.Round(time.Millisecond), later[i])
			if after > failoverResume {
				t.Errorf("instance %d: claims back %s after the promotion, want within %s", i+1, after.Round(time.Millisecond), failoverResume)
			}
		}
		e.checkStorms(t, storms())
	})
	if t.Failed() {
		return
	}

	t.Run("failover force", func(t *testing.T) {
		e.cluster.Restart(victim)
		wait, cancel := context.WithTimeout(ctx, 60*time.Second)
		e.cluster.WaitHealthy(wait)
		cancel()
		traffic, stop := context.WithCancel(ctx)
		probes := e.probeShard(traffic, t, probeKeys)
		storms := e.stormShard(traffic, stormKeys[100:])
		time.Sleep(500 * time.Millisecond)
		forced := time.Now()
		e.cluster.FailoverForce(ctx, victim)
		wait, cancel = context.WithTimeout(ctx, 15*time.Second)
		promoted := e.cluster.WaitMaster(wait, victim)
		cancel()
		time.Sleep(failoverResume)
		stop()
		back, failed, later := resumed(probes(), forced)
		t.Logf("CLUSTER FAILOVER FORCE on %s: master %s later", victim, promoted.Sub(forced).Round(time.Millisecond))
		for i := range back {
			if back[i].IsZero() || back[i].Sub(promoted) > failoverResume {
				t.Errorf("instance %d: claims back at %v (%d failed), want within %s of the promotion", i+1, back[i], failed[i], failoverResume)
				continue
			}
			if failed[i] == 0 {
				t.Logf("instance %d: no claim failed", i+1)
				continue
			}
			t.Logf("instance %d: %d claims failed; claims back %s after the promotion (%d failed later)", i+1, failed[i], back[i].Sub(promoted).Round(time.Millisecond), later[i])
		}
		e.checkStorms(t, storms())
	})
}
