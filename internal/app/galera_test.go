package app_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/galera"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// galeraWorld is three oncepay instances, each on its own node of a real three-node MariaDB
// Galera cluster, sharing one Redis and one Kafka.
type galeraWorld struct {
	cluster *galera.Cluster
	pools   []*gorm.DB
	servers []*apptest.Server
}

// startGaleraWorld starts the cluster (galera.ForTest: skipped unless ONCEPAY_TEST_GALERA=1),
// creates and migrates the database through node 1, and starts instance i on node i with
// oncepay's recommended wsrep_sync_wait=1 (database.Options.WsrepSyncWait).
func startGaleraWorld(t *testing.T) *galeraWorld {
	t.Helper()
	c := galera.ForTest(t)
	ctx := context.Background()
	if err := c.Exec(ctx, 1, "CREATE DATABASE oncepay"); err != nil {
		t.Fatal(err)
	}
	w := &galeraWorld{cluster: c}
	for n := 1; n <= 3; n++ {
		pool, err := database.Open(database.Options{MySQLDSN: c.DSN(n, "oncepay"), WsrepSyncWait: 1, MaxOpenConns: 30})
		if err != nil {
			t.Fatalf("open node %d: %v", n, err)
		}
		t.Cleanup(func() { _ = database.Close(pool) })
		w.pools = append(w.pools, pool)
	}
	if err := database.Migrate(ctx, w.pools[0]); err != nil {
		t.Fatalf("migrate through node 1: %v", err)
	}
	shared := testenv.Redis(t)
	kafka := testenv.Kafka(t)
	for i, pool := range w.pools {
		rdb := redisx.NewClient(shared.Addrs()[0], shared.DB())
		t.Cleanup(func() { _ = rdb.Close() })
		node := int64(i + 1)
		s := apptest.StartOn(t, app.Deps{DB: pool, Redis: &redisx.Conn{Client: rdb}, Kafka: kafka}, func(cfg *config.Config) { cfg.NodeID = node })
		w.servers = append(w.servers, s)
	}
	return w
}

// aborts is what Galera and the guard counted so far: certification failures and brute-force
// aborts over the nodes, and the guard's reruns and busy answers over the instances.
type aborts struct{ certFailures, bfAborts, retries, busy int64 }

func (w *galeraWorld) aborts(t *testing.T) aborts {
	t.Helper()
	ctx := context.Background()
	a := aborts{
		certFailures: w.cluster.StatusSum(ctx, "wsrep_local_cert_failures"),
		bfAborts:     w.cluster.StatusSum(ctx, "wsrep_local_bf_aborts"),
	}
	for _, s := range w.servers {
		a.retries += counterValue(t, s.App.Registry, "oncepay_idempotency_tx_retries_total")
		a.busy += counterValue(t, s.App.Registry, "oncepay_idempotency_tx_busy_total")
	}
	return a
}

func (a aborts) since(b aborts) aborts {
	return aborts{a.certFailures - b.certFailures, a.bfAborts - b.bfAborts, a.retries - b.retries, a.busy - b.busy}
}

func (a aborts) String() string {
	return fmt.Sprintf("%d certification failures, %d brute-force aborts; the guard reran %d transactions and answered %d busy", a.certFailures, a.bfAborts, a.retries, a.busy)
}

// counterValue reads a counter of reg by name (0 when absent).
func counterValue(t *testing.T, reg prometheus.Gatherer, name string) int64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return int64(sum)
}

