package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// outcome is what a scenario function reports; runOne turns it into a result with a verdict.
type outcome struct {
	copies   []copyRecord
	expected string
	observed string
	// held is the one-line account printed when nothing was found.
	held string
	// skipped, when set, says why the scenario could not apply to this server.
	skipped string
	findings
}

// findings collects what a scenario saw that the contract does not allow.
type findings struct {
	// effect lists differences in the business effect: the incident itself. On a lab route
	// any of these means the incident was reproduced.
	effect []string
	// answers lists answers the contract does not allow, even when the effect is intact.
	answers []string
	// notes are remarks that change no verdict, such as what the drill could not control.
	notes []string
}

// effectf records a difference in the business effect.
func (f *findings) effectf(format string, args ...any) {
	f.effect = append(f.effect, fmt.Sprintf(format, args...))
}

// answerf records an answer the contract does not allow.
func (f *findings) answerf(format string, args ...any) {
	f.answers = append(f.answers, fmt.Sprintf(format, args...))
}

// notef records a remark that changes no verdict.
func (f *findings) notef(format string, args ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
}

// drill runs the catalog against one server.
type drill struct {
	cfg config
	c   *client
	// lab is true when the lab scenarios run too.
	lab bool
	// runID makes this run's SKUs, keys and trade numbers unique, so the drill can be run
	// again and again against the same server.
	runID string
	// progress receives one line per scenario as it starts and as it ends; progressMu keeps
	// the lines of concurrent scenarios whole.
	progress   io.Writer
	progressMu sync.Mutex
	// seq numbers the X-Request-Id of every call.
	seq atomic.Int64
	// purgeGate keeps I6's and I13's purges of every dedup row out of the runs whose duplicates
	// are answered from the first one's stored result (purgeSensitive): they hold it shared for
	// their whole run, I12 from its key's first use to the refused reuse, and each purge holds
	// it alone for its one call (purgeDedupRecords).
	purgeGate sync.RWMutex
	// active tracks which runs overlap, so that a run's counter delta is reported only when it
	// had the server to itself.
	active overlaps
	// others counts the runs in flight that the close job waits for: every run that does not
	// call it (closeAtTheEnd). closers counts the runs that call it and have not yet asked
	// for it (or ended without asking). closing is the one call they share.
	others  sync.WaitGroup
	closers sync.WaitGroup
	closing sharedClose
	// i5xOrdered is closed once I5's second half has made its order (or when it does not run):
	// I9's oncepay run makes its own order after it, so that the close job, which takes expired
	// orders by expiry, closes I5's before it pays I9's (7 s), and I5's late payment need not
	// wait for that. ordered closes it.
	i5xOrdered chan struct{}
	ordered    func()
	// simGate keeps the channel simulator's faults, which are global, to the run that set
	// them (I8, I9): a run holds it alone from setting a fault to clearing it, and shared
	// while it needs the channel to behave (opening a trade, a notification on its way).
	simGate sync.RWMutex
	// simURL is the simulator's base URL: --sim, or learned from a trade's pay_url.
	simMu  sync.Mutex
	simURL string
}

// newDrill connects to the server: it waits for /readyz, checks the Kafka broker when the
// Kafka path is on, and probes whether the lab is mounted. Any failure is a connection error
// (exit status 2).
func newDrill(ctx context.Context, cfg config, progress io.Writer) (*drill, error) {
	d := &drill{cfg: cfg, c: newClient(cfg), progress: progress, runID: randomHex(4), simURL: cfg.Sim}
	if err := d.awaitReady(ctx); err != nil {
		d.c.close()
		return nil, err
	}
	if d.c.kafka != nil {
		if err := d.c.checkKafka(ctx); err != nil {
			d.c.close()
			return nil, err
		}
	}
	switch cfg.Lab {
	case labOn:
		d.lab = true
	case labAuto:
		a, err := d.c.do(ctx, call{method: http.MethodGet, path: labProbePath})
		if err != nil {
			d.c.close()
			return nil, fmt.Errorf("probing %s: %w", labProbePath, err)
		}
		d.lab = a.status != http.StatusNotFound
	}
	return d, nil
}

