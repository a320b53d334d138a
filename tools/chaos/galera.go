package chaos

import (
	"context"
	"database/sql"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/testsupport/galera"
)

// The faults of a run on Galera (-galera), in place of kill_mariadb: the database is three
// nodes, and each oncepay instance talks to its own.
const (
	faultKillGaleraNode      = "kill_galera_node"      // kill -9 a node, start it again: it rejoins by IST (or SST)
	faultPartitionGaleraNode = "partition_galera_node" // cut a node off the others (gmcast.isolate), then heal
)

// galeraWorld is the Galera part of a world: the cluster, the wsrep_sync_wait the instances
// set, and what its faults measured.
type galeraWorld struct {
	cluster  *galera.Cluster
	syncWait int

	mu sync.Mutex
	// rejoins are how long each node took to be synced again after a kill or a partition.
	rejoins []time.Duration
}

// galeraOptions are the command line of a run on Galera.
type galeraOptions struct {
	// on starts the cluster in place of the one MariaDB server.
	on bool
	// port is node 1's MySQL port (see galera.Options.Port).
	port int
	// syncWait is every instance's ONCEPAY_MYSQL_WSREP_SYNC_WAIT: 1 (oncepay's default)
	// or 0 (MariaDB's).
	syncWait int
}

// startGalera starts the three nodes in the world's directory (their logs are copied out
// with the others) and creates the run's database.
func (w *world) startGalera(ctx context.Context, o galeraOptions) error {
	c, err := galera.Start(ctx, galera.Options{Dir: w.dir, Port: o.port, Name: "oncepay-chaos"})
	if err != nil {
		return err
	}
	w.galera = &galeraWorld{cluster: c, syncWait: o.syncWait}
	return c.Exec(ctx, 1, "CREATE DATABASE IF NOT EXISTS oncepay")
}

// galeraDSN is the DSN of database db on node n, with the chaos run's timeouts.
func (w *world) galeraDSN(n int, db string) string {
	return w.galera.cluster.DSN(n, db, "timeout=2s", "readTimeout=10s", "writeTimeout=10s")
}

// instanceDSN is oncepay-n's ONCEPAY_MYSQL_DSN: on Galera node n's (instance n on node n),
// otherwise the one server's.
func (w *world) instanceDSN(n int) string {
	if w.galera == nil {
		return w.mysqlDSN("oncepay")
	}
	return w.galeraDSN((n-1)%len(w.galera.cluster.Nodes())+1, "oncepay")
}

// instanceEnv is the environment an instance adds on Galera: the wsrep_sync_wait it sets.
func (w *world) instanceEnv() []string {
	if w.galera == nil {
		return nil
	}
	return []string{"ONCEPAY_MYSQL_WSREP_SYNC_WAIT=" + strconv.Itoa(w.galera.syncWait)}
}

// rotation is the faults of the scheduler: allFaults, with the Galera faults in place of
// kill_mariadb on a cluster.
func (f *faulter) rotation() []string {
	if f.w.galera == nil {
		return allFaults
	}
	out := slices.DeleteFunc(slices.Clone(allFaults), func(k string) bool { return k == faultKillMariaDB })
	return append(out, faultKillGaleraNode, faultPartitionGaleraNode)
}

