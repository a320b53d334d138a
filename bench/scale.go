package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oncepay/oncepay/idempotent"
)

// The scale scenario (-scale N, make bench-scale): what a dedup table of N records costs new
// keys, and what purging its expired part costs the traffic that runs meanwhile.
//
// Two guards with every layer serve new keys, random like clients' UUIDs, on two databases of
// one server: one whose table stays (nearly) empty, one filled with N records of random keys and
// ids, -purge of them expired. Every comparison is made of alternating windows of -d, so that a
// machine whose load changes during the run moves both sides of a ratio alike:
//
//  1. empty, full, empty, full, … (scaleRounds pairs): each pair's full ÷ empty;
//  2. the full table without and then with Guard.Purge deleting its expired records, pair after
//     pair until the purge is done: each pair's with ÷ without.
//
// The medians of the pairs' ratios are the targets; the sums of the windows are printed too.

// scaleRounds is how many pairs of windows compare the full table with the empty one.
const scaleRounds = 3

// scaleResult is what the scenario measured.
type scaleResult struct {
	// empty, full, without and purging add up the windows of each kind.
	empty, full, without, purging stats
	// fullRatios and purgeRatios are each pair's ratio, in order.
	fullRatios, purgeRatios []float64
	records, expired        int64
	fillTook                time.Duration
	purged                  int64
	purgeTook               time.Duration
	purgeErr                error
	bufferPoolMB            int64
}

