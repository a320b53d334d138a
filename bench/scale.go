package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/oncepay/oncepay/idempotent"
)

// The scale scenario (-scale N, make bench-scale): what a dedup table of N records costs new
// keys, and what purging its expired part costs the traffic that runs meanwhile.
//
//  1. new keys, random like clients' UUIDs, against the guard with every layer on an empty
//     table;
//  2. the table filled with N records of random keys and ids, -purge of them expired;
//  3. the same new-key traffic again;
//  4. the same traffic while Guard.Purge deletes the expired records in batches.
//
// Each phase runs -d; the purge phase runs until the purge is done, at least -d.

// scaleResult is what the scenario measured.
type scaleResult struct {
	empty, full, purging stats
	records, expired     int64
	fillTook             time.Duration
	purged               int64
	purgeTook            time.Duration
	purgeErr             error
	bufferPoolMB         int64
}

// runScale runs the scale scenario on the bench database and prints it.
func runScale(ctx context.Context, e *env, opts options, out io.Writer) error {
	if opts.scaleExpired > opts.scale {
		return fmt.Errorf("-purge %d is more than -scale %d", opts.scaleExpired, opts.scale)
	}
	g := e.newGuard("scale", idempotent.Config{})
	url, stop, err := serveHTTP(benchMux(guardHandlerWith(g, e.orders, true)))
	if err != nil {
		return err
	}
	defer stop()
	t := target{url: url + "/orders", body: orderBody, key: randomKey}
	r := scaleResult{records: opts.scale, expired: opts.scaleExpired}
	if err := e.db.WithContext(ctx).Raw("SELECT @@innodb_buffer_pool_size DIV 1048576").Scan(&r.bufferPoolMB).Error; err != nil {
		return err
	}
	fmt.Fprintf(out, "scale: %d records (%d expired), InnoDB buffer pool %d MB\n", r.records, r.expired, r.bufferPoolMB)

	r.empty = measure(ctx, t, opts.concurrency, opts.duration)
	fmt.Fprintf(out, "  empty table: %.0f req/s\n", r.empty.rate())
	began := time.Now()
	if err := e.fillRecords(ctx, opts.scale, opts.scaleExpired, out); err != nil {
		return err
	}
	r.fillTook = time.Since(began)
	r.full = measure(ctx, t, opts.concurrency, opts.duration)
	fmt.Fprintf(out, "  %d records: %.0f req/s\n", r.records, r.full.rate())

	done := make(chan struct{})
	go func() {
		defer close(done)
		began := time.Now()
		r.purged, r.purgeErr = g.Purge(ctx, idempotent.PurgeOptions{OlderThan: 30 * 24 * time.Hour})
		r.purgeTook = time.Since(began)
	}()
	r.purging = loadUntil(ctx, t, opts.concurrency, opts.duration, done)
	<-done
	printScale(out, r)
	return r.purgeErr
}

// loadUntil runs the load for at least d and until done is closed, and returns its figures.
func loadUntil(ctx context.Context, t target, conc int, d time.Duration, done <-chan struct{}) stats {
	client := newClient(conc)
	defer client.CloseIdleConnections()
	var all []stats
	deadline := time.Now().Add(d)
	for {
		all = append(all, load(ctx, t, client, conc, time.Second))
		select {
		case <-done:
			if time.Now().After(deadline) {
				return mergeStats(all)
			}
		default:
		}
		if ctx.Err() != nil {
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

// fillRecords inserts n finished dedup records with random ids and keys, spread over 1,000
// users, the first expired of them created 40 days ago: a million rows a statement, from
// MariaDB's SEQUENCE engine.
func (e *env) fillRecords(ctx context.Context, n, expired int64, out io.Writer) error {
	const chunk = 1_000_000
	for from := int64(1); from <= n; from += chunk {
		to := min(from+chunk-1, n)
		began := time.Now()
		err := e.db.WithContext(ctx).Exec(fmt.Sprintf(`INSERT IGNORE INTO idempotency_records
			(id, scope, biz_type, biz_key, request_id, fingerprint, status, response_status,
			 response_headers, response_body, created_at, updated_at, expires_at)
			SELECT CONV(SUBSTR(MD5(seq), 1, 15), 16, 10), CONCAT('user:', seq MOD 1000), 'idempotency-key',
			       MD5(CONCAT('key-', seq)), '', REPEAT('0', 64), 'COMPLETED', 201,
			       '{"Content-Type":"application/json"}', '{"order_id":"1"}',
			       IF(seq <= %[3]d, NOW(6) - INTERVAL 40 DAY, NOW(6)), NOW(6),
			       IF(seq <= %[3]d, NOW(6) - INTERVAL 10 DAY, NOW(6) + INTERVAL 30 DAY)
			FROM seq_%[1]d_to_%[2]d`, from, to, expired)).Error
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

// printScale prints the scenario's table and its targets.
func printScale(out io.Writer, r scaleResult) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, left("phase")+"\treq/s\tp50\tp99\tratio\tvs\terrors\t")
	row := func(name string, s stats, base stats, vs string) {
		ratio := "-"
		if base.rate() > 0 {
			ratio = fmt.Sprintf("%.2f", s.rate()/base.rate())
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t\n", left(name), s.rate(), ms(s.p50), ms(s.p99), ratio, vs, s.failed())
	}
	row("empty table", r.empty, r.empty, "empty")
	row(fmt.Sprintf("%d records", r.records), r.full, r.empty, "empty")
	row("while purging", r.purging, r.full, "full")
	_ = tw.Flush()
	fmt.Fprintf(out, "filled in %s; purged %d of %d expired records in %s (%.0f records/s)\n",
		r.fillTook.Round(time.Second), r.purged, r.expired, r.purgeTook.Round(100*time.Millisecond),
		float64(r.purged)/max(r.purgeTook.Seconds(), 0.001))
	if r.purgeErr != nil {
		fmt.Fprintf(out, "ERROR purge: %v\n", r.purgeErr)
	}
	for _, g := range []struct {
		label string
		x     float64
		bar   float64
	}{
		{fmt.Sprintf("new keys at %d records ÷ an empty table", r.records), r.full.rate() / max(r.empty.rate(), 1), 0.95},
		{"traffic while purging ÷ without", r.purging.rate() / max(r.full.rate(), 1), 0.90},
	} {
		verdict := "met"
		if g.x < g.bar {
			verdict = "NOT MET"
		}
		fmt.Fprintf(out, "target: %s = %.2f (≥ %.2f) %s\n", g.label, g.x, g.bar, verdict)
	}
	if r.purged != r.expired {
		fmt.Fprintf(out, "NOT MET: the purge deleted %d records, %d were expired\n", r.purged, r.expired)
	}
}
