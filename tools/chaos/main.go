// Package chaos is oncepay's Jepsen-style chaos run; tools/cmd/chaos is its command. It starts
// a world of its own on this machine — a private MariaDB server, a private Redis (one server,
// or a cluster of three masters and three replicas), a Kafka broker, the channel simulator,
// three oncepay processes with distinct node ids and an nginx gateway in front of them —
// drives a randomized workload at it (orders, payments through the channel with extra copies
// by HTTP and by Kafka, cancels, refunds, recharges, retries after client timeouts) while it
// injects faults on a schedule (kill -9 an instance, SIGSTOP one longer than the lock TTL,
// restart Redis empty, kill -9 MariaDB, kill -9 the Kafka broker (a process of its own,
// kafka.go), Kafka redelivery, channel faults, payments slower than the lock TTL; with a
// cluster, Redis failovers) and serves a faulty merchant receiver of
// oncepay's webhooks (receiver.go), records every delivery in a JSON-lines history and, once the run has
// settled, checks the history and the stores against oncepay's invariants. It prints a
// summary, writes history.jsonl, summary.json and report.html, and exits 1 on any violation.
//
//	go run ./tools/cmd/chaos -mode short   # CI: ≥ 1,000 deliveries, under 3 minutes
//	go run ./tools/cmd/chaos -mode full    # ≥ 10,000 deliveries, every fault several times
package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/testsupport/galera"
)

// Run is the whole program (tools/cmd/chaos is its main): the exit status, and an error that
// kept the run from starting.
func Run(ctx context.Context, args []string, stdout io.Writer) (int, error) {
	return run(ctx, args, stdout)
}

// mode is the size of a run.
type mode struct {
	name          string
	duration      time.Duration // traffic lasts at least this long …
	minDeliveries int64         // … and until this many deliveries were made
	maxDuration   time.Duration // … but never longer than this
	buyers        int
	faultEvery    time.Duration
	// netFaults are the network faults (network.go) the rotation adds.
	netFaults []string
}

var modes = map[string]mode{
	"short": {name: "short", duration: 70 * time.Second, minDeliveries: 1000, maxDuration: 100 * time.Second, buyers: 12, faultEvery: 5 * time.Second,
		netFaults: []string{faultCommitLost, faultNetPartition, faultNetReset}},
	"full": {name: "full", duration: 5 * time.Minute, minDeliveries: 10000, maxDuration: 12 * time.Minute, buyers: 12, faultEvery: 6 * time.Second,
		netFaults: netFaults},
}