// injectGalera runs a Galera fault to its end, and reports whether kind was one.
func (f *faulter) injectGalera(ctx context.Context, kind string) bool {
	g := f.w.galera
	if g == nil {
		return false
	}
	heal := context.WithoutCancel(ctx)
	n := 1 + mrand.IntN(len(g.cluster.Nodes()))
	switch kind {
	case faultKillGaleraNode:
		g.cluster.Kill(n)
		f.record(kind, fmt.Sprintf("kill -9 galera node %d (oncepay-%d's database)", n, n), nil)
		sleepCtx(ctx, time.Duration(1000+mrand.IntN(2000))*time.Millisecond)
		took, err := g.cluster.Restart(heal, n)
		g.rejoined(took)
		f.record(kind+"_healed", fmt.Sprintf("galera node %d restarted and synced in %s", n, took.Round(time.Millisecond)), err)
	case faultPartitionGaleraNode:
		// Longer than evs.suspect_timeout (3 s): the others evict the node, which becomes a
		// non-primary component of one and refuses every query (1047) until it is healed.
		cut := time.Duration(4000+mrand.IntN(3000)) * time.Millisecond
		err := g.cluster.Isolate(heal, n, true)
		f.record(kind, fmt.Sprintf("galera node %d cut off the others for %s (gmcast.isolate=1)", n, cut), err)
		sleepCtx(heal, cut)
		start := time.Now()
		err = g.cluster.Isolate(heal, n, false)
		if err == nil {
			err = g.cluster.WaitSynced(heal, n, 2*time.Minute)
		}
		took := time.Since(start)
		g.rejoined(took)
		f.record(kind+"_healed", fmt.Sprintf("galera node %d healed and synced in %s", n, took.Round(time.Millisecond)), err)
	default:
		return false
	}
	return true
}

func (g *galeraWorld) rejoined(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rejoins = append(g.rejoins, d)
}

// healGalera brings every node back before the run settles: started, not isolated, synced.
func (w *world) healGalera(ctx context.Context) error {
	if w.galera == nil {
		return nil
	}
	c := w.galera.cluster
	for _, node := range c.Nodes() {
		if !c.Running(node.N) {
			if _, err := c.Restart(ctx, node.N); err != nil {
				return err
			}
			continue
		}
		_ = c.Isolate(ctx, node.N, false)
	}
	return c.WaitAllSynced(ctx, 2*time.Minute)
}

// galeraTables are the tables whose contents every node must hold alike once the run has
// settled.
var galeraTables = []string{
	"accounts", "account_ledger", "anomalies", "api_keys", "idempotency_records", "inventory", "inventory_movements", "ledger_postings", "ledger_transfers",
	"order_items", "orders", "outbox", "payments", "recharges", "refunds", "report_claims", "trades", "users",
}

// nodeView is what one node holds after the run: its wsrep state and a checksum of every
// table of galeraTables.
type nodeView struct {
	Node      int
	State     string // wsrep_local_state_comment: Synced
	Component string // wsrep_cluster_status: Primary
	Size      string // wsrep_cluster_size
	Sums      map[string]string
	Err       string
}

// galeraViews reads every node's view, again up to twice 2 s later while the nodes disagree:
// the nodes are read one after another, and a job's commit between two reads (the
// instances' jobs keep their schedules) must not pass for a lost one.
func (w *world) galeraViews(ctx context.Context) []nodeView {
	var views []nodeView
	for range 3 {
		if views = w.readGaleraViews(ctx); viewsAgree(views) {
			break
		}
		sleepCtx(ctx, 2*time.Second)
	}
	return views
}

// viewsAgree reports whether every node is readable and holds node 1's checksums.
func viewsAgree(views []nodeView) bool {
	for _, v := range views {
		if v.Err != "" || len(v.Sums) != len(views[0].Sums) {
			return false
		}
		for t, sum := range views[0].Sums {
			if v.Sums[t] != sum {
				return false
			}
		}
	}
	return true
}

// readGaleraViews reads every node's view once.
func (w *world) readGaleraViews(ctx context.Context) []nodeView {
	c := w.galera.cluster
	var views []nodeView
	for _, node := range c.Nodes() {
		v := nodeView{Node: node.N, Sums: map[string]string{}}
		v.State, _ = c.Status(ctx, node.N, "wsrep_local_state_comment")
		v.Component, _ = c.Status(ctx, node.N, "wsrep_cluster_status")
		v.Size, _ = c.Status(ctx, node.N, "wsrep_cluster_size")
		db, err := sql.Open("mysql", w.galeraDSN(node.N, "oncepay"))
		if err == nil {
			err = tableSums(ctx, db, v.Sums)
			db.Close()
		}
		if err != nil {
			v.Err = err.Error()
		}
		views = append(views, v)
	}
	return views
}

