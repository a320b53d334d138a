package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent/idemtest"
	"github.com/oncepay/oncepay/internal/config"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestRedisCluster runs a whole instance whose ONCEPAY_REDIS_ADDR lists the three masters of
// a real Redis Cluster, so that it opens a cluster client itself. Orders under keys whose hash
// tags land on every master, each posted 20 times at once, create one order each and take the
// stock once each; a one-time token is consumed once; the admin's GET and DELETE of
// idempotency records work (DELETE is Evict: the key's lock, then a DEL of two keys of one
// hash tag); the jobs run under their cluster-wide locks, and the purge job drops cache
// entries of many hash tags at once. Every key the instance wrote, on every master, starts
// with its prefix.
func TestRedisCluster(t *testing.T) {
	addrs := idemtest.RedisCluster(t)
	prefix := "cluster-" + apptest.RandHex(4) + ":"
	s := startOwnRedis(t, func(c *config.Config) { c.RedisAddrs, c.RedisDB, c.RedisPrefix = addrs, 0, prefix })
	cluster, ok := s.App.Redis.Client.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("ONCEPAY_REDIS_ADDR=%s opened a %T, want a *redis.ClusterClient", strings.Join(addrs, ","), s.App.Redis.Client)
	}
	alice := aliceID(t, s)
	item := apptest.Item{SKU: "SKU-1002", Quantity: 1}

	t.Run("orders", func(t *testing.T) {
		const copies = 20
		keys := keysOnEveryMaster(t, cluster, prefix, "user:"+alice, 2)
		before := s.Inventory(t, item.SKU)
		answers := make([]apptest.Response, len(keys)*copies)
		apptest.Parallel(len(answers), len(answers), func(i int) {
			answers[i] = s.PostOrder(apptest.AliceKey, keys[i%len(keys)], item)
		})
		for ki, key := range keys {
			checkOneOrder(t, answers, ki, len(keys), key)
		}
		after := s.Inventory(t, item.SKU)
		if got, want := before.Available-after.Available, int64(len(keys)); got != want {
			t.Errorf("stock of %s went from %d to %d: taken %d times, want %d (once per key)", item.SKU, before.Available, after.Available, got, want)
		}
		if n := s.Count(t, "orders", "user_id = ?", alice); n != int64(len(keys)) {
			t.Errorf("%d orders of alice after %d copies of %d keys, want %d", n, copies, len(keys), len(keys))
		}
	})

	t.Run("token", func(t *testing.T) {
		before := s.Count(t, "orders", "user_id = ?", alice)
		for range 6 { // tokens carry no hash tag: six of them reach more than one master
			tok := s.Token(t, apptest.AliceKey)
			answers := make([]apptest.Response, 10)
			apptest.Parallel(len(answers), len(answers), func(i int) { answers[i] = s.PostOrder(apptest.AliceKey, tok, item) })
			checkOneOrder(t, answers, 0, 1, tok)
		}
		if n := s.Count(t, "orders", "user_id = ?", alice) - before; n != 6 {
			t.Errorf("%d orders from 6 tokens, want 6", n)
		}
	})

	t.Run("idempotency records", func(t *testing.T) {
		big := apptest.Item{SKU: "SKU-1003", Quantity: 6} // 5 in stock
		for _, key := range keysOnEveryMaster(t, cluster, prefix, "user:"+alice, 1) {
			sel := userSelector(alice, key)
			apptest.WantProblem(t, s.PostOrder(apptest.AliceKey, key, big), http.StatusConflict, "out_of_stock")
			var rec idem.RecordView
			apptest.Must(t, s.Do(http.MethodGet, recordsPath(sel), apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &rec)
			if rec.ResponseStatus != http.StatusConflict || !rec.Evictable {
				t.Errorf("GET record of %s = %+v, want the evictable 409", key, rec)
			}
			apptest.Must(t, s.Do(http.MethodDelete, recordsPath(sel), apptest.AdminKey, nil, nil), http.StatusOK)
			apptest.WantProblem(t, s.Do(http.MethodGet, recordsPath(sel), apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")
			r := apptest.Must(t, s.PostOrder(apptest.AliceKey, key, item), http.StatusCreated)
			if r.Outcome() != "executed" {
				t.Errorf("%s after the eviction: outcome %q, want executed (no cached refusal left)", key, r.Outcome())
			}
			apptest.WantProblem(t, s.Do(http.MethodDelete, recordsPath(sel), apptest.AdminKey, nil, nil), http.StatusConflict, "effect_committed")
		}
	})

	t.Run("jobs", func(t *testing.T) {
		apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/jobs/close-expired-orders/run", apptest.AdminKey, nil, nil), http.StatusOK)
		if n := s.PurgeDedup(t, "0s"); n == 0 {
			t.Fatal("the purge job purged no record")
		}
		left := 0
		for _, keys := range keysByMaster(t, cluster) {
			for _, k := range keys {
				if strings.HasSuffix(k, "}:resp") {
					left++
				}
			}
		}
		if left != 0 {
			t.Errorf("%d replay cache entries survived the purge of every record", left)
		}
	})

	// Every key of the instance starts with its prefix, and every master holds some: the
	// prefix check of TestRedisPrefixAndDB, made on each master (a SCAN through a cluster
	// client would see one node only).
	perMaster := map[string]int{}
	for node, keys := range keysByMaster(t, cluster) {
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				t.Errorf("key %q on %s does not start with ONCEPAY_REDIS_PREFIX=%q", k, node, prefix)
			}
		}
		if len(keys) > 0 {
			perMaster[node] = len(keys)
		}
	}
	if len(perMaster) != 3 {
		t.Errorf("keys per master %v, want keys on all 3", perMaster)
	}
	t.Logf("keys per master: %v", perMaster)
}