// TestGalera holds oncepay to exactly-once on a real MariaDB Galera cluster (issue 21), with
// each instance on its own node: a key's copies spread over the nodes make one order; a hot
// stock row written from every node at once loses certification again and again and the
// guard reruns it, answering 503 when it must and 500 never; with Redis down the dedup
// record's unique key across the nodes is the fence; a payment report on another node right
// after its order committed applies (causal reads); a node killed -9 rejoins and a node cut
// off answers 503 until it is back. Run by make test-galera (ONCEPAY_TEST_GALERA=1).
func TestGalera(t *testing.T) {
	w := startGaleraWorld(t)
	alice := aliceID(t, w.servers[0])

	t.Run("causal reads", func(t *testing.T) { galeraCausalReads(t, w) })

	t.Run("one key, 300 copies over three nodes", func(t *testing.T) {
		item := apptest.Item{SKU: "SKU-1002", Quantity: 1}
		before := w.servers[0].Inventory(t, item.SKU)
		orders := w.servers[0].Count(t, "orders", "user_id = ?", alice)
		key := "galera-storm-" + apptest.RandHex(4)
		was := w.aborts(t)
		start := time.Now()
		answers := make([]apptest.Response, 300)
		apptest.Parallel(60, len(answers), func(i int) { answers[i] = w.servers[i%3].PostOrder(apptest.AliceKey, key, item) })
		checkOneOrder(t, answers, 0, 1, key)
		if n := w.servers[1].Count(t, "orders", "user_id = ?", alice) - orders; n != 1 {
			t.Errorf("%d orders from 300 copies of one key, want 1", n)
		}
		if got := before.Available - w.servers[2].Inventory(t, item.SKU).Available; got != 1 {
			t.Errorf("stock taken %d times, want once", got)
		}
		t.Logf("300 copies in %s: %s", time.Since(start).Round(time.Millisecond), w.aborts(t).since(was))
	})

	t.Run("a hot stock row from three nodes", func(t *testing.T) { galeraHotRow(t, w, alice) })

	t.Run("redis down: the record is the fence", func(t *testing.T) { galeraRedisDown(t, w) })

	t.Run("an order's lock holds across the nodes", func(t *testing.T) { galeraOrderLock(t, w) })

	t.Run("a payment report on another node right after the commit", func(t *testing.T) {
		item := apptest.Item{SKU: "SKU-1001", Quantity: 1}
		w.servers[0].PutInventory(t, item.SKU, 1000, 1000)
		for i := range 30 {
			o := w.servers[i%3].CreateOrder(t, apptest.AliceKey, fmt.Sprintf("galera-pay-%s-%d", apptest.RandHex(3), i), item)
			report := apptest.JSON(apptest.Notification(o, "alipay", "T-GALERA-"+o.OrderID))
			r := w.servers[(i+1)%3].SignedNotify(report)
			if r.Status != http.StatusOK {
				t.Errorf("order %s committed on node %d, its report on node %d: %s, want 200", o.OrderID, i%3+1, (i+1)%3+1, r)
				continue
			}
			if got := w.servers[(i+2)%3].Order(t, o.OrderID); got.Status != "PAID" {
				t.Errorf("order %s is %s after its report was answered 200, want PAID", o.OrderID, got.Status)
			}
		}
	})

	t.Run("a node killed -9 rejoins", func(t *testing.T) {
		item := apptest.Item{SKU: "SKU-1001", Quantity: 1}
		orders := w.servers[0].Count(t, "orders", "user_id = ?", alice)
		w.cluster.Kill(3)
		for i := range 20 {
			w.servers[i%2].CreateOrder(t, apptest.AliceKey, fmt.Sprintf("galera-kill-%s-%d", apptest.RandHex(3), i), item)
		}
		took, err := w.cluster.Restart(context.Background(), 3)
		if err != nil {
			t.Fatalf("node 3 did not rejoin: %v", err)
		}
		if n := w.servers[2].Count(t, "orders", "user_id = ?", alice) - orders; n != 20 {
			t.Errorf("node 3 sees %d of the 20 orders made while it was down", n)
		}
		t.Logf("node 3 back in sync %s after its restart", took.Round(time.Millisecond))
		w.servers[2].CreateOrder(t, apptest.AliceKey, "galera-after-rejoin-"+apptest.RandHex(3), item)
	})

	t.Run("a node cut off answers 503, never 500", func(t *testing.T) {
		item := apptest.Item{SKU: "SKU-1001", Quantity: 1}
		ctx := context.Background()
		if err := w.cluster.Isolate(ctx, 2, true); err != nil {
			t.Fatal(err)
		}
		healed := false
		defer func() {
			if !healed {
				_ = w.cluster.Isolate(ctx, 2, false)
			}
		}()
		apptest.Eventually(t, 20*time.Second, "node 2 leaves the primary component", func() (bool, string) {
			st, err := w.cluster.Status(ctx, 2, "wsrep_cluster_status")
			return err == nil && st != "Primary", st
		})
		key := "galera-cut-" + apptest.RandHex(4)
		for range 3 {
			r := w.servers[1].PostOrder(apptest.AliceKey, key, item)
			if r.Status != http.StatusServiceUnavailable || r.Code() != "unavailable" || r.Header.Get("Retry-After") == "" {
				t.Errorf("an order on the node cut off: %s, want 503 unavailable with Retry-After", r)
			}
		}
		// The other two nodes are a majority and go on.
		w.servers[0].CreateOrder(t, apptest.AliceKey, "galera-majority-"+apptest.RandHex(3), item)
		if err := w.cluster.Isolate(ctx, 2, false); err != nil {
			t.Fatal(err)
		}
		healed = true
		start := time.Now()
		if err := w.cluster.WaitSynced(ctx, 2, time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("node 2 back in sync %s after the partition healed", time.Since(start).Round(time.Millisecond))
		// Nothing of the refused copies was stored: the key executes now, once.
		r := apptest.Must(t, w.servers[1].PostOrder(apptest.AliceKey, key, item), http.StatusCreated)
		if r.Outcome() != "executed" {
			t.Errorf("the key refused while cut off: %s after the heal, want executed", r.Outcome())
		}
	})
}

// galeraCausalReads measures what wsrep_sync_wait is for: a row committed on node 1 and read
// at once on node 2. With MariaDB's default 0 the read may miss it (a figure, logged); with
// the 1 oncepay sets it never does.
func galeraCausalReads(t *testing.T, w *galeraWorld) {
	ctx := context.Background()
	if err := w.pools[0].Exec("CREATE TABLE causal (id INT PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	open := func(params string) *sql.DB {
		db, err := sql.Open("mysql", w.cluster.DSN(2, "oncepay", params))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	writer, err := sql.Open("mysql", w.cluster.DSN(1, "oncepay"))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	lax, causal := open("wsrep_sync_wait=0"), open("wsrep_sync_wait=1")
	var wait int
	if err := w.pools[1].Raw("SELECT @@session.wsrep_sync_wait").Row().Scan(&wait); err != nil || wait != 1 {
		t.Errorf("oncepay's pool on node 2 reads with wsrep_sync_wait=%d (%v), want 1", wait, err)
	}
	// Each round commits 200 rows in one transaction on node 1 — a write set node 2 takes a
	// moment to apply — and counts them on node 2 at once.
	const n, batch = 100, 200
	missed := map[string]int{}
	for i := range n {
		var sb strings.Builder
		sb.WriteString("INSERT INTO causal VALUES ")
		for j := range batch {
			if j > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, "(%d)", i*batch+j)
		}
		if _, err := writer.ExecContext(ctx, sb.String()); err != nil {
			t.Fatal(err)
		}
		// The lax read first: the causal one waits for the apply, after which anything sees it.
		for _, r := range []struct {
			name string
			db   *sql.DB
		}{{"0", lax}, {"1", causal}} {
			name, db := r.name, r.db
			var found int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM causal WHERE id = ?", i*batch+batch-1).Scan(&found); err != nil {
				t.Fatal(err)
			}
			if found == 0 {
				missed[name]++
			}
		}
	}
	if missed["1"] != 0 {
		t.Errorf("with wsrep_sync_wait=1, %d of %d reads on node 2 missed rows node 1 had committed", missed["1"], n)
	}
	t.Logf("a commit of %d rows on node 1, read at once on node 2: missed %d of %d times with wsrep_sync_wait=0, %d with 1", batch, missed["0"], n, missed["1"])
}

