package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	oncepay "github.com/oncepay/oncepay/client"
)

// The timing of I18. Both clients give an attempt i18AttemptTimeout before they take it for
// lost — far more than an order takes, so that only the lab's held answer times out — and
// the naive one makes at most i18NaiveAttempts.
const (
	i18AttemptTimeout = 2 * time.Second
	i18NaiveAttempts  = 3
	i18Deadline       = 30 * time.Second
)

// i18Path is the lab's lossy network in front of oncepay's own POST /v1/orders: the first
// answer of run is held until the client gives up, then dropped.
func i18Path(run string) string { return "/lab/orders/lose-first-answer?run=" + url.QueryEscape(run) }

// newKeyRetry is I18: a client orders, the server commits the order, and its answer is lost
// on the way back, so the client times out and sends the order again. Both runs go through
// the lab's lossy network in front of oncepay's real POST /v1/orders, as I10's both go
// through /lab/: the server is the same, the client is what differs. The lab's run is the
// incident's client, which sends the retry under a NEW Idempotency-Key, so oncepay rightly
// takes it for a second order; oncepay's run is the Go client (package client), which sends
// every attempt under the key it chose before the first, so the retry is answered with the
// first order, replayed.
func (d *drill) newKeyRetry(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	if !d.lab {
		out.skipped = "the answer of an order is lost only under /lab/ (its lossy network): start the server with ONCEPAY_LAB=true to run I18"
		return out, nil
	}
	sku, err := d.newSKU(ctx, rt, "I18", 1999, 100)
	if err != nil {
		return out, err
	}
	path, body := i18Path(d.runID+"-"+rt.target), orderBody(sku.SKU, 1)
	var keys []string
	if rt.target == labRoutes.target {
		out.copies, keys = d.retryUnderNewKeys(ctx, path, body)
	} else {
		out.copies, keys = d.retryWithTheClient(ctx, path, body, &out)
	}
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	delta := after.since(sku)
	checkLostAnswerRetry(&out.findings, rt, out.copies, delta)
	out.expected = fmt.Sprintf("one order for one purchase: stock %s; the retry answered with it, Idempotent-Replayed", stockDelta{-1, 1, 0})
	nk := len(distinct(keys))
	out.observed = fmt.Sprintf("%s under %s; stock %s: %s", plural(len(out.copies), "1 attempt", fmt.Sprintf("%d attempts", len(out.copies))),
		plural(nk, "1 key", fmt.Sprintf("%d keys", nk)), delta, plural(int(delta.reserved), "1 order", fmt.Sprintf("%d orders", delta.reserved)))
	out.held = "one order: the client kept its key, and the retry after the lost answer was answered with the first order, replayed"
	return out, nil
}

// checkLostAnswerRetry judges I18 from the stock (one order's worth) and the attempts: the
// first must have lost its answer, for the drill to have tested anything, and the last must
// have been the order.
func checkLostAnswerRetry(f *findings, rt routes, copies []copyRecord, delta stockDelta) {
	if len(copies) == 0 {
		f.answerf("the client sent nothing")
		return
	}
	if first := copies[0]; first.Error == "" {
		f.notef("the first attempt was answered (%s): the lab's network did not lose its answer, so the retry was not tested", answerSummary(first))
	}
	last := copies[len(copies)-1]
	if last.Status != http.StatusCreated {
		f.answerf("the client's last attempt got %s, not the order", answerSummary(last))
	}
	if rt.target == oncepayRoutes.target && len(copies) > 1 && !last.Replayed {
		f.answerf("the retry after the lost answer was not answered Idempotent-Replayed: true")
	}
	if want := (stockDelta{-1, 1, 0}); delta != want {
		f.effectf("stock %s for one purchase, want %s: %d orders", delta, want, delta.reserved)
	}
}

// retryUnderNewKeys is the BUG of I18, the incident's client: an attempt that timed out is
// taken for one that never arrived, and the order is sent again under a NEW Idempotency-Key,
// up to i18NaiveAttempts times, until an answer comes.
func (d *drill) retryUnderNewKeys(ctx context.Context, path string, body []byte) ([]copyRecord, []string) {
	var recs []copyRecord
	var keys []string
	t0 := time.Now()
	for n := 1; n <= i18NaiveAttempts; n++ {
		key := d.key(labRoutes, fmt.Sprintf("I18-%d", n))
		actx, cancel := context.WithTimeout(ctx, i18AttemptTimeout)
		rec := d.c.fireHTTP(actx, t0, fmt.Sprintf("naive client, attempt %d, a new key", n),
			call{method: http.MethodPost, path: path, bearer: d.cfg.UserKey, idemKey: key, body: body, requestID: d.requestID()}, nil)
		cancel()
		recs, keys = append(recs, rec), append(keys, key)
		if rec.Error == "" && rec.Status < 500 {
			break
		}
	}
	return recs, keys
}

// retryWithTheClient places the order with oncepay's Go client, which chooses the key once
// and retries the timed-out attempt under it; every attempt is recorded as a copy.
func (d *drill) retryWithTheClient(ctx context.Context, path string, body []byte, out *outcome) ([]copyRecord, []string) {
	var recs []copyRecord
	var keys []string
	t0 := time.Now()
	c, err := oncepay.New(oncepay.Config{
		BaseURL: d.cfg.URL, APIKey: d.cfg.UserKey, HTTPClient: d.c.http,
		AttemptTimeout: i18AttemptTimeout, Deadline: i18Deadline,
		NewKey: func() (string, error) { return d.key(oncepayRoutes, "I18"), nil },
		// OnAttempt runs on the calling goroutine: recs needs no lock.
		OnAttempt: func(a oncepay.Attempt) {
			recs, keys = append(recs, copyOfAttempt(t0, a)), append(keys, a.Key)
		},
	})
	if err != nil {
		out.answerf("the client could not be made: %v", err)
		return nil, nil
	}
	if _, err := c.Do(ctx, oncepay.Request{Method: http.MethodPost, Path: path, Body: body, Keyed: true}, oncepay.WithRequestID(d.requestID())); err != nil {
		out.notef("the client ended with: %v", err)
	}
	return recs, keys
}

// copyOfAttempt is one attempt of the Go client as a copy of the report.
func copyOfAttempt(t0 time.Time, a oncepay.Attempt) copyRecord {
	start := time.Now().Add(-a.Duration)
	rec := copyRecord{Path: fmt.Sprintf("oncepay client, attempt %d, key %s", a.N, a.Key), Via: "http", Route: "POST " + strings.SplitN(a.Path, "?", 2)[0],
		RequestID: a.RequestID, StartMS: ms(start.Sub(t0)), DurationMS: ms(a.Duration),
		Status: a.Status, Outcome: string(a.Outcome), Replayed: a.Replayed, Code: a.Code}
	if a.Err != nil {
		rec.Error = a.Err.Error()
	}
	var ref struct {
		OrderID flexID `json:"order_id"`
	}
	if a.Status < 300 && json.Unmarshal(a.Body, &ref) == nil {
		rec.Ref = string(ref.OrderID)
	}
	return rec
}

// distinct returns the distinct strings of ss, in order.
func distinct(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