// keysOnEveryMaster returns Idempotency-Keys of scope, perMaster of them on each master of
// the cluster: each key's hash tag {scope:idempotency-key:key} is placed with CLUSTER KEYSLOT.
func keysOnEveryMaster(t *testing.T, cluster *redis.ClusterClient, prefix, scope string, perMaster int) []string {
	t.Helper()
	ctx := context.Background()
	owner := idemtest.SlotMasters(t, cluster)
	run := apptest.RandHex(3)
	count := map[string]int{}
	var keys []string
	for i := 0; len(keys) < 3*perMaster; i++ {
		if i > 1000 {
			t.Fatalf("no keys on every master after 1000 tries: %v", count)
		}
		key := fmt.Sprintf("cluster-%s-%d", run, i)
		slot, err := cluster.ClusterKeySlot(ctx, prefix+"idem:{"+scope+":idempotency-key:"+key+"}:resp").Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if node := owner[slot]; count[node] < perMaster {
			count[node]++
			keys = append(keys, key)
		}
	}
	return keys
}

// checkOneOrder checks the answers to the copies of key, every n-th of answers from the ki-th:
// one order created, every other copy its replay (byte for byte) or 409 in progress.
func checkOneOrder(t *testing.T, answers []apptest.Response, ki, n int, key string) {
	t.Helper()
	var created []byte
	executed := 0
	for i := ki; i < len(answers); i += n {
		r := answers[i]
		switch {
		case r.Status == http.StatusCreated && r.Outcome() == "executed":
			executed++
			created = r.Body
		case r.Status == http.StatusCreated && r.Outcome() == "replayed":
		case r.Status == http.StatusConflict && r.Code() == "idempotency_key_in_use":
		default:
			t.Errorf("%s: copy answered %s, want 201 or 409 idempotency_key_in_use", key, r)
		}
	}
	if executed != 1 {
		t.Fatalf("%s: %d copies executed, want exactly 1", key, executed)
	}
	for i := ki; i < len(answers); i += n {
		if r := answers[i]; r.Outcome() == "replayed" && string(r.Body) != string(created) {
			t.Errorf("%s: replayed %s, want the created body %s", key, r.Body, created)
		}
	}
}

// keysByMaster returns every key of the cluster by the address of the master that holds it.
// SCAN through a cluster client would walk one node only, so it scans each master on its own.
func keysByMaster(t *testing.T, cluster *redis.ClusterClient) map[string][]string {
	t.Helper()
	var (
		mu  sync.Mutex
		all = map[string][]string{}
	)
	err := cluster.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		var keys []string
		iter := node.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		mu.Lock()
		all[node.Options().Addr] = keys
		mu.Unlock()
		return iter.Err()
	})
	if err != nil {
		t.Fatalf("scan the masters: %v", err)
	}
	return all
}
