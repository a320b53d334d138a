package main

import (
	"cmp"
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

// stormDeadline is how fast every copy of a storm must be answered, unless the storm says.
const stormDeadline = time.Second

// storm fires many concurrent copies of one request, with one key, at one or more replicas
// sharing the database and Redis, and counts the business effect afterwards.
type storm struct {
	name string
	// copies, when positive, is the storm's own number of copies instead of -storm.
	copies int
	// deadline, when positive, replaces stormDeadline.
	deadline time.Duration
	// start starts the replicas.
	start func(ctx context.Context, e *env) (stormSetup, error)
}

// stormSetup is what a storm fires at: its replicas' base URLs, the requests of one key (one
// target per replica), how to count the effect, and how to stop the replicas.
type stormSetup struct {
	urls []string
	// ping is the path a GET opens each connection with beforehand.
	ping    string
	targets func(key string) []target
	counts  func(ctx context.Context) (orders, stock int64, err error)
	stop    func()
}

// allStorms lists the storms in the order they run.
func allStorms() []storm {
	return []storm{
		{name: "storm-guard", start: startGuardStorm},
		{name: "storm-fiber", start: startFiberStorm},
		{name: "storm-oncepay-3", copies: 10_000, deadline: 2 * time.Second, start: startOncepayStorm},
	}
}

// benchSetup is the setup of replicas serving the bench transaction at urls.
func (e *env) benchSetup(urls []string, stop func()) stormSetup {
	return stormSetup{urls: urls, ping: "/ping", stop: stop, counts: e.counts, targets: func(key string) []target {
		ts := make([]target, len(urls))
		for i, url := range urls {
			ts[i] = target{url: url + "/orders", body: orderBody, key: func() string { return key }}
		}
		return ts
	}}
}

// startOncepayStorm is three oncepay processes on one database and Redis (startCluster): the
// storm's copies are alice's order of one unit of serverSKU, spread over the three.
func startOncepayStorm(ctx context.Context, e *env) (stormSetup, error) {
	c, err := e.startCluster(ctx, "storm", 3)
	if err != nil {
		return stormSetup{}, err
	}
	counts := func(ctx context.Context) (orders, stock int64, err error) {
		db := c.db.WithContext(ctx)
		if err = db.Raw("SELECT COUNT(*) FROM orders").Scan(&orders).Error; err != nil {
			return 0, 0, err
		}
		err = db.Raw("SELECT available FROM inventory WHERE sku = ?", serverSKU).Scan(&stock).Error
		return orders, stock, err
	}
	return stormSetup{urls: c.urls, ping: "/healthz", stop: c.stop, counts: counts, targets: func(key string) []target {
		ts := make([]target, len(c.urls))
		for i, url := range c.urls {
			ts[i] = serverTarget(e, url)
			ts[i].key = func() string { return key }
		}
		return ts
	}}, nil
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
func startGuardStorm(_ context.Context, e *env) (stormSetup, error) {
	url, stop, err := serveHTTP(benchMux(guardHandler(e.newGuard("storm-guard", idempotent.Config{}), e.orders)))
	return e.benchSetup([]string{url}, stop), err
}

// startFiberStorm is two gofiber replicas behind the idempotency middleware, sharing one
// Redis storage (the same prefix); each has the middleware's default lock, which is in
// process.
func startFiberStorm(_ context.Context, e *env) (stormSetup, error) {
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
			return stormSetup{}, err
		}
		urls, stops = append(urls, url), append(stops, stop)
	}
	return e.benchSetup(urls, stopAll), nil
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
	deadline   time.Duration
	err        error
}

// ok reports whether the storm met its bar: one effect, no 5xx or transport error, and
// every copy answered within its deadline.
func (r stormResult) ok() bool {
	_, fivexx := r.classes()
	return r.err == nil && r.effects == 1 && r.stockTaken == 1 && fivexx == 0 && r.transport == 0 &&
		r.maxLatency < r.deadline
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
	if s.copies > 0 {
		copies = s.copies
	}
	res := stormResult{name: s.name, copies: copies, statuses: map[int]int{}, deadline: cmp.Or(s.deadline, stormDeadline)}
	setup, err := s.start(ctx, e)
	if err != nil {
		res.err = err
		return res
	}
	defer setup.stop()
	res.replicas = len(setup.urls)

	client := newClient(copies)
	defer client.CloseIdleConnections()
	openConnections(ctx, client, setup.urls, setup.ping, copies)

	ordersBefore, stockBefore, err := setup.counts(ctx)
	if err != nil {
		res.err = err
		return res
	}
	answers := fire(ctx, setup.targets(e.newKey()), client, copies)
	ordersAfter, stockAfter, err := setup.counts(ctx)
	if err != nil {
		res.err = err
		return res
	}
	res.effects, res.stockTaken = ordersAfter-ordersBefore, stockBefore-stockAfter
	res.tally(answers)
	return res
}

// openConnections sends n concurrent GET ping, spread over the replicas, so that the storm
// finds its connections open and measures the answers rather than the TCP handshakes.
func openConnections(ctx context.Context, client *http.Client, urls []string, ping string, n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-release
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, urls[i%len(urls)]+ping, nil)
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
	fmt.Fprintf(out, "storms: want 1 effect, stock down by 1, 0 5xx, every copy answered < %s (storm-oncepay-3: 2s)\n", stormDeadline)
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