// options are the command line.
type options struct {
	mode    mode
	out     string
	bin     string
	cluster bool
	keep    bool
	galera  galeraOptions
	gateway string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	m := fs.String("mode", "short", "short (CI: ≥ 1,000 deliveries, < 3 min) or full (≥ 10,000 deliveries)")
	out := fs.String("out", "", "directory for history.jsonl, summary.json, report.html and the servers' logs (default chaos-out/<mode>-<time>)")
	bin := fs.String("oncepay", "bin/oncepay-lab", "the oncepay binary to run three times: the lab build, which reads the faults ONCEPAY_CHAOS_* (its /lab/ routes stay off)")
	cluster := fs.Bool("redis-cluster", false, "run Redis as a local cluster of three masters and three replicas instead of one server, and fail masters over")
	keep := fs.Bool("keep", false, "keep the MariaDB data directory after the run (it is deleted otherwise)")
	var g galeraOptions
	fs.BoolVar(&g.on, "galera", false, "run MariaDB as a three-node Galera cluster (galera-4), each instance on its own node, with node kills and partitions in place of kill_mariadb")
	fs.IntVar(&g.port, "galera-port", 4401, "with -galera: node 1's MySQL port; node i's ports are port+i-1, +10 (replication), +20 (IST), +30 (SST)")
	fs.IntVar(&g.syncWait, "galera-sync-wait", 1, "with -galera: the instances' ONCEPAY_MYSQL_WSREP_SYNC_WAIT (1 is oncepay's default, 0 MariaDB's)")
	gateway := fs.String("gateway", defaultGateway, "the address of the nginx gateway in front of the instances (port 0: a free one)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	md, ok := modes[*m]
	if !ok {
		return options{}, fmt.Errorf("-mode %q: use short or full", *m)
	}
	o := options{mode: md, out: *out, bin: *bin, cluster: *cluster, keep: *keep, galera: g, gateway: *gateway}
	if o.out == "" {
		o.out = filepath.Join("chaos-out", md.name+"-"+time.Now().UTC().Format("20060102-150405"))
	}
	for _, tool := range []string{"mariadb-install-db", "mariadbd", "redis-server", "redis-cli", "nginx"} {
		if _, err := exec.LookPath(tool); err != nil {
			return options{}, fmt.Errorf("%s is not on PATH: the chaos run starts private MariaDB and Redis servers and an nginx gateway (Debian: apt-get install mariadb-server redis-server nginx)", tool)
		}
	}
	if o.galera.on {
		if err := galera.Available(); err != nil {
			return options{}, fmt.Errorf("-galera: %w", err)
		}
	}
	if _, err := os.Stat(o.bin); err != nil {
		return options{}, fmt.Errorf("the oncepay binary %s: %w (run make build first)", o.bin, err)
	}
	return o, nil
}

// lockTTL is the instances' ONCEPAY_LOCK_TTL: short, so that pauses outlast it often.
const lockTTL = 2 * time.Second

// summary is what a run prints and writes to summary.json.
type summary struct {
	Mode         string         `json:"mode"`
	RedisCluster bool           `json:"redis_cluster"`
	Galera       *galeraSummary `json:"galera,omitempty"`
	Seconds      float64        `json:"seconds"`
	Deliveries   int64          `json:"deliveries"`
	ByOp         map[string]int `json:"deliveries_by_op"`
	ByStatus     map[string]int `json:"answers_by_status"`
	ByOutcome    map[string]int `json:"answers_by_idempotency_outcome"`
	Faults       map[string]int `json:"faults"`
	// GatewayRetries counts the requests the gateway sent to more than one instance.
	GatewayRetries int `json:"gateway_retries"`
	// Webhooks are the merchant's receiver's figures (receiver.go).
	Webhooks *hookFigures  `json:"webhooks,omitempty"`
	Checks   []checkResult `json:"checks"`
	// Total counts every violation; Violations lists every one, with its evidence.
	Total       int            `json:"total_violations"`
	Violations  []violation    `json:"violations"`
	Orders      map[string]int `json:"orders_by_status"`
	ChannelPaid int            `json:"channel_trades_paid"`
	Refunds     int            `json:"channel_refunds"`
	SettleSecs  float64        `json:"settle_seconds"`
}

func run(ctx context.Context, args []string, stdout io.Writer) (int, error) {
	opts, err := parseOptions(args, os.Stderr)
	if err != nil {
		return 2, err
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return 2, err
	}
	dir, err := os.MkdirTemp("", "oncepay-chaos-")
	if err != nil {
		return 2, err
	}
	defer func() {
		if !opts.keep {
			os.RemoveAll(dir)
		}
	}()
	h, err := newHistory(filepath.Join(opts.out, "history.jsonl"))
	if err != nil {
		return 2, err
	}
	defer h.close()

	fmt.Fprintf(stdout, "chaos %s: starting a private MariaDB%s, Redis%s, Kafka, the channel simulator and 3 oncepay instances (in %s)\n",
		opts.mode.name, map[bool]string{true: " Galera cluster (3 nodes)", false: ""}[opts.galera.on], map[bool]string{true: " cluster (3 masters, 3 replicas)", false: ""}[opts.cluster], dir)
	w, err := startWorld(ctx, worldOptions{
		dir: dir, oncepayBin: opts.bin, instances: 3, redisCluster: opts.cluster, gateway: opts.gateway,
		lockTTL: lockTTL, orderTTL: 12 * time.Second, slowPayment: lockTTL + time.Second, galera: opts.galera,
	})
	if err != nil {
		return 2, err
	}
	// The servers' logs go to the output directory when the run ends.
	defer func() {
		w.close()
		copyLogs(dir, opts.out)
		copyGaleraLogs(dir, opts.out)
	}()
	h.note("world started")

	// The merchant's receiver, registered before the traffic so that it hears of every event.
	if err := w.exec(ctx, "", "CREATE DATABASE IF NOT EXISTS merchant"); err != nil {
		return 2, fmt.Errorf("the receiver's database: %w", err)
	}
	m, err := startMerchantProcess(ctx, dir, w.mysqlDSN("merchant"))
	if err != nil {
		return 2, fmt.Errorf("start the receiver: %w", err)
	}
	defer m.close()
	endpoint, err := m.register(ctx, w.insts[0].base, w.adminKey)
	if err != nil {
		return 2, err
	}
	h.note("webhook endpoint " + endpoint + " registered: " + m.url)

	wl := newWorkload(w, h)
	defer wl.kafka.Close()
	f := &faulter{w: w, h: h, wl: wl, lockTTL: lockTTL, every: opts.mode.faultEvery, counts: map[string]int{}, m: m}
	allFaults = append(allFaults, opts.mode.netFaults...)
	allFaults = append(allFaults, receiverFaults...)
	if opts.cluster {
		allFaults = append(allFaults, redisClusterFaults...)
	}
	f.own = f.ownFaults(opts.cluster)
	op := &operator{w: w, h: h, m: m, endpoint: endpoint, count: f.count}

	// A standing fault: the last instance sleeps past the lock's TTL inside every payment it
	// applies, so only the watchdog's renewals keep its lease.
	f.counts["slow_payments"] = 1
	h.add(&event{Kind: kindFault, Op: "slow_payments", Detail: fmt.Sprintf("oncepay-3 holds every payment's lock %s, past the lock TTL %s, for the whole run", lockTTL+time.Second, lockTTL)})

	clockSkewFault(h, f.counts)

	start := time.Now()
	traffic, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range opts.mode.buyers {
		u := w.users[i%len(w.users)]
		wg.Go(func() { wl.buyer(traffic, u) })
	}
	wg.Go(func() { wl.jobs(traffic) })
	faults, stopFaults := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	fwg.Go(func() { f.run(faults) })
	fwg.Go(func() { op.run(faults, start, opts.mode.duration) })
	fmt.Fprintf(stdout, "traffic: %d buyers, faults every %s; at least %s and %d deliveries\n", opts.mode.buyers, opts.mode.faultEvery, opts.mode.duration, opts.mode.minDeliveries)

	tick := time.NewTicker(10 * time.Second)
	for {
		select {
		case <-ctx.Done():
		case <-tick.C:
			fmt.Fprintf(stdout, "  %3.0fs: %d deliveries, faults %v\n", time.Since(start).Seconds(), wl.deliveries.Load(), f.snapshot())
			elapsed := time.Since(start)
			if (elapsed >= opts.mode.duration && wl.deliveries.Load() >= opts.mode.minDeliveries) || elapsed >= opts.mode.maxDuration {
				break
			}
			continue
		}
		break
	}
	tick.Stop()
	// Faults stop first (the one in progress heals), then the traffic drains.
	stopFaults()
	fwg.Wait()
	w.sim.SetFaults(channelsim.Faults{})
	stopTraffic()
	wg.Wait()
	if ctx.Err() != nil {
		return 2, errors.New("interrupted")
	}
	trafficSecs := time.Since(start).Seconds()
	h.note("traffic stopped; settling")
	fmt.Fprintf(stdout, "traffic stopped after %.0fs: %d deliveries; settling\n", trafficSecs, wl.deliveries.Load())

	db, err := sql.Open("mysql", w.mysqlDSN("oncepay"))
	if err != nil {
		return 2, err
	}
	defer db.Close()
	settleStart := time.Now()
	if err := settle(ctx, w, wl, db, stdout); err != nil {
		fmt.Fprintf(stdout, "settling: %v (checking anyway)\n", err)
	}
	// The sender drains: every event sequenced, no delivery pending (the schedule's pauses add
	// up to 32 s, so a minute is enough unless something is stuck).
	if err := drainWebhooks(ctx, db, 60*time.Second, stdout); err != nil {
		fmt.Fprintf(stdout, "draining the webhooks: %v (checking anyway)\n", err)
	}
	settleSecs := time.Since(settleStart).Seconds()
	h.note("settled; checking")
	hooks := &hookView{attempts: m.snapshot(), endpoint: endpoint, redeliveries: op.redeliveries}
	if hooks.effects, err = m.effects(ctx); err != nil {
		return 2, fmt.Errorf("read the receiver's effects: %w", err)
	}
	var feedPages int
	hooks.feed, feedPages, err = readFeed(ctx, w.insts[0].base, w.adminKey)
	if err != nil {
		hooks.feedErr = err.Error()
	}

	gatewayLog, retried, err := annotateGateway(h, w)
	if err != nil {
		return 2, fmt.Errorf("read the gateway's access log: %w", err)
	}
	if err := h.rewrite(); err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "the gateway retried %d requests on another instance\n", retried)
	rdb := w.redisClient()
	defer rdb.Close()
	c := &checker{events: h.snapshot(), start: h.start, db: db, rdb: rdb, state: w.sim.State(), users: w.users, lockTTL: lockTTL, prefix: "oncepay:", exits: map[string]int{},
		gatewayLog: gatewayLog, hooks: hooks}
	for _, in := range w.insts {
		c.serverLogs = append(c.serverLogs, in.logf)
	}
	c.kafkaLag, c.dlq, err = kafkaBacklog(ctx, w.kafka.Brokers)
	if err != nil {
		return 2, fmt.Errorf("read the consumer group's offsets: %w", err)
	}
	for _, in := range w.insts {
		in.mu.Lock()
		c.exits[in.name] = in.exits
		in.mu.Unlock()
	}
	if c.kafka, err = readKafka(ctx, w.kafka.Brokers); err != nil {
		return 2, fmt.Errorf("read the broker's topics: %w", err)
	}
	w.broker.mu.Lock()
	c.exits[w.broker.name] = w.broker.exits
	w.broker.mu.Unlock()
	if err := c.run(ctx); err != nil {
		return 2, fmt.Errorf("check: %w", err)
	}
	c.checkNoStaleNotFound()
	if w.galera != nil {
		c.checkGaleraNodes(w.galeraViews(ctx))
	}
	if v, err := reconcileBills(ctx, w, wl); err != nil {
		return 2, err
	} else {
		c.add("channel_books_equal", "the channel's bill of the day equals oncepay's payments and refunds (reconcile-bills)", v.matched, v.mismatches)
	}

	s := summarize(opts, c, h.snapshot(), f.snapshot(), wl.deliveries.Load(), trafficSecs, settleSecs)
	s.Galera = w.galeraSummary(ctx)
	var events int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&events)
	fig := hooks.figures(events, feedPages)
	fig.FeedLagMaxSecs = c.feedLag.Seconds()
	for _, r := range op.redeliveries {
		fig.Redelivered += r.Queued
	}
	s.Webhooks = &fig
	if err := writeJSON(filepath.Join(opts.out, "webhooks.json"), hooks.attempts); err != nil {
		return 2, err
	}
	if err := writeJSON(filepath.Join(opts.out, "summary.json"), s); err != nil {
		return 2, err
	}
	if err := writeReport(filepath.Join(opts.out, "report.html"), s, h.snapshot()); err != nil {
		return 2, err
	}
	// The channel's own view — every trade, refund and notification with each delivery
	// attempt and its answer — for reading a violation from the channel's side.
	if err := writeJSON(filepath.Join(opts.out, "channel.json"), c.state); err != nil {
		return 2, err
	}
	printSummary(stdout, s, opts.out)
	if s.Total > 0 {
		return 1, nil
	}
	if missing := missingFaults(f.own, s.Faults); len(missing) > 0 {
		fmt.Fprintf(stdout, "the run did not inject its own faults %v: it proves nothing about them\n", missing)
		return 2, nil
	}
	return 0, nil
}