// runScale runs the scale scenario on the bench database and a second, empty one, and prints it.
func runScale(ctx context.Context, e *env, opts options, out io.Writer) error {
	if opts.scaleExpired > opts.scale {
		return fmt.Errorf("-purge %d is more than -scale %d", opts.scaleExpired, opts.scale)
	}
	emptyDB, err := e.createDatabase(ctx, "oncepay_bench_scale_empty_"+e.runID)
	if err != nil {
		return err
	}
	if err := createTables(ctx, emptyDB); err != nil {
		return err
	}
	full := e.newGuard("scale", idempotent.Config{})
	fullURL, stopFull, err := serveHTTP(benchMux(guardHandlerWith(full, e.orders, true)))
	if err != nil {
		return err
	}
	defer stopFull()
	emptyURL, stopEmpty, err := serveHTTP(benchMux(guardHandlerWith(e.newGuardOn(emptyDB, "scale-empty", idempotent.Config{}), &orders{db: emptyDB}, true)))
	if err != nil {
		return err
	}
	defer stopEmpty()
	onFull := target{url: fullURL + "/orders", body: orderBody, key: randomKey}
	onEmpty := target{url: emptyURL + "/orders", body: orderBody, key: randomKey}

	r := scaleResult{records: opts.scale, expired: opts.scaleExpired}
	if err := e.db.WithContext(ctx).Raw("SELECT @@innodb_buffer_pool_size DIV 1048576").Scan(&r.bufferPoolMB).Error; err != nil {
		return err
	}
	fmt.Fprintf(out, "scale: %d records (%d expired), InnoDB buffer pool %d MB, windows of %s\n", r.records, r.expired, r.bufferPoolMB, opts.duration)
	began := time.Now()
	if err := e.fillRecords(ctx, opts.scale, opts.scaleExpired, out); err != nil {
		return err
	}
	r.fillTook = time.Since(began)

	for i := range scaleRounds {
		a := measure(ctx, onEmpty, opts.concurrency, opts.duration)
		b := measure(ctx, onFull, opts.concurrency, opts.duration)
		r.empty, r.full = mergeStats([]stats{r.empty, a}), mergeStats([]stats{r.full, b})
		r.fullRatios = append(r.fullRatios, b.rate()/max(a.rate(), 1))
		fmt.Fprintf(out, "  pair %d: empty %.0f req/s, %d records %.0f req/s (%.2f)\n", i+1, a.rate(), r.records, b.rate(), b.rate()/max(a.rate(), 1))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	// The purge runs only in the second window of each pair, until every expired record is
	// gone; a window's end cancels it mid-batch, which leaves that batch for the next window.
	began = time.Now()
	for pair := 1; r.purged < r.expired && ctx.Err() == nil; pair++ {
		a := measure(ctx, onFull, opts.concurrency, opts.duration)
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		var n int64
		var perr error
		go func() {
			defer close(done)
			n, perr = full.Purge(pctx, idempotent.PurgeOptions{OlderThan: 30 * 24 * time.Hour})
		}()
		b := loadUntil(ctx, onFull, opts.concurrency, opts.duration, done)
		cancel()
		<-done
		r.purged += n
		if perr != nil && !errors.Is(perr, context.Canceled) {
			r.purgeErr = perr
			break
		}
		r.without, r.purging = mergeStats([]stats{r.without, a}), mergeStats([]stats{r.purging, b})
		r.purgeRatios = append(r.purgeRatios, b.rate()/max(a.rate(), 1))
		fmt.Fprintf(out, "  purge pair %d: without %.0f req/s, purging %.0f req/s (%.2f), %d purged so far\n", pair, a.rate(), b.rate(), b.rate()/max(a.rate(), 1), r.purged)
		if n == 0 && perr == nil {
			break // nothing left that the purge could see
		}
	}
	r.purgeTook = time.Since(began)
	printScale(out, r)
	return r.purgeErr
}

// loadUntil runs the load for d, or until done is closed if that comes first, one second at
// a time, and returns its figures.
func loadUntil(ctx context.Context, t target, conc int, d time.Duration, done <-chan struct{}) stats {
	client := newClient(conc)
	defer client.CloseIdleConnections()
	var all []stats
	deadline := time.Now().Add(d)
	for {
		all = append(all, load(ctx, t, client, conc, time.Second))
		select {
		case <-done:
			return mergeStats(all)
		default:
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return mergeStats(all)
		}
	}
}

// mergeStats adds up consecutive measured periods; p50 and p99 are the worst of the periods.
func mergeStats(all []stats) stats {
	s := stats{errors: map[string]int{}}
	for _, x := range all {
		s.ok += x.ok
		s.elapsed += x.elapsed
		s.p50 = max(s.p50, x.p50)
		s.p99 = max(s.p99, x.p99)
		for reason, n := range x.errors {
			s.errors[reason] += n
		}
	}
	return s
}

// fillRecords inserts n finished dedup records, a million rows a statement from MariaDB's
// SEQUENCE engine, the first expired of them created 40 days ago. They are shaped as a
// deployment's table is: 1,000 users (user:1, the bench's own, among them) with random keys
// of the bench's kind, and ids that grow, as the guard's snowflake ids do, below any of those.
// Each statement inserts its rows in index order, (scope, biz_type, biz_key) and the id with
// it, so that the fill sweeps the indexes instead of reading them from disk at random; the
// keys themselves stay random.
func (e *env) fillRecords(ctx context.Context, n, expired int64, out io.Writer) error {
	const chunk = 1_000_000
	for from := int64(1); from <= n; from += chunk {
		to := min(from+chunk-1, n)
		began := time.Now()
		// The sort's temporary table stays in memory (SET STATEMENT is MariaDB's): on disk it
		// would live in the server's tmpdir, where another server started on this machine
		// with the same tmpdir deletes it at its start-up.
		err := e.db.WithContext(ctx).Exec(fmt.Sprintf(`SET STATEMENT tmp_table_size = 1073741824, max_heap_table_size = 1073741824 FOR
			INSERT INTO idempotency_records
			(id, scope, biz_type, biz_key, request_id, fingerprint, status, response_status,
			 response_headers, response_body, created_at, updated_at, expires_at)
			SELECT %[1]d - 1 + ROW_NUMBER() OVER (ORDER BY scope, biz_key), scope, 'bench', biz_key,
			       '', REPEAT('0', 64), 'COMPLETED', 201,
			       '{"Content-Type":"application/json"}', '{"order_id":"1"}',
			       IF(seq <= %[3]d, NOW(6) - INTERVAL 40 DAY, NOW(6)), NOW(6),
			       IF(seq <= %[3]d, NOW(6) - INTERVAL 10 DAY, NOW(6) + INTERVAL 30 DAY)
			FROM (SELECT seq, CONCAT('user:', 1 + seq MOD 1000) AS scope, MD5(CONCAT('key-', seq)) AS biz_key
			      FROM seq_%[1]d_to_%[2]d) AS s
			ORDER BY scope, biz_key`, from, to, expired)).Error
		if err != nil {
			return fmt.Errorf("fill records %d..%d (the SEQUENCE engine is MariaDB's): %w", from, to, err)
		}
		fmt.Fprintf(out, "  filled %d..%d in %s\n", from, to, time.Since(began).Round(time.Millisecond))
	}
	return e.db.WithContext(ctx).Exec("ANALYZE TABLE idempotency_records").Error
}

// randomKey is a new random Idempotency-Key of 36 characters, like a client's UUID.
func randomKey() string {
	h := randomHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// printScale prints the scenario's table and its targets: the medians of the pairs' ratios.
func printScale(out io.Writer, r scaleResult) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, left("windows")+"\treq/s\tp50\tp99\terrors\t")
	row := func(name string, s stats) {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t\n", left(name), s.rate(), ms(s.p50), ms(s.p99), s.failed())
	}
	row("empty table", r.empty)
	row(fmt.Sprintf("%d records", r.records), r.full)
	row("full, before each purge window", r.without)
	row("full, while purging", r.purging)
	_ = tw.Flush()
	fmt.Fprintf(out, "filled in %s; purged %d of %d expired records in %s, half of it with the purge running (%.0f records/s of purge time)\n",
		r.fillTook.Round(time.Second), r.purged, r.expired, r.purgeTook.Round(100*time.Millisecond),
		float64(r.purged)/max(r.purging.elapsed.Seconds(), 0.001))
	if r.purgeErr != nil {
		fmt.Fprintf(out, "ERROR purge: %v\n", r.purgeErr)
	}
	for _, g := range []struct {
		label  string
		ratios []float64
		bar    float64
	}{
		{fmt.Sprintf("new keys at %d records ÷ an empty table", r.records), r.fullRatios, 0.95},
		{"traffic while purging ÷ without", r.purgeRatios, 0.90},
	} {
		x, _ := median(g.ratios)
		verdict := "met"
		if x < g.bar {
			verdict = "NOT MET"
		}
		fmt.Fprintf(out, "target: %s = %.2f (≥ %.2f) %s, median of %d pairs: %s\n", g.label, x, g.bar, verdict, len(g.ratios), formatRatios(g.ratios))
	}
	if r.purged != r.expired {
		fmt.Fprintf(out, "NOT MET: the purge deleted %d records, %d were expired\n", r.purged, r.expired)
	}
}

// formatRatios prints ratios with two decimals, space-separated.
func formatRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}