// tableSums reads CHECKSUM TABLE of every table of galeraTables that exists.
func tableSums(ctx context.Context, db *sql.DB, into map[string]string) error {
	for _, t := range galeraTables {
		var name string
		var sum sql.NullString
		if err := db.QueryRowContext(ctx, "CHECKSUM TABLE "+t).Scan(&name, &sum); err != nil {
			return fmt.Errorf("CHECKSUM TABLE %s: %w", t, err)
		}
		if sum.Valid { // NULL: no such table
			into[t] = sum.String
		}
	}
	return nil
}

// checkGaleraNodes: once the run has settled every node is back — synced, in one primary
// component of all of them — and holds the same data: a commit acknowledged on one node and
// missing on another (a lost transaction, as Jepsen found under faults) shows as a checksum
// that differs.
func (c *checker) checkGaleraNodes(views []nodeView) {
	var vs []string
	want := strconv.Itoa(len(views))
	for _, v := range views {
		switch {
		case v.Err != "":
			vs = append(vs, fmt.Sprintf("galera node %d could not be read: %s", v.Node, v.Err))
		case v.State != "Synced" || v.Component != "Primary" || v.Size != want:
			vs = append(vs, fmt.Sprintf("galera node %d is %q in a %q component of %s nodes, want Synced in the Primary component of %s", v.Node, v.State, v.Component, v.Size, want))
		}
	}
	tables := map[string]bool{}
	for _, v := range views {
		for t := range v.Sums {
			tables[t] = true
		}
	}
	names := make([]string, 0, len(tables))
	for t := range tables {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		var sums []string
		differ := false
		for _, v := range views {
			if v.Err != "" {
				continue
			}
			sums = append(sums, fmt.Sprintf("node %d: %s", v.Node, v.Sums[t]))
			differ = differ || v.Sums[t] != views[0].Sums[t]
		}
		if differ {
			vs = append(vs, fmt.Sprintf("table %s differs between the galera nodes (%s)", t, strings.Join(sums, ", ")))
		}
	}
	c.add("galera_nodes_agree", "after the run every Galera node is synced in one primary component and holds the same rows", len(views)*(1+len(names)), vs)
}

// galeraSummary is what Galera did during a run.
type galeraSummary struct {
	SyncWait int `json:"wsrep_sync_wait"`
	// CertFailures and BFAborts are the nodes' wsrep_local_cert_failures and
	// wsrep_local_bf_aborts: transactions that lost a conflict with another node's.
	CertFailures int64 `json:"cert_failures"`
	BFAborts     int64 `json:"bf_aborts"`
	// Rejoins are how long each killed or cut-off node took to be synced again.
	Rejoins []string `json:"rejoins"`
}

// galeraSummary reads the cluster's counters; they count since each node's last start, so
// a node killed during the run counts only what it saw since.
func (w *world) galeraSummary(ctx context.Context) *galeraSummary {
	if w.galera == nil {
		return nil
	}
	g := w.galera
	s := &galeraSummary{
		SyncWait:     g.syncWait,
		CertFailures: g.cluster.StatusSum(ctx, "wsrep_local_cert_failures"),
		BFAborts:     g.cluster.StatusSum(ctx, "wsrep_local_bf_aborts"),
	}
	g.mu.Lock()
	for _, d := range g.rejoins {
		s.Rejoins = append(s.Rejoins, d.Round(100*time.Millisecond).String())
	}
	g.mu.Unlock()
	return s
}

// copyGaleraLogs copies each Galera node's error log into the output directory as
// galera-node<N>.err.
func copyGaleraLogs(from, to string) {
	matches, _ := filepath.Glob(filepath.Join(from, "node*", "mariadb.err"))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			_ = os.WriteFile(filepath.Join(to, "galera-"+filepath.Base(filepath.Dir(m))+".err"), b, 0o644)
		}
	}
}
