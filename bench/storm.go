package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/oncepay/oncepay/idempotent"
)

// stormDeadline is how fast every copy of a storm must be answered.
const stormDeadline = time.Second

// storm fires many concurrent copies of one request, with one key, at one or more replicas
// sharing the database and Redis, and counts the business effect afterwards.
type storm struct {
	name string
	// start starts the replicas and returns their base URLs and the function that stops them.
	start func(ctx context.Context, e *env) ([]string, func(), error)
}

// allStorms lists the storms in the order they run.
func allStorms() []storm {
	return []storm{
		{name: "storm-guard", start: startGuardStorm},
		{name: "storm-fiber", start: startFiberStorm},
	}
}

// selectStorms keeps the storms whose name matches re.
func selectStorms(ss []storm, re *regexp.Regexp) []storm {
	var out []storm
	for _, s := range ss {
		if re.MatchString(s.name) {
			out = append(out, s)
		}
	}
	return out
}

// startGuardStorm is one net/http replica behind the guard with every layer.
func startGuardStorm(_ context.Context, e *env) ([]string, func(), error) {
	url, stop, err := serveHTTP(benchMux(guardHandler(e.newGuard("storm-guard", idempotent.Config{}), e.orders)))
	return []string{url}, stop, err
}

// startFiberStorm is two gofiber replicas behind the idempotency middleware, sharing one
// Redis storage (the same prefix); each has the middleware's default lock, which is in
// process.
func startFiberStorm(_ context.Context, e *env) ([]string, func(), error) {
	var (
		urls  []string
		stops []func()
	)
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for range 2 {
		storage := e.newFiberStorage(e.prefix + "storm-fiber:")
		url, stop, err := e.serveFiber(newFiberApp(e.orders, storage))
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		urls, stops = append(urls, url), append(stops, stop)
	}
	return urls, stopAll, nil
}

// stormResult is what a storm did.
type stormResult struct {
	name     string
	replicas int
	copies   int
	// effects is the number of orders rows the storm added; stockTaken how much the stock
	// row went down.
	effects    int64
	stockTaken int64
	statuses   map[int]int
	transport  int
	// bodies is the number of distinct bodies among the 201 answers.
	bodies     int
	maxLatency time.Duration
	err        error
}

// ok reports whether the storm met its bar: one effect, no 5xx or transport error, and
// every copy answered within stormDeadline.
func (r stormResult) ok() bool {
	_, fivexx := r.classes()
	return r.err == nil && r.effects == 1 && r.stockTaken == 1 && fivexx == 0 && r.transport == 0 &&
		r.maxLatency < stormDeadline
}

// runStorms runs the storms one after the other, each with copies copies.
func runStorms(ctx context.Context, e *env, storms []storm, copies int) ([]stormResult, error) {
	var results []stormResult
	for _, s := range storms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		results = append(results, runStorm(ctx, e, s, copies))
	}
	return results, ctx.Err()
}

// runStorm starts the replicas, opens the connections, fires the copies together, and
// counts the effect in the database.
func runStorm(ctx context.Context, e *env, s storm, copies int) stormResult {
	res := stormResult{name: s.name, copies: copies, statuses: map[int]int{}}
	urls, stop, err := s.start(ctx, e)
	if err != nil {
		res.err = err
		return res
	}
	defer stop()
	res.replicas = len(urls)

	client := newClient(copies)
	defer client.CloseIdleConnections()
	openConnections(ctx, client, urls, copies)

	ordersBefore, stockBefore, err := e.counts(ctx)
	if err != nil {
		res.err = err
		return res
	}
	answers := fire(ctx, e.stormTargets(urls), client, copies)
	ordersAfter, stockAfter, err := e.counts(ctx)
	if err != nil {
		res.err = err
		return res
	}
	res.effects, res.stockTaken = ordersAfter-ordersBefore, stockBefore-stockAfter
	res.tally(answers)
	return res
}

// stormTargets returns one target per replica, all with one new key.
func (e *env) stormTargets(urls []string) []target {
	key := e.newKey()
	ts := make([]target, len(urls))
	for i, url := range urls {
		ts[i] = target{url: url + "/orders", body: orderBody, key: func() string { return key }}
	}
	return ts
}

