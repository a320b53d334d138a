package main

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
	// progress receives one line per scenario as it starts.
	progress io.Writer
	// seq numbers the X-Request-Id of every call.
	seq atomic.Int64
}

// newDrill connects to the server: it waits for /readyz, checks the Kafka broker when the
// Kafka path is on, and probes whether the lab is mounted. Any failure is a connection error
// (exit status 2).
func newDrill(ctx context.Context, cfg config, progress io.Writer) (*drill, error) {
	d := &drill{cfg: cfg, c: newClient(cfg), progress: progress, runID: randomHex(4)}
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

// run runs every selected scenario, each against oncepay and, when the lab is on and the
// scenario has a replica, against the lab.
func (d *drill) run(ctx context.Context) report {
	rep := newReport(d)
	for _, s := range catalog {
		if len(d.cfg.Only) > 0 && !slices.Contains(d.cfg.Only, s.id) {
			continue
		}
		rep.Results = append(rep.Results, d.runOne(ctx, s, oncepayRoutes))
		if s.lab && d.lab {
			rep.Results = append(rep.Results, d.runOne(ctx, s, labRoutes))
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.finish()
	return rep
}

// runOne runs one scenario against one target, with the idempotency counters read before and
// after as extra evidence, and judges it.
func (d *drill) runOne(ctx context.Context, s scenario, rt routes) result {
	fmt.Fprintf(d.progress, "drill: %s %s against %s\n", s.id, s.name, rt.target)
	res := result{ID: s.id, Name: s.name, Target: rt.target, StartedAt: time.Now().UTC()}
	before, mErr := d.c.counters(ctx)
	out, err := s.run(d, ctx, rt)
	after, mErr2 := d.c.counters(ctx)
	res.DurationMS = ms(time.Since(res.StartedAt))
	res.Metrics = map[string]float64{}
	switch {
	case mErr != nil || mErr2 != nil:
		res.MetricsNote = fmt.Sprintf("metrics unavailable: %v", errors.Join(mErr, mErr2))
	case len(before) == 0 && len(after) == 0:
		res.MetricsNote = "no " + counterPrefix + "* counters exposed"
	default:
		res.Metrics = counterDelta(before, after)
	}
	res.Copies = out.copies
	res.Expected, res.Observed = out.expected, out.observed
	res.Effect, res.Answers, res.Notes = out.effect, out.answers, out.notes
	if err == nil {
		err = refused(out.copies)
	}
	if err != nil {
		res.Verdict, res.Error, res.Summary = verdictError, err.Error(), err.Error()
		return res
	}
	res.Verdict, res.Summary = judge(rt.target, out)
	return res
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

// sentinel is a second order, on a SKU of its own, that only a Kafka notification published
// right behind a scenario's Kafka copies pays. The server's consumer handles a partition in
// order, so once the sentinel order has moved, every copy ahead of it has been handled: the
// drill judges the effect then, instead of after a guessed delay. HTTP copies need no such
// wait: they are judged once answered.
type sentinel struct{ order order }

// newSentinel prepares a sentinel order; nil when the Kafka path is disabled.
func (d *drill) newSentinel(ctx context.Context, rt routes, tag string) (*sentinel, error) {
	if d.c.kafka == nil {
		return nil, nil
	}
	_, o, err := d.orderOnNewSKU(ctx, rt, tag+"-SENTINEL", 1)
	if err != nil {
		return nil, fmt.Errorf("the Kafka sentinel order: %w", err)
	}
	return &sentinel{order: o}, nil
}

// awaitSentinel publishes the sentinel's payment on afterKey's partition and waits, at most
// --settle, for the sentinel order to leave PENDING_PAYMENT. It notes how long the consumer
// took, or that it did not get there in time.
func (d *drill) awaitSentinel(ctx context.Context, s *sentinel, afterKey string, f *findings) {
	if s == nil {
		return
	}
	id := string(s.order.OrderID)
	tradeNo, body := d.notification(id, s.order.Amount)
	start := time.Now()
	if err := d.c.publishBehind(ctx, afterKey, tradeNo, d.requestID(), body); err != nil {
		f.notef("the Kafka sentinel could not be published (%v): the Kafka copies were judged without waiting for them", err)
		return
	}
	for {
		if o, err := d.order(ctx, id); err == nil && o.Status != "PENDING_PAYMENT" {
			f.notef("Kafka copies consumed: the sentinel behind them was applied %s after it was published", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > d.cfg.Settle || sleep(ctx, 50*time.Millisecond) != nil {
			f.notef("the Kafka copies were not confirmed consumed within --settle=%s (the sentinel behind them was not applied): "+
				"the effect was judged without them", d.cfg.Settle)
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
