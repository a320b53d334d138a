package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one variant's line of a run's table.
type row struct {
	name     string
	baseline string
	stats    stats
	// err is why the variant could not be started; it then has no figures.
	err error
}

// comparisons are the ratios printed under each table besides the ratio column: between
// variants that are not each other's baseline.
var comparisons = []struct{ label, num, den string }{
	{"fiber-idem ÷ bare", "fiber-idem", "bare"},
	{"replay, oncepay ÷ fiber (guard-replay ÷ fiber-replay)", "guard-replay", "fiber-replay"},
	{"server-orders ÷ server-orders-unguarded", "server-orders", "server-orders-unguarded"},
	{"server-orders-replay ÷ floor-replay", "server-orders-replay", "floor-replay"},
}

// startMeasured starts v, and has a target that reads no CPU of its own read the bench
// process's, MariaDB's and Redis's.
func (v variant) startMeasured(ctx context.Context, e *env) (target, func(), error) {
	t, stop, err := v.start(ctx, e)
	if err == nil && t.cpu == nil {
		t.cpu = cpuOfPIDs(e.storePIDs(ctx))
	}
	return t, stop, err
}

// runVariants runs every variant once, one after the other (with opts.chunks over 1, in
// alternating chunks: runInterleaved).
func runVariants(ctx context.Context, e *env, vs []variant, opts options) ([]row, error) {
	if opts.chunks > 1 {
		return runInterleaved(ctx, e, vs, opts)
	}
	rows := make([]row, 0, len(vs))
	for _, v := range vs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r := row{name: v.name, baseline: v.baseline}
		t, stop, err := v.startMeasured(ctx, e)
		if err != nil {
			r.err = err
		} else {
			r.stats = measure(ctx, t, opts.concurrency, opts.duration)
			stop()
		}
		rows = append(rows, r)
	}
	return rows, ctx.Err()
}

// runInterleaved measures the variants in alternating chunks: every variant is started,
// then each gets opts.duration/opts.chunks in turn, round after round, and its chunks are
// merged. A swing of the shared machine's load then lands on every variant alike instead of
// on whichever ran during it, so a ratio within the run measures the code, not the load.
func runInterleaved(ctx context.Context, e *env, vs []variant, opts options) ([]row, error) {
	rows := make([]row, len(vs))
	targets := make([]*target, len(vs))
	for i, v := range vs {
		rows[i] = row{name: v.name, baseline: v.baseline}
		t, stop, err := v.startMeasured(ctx, e)
		if err != nil {
			rows[i].err = err
			continue
		}
		defer stop()
		targets[i] = &t
	}
	chunk := opts.duration / time.Duration(opts.chunks)
	for range opts.chunks {
		for i, t := range targets {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if t != nil {
				rows[i].stats = rows[i].stats.merge(measure(ctx, *t, opts.concurrency, chunk))
			}
		}
	}
	return rows, ctx.Err()
}

// find returns the row named name.
func find(rows []row, name string) (row, bool) {
	for _, r := range rows {
		if r.name == name && r.err == nil && r.stats.ok > 0 {
			return r, true
		}
	}
	return row{}, false
}

// ratio divides the req/s of num by that of den within one run.
func ratio(rows []row, num, den string) (float64, bool) {
	n, ok1 := find(rows, num)
	d, ok2 := find(rows, den)
	if !ok1 || !ok2 {
		return 0, false
	}
	return n.stats.rate() / d.stats.rate(), true
}

// printRun prints one run's table, the comparisons, and the errors of each variant.
func printRun(out io.Writer, rows []row) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, left("variant")+"\treq/s\tp50\tp99\tratio\tvs\terrors\t")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\tdid not start\t\n", left(r.name), r.baseline)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t\n", left(r.name), r.stats.rate(),
			ms(r.stats.p50), ms(r.stats.p99), ratioText(ratio(rows, r.name, r.baseline)), r.baseline, r.stats.failed())
	}
	_ = tw.Flush()
	for _, c := range comparisons {
		if x, ok := ratio(rows, c.num, c.den); ok {
			fmt.Fprintf(out, "%s = %.2f\n", c.label, x)
		}
	}
	printReplayLatency(out, rows)
	printCPU(out, rows)
	printErrors(out, rows)
	fmt.Fprintln(out)
}

// printReplayLatency puts the two replays' p99 side by side.
func printReplayLatency(out io.Writer, rows []row) {
	var parts []string
	for _, name := range []string{"floor-replay", "guard-replay", "server-orders-replay", "fiber-replay"} {
		if r, ok := find(rows, name); ok {
			parts = append(parts, name+" "+ms(r.stats.p99))
		}
	}
	if len(parts) > 1 {
		fmt.Fprintf(out, "replay p99: %s\n", strings.Join(parts, ", "))
	}
}

// printErrors lists, for every variant that had any, its failed requests by reason, most
// frequent first, and why a variant did not start.
func printErrors(out io.Writer, rows []row) {
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(out, "ERROR %s did not start: %v\n", r.name, r.err)
			continue
		}
		if r.stats.failed() == 0 {
			continue
		}
		fmt.Fprintf(out, "ERRORS %s: %d failed requests (not counted in req/s)\n", r.name, r.stats.failed())
		reasons := slices.SortedFunc(maps.Keys(r.stats.errors), func(a, b string) int {
			return r.stats.errors[b] - r.stats.errors[a]
		})
		for i, reason := range reasons {
			if i == 5 {
				fmt.Fprintf(out, "  … %d more reasons\n", len(reasons)-i)
				break
			}
			fmt.Fprintf(out, "  %6d × %s\n", r.stats.errors[reason], reason)
		}
	}
}

// printMedians prints, for every variant, the median over the runs of its req/s and of its
// ratio, each ratio having been computed within its own run.
func printMedians(out io.Writer, runs [][]row) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(out, "medians of %d runs\n", len(runs))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, left("variant")+"\treq/s\tratio\tvs\treq/s of each run\t")
	for _, r := range runs[0] {
		var rates, ratios []float64
		for _, rows := range runs {
			if x, ok := find(rows, r.name); ok {
				rates = append(rates, x.stats.rate())
			}
			if x, ok := ratio(rows, r.name, r.baseline); ok {
				ratios = append(ratios, x)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", left(r.name), rateText(median(rates)),
			ratioText(median(ratios)), r.baseline, joinRates(rates))
	}
	_ = tw.Flush()
	for _, c := range comparisons {
		var xs []float64
		for _, rows := range runs {
			if x, ok := ratio(rows, c.num, c.den); ok {
				xs = append(xs, x)
			}
		}
		if x, ok := median(xs); ok {
			fmt.Fprintf(out, "%s = %.2f (median)\n", c.label, x)
		}
	}
	fmt.Fprintln(out)
}

// median returns the median of xs, false when there are none.
func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// ms renders a latency in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// ratioText renders a ratio, or "-" when its baseline did not run.
func ratioText(x float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

// rateText renders a rate, or "-" when there is none.
func rateText(x float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f", x)
}

// joinRates renders the req/s of each run.
func joinRates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " ")
}

// left pads a name so that the first column, in a right-aligned table, reads left-aligned.
func left(name string) string { return fmt.Sprintf("%-24s", name) }
