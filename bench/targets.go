package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// goal is one of the figures the bench holds the guard to (bench/README.md, "Targets"):
// a value computed within one run, and the bar it must reach.
type goal struct {
	label string
	value func(rows []row) (float64, bool)
	// atMost is true when the value must stay at or under bar, false when it must reach it.
	atMost bool
	bar    float64
	unit   string
	// probe marks a figure printed beside the targets, to show what bounds one: it has the
	// bar of the target it probes, and no verdict.
	probe bool
}

// goals are the targets, each printed with its figure and whether it is met.
var goals = []goal{
	{label: "guard, all layers ÷ the same transaction unguarded (guard-all-last ÷ bare)", value: ratioOf("guard-all-last", "bare"), bar: 0.90},
	{label: "server-orders ÷ server-orders-unguarded", value: ratioOf("server-orders", "server-orders-unguarded"), bar: 0.85},
	{label: "server-orders ÷ bare", value: ratioOf("server-orders", "bare"), bar: 0.70},
	{label: "guard-replay ÷ floor-replay", value: ratioOf("guard-replay", "floor-replay"), bar: 0.90},
	{label: "server-orders-replay ÷ floor-replay", value: ratioOf("server-orders-replay", "floor-replay"), bar: 0.90},
	{label: "guard-replay p99 ÷ floor-replay p99", value: p99Of("guard-replay", "floor-replay"), atMost: true, bar: 1.5},
	{label: "server-orders-replay p99 ÷ floor-replay p99", value: p99Of("server-orders-replay", "floor-replay"), atMost: true, bar: 1.5},
	{label: "server CPU per new order (server-orders-proc)", value: cpuOf("server-orders-proc", "server"), atMost: true, bar: 550, unit: "µs"},
	{label: "server CPU per new order, GOMAXPROCS=1 (server-orders-proc-1p)", value: cpuOf("server-orders-proc-1p", "server"), atMost: true, bar: 550, unit: "µs", probe: true},
}

// ratioOf is the req/s of num ÷ den within one run.
func ratioOf(num, den string) func([]row) (float64, bool) {
	return func(rows []row) (float64, bool) { return ratio(rows, num, den) }
}

// p99Of is the p99 of num ÷ den within one run.
func p99Of(num, den string) func([]row) (float64, bool) {
	return func(rows []row) (float64, bool) {
		n, ok1 := find(rows, num)
		d, ok2 := find(rows, den)
		if !ok1 || !ok2 || d.stats.p99 == 0 {
			return 0, false
		}
		return float64(n.stats.p99) / float64(d.stats.p99), true
	}
}

// cpuOf is the CPU, in µs, process used per successful request of variant.
func cpuOf(variant, process string) func([]row) (float64, bool) {
	return func(rows []row) (float64, bool) {
		r, ok := find(rows, variant)
		if !ok {
			return 0, false
		}
		d, ok := r.stats.cpuPerRequest(process)
		return float64(d) / float64(time.Microsecond), ok
	}
}

// met says whether x reaches g's bar.
func (g goal) met(x float64) string {
	if g.probe {
		return "probe"
	}
	if (g.atMost && x <= g.bar) || (!g.atMost && x >= g.bar) {
		return "met"
	}
	return "NOT MET"
}

// barText renders g's bar.
func (g goal) barText() string {
	op := "≥"
	if g.atMost {
		op = "≤"
	}
	return fmt.Sprintf("%s %s%s", op, trimFloat(g.bar), g.unit)
}

// printGoals prints every target whose variants ran, with the value of each run and the
// median, and whether the median meets it.
func printGoals(out io.Writer, runs [][]row) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	printed := false
	for _, g := range goals {
		var xs []float64
		for _, rows := range runs {
			if x, ok := g.value(rows); ok {
				xs = append(xs, x)
			}
		}
		m, ok := median(xs)
		if !ok {
			continue
		}
		if !printed {
			fmt.Fprintf(out, "targets (median of %d run(s); each value computed within its run)\n", len(runs))
			printed = true
		}
		each := make([]string, len(xs))
		for i, x := range xs {
			each[i] = trimFloat(x)
		}
		fmt.Fprintf(tw, "  %s\t%s%s\t%s\t%s\truns: %v\n", g.label, trimFloat(m), g.unit, g.barText(), g.met(m), each)
	}
	_ = tw.Flush()
	if printed {
		fmt.Fprintln(out)
	}
}

// printCPU prints the CPU per request of each variant that reads it, by process.
func printCPU(out io.Writer, rows []row) {
	for _, r := range rows {
		if r.err != nil {
			continue
		}
		if r.stats.cpuErr != nil {
			fmt.Fprintf(out, "cpu of %s could not be read: %v\n", r.name, r.stats.cpuErr)
			continue
		}
		if len(r.stats.cpu) == 0 {
			continue
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range r.stats.cpu {
				if !yield(n) {
					return
				}
			}
		})
		fmt.Fprintf(out, "cpu per request, %s:", r.name)
		for _, n := range names {
			d, _ := r.stats.cpuPerRequest(n)
			fmt.Fprintf(out, " %s %dµs", n, d.Microseconds())
		}
		fmt.Fprintln(out)
	}
}

// trimFloat renders x with two decimals, or none for large values.
func trimFloat(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2f", x)
}