// openConnections sends n concurrent GET /ping, spread over the replicas, so that the storm
// finds its connections open and measures the answers rather than the TCP handshakes.
func openConnections(ctx context.Context, client *http.Client, urls []string, n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-release
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, urls[i%len(urls)]+"/ping", nil)
			if err != nil {
				return
			}
			if res, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			}
		})
	}
	close(release)
	wg.Wait()
}

// stormAnswer is one copy's answer and how long after the release it came.
type stormAnswer struct {
	answer
	err  error
	took time.Duration
}

// fire sends n copies, spread over the targets, released together by a barrier.
func fire(ctx context.Context, targets []target, client *http.Client, n int) []stormAnswer {
	answers := make([]stormAnswer, n)
	release := make(chan struct{})
	var (
		ready sync.WaitGroup
		done  sync.WaitGroup
		t0    time.Time
	)
	ready.Add(n)
	for i := range n {
		done.Go(func() {
			ready.Done()
			<-release
			a, err := targets[i%len(targets)].send(ctx, client)
			answers[i] = stormAnswer{answer: a, err: err, took: time.Since(t0)}
		})
	}
	ready.Wait()
	t0 = time.Now()
	close(release)
	done.Wait()
	return answers
}

// tally counts the answers by status and the distinct 201 bodies.
func (r *stormResult) tally(answers []stormAnswer) {
	bodies := map[string]bool{}
	for _, a := range answers {
		r.maxLatency = max(r.maxLatency, a.took)
		if a.err != nil {
			r.transport++
			continue
		}
		r.statuses[a.status]++
		if a.status == http.StatusCreated {
			bodies[string(a.body)] = true
		}
	}
	r.bodies = len(bodies)
}

// counts returns the number of orders and the stock of the bench SKU.
func (e *env) counts(ctx context.Context) (orders, stock int64, err error) {
	db := e.db.WithContext(ctx)
	if err = db.Raw("SELECT COUNT(*) FROM orders").Scan(&orders).Error; err != nil {
		return 0, 0, err
	}
	err = db.Raw("SELECT available FROM stock WHERE sku = ?", benchSKU).Scan(&stock).Error
	return orders, stock, err
}

// printStorms prints the storms' table and what each storm's answers were.
func printStorms(out io.Writer, results []stormResult) {
	fmt.Fprintf(out, "storms: want 1 effect, stock down by 1, 0 5xx, every copy answered < %s\n", stormDeadline)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, left("storm")+"\treplicas\tcopies\teffects\tstock -\t201\t409\tother 4xx\t5xx\tno answer\t201 bodies\tmax latency\tverdict\t")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t-\t%d\t-\t-\t-\t-\t-\t-\t-\t-\t-\tERROR\t\n", left(r.name), r.copies)
			continue
		}
		other4xx, fivexx := r.classes()
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", left(r.name), r.replicas, r.copies,
			r.effects, r.stockTaken, r.statuses[http.StatusCreated], r.statuses[http.StatusConflict],
			other4xx, fivexx, r.transport, r.bodies, ms(r.maxLatency), verdict(r.ok()))
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(out, "ERROR %s: %v\n", r.name, r.err)
			continue
		}
		fmt.Fprintf(out, "%s statuses: %s\n", r.name, statusList(r.statuses))
	}
	fmt.Fprintln(out)
}

// printStormSummary prints, for every storm, its effects and verdict in each run.
func printStormSummary(out io.Writer, runs [][]stormResult) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(out, "storms over %d runs\n", len(runs))
	for i, first := range runs[0] {
		var effects []string
		passed := 0
		for _, results := range runs {
			r := results[i]
			effects = append(effects, fmt.Sprint(r.effects))
			if r.ok() {
				passed++
			}
		}
		fmt.Fprintf(out, "%s effects per run: %s; passed %d of %d\n", first.name, strings.Join(effects, " "), passed, len(runs))
	}
	fmt.Fprintln(out)
}

// classes counts the 4xx other than 409, and the 5xx.
func (r stormResult) classes() (other4xx, fivexx int) {
	for status, n := range r.statuses {
		switch {
		case status >= 500:
			fivexx += n
		case status >= 400 && status != http.StatusConflict:
			other4xx += n
		}
	}
	return other4xx, fivexx
}

// verdict renders whether a storm met its bar.
func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// statusList renders the status counts in status order.
func statusList(statuses map[int]int) string {
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d×%d", statuses[c], c)
	}
	return strings.Join(parts, ", ")
}