// galeraHotRow orders one SKU under 90 keys, 30 on each node at once: every order updates
// the SKU's stock row, so that transactions from different nodes lose certification against
// each other. Every answer is 201, or 503 unavailable with Retry-After (the guard gave up
// after its retry budget, nothing stored) — never 500 — and a 503's retry with the same key
// executes; in the end the stock went down once per key.
func galeraHotRow(t *testing.T, w *galeraWorld, alice string) {
	item := apptest.Item{SKU: "SKU-1003", Quantity: 1}
	w.servers[0].PutInventory(t, item.SKU, 500, 10000)
	orders := w.servers[0].Count(t, "orders", "user_id = ?", alice)
	prefix := "galera-hot-" + apptest.RandHex(4)
	was := w.aborts(t)
	start := time.Now()
	const keys = 90
	var unavailable, retried atomic.Int64
	apptest.Parallel(keys, keys, func(i int) {
		s := w.servers[i%3]
		for attempt := 0; attempt < 20; attempt++ {
			r := s.PostOrder(apptest.AliceKey, apptest.Key(prefix, i), item)
			switch {
			case r.Status == http.StatusCreated:
				return
			case r.Status == http.StatusServiceUnavailable && r.Code() == "unavailable" && r.Header.Get("Retry-After") != "":
				unavailable.Add(1)
			case r.Status == http.StatusConflict && r.Code() == "idempotency_key_in_use":
			default:
				t.Errorf("key %d on node %d: %s, want 201 or 503 unavailable", i, i%3+1, r)
				return
			}
			retried.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("key %d was not created after 20 attempts", i)
	})
	took := time.Since(start)
	if n := w.servers[1].Count(t, "orders", "user_id = ?", alice) - orders; n != keys {
		t.Errorf("%d orders from %d keys, want %d", n, keys, keys)
	}
	if got := 10000 - w.servers[2].Inventory(t, item.SKU).Available; got != keys {
		t.Errorf("stock went down by %d, want %d (once per key)", got, keys)
	}
	t.Logf("%d keys on one stock row from 3 nodes in %s: %s; %d answers 503, %d client retries",
		keys, took.Round(time.Millisecond), w.aborts(t).since(was), unavailable.Load(), retried.Load())
}

// galeraRedisDown runs 300 copies of one key through three guards, one per node, with Redis
// unreachable: no lease, no cache, only the dedup record's unique key, which the nodes certify
// against each other. The effect happens once; every copy is executed, replayed or in
// progress.
func galeraRedisDown(t *testing.T, w *galeraWorld) {
	for _, stmt := range []string{
		"CREATE TABLE galera_effects (id BIGINT PRIMARY KEY, k VARCHAR(64) NOT NULL)",
		"CREATE TABLE galera_hot (id INT PRIMARY KEY, n INT NOT NULL)",
		"INSERT INTO galera_hot VALUES (1, 0)",
	} {
		if err := w.pools[0].Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	guards := make([]*idempotent.Guard, 3)
	for i, pool := range w.pools {
		r := prometheus.WrapRegistererWith(prometheus.Labels{"node": fmt.Sprint(i + 1)}, reg)
		guards[i] = idempotent.New(pool, testenv.Unreachable(t), idempotent.Config{Classify: mysqlerr.Classify, Registerer: r})
	}
	key := idempotent.Key{Scope: "user:1", BizType: "galera", BizKey: "redis-down-" + apptest.RandHex(4)}
	req := idempotent.Request{Key: key, Fingerprint: idempotent.Fingerprint(http.MethodPost, "/things", []byte("{}"))}
	var runs atomic.Int64
	work := idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		runs.Add(1)
		id := time.Now().UnixNano()
		if err := tx.Exec("INSERT INTO galera_effects VALUES (?, ?)", id, key.BizKey).Error; err != nil {
			return idempotent.Response{}, err
		}
		if err := tx.Exec("UPDATE galera_hot SET n = n + 1 WHERE id = 1").Error; err != nil {
			return idempotent.Response{}, err
		}
		return idempotent.Response{Status: http.StatusCreated, Body: fmt.Appendf(nil, `{"id":%d}`, id)}, nil
	})
	was := w.aborts(t)
	start := time.Now()
	var mu sync.Mutex
	outcomes := map[string]int{}
	apptest.Parallel(60, 300, func(i int) {
		res, err := guards[i%3].Do(context.Background(), req, work)
		o := string(res.Outcome)
		if err != nil && !errors.Is(err, idempotent.ErrKeyInUse) {
			o = "error: " + err.Error()
		}
		mu.Lock()
		outcomes[o]++
		mu.Unlock()
	})
	var effects, hot int64
	if err := w.pools[2].Raw("SELECT COUNT(*) FROM galera_effects WHERE k = ?", key.BizKey).Row().Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if err := w.pools[1].Raw("SELECT n FROM galera_hot WHERE id = 1").Row().Scan(&hot); err != nil {
		t.Fatal(err)
	}
	if effects != 1 || hot != 1 || outcomes[string(idempotent.Executed)] != 1 {
		t.Errorf("300 copies with Redis down: %d effects, hot row %d, outcomes %v; want 1 effect, 1 executed", effects, hot, outcomes)
	}
	for o := range outcomes {
		if strings.HasPrefix(o, "error") {
			t.Errorf("a copy failed: %s", o)
		}
	}
	t.Logf("300 copies with Redis down in %s: outcomes %v, the work ran %d times, the guards reran %d transactions; %s",
		time.Since(start).Round(time.Millisecond), outcomes, runs.Load(), counterValue(t, reg, "idempotency_tx_retries_total"), w.aborts(t).since(was))
}