// awaitReady waits, at most --wait, for GET /readyz to answer 200, so that a drill started
// right after the server finds its Kafka consumers joined. A server that answers but is not
// ready is drilled anyway, with a warning; one that never answers is a connection error.
func (d *drill) awaitReady(ctx context.Context) error {
	deadline := time.Now().Add(d.cfg.Wait)
	for {
		a, err := d.c.do(ctx, call{method: http.MethodGet, path: "/readyz"})
		switch {
		case err == nil && a.status == http.StatusOK:
			return nil
		case time.Now().After(deadline) && err != nil:
			return fmt.Errorf("cannot reach oncepay at %s: %w", d.cfg.URL, err)
		case time.Now().After(deadline):
			fmt.Fprintf(d.progress, "drill: warning: GET /readyz answers %d after --wait=%s; drilling anyway\n", a.status, d.cfg.Wait)
			return nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// close releases the client.
func (d *drill) close() { d.c.close() }

// logf prints one progress line.
func (d *drill) logf(format string, args ...any) {
	d.progressMu.Lock()
	defer d.progressMu.Unlock()
	fmt.Fprintf(d.progress, format+"\n", args...)
}

// planned is one scenario to run against one target.
type planned struct {
	s  scenario
	rt routes
}

// plan lists the selected runs in catalog order, each scenario against oncepay and, when the
// lab is on and the scenario has a replica, against the lab. The report keeps this order.
func (d *drill) plan() []planned {
	var runs []planned
	for _, s := range catalog {
		if len(d.cfg.Only) > 0 && !slices.Contains(d.cfg.Only, s.id) {
			continue
		}
		runs = append(runs, planned{s, oncepayRoutes})
		if s.lab && d.lab {
			runs = append(runs, planned{s, labRoutes})
		}
	}
	return runs
}

// run runs the plan. ONCEPAY_CHAOS_PAYMENT_DELAY slows every payment, so the runs go at the
// same time, each on SKUs, keys and trade numbers of its own, in two groups:
//
//   - the runs that do not pay through oncepay, all at once;
//   - beside them, the runs that do, --payments at a time (see config.Payments).
//
// The runs that call the close job (closeAtTheEnd) start with the first group and share one
// call of it, made once every other run has finished and each of them has asked for it
// (closeJob). With --serial every run goes alone, in plan order, and each calls the job
// itself. The report keeps plan order either way.
func (d *drill) run(ctx context.Context) report {
	rep := newReport(d)
	before, beforeErr := d.c.counters(ctx)
	runs := d.plan()
	results := make([]result, len(runs))
	free, paying, alone := schedule(runs, d.cfg.Serial)
	var wg sync.WaitGroup
	if !d.cfg.Serial {
		d.closing.done = make(chan struct{})
	}
	d.i5xOrdered = make(chan struct{})
	d.ordered = sync.OnceFunc(func() { close(d.i5xOrdered) })
	i5x := -1
	for _, i := range free {
		if runs[i].s.id == "I5" && runs[i].s.closes(runs[i].rt) == closeAtTheEnd && runs[i].s.name == payAfterCloseName {
			i5x = i
		}
	}
	if i5x < 0 {
		d.ordered()
	}
	asked := make([]func(), len(runs))
	for _, i := range append(slices.Clone(free), paying...) {
		if runs[i].s.closes(runs[i].rt) == closeAtTheEnd {
			d.closers.Add(1)
			asked[i] = sync.OnceFunc(d.closers.Done)
		} else {
			d.others.Add(1)
		}
		if runs[i].s.purgeSensitive && runs[i].rt.target == oncepayRoutes.target {
			d.purgeGate.RLock() // taken before any run starts, so that I6's purge waits for it
		}
	}
	finish := func(i int) {
		if i == i5x {
			d.ordered()
		}
		if asked[i] != nil {
			asked[i]() // a run that ended without asking for the close job holds nobody up
		} else {
			d.others.Done()
		}
		if runs[i].s.purgeSensitive && runs[i].rt.target == oncepayRoutes.target {
			d.purgeGate.RUnlock()
		}
	}
	for _, i := range free {
		wg.Go(func() {
			defer finish(i)
			runCtx := ctx
			if asked[i] != nil {
				runCtx = context.WithValue(ctx, askedKey{}, asked[i])
			}
			results[i] = d.runOne(runCtx, i, runs[i])
		})
	}
	lanes := d.cfg.Payments
	if lanes == 0 || lanes > len(paying) {
		lanes = len(paying)
	}
	queue := make(chan int, len(paying))
	for _, i := range paying {
		queue <- i
	}
	close(queue)
	for range lanes {
		wg.Go(func() {
			for i := range queue {
				if ctx.Err() == nil {
					results[i] = d.runOne(ctx, i, runs[i])
				}
				finish(i)
			}
		})
	}
	wg.Wait()
	for _, i := range alone {
		if ctx.Err() != nil {
			break
		}
		results[i] = d.runOne(ctx, i, runs[i])
	}
	for _, r := range results {
		if r.ID != "" { // a run that never started because the drill was interrupted
			rep.Results = append(rep.Results, r)
		}
	}
	after, afterErr := d.c.counters(ctx)
	rep.Metrics, rep.MetricsNote = metricsDelta(before, after, errors.Join(beforeErr, afterErr))
	rep.finish()
	return rep
}

// schedule sorts runs, by index, into the groups of drill.run: free runs start at once and
// paying runs take turns; with serial every run is alone, and they follow one by one.
func schedule(runs []planned, serial bool) (free, paying, alone []int) {
	for i, p := range runs {
		switch {
		case serial:
			alone = append(alone, i)
		case p.s.paying(p.rt) && p.s.closes(p.rt) == noCloseJob:
			paying = append(paying, i)
		default:
			free = append(free, i)
		}
	}
	return free, paying, alone
}

// askedKey is the context key under which a closeAtTheEnd run carries the function that tells
// the shared close job it has asked for it.
type askedKey struct{}

// sharedClose is the one call of POST /v1/admin/jobs/close-expired-orders/run that the
// closeAtTheEnd runs share. The job closes every expired unpaid order on the server, and
// orders expire after ONCEPAY_ORDER_TTL=3s while payments take ONCEPAY_CHAOS_PAYMENT_DELAY=7s in
// make drill: called while another run's payment is on its way, it would close that run's
// order under it. So it is called once, after every other run.
type sharedClose struct {
	once sync.Once
	// started is when the call left; done is closed once it was answered.
	started time.Time
	done    chan struct{}
	rec     copyRecord
	closed  int64
}

// closeJob is the close job as a closeAtTheEnd run sees it: it waits until every run that does
// not call the job has finished and every run that does has asked, then makes the one call
// (the first to get there does; the others wait for it). It returns once the call has left,
// with wait, which blocks until the job has answered and returns its record (timed from t0)
// and how many orders it closed, and done, closed then. Meanwhile the caller may watch its own
// order: the job may be done with it long before it is done with every order. With --serial
// each run calls the job itself, and closeJob returns once it has answered.
func (d *drill) closeJob(ctx context.Context, t0 time.Time) (wait func() (copyRecord, int64, error), done <-chan struct{}, err error) {
	job := func(ctx context.Context) (copyRecord, int64) {
		var res struct {
			Closed int64 `json:"closed"`
		}
		rec := d.c.fireHTTP(ctx, t0, "close job", call{method: http.MethodPost, path: "/v1/admin/jobs/close-expired-orders/run",
			bearer: d.cfg.AdminKey, requestID: d.requestID()}, &res)
		return rec, res.Closed
	}
	if d.closing.done == nil { // --serial, or a run driven alone by a test
		rec, n := job(ctx)
		over := make(chan struct{})
		close(over)
		return func() (copyRecord, int64, error) { return rec, n, nil }, over, nil
	}
	if asked, ok := ctx.Value(askedKey{}).(func()); ok {
		asked()
	}
	all := make(chan struct{})
	go func() { d.others.Wait(); d.closers.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	d.closing.once.Do(func() {
		d.closing.started = time.Now()
		go func() {
			defer close(d.closing.done)
			d.closing.rec, d.closing.closed = job(ctx)
		}()
	})
	return func() (copyRecord, int64, error) {
		select {
		case <-d.closing.done:
		case <-ctx.Done():
			return copyRecord{}, 0, ctx.Err()
		}
		rec := d.closing.rec
		rec.StartMS = ms(d.closing.started.Sub(t0))
		return rec, d.closing.closed, nil
	}, d.closing.done, nil
}

// runOne runs one scenario against one target, with the idempotency counters read before and
// after as extra evidence, and judges it.
func (d *drill) runOne(ctx context.Context, n int, p planned) result {
	s, rt := p.s, p.rt
	d.logf("drill: %s %s against %s", s.id, s.name, rt.target)
	res := result{ID: s.id, Name: s.name, Target: rt.target, StartedAt: time.Now().UTC()}
	d.active.begin(n)
	before, mErr := d.c.counters(ctx)
	out, err := s.run(d, ctx, rt)
	after, mErr2 := d.c.counters(ctx)
	overlapped := d.active.end(n)
	res.DurationMS = ms(time.Since(res.StartedAt))
	res.Metrics, res.MetricsNote = metricsDelta(before, after, errors.Join(mErr, mErr2))
	if overlapped && res.MetricsNote == "" {
		res.Metrics = map[string]float64{}
		res.MetricsNote = metricsOverlapNote
	}
	res.Copies = out.copies
	res.Expected, res.Observed = out.expected, out.observed
	res.Effect, res.Answers, res.Notes = out.effect, out.answers, out.notes
	if err == nil {
		err = refused(out.copies)
	}
	if err != nil {
		res.Verdict, res.Error, res.Summary = verdictError, err.Error(), err.Error()
	} else {
		res.Verdict, res.Summary = judge(rt.target, out)
	}
	d.logf("drill: %s %s against %s: %s in %s", s.id, s.name, rt.target, res.Verdict, fmtMS(res.DurationMS))
	return res
}

// metricsOverlapNote replaces the counter delta of a run that overlapped another.
const metricsOverlapNote = "not attributed: other scenarios ran meanwhile and the counters are server-wide " +
	"(see \"whole run\"; --serial attributes them)"

// metricsDelta turns two readings of the counters into a delta, or a note on why there is none.
func metricsDelta(before, after map[string]float64, err error) (map[string]float64, string) {
	switch {
	case err != nil:
		return map[string]float64{}, fmt.Sprintf("metrics unavailable: %v", err)
	case len(before) == 0 && len(after) == 0:
		return map[string]float64{}, "no " + counterPrefix + "* counters exposed"
	}
	return counterDelta(before, after), ""
}

// overlaps records which runs were in flight at the same time as another.
type overlaps struct {
	mu         sync.Mutex
	active     map[int]bool
	overlapped map[int]bool
}

// begin marks run n in flight, and it and every run in flight as overlapped if there are any.
func (o *overlaps) begin(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.active == nil {
		o.active, o.overlapped = map[int]bool{}, map[int]bool{}
	}
	for m := range o.active {
		o.overlapped[m], o.overlapped[n] = true, true
	}
	o.active[n] = true
}

// end marks run n finished and reports whether another run was in flight at any time during it.
func (o *overlaps) end(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.active, n)
	return o.overlapped[n]
}

// refused turns a 401 to any copy into an error: the drill was given the wrong key or channel
// secret, which says nothing about the server's guarantees.
func refused(copies []copyRecord) error {
	for _, c := range copies {
		if c.Status == http.StatusUnauthorized {
			return fmt.Errorf("%s answered 401 %s: check --user-key, --admin-key and --channel-secret (ONCEPAY_ADMIN_KEY, ONCEPAY_CHANNEL_SECRET)", c.Route, c.Code)
		}
	}
	return nil
}

// judge turns findings into a verdict. On oncepay any finding is a violation; on the lab only
// a damaged effect counts as the incident reproduced.
func judge(target string, out outcome) (verdict, string) {
	switch {
	case out.skipped != "":
		return verdictSkipped, out.skipped
	case target == labRoutes.target && len(out.effect) > 0:
		return verdictReproduced, strings.Join(out.effect, "; ")
	case target == labRoutes.target:
		return verdictNotReproduced, strings.Join(append([]string{out.held}, out.notes...), "; ")
	case len(out.effect)+len(out.answers) > 0:
		return verdictViolated, strings.Join(append(slices.Clone(out.effect), out.answers...), "; ")
	}
	return verdictHeld, out.held
}

// shot is one copy to fire, at a delay after the scenario's first copy.
type shot struct {
	at time.Duration
	// path labels the copy, e.g. "gateway retry".
	path string
	fire func(ctx context.Context, t0 time.Time) copyRecord
}

// fireAll fires every shot from its own goroutine, all released by one gate so that the copies
// race as real duplicates do, and returns their records in shot order.
func fireAll(ctx context.Context, shots []shot) []copyRecord {
	recs := make([]copyRecord, len(shots))
	gate := make(chan struct{})
	var t0 time.Time
	var wg sync.WaitGroup
	for i, s := range shots {
		wg.Go(func() {
			<-gate
			if sleep(ctx, time.Until(t0.Add(s.at))) != nil {
				recs[i] = copyRecord{Path: s.path, Error: ctx.Err().Error()}
				return
			}
			recs[i] = s.fire(ctx, t0)
		})
	}
	t0 = time.Now()
	close(gate)
	wg.Wait()
	return recs
}

// fireInOrder fires the shots one after the other, each after the previous was answered.
func fireInOrder(ctx context.Context, shots []shot) []copyRecord {
	recs := make([]copyRecord, len(shots))
	t0 := time.Now()
	for i, s := range shots {
		recs[i] = s.fire(ctx, t0)
	}
	return recs
}

// httpShot fires cl as one copy labelled path, with its own X-Request-Id.
func (d *drill) httpShot(at time.Duration, path string, cl call) shot {
	cl.requestID = d.requestID()
	return shot{at: at, path: path, fire: func(ctx context.Context, t0 time.Time) copyRecord {
		return d.c.fireHTTP(ctx, t0, path, cl, nil)
	}}
}

// notifyShot fires a signed notification body at route.
func (d *drill) notifyShot(at time.Duration, path, route string, body []byte) shot {
	return d.httpShot(at, path, d.notifyCall(route, body))
}

// notifyCall is a signed notification, the way a payment channel sends it.
func (d *drill) notifyCall(route string, body []byte) call {
	return call{method: http.MethodPost, path: route, body: body, signed: true, requestID: d.requestID()}
}

// kafkaShot publishes a payment notification keyed by its trade_no.
func (d *drill) kafkaShot(at time.Duration, path, tradeNo string, body []byte) shot {
	rid := d.requestID()
	return shot{at: at, path: path, fire: func(ctx context.Context, t0 time.Time) copyRecord {
		return d.c.fireKafka(ctx, t0, path, tradeNo, rid, body)
	}}
}

// consumedPoll is how often awaitConsumed reads the consumer group's offsets.
const consumedPoll = 50 * time.Millisecond

// awaitConsumed waits, at most --settle, until the server's consumer group has committed past
// every Kafka copy in copies, and stamps each copy's ConsumedMS when it sees that. The
// consumer commits a message only once it is handled (applied, found a duplicate, or
// dead-lettered), so the effect is judged then, instead of after a guessed delay. HTTP
// copies need no such wait: they are judged once answered.
func (d *drill) awaitConsumed(ctx context.Context, copies []copyRecord, f *findings) {
	var partitions []int
	waiting := 0
	for _, c := range copies {
		if c.Placement != nil {
			waiting++
			if !slices.Contains(partitions, c.Placement.Partition) {
				partitions = append(partitions, c.Placement.Partition)
			}
		}
	}
	if waiting == 0 {
		return
	}
	start := time.Now()
	var lastErr error
	for {
		committed, err := d.c.committed(ctx, partitions)
		now := time.Now()
		if err != nil {
			lastErr = err
		}
		for i := range copies {
			c := &copies[i]
			if c.Placement == nil || c.ConsumedMS > 0 {
				continue
			}
			if off, ok := committed[c.Placement.Partition]; ok && off > c.Placement.Offset {
				c.ConsumedMS = c.StartMS + ms(now.Sub(c.sent))
				waiting--
			}
		}
		if waiting == 0 {
			lag := 0.0
			for _, c := range copies {
				if c.Placement != nil {
					lag = max(lag, c.ConsumedMS-c.StartMS)
				}
			}
			f.notef("Kafka copies consumed: group %s had committed past each within %s of its publication", paymentGroup, fmtMS(lag))
			return
		}
		if time.Since(start) > d.cfg.Settle || sleep(ctx, consumedPoll) != nil {
			why := ""
			if lastErr != nil {
				why = " (" + lastErr.Error() + ")"
			}
			f.notef("%d Kafka %s not confirmed consumed within --settle=%s: group %s did not commit past %s%s; "+
				"the effect was judged without %s", waiting, plural(waiting, "copy was", "copies were"), d.cfg.Settle,
				paymentGroup, plural(waiting, "it", "them"), why, plural(waiting, "it", "them"))
			return
		}
	}
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll calls fn every interval in the background until the returned stop is called.
func poll(ctx context.Context, every time.Duration, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			fn(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// notificationBody is the contract's notification JSON, shared by payments, recharges and the
// Kafka topic.
type notificationBody struct {
	Channel    string `json:"channel"`
	TradeNo    string `json:"trade_no"`
	OutTradeNo string `json:"out_trade_no"`
	Amount     int64  `json:"amount"`
	Status     string `json:"status"`
}

// drillChannel is the channel name on the drill's notifications. The contract does not list
// channels; a name of its own keeps drill payments apart in reconciliation.
const drillChannel = "drill"

// notification returns a fresh random trade_no and the notification body for it.
func (d *drill) notification(outTradeNo string, amount int64) (string, []byte) {
	tradeNo := "DRILL-" + d.runID + "-" + randomHex(6)
	b, _ := json.Marshal(notificationBody{Channel: drillChannel, TradeNo: tradeNo, OutTradeNo: outTradeNo, Amount: amount, Status: "SUCCESS"})
	return tradeNo, b
}

// key is a fresh Idempotency-Key for one scenario step on one target.
func (d *drill) key(rt routes, tag string) string {
	return "drill-" + d.runID + "-" + rt.target + "-" + tag
}

// requestID is a fresh X-Request-Id, so each copy can be found in the server's logs.
func (d *drill) requestID() string {
	return fmt.Sprintf("drill-%s-%d", d.runID, d.seq.Add(1))
}

// randomHex returns n random bytes as upper-case hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}