// settle brings the world to rest after the traffic: every instance runs, the channel's
// faults are off, and oncepay's jobs run until nothing is left in flight — no order waiting
// for payment, no refund unfinished, no notification the channel still retries, no outbox
// event unpublished, no Kafka message unconsumed.
func settle(ctx context.Context, w *world, wl *workload, db *sql.DB, progress io.Writer) error {
	start := time.Now()
	if err := w.healGalera(ctx); err != nil {
		return err
	}
	for _, in := range w.insts {
		in.signal(syscall.SIGCONT)
		if !in.running() {
			if err := in.start(ctx); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	jobs := []string{"/v1/admin/jobs/reconcile-payments/run", "/v1/admin/jobs/close-expired-orders/run", "/v1/admin/jobs/resume-refunds/run"}
	var last string
	for time.Now().Before(deadline) {
		for _, j := range jobs {
			wl.deliver(ctx, wl.randomInst(), call{op: "settle_job", method: http.MethodPost, path: j, bearer: w.adminKey})
		}
		var pending, refunds, outbox int
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders WHERE status = 'PENDING_PAYMENT'`).Scan(&pending)
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM refunds WHERE status IN ('PENDING','SUBMITTED')`).Scan(&refunds)
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE published_at IS NULL`).Scan(&outbox)
		notifying := 0
		for _, n := range w.sim.State().Notifications {
			if n.Status == channelsim.NotificationPending {
				notifying++
			}
		}
		lag, _, err := kafkaBacklog(ctx, w.kafka.Brokers)
		if err != nil {
			lag = -1
		}
		now := fmt.Sprintf("%d orders pending payment, %d refunds unfinished, %d notifications retrying, %d outbox events, Kafka lag %d", pending, refunds, notifying, outbox, lag)
		if now != last {
			fmt.Fprintf(progress, "  settling %3.0fs: %s\n", time.Since(start).Seconds(), now)
		}
		last = now
		if pending == 0 && refunds == 0 && notifying == 0 && outbox == 0 && lag == 0 {
			// One more lease TTL, so that a lease taken by the last job has lapsed.
			sleepCtx(ctx, lockTTL+500*time.Millisecond)
			return nil
		}
		sleepCtx(ctx, time.Second)
	}
	return errors.New("not at rest after 3 minutes: " + last)
}

// bills is the outcome of reconcile-bills over the run's days.
type bills struct {
	matched    int
	mismatches []string
}

// reconcileBills asks oncepay to reconcile the channel's bill of every day the run touched.
func reconcileBills(ctx context.Context, w *world, wl *workload) (bills, error) {
	var b bills
	days := map[string]bool{}
	for _, t := range w.sim.State().Trades {
		if t.PaidAt != nil {
			days[t.PaidAt.UTC().Format(time.DateOnly)] = true
		}
	}
	for _, r := range w.sim.State().Refunds {
		if r.RefundedAt != nil {
			days[r.RefundedAt.UTC().Format(time.DateOnly)] = true
		}
	}
	for day := range days {
		e := wl.deliver(ctx, 1, call{op: "settle_job", method: http.MethodPost, path: "/v1/admin/jobs/reconcile-bills/run",
			bearer: w.adminKey, body: fmt.Appendf(nil, `{"date":%q}`, day), direct: true})
		if e.Status != http.StatusOK {
			return b, fmt.Errorf("reconcile-bills %s: %d %s %s", day, e.Status, e.Resp, e.Err)
		}
		var out struct {
			Matched    int               `json:"matched"`
			Mismatches []json.RawMessage `json:"mismatches"`
		}
		if err := json.Unmarshal([]byte(e.Resp), &out); err != nil {
			return b, fmt.Errorf("reconcile-bills %s: %w", day, err)
		}
		b.matched += out.Matched
		for _, m := range out.Mismatches {
			b.mismatches = append(b.mismatches, day+": "+string(m))
		}
	}
	return b, nil
}

func summarize(opts options, c *checker, events []*event, faults map[string]int, deliveries int64, secs, settleSecs float64) summary {
	s := summary{
		Mode: opts.mode.name, RedisCluster: opts.cluster, Seconds: secs, Deliveries: deliveries, SettleSecs: settleSecs,
		ByOp: map[string]int{}, ByStatus: map[string]int{}, ByOutcome: map[string]int{}, Faults: faults, Checks: c.results, Violations: c.violations,
		Orders: map[string]int{},
	}
	if s.Violations == nil {
		s.Violations = []violation{}
	}
	for _, r := range c.results {
		s.Total += r.Violations
	}
	for _, e := range events {
		switch e.Kind {
		case kindHTTP:
			s.ByOp[e.Op]++
			if e.Outcome != "" {
				s.ByOutcome[e.Outcome]++
			}
			switch {
			case e.Err != "":
				s.ByStatus["error: "+e.Err]++
			default:
				s.ByStatus[fmt.Sprint(e.Status)]++
			}
		case kindKafka:
			s.ByOp["kafka_"+e.Op]++
		case kindGateway:
			s.GatewayRetries++
		}
	}
	for _, t := range c.state.Trades {
		if t.Status == "SUCCESS" {
			s.ChannelPaid++
		}
	}
	s.Refunds = len(c.state.Refunds)
	if rows, err := c.db.Query(`SELECT status, COUNT(*) FROM orders GROUP BY status`); err == nil {
		for rows.Next() {
			var st string
			var n int
			if rows.Scan(&st, &n) == nil {
				s.Orders[st] = n
			}
		}
		rows.Close()
	}
	return s
}

func printSummary(w io.Writer, s summary, out string) {
	fmt.Fprintf(w, "\n%d deliveries in %.0fs (settled in %.0fs); faults: %v; gateway retries: %d\n", s.Deliveries, s.Seconds, s.SettleSecs, s.Faults, s.GatewayRetries)
	fmt.Fprintf(w, "orders by status: %v; channel trades paid: %d; channel refunds: %d\n", s.Orders, s.ChannelPaid, s.Refunds)
	fmt.Fprintf(w, "answers by Idempotency-Outcome: %v\n", s.ByOutcome)
	if s.Webhooks != nil {
		fmt.Fprintf(w, "webhooks: %s\n", s.Webhooks)
	}
	if g := s.Galera; g != nil {
		fmt.Fprintf(w, "galera: wsrep_sync_wait=%d, %d certification failures, %d brute-force aborts, nodes back in sync in %v\n", g.SyncWait, g.CertFailures, g.BFAborts, g.Rejoins)
	}
	for _, c := range s.Checks {
		mark := "ok  "
		if c.Violations > 0 {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %-26s %6d checked, %d violations\n", mark, c.Name, c.Checked, c.Violations)
	}
	for _, v := range s.Violations {
		fmt.Fprintf(w, "\nVIOLATION [%s] %s\n  invariant: %s\n", v.Check, v.Detail, v.Invariant)
		if len(v.Keys) > 0 {
			fmt.Fprintf(w, "  keys: %s\n", strings.Join(v.Keys, " "))
		}
		for _, l := range v.History {
			fmt.Fprintf(w, "    %s\n", l)
		}
		if len(v.Logs) > 0 {
			fmt.Fprintf(w, "  the instances' log lines naming them:\n")
			for _, l := range v.Logs {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}
	fmt.Fprintf(w, "%d violations; history, summary and report in %s\n", s.Total, out)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// copyLogs copies the servers' logs into the output directory.
func copyLogs(from, to string) {
	matches, _ := filepath.Glob(filepath.Join(from, "*.log"))
	errLog, _ := filepath.Glob(filepath.Join(from, "*.err"))
	for _, m := range append(matches, errLog...) {
		if b, err := os.ReadFile(m); err == nil {
			_ = os.WriteFile(filepath.Join(to, filepath.Base(m)), b, 0o644)
		}
	}
}