// galeraOrderLock runs two transactions at once, on node 1 and node 2, that each lock one
// order, then — both holding their lock — write a row of their own and commit: "lock the
// order, then decide", as a refund does. With a locking read (SELECT … FOR UPDATE) both
// commit: the lock is local to its node and never certified, the write skew the chaos run on
// Galera found (two partial refunds each counting only itself). With order.Store.Lock, a
// write, the second to commit loses certification with 1213, which the guard reruns.
func galeraOrderLock(t *testing.T, w *galeraWorld) {
	o := w.servers[0].CreateOrder(t, apptest.AliceKey, "galera-lock-"+apptest.RandHex(3), apptest.Item{SKU: "SKU-1001", Quantity: 1})
	id, ok := ids.Parse(o.OrderID)
	if !ok {
		t.Fatalf("order id %q", o.OrderID)
	}
	if err := w.pools[0].Exec("CREATE TABLE decisions (id BIGINT PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		lock       func(ctx context.Context, tx *gorm.DB) error
		bothCommit bool
	}{
		{"a locking read", func(ctx context.Context, tx *gorm.DB) error {
			_, err := order.Store{}.Current(ctx, tx, id)
			return err
		}, true},
		{"order.Store.Lock", func(ctx context.Context, tx *gorm.DB) error { return order.Store{}.Lock(ctx, tx, id) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var locked sync.WaitGroup
			locked.Add(2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() {
					errs[i] = w.pools[i].Transaction(func(tx *gorm.DB) error {
						err := tc.lock(context.Background(), tx)
						locked.Done()
						if err != nil {
							return err
						}
						locked.Wait() // both hold their node's lock
						return tx.Exec("INSERT INTO decisions VALUES (?)", time.Now().UnixNano()).Error
					})
				})
			}
			wg.Wait()
			committed, aborted := 0, 0
			for _, err := range errs {
				switch {
				case err == nil:
					committed++
				case mysqlerr.Classify(err) == dberr.Aborted:
					aborted++
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
			if tc.bothCommit && committed != 2 {
				t.Errorf("%s on two nodes: %d committed, %d aborted; Galera certified the locking read after all (want both committed)", tc.name, committed, aborted)
			}
			if !tc.bothCommit && (committed != 1 || aborted != 1) {
				t.Errorf("%s on two nodes: %d committed, %d aborted; want one each", tc.name, committed, aborted)
			}
			t.Logf("%s on node 1 and node 2 at once: %d committed, %d aborted (1213)", tc.name, committed, aborted)
		})
	}
}
