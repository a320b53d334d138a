package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The outbound incidents, I8 and I9: oncepay calling the payment channel. The channel is the
// simulator oncepay is configured with (the embedded one under make drill); the drill drives
// it as the buyer (POST /sim/trades/{out_trade_no}/pay) and as the network (PUT /sim/faults),
// and reads what the channel did (GET /sim/state, GET /sim/trades/{out_trade_no}). Those
// controls are not part of oncepay's contract: they stand for the world outside it.
//
// The simulator's faults are global: every call and notification of every scenario meets
// them. Each fault is therefore switched on only inside an exclusive hold of drill.simGate,
// for the few calls the scenario is about, and cleared ({}) before the hold is released, even
// when the scenario fails; a scenario that needs the channel to behave (opening a trade, a
// payment whose notification must arrive) holds simGate shared meanwhile.

// i8RefundAmount is what each I8 run asks to refund, in cents: under half of the 1999 order,
// so that a second refund of the same amount fits in the trade and the channel accepts it.
const i8RefundAmount = 500

// simFaults is the body of PUT /sim/faults.
type simFaults struct {
	DropNotifications float64 `json:"drop_notifications,omitempty"`
	TimeoutAfterApply float64 `json:"timeout_after_apply,omitempty"`
}

// simTrade is a trade as GET /sim/trades/{out_trade_no} shows it, with its notifications.
type simTrade struct {
	Trade struct {
		OutTradeNo string `json:"out_trade_no"`
		Status     string `json:"status"`
		Amount     int64  `json:"amount"`
	} `json:"trade"`
	Notifications []struct {
		Body     json.RawMessage `json:"body"`
		Attempts []struct {
			Dropped bool `json:"dropped"`
			Success bool `json:"success"`
		} `json:"attempts"`
	} `json:"notifications"`
}

// droppedBody returns the body of the trade's notification that the drop fault lost, or nil.
func (t simTrade) droppedBody() []byte {
	for _, n := range t.Notifications {
		for _, a := range n.Attempts {
			if a.Dropped {
				return n.Body
			}
		}
	}
	return nil
}

// simRefund is a refund as GET /sim/state lists it.
type simRefund struct {
	OutRefundNo string `json:"out_refund_no"`
	OutTradeNo  string `json:"out_trade_no"`
	Status      string `json:"status"`
	Amount      int64  `json:"amount"`
}

// tradeView is the answer of POST /v1/orders/{order_id}/payments.
type tradeView struct {
	TradeNo string `json:"trade_no"`
	PayURL  string `json:"pay_url"`
	Status  string `json:"status"`
}

// refundView is the contract's refund JSON, as far as the drill reads it.
type refundView struct {
	RefundID    flexID `json:"refund_id"`
	Status      string `json:"status"`
	Amount      int64  `json:"amount"`
	OutRefundNo string `json:"out_refund_no"`
}

// simCall is a call to the simulator's controls.
func (d *drill) simCall(method, path string, body any) call {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	d.simMu.Lock()
	base := d.simURL
	d.simMu.Unlock()
	return call{method: method, path: path, body: raw, base: base, requestID: d.requestID()}
}

// learnSim remembers the simulator's base URL from a trade's pay_url (the cashier page, which
// the embedded simulator serves under its own base URL), unless --sim gave it.
func (d *drill) learnSim(payURL string) error {
	d.simMu.Lock()
	defer d.simMu.Unlock()
	if d.simURL != "" {
		return nil
	}
	u, err := url.Parse(payURL)
	if err != nil || u.Host == "" || !strings.Contains(u.Path, "/sim/") {
		return fmt.Errorf("cannot find the channel simulator from pay_url %q: give its base URL with --sim", payURL)
	}
	d.simURL = u.Scheme + "://" + u.Host
	return nil
}

// setFaults switches the simulator's faults, recording the call as a copy.
func (d *drill) setFaults(ctx context.Context, t0 time.Time, label string, f simFaults, out *outcome) error {
	c := d.c.fireHTTP(ctx, t0, label, d.simCall(http.MethodPut, "/sim/faults", f), nil)
	out.copies = append(out.copies, c)
	if c.Error != "" || c.Status != http.StatusOK {
		return fmt.Errorf("PUT /sim/faults answered %s", answerSummary(c))
	}
	return nil
}

// clearFaults puts the simulator back to normal, whatever the scenario's context says.
func (d *drill) clearFaults(ctx context.Context, t0 time.Time, label string, out *outcome) {
	if err := d.setFaults(context.WithoutCancel(ctx), t0, label, simFaults{}, out); err != nil {
		out.notef("the simulator's faults could not be cleared: %v", err)
	}
}

// openAndPay makes an order of one unit on a new SKU, opens its channel trade (openTrade) and
// has the buyer pay it at the simulator while every notification is dropped (payDropped). It
// returns the channel's notification, which never reached oncepay.
func (d *drill) openAndPay(ctx context.Context, rt routes, tag string, t0 time.Time, out *outcome) (stock, order, []byte, error) {
	sku, o, err := d.openTrade(ctx, rt, tag, t0, out)
	if err != nil {
		return sku, o, nil, err
	}
	id := string(o.OrderID)
	pay, body, err := d.payDropped(ctx, t0, id, out)
	if err == nil && pay.Status != http.StatusOK {
		err = fmt.Errorf("POST /sim/trades/%s/pay answered %s, want 200", id, answerSummary(pay))
	}
	return sku, o, body, err
}

// openTrade makes an order of one unit on a new SKU and opens its channel trade through
// POST /v1/orders/{order_id}/payments, holding simGate shared: no fault may meet the call.
func (d *drill) openTrade(ctx context.Context, rt routes, tag string, t0 time.Time, out *outcome) (stock, order, error) {
	d.simGate.RLock()
	defer d.simGate.RUnlock()
	sku, o, err := d.orderOnNewSKU(ctx, rt, tag, 1)
	if err != nil {
		return sku, o, err
	}
	id := string(o.OrderID)
	var tv tradeView
	open := d.c.fireHTTP(ctx, t0, "open the channel trade", call{method: http.MethodPost, path: "/v1/orders/" + id + "/payments",
		bearer: d.cfg.UserKey, idemKey: d.key(rt, tag+"-pay"), requestID: d.requestID()}, &tv)
	out.copies = append(out.copies, open)
	if open.Status != http.StatusCreated {
		return sku, o, fmt.Errorf("POST /v1/orders/%s/payments answered %s, want 201", id, answerSummary(open))
	}
	return sku, o, d.learnSim(tv.PayURL)
}

// payDropped has the buyer pay order id's trade at the simulator while every notification is
// dropped, holding simGate alone from the fault to its clearing. It returns the buyer's
// answer and, when the channel took the payment, its notification, which never reached
// oncepay; a payment the channel refused (a closed trade, I12) is no error, and has none.
func (d *drill) payDropped(ctx context.Context, t0 time.Time, id string, out *outcome) (copyRecord, []byte, error) {
	d.simGate.Lock()
	defer d.simGate.Unlock()
	if err := d.setFaults(ctx, t0, "fault: drop_notifications=1", simFaults{DropNotifications: 1}, out); err != nil {
		return copyRecord{}, nil, err
	}
	defer d.clearFaults(ctx, t0, "drop fault cleared ({})", out)
	pay := d.c.fireHTTP(ctx, t0, "the buyer pays at the channel", d.simCall(http.MethodPost, "/sim/trades/"+url.PathEscape(id)+"/pay", nil), nil)
	out.copies = append(out.copies, pay)
	if pay.Error != "" || pay.Status != http.StatusOK {
		return pay, nil, nil
	}
	// The notification is sent, and dropped, at once; wait until the simulator shows it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		trade, err := d.simTradeOf(ctx, id)
		if err != nil {
			return pay, nil, err
		}
		if body := trade.droppedBody(); body != nil {
			return pay, body, nil
		}
		if time.Now().After(deadline) {
			return pay, nil, fmt.Errorf("the simulator shows no dropped notification for trade %s 5s after it was paid", id)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return pay, nil, err
		}
	}
}

// simTradeOf reads the simulator's view of trade outTradeNo.
func (d *drill) simTradeOf(ctx context.Context, outTradeNo string) (simTrade, error) {
	var t simTrade
	_, err := d.c.expect(ctx, d.simCall(http.MethodGet, "/sim/trades/"+url.PathEscape(outTradeNo), nil), http.StatusOK, &t)
	return t, err
}

// refundsAtChannel lists the simulator's refunds of trade outTradeNo.
func (d *drill) refundsAtChannel(ctx context.Context, outTradeNo string) ([]simRefund, error) {
	var st struct {
		Refunds []simRefund `json:"refunds"`
	}
	if _, err := d.c.expect(ctx, d.simCall(http.MethodGet, "/sim/state", nil), http.StatusOK, &st); err != nil {
		return nil, err
	}
	var out []simRefund
	for _, r := range st.Refunds {
		if r.OutTradeNo == outTradeNo {
			out = append(out, r)
		}
	}
	return out, nil
}

// awaitOrder polls order id until its status is want or within passes.
func (d *drill) awaitOrder(ctx context.Context, id, want string, within time.Duration) (order, error) {
	deadline := time.Now().Add(within)
	for {
		o, err := d.order(ctx, id)
		if err != nil || o.Status == want || time.Now().After(deadline) {
			return o, err
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return o, err
		}
	}
}

// i8PaidWithin is how long I8 waits for the channel's notification to pay its order, once
// answered: the payment is slowed by ONCEPAY_CHAOS_PAYMENT_DELAY (7 s under make drill).
const i8PaidWithin = 30 * time.Second

// refundTimeout is I8: a refund whose channel call times out although the channel applied it.
// The order is paid through the channel (the buyer pays at the simulator, and its
// notification, carried by the drill, pays it in oncepay); then, with timeout_after_apply at 1, the refund is asked for once. Every
// call the channel gets is applied and answered only after the caller gave up. oncepay commits
// the refund PENDING with its out_refund_no before the call, retries with that number and
// leaves it PENDING; resume-refunds, once the fault is cleared, calls again with the same
// number: the channel refunds once. The lab's refund takes the timeout for a failure and sends
// the refund again under a new number: the channel refunds twice.
func (d *drill) refundTimeout(ctx context.Context, rt routes) (out outcome, err error) {
	t0 := time.Now()
	sku, o, body, err := d.openAndPay(ctx, rt, "I8", t0, &out)
	if err != nil {
		return out, err
	}
	id := string(o.OrderID)
	// The drill carries the channel's notification itself, byte for byte: the simulator's own
	// client gives up after 5 s, and under make drill every payment takes 7 s
	// (ONCEPAY_CHAOS_PAYMENT_DELAY), so its attempt would be cut off and retried only minutes
	// later. Its notification was dropped for that reason.
	deliver := d.c.fireHTTP(ctx, t0, "the channel's notification (carried by the drill)", d.notifyCall(oncepayRoutes.paymentNotify, body), nil)
	out.copies = append(out.copies, deliver)
	paid, err := d.awaitOrder(ctx, id, "PAID", i8PaidWithin)
	if err != nil {
		return out, err
	}
	if paid.Status != "PAID" {
		return out, fmt.Errorf("order %s is %s after the channel's notification (answered %s); I8 needs a paid order", id, paid.Status, answerSummary(deliver))
	}

	// The fault window: every call to the channel is applied, and answered only after the
	// caller gave up.
	d.simGate.Lock()
	var created refundView
	var ask copyRecord
	err = d.setFaults(ctx, t0, "fault: timeout_after_apply=1", simFaults{TimeoutAfterApply: 1}, &out)
	if err == nil {
		body, _ := json.Marshal(map[string]any{"amount": i8RefundAmount, "reason": "drill I8"})
		cl := call{method: http.MethodPost, path: rt.refundOrder(id), bearer: d.cfg.UserKey, body: body, requestID: d.requestID()}
		label := "refund (its channel call times out after applying)"
		if rt.target == oncepayRoutes.target {
			cl.idemKey = d.key(rt, "I8-refund")
		} else {
			label = "naive refund (a new out_refund_no per timed-out call)"
		}
		ask = d.c.fireHTTP(ctx, t0, label, cl, &created)
		out.copies = append(out.copies, ask)
	}
	d.clearFaults(ctx, t0, "timeout fault cleared ({})", &out)
	d.simGate.Unlock()
	if err != nil {
		return out, err
	}

	var final refundView
	if rt.target == oncepayRoutes.target {
		if ask.Status != http.StatusCreated {
			return out, fmt.Errorf("POST %s answered %s, want 201 (the refund committed PENDING)", rt.refundOrder(id), answerSummary(ask))
		}
		final, err = d.resumeRefund(ctx, t0, string(created.RefundID), &out)
		if err != nil {
			return out, err
		}
	}
	refunds, err := d.refundsAtChannel(ctx, id)
	if err != nil {
		return out, err
	}
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	var sum int64
	var numbers []string
	for _, r := range refunds {
		sum += r.Amount
		numbers = append(numbers, r.OutRefundNo)
	}
	switch {
	case sum > i8RefundAmount:
		out.effectf("the channel refunded %d in %d refunds (%s) for one refund of %d asked (%s)", sum, len(refunds),
			strings.Join(numbers, ", "), i8RefundAmount, times(sum, i8RefundAmount))
	case sum < i8RefundAmount && rt.target == oncepayRoutes.target:
		out.effectf("the channel refunded %d of the %d asked", sum, i8RefundAmount)
	}
	if rt.target == oncepayRoutes.target {
		if len(refunds) == 1 && refunds[0].OutRefundNo != created.OutRefundNo {
			out.effectf("the channel's refund is %s, not the out_refund_no %s committed before the call", refunds[0].OutRefundNo, created.OutRefundNo)
		}
		if final.Status != "SUCCEEDED" {
			out.effectf("the refund is %s, want SUCCEEDED", final.Status)
		}
		if delta := after.since(sku); delta != (stockDelta{-1, 0, 1}) {
			out.effectf("stock %s after a partial refund, want available -1, reserved +0, sold +1", delta)
		}
	}
	if sum == i8RefundAmount && rt.target == labRoutes.target {
		out.notef("the channel refunded %d once: the lab's calls were answered in time, so no timeout made it try a new number", sum)
	}
	out.expected = fmt.Sprintf("the channel refunds %d once, under the out_refund_no committed before the call; the refund ends SUCCEEDED", i8RefundAmount)
	out.observed = fmt.Sprintf("the channel refunded %d in %d %s (%s)", sum, len(refunds), plural(len(refunds), "refund", "refunds"), orNone(strings.Join(numbers, ", ")))
	if rt.target == oncepayRoutes.target {
		out.observed += fmt.Sprintf("; refund %s %s; answered %s in %s", created.OutRefundNo, final.Status, answerSummary(ask), fmtMS(ask.DurationMS))
	}
	out.held = fmt.Sprintf("the call timed out after the channel applied it; refunded %d once under %s, SUCCEEDED", sum, created.OutRefundNo)
	if rt.target == labRoutes.target {
		out.held = fmt.Sprintf("the channel refunded %d in %d %s", sum, len(refunds), plural(len(refunds), "refund", "refunds"))
	}
	return out, nil
}

// i8SettleWithin bounds how long I8 waits for its refund to end once the fault is cleared.
const i8SettleWithin = 20 * time.Second

// resumeRefund runs resume-refunds, then polls the refund until it ends, running the job
// again every second or so: the refund is PENDING after the timed-out call, or already SUCCEEDED if
// the channel's refund notification overtook the lost answer.
func (d *drill) resumeRefund(ctx context.Context, t0 time.Time, refundID string, out *outcome) (refundView, error) {
	var r refundView
	deadline := time.Now().Add(i8SettleWithin)
	for i := 0; ; i++ {
		if i%10 == 0 {
			label := "resume-refunds"
			if i > 0 {
				label = "resume-refunds again"
			}
			job := d.c.fireHTTP(ctx, t0, label, call{method: http.MethodPost, path: "/v1/admin/jobs/resume-refunds/run",
				bearer: d.cfg.AdminKey, requestID: d.requestID()}, nil)
			out.copies = append(out.copies, job)
			if job.Status != http.StatusOK {
				return r, fmt.Errorf("POST /v1/admin/jobs/resume-refunds/run answered %s, want 200", answerSummary(job))
			}
		}
		if _, err := d.c.expect(ctx, d.get("/v1/refunds/"+refundID, d.cfg.UserKey), http.StatusOK, &r); err != nil {
			return r, err
		}
		if r.Status == "SUCCEEDED" || r.Status == "FAILED" || time.Now().After(deadline) {
			return r, nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return r, err
		}
	}
}

// lostNotification is I9: the buyer pays at the channel while every notification is dropped,
// and the order expires. oncepay's close job asks the channel before it closes: the order
// ends PAID. The lab's close looks only at oncepay's own data and closes it: the order is
// CLOSED while the channel holds the money.
func (d *drill) lostNotification(ctx context.Context, rt routes) (out outcome, err error) {
	if rt.closeExpired == nil && d.i5xOrdered != nil {
		select { // see drill.i5xOrdered
		case <-d.i5xOrdered:
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	t0 := time.Now()
	sku, o, _, err := d.openAndPay(ctx, rt, "I9", t0, &out)
	if err != nil {
		return out, err
	}
	id := string(o.OrderID)
	ttl, err := o.ttl()
	if err != nil {
		return out, err
	}
	if ttl > maxDrillTTL {
		out.skipped = fmt.Sprintf("ORDER_TTL too long: %s; start the server with ONCEPAY_ORDER_TTL=%s or less to run I9", ttl, maxDrillTTL)
		return out, nil
	}
	created, _ := time.Parse(time.RFC3339Nano, o.CreatedAt)
	if err := sleep(ctx, time.Until(created.Add(ttl+time.Second))); err != nil {
		return out, err
	}
	expired, err := d.order(ctx, id)
	if err != nil {
		return out, err
	}
	if expired.Status != "PENDING_PAYMENT" {
		out.notef("the order was already %s when it expired, although its notification was dropped", expired.Status)
	}
	var job struct {
		Closed int64 `json:"closed"`
	}
	var closing copyRecord
	if rt.closeExpired != nil {
		closing = d.c.fireHTTP(ctx, t0, "naive close (the channel is not asked)", call{method: http.MethodPost, path: rt.closeExpired(id),
			bearer: d.cfg.AdminKey, requestID: d.requestID()}, nil)
	} else {
		wait, _, err := d.closeJob(ctx, t0)
		if err != nil {
			return out, err
		}
		if closing, job.Closed, err = wait(); err != nil {
			return out, err
		}
	}
	out.copies = append(out.copies, closing)
	if closing.Status != http.StatusOK {
		return out, fmt.Errorf("%s answered %s, want 200", closing.Route, answerSummary(closing))
	}
	final, err := d.order(ctx, id)
	if err != nil {
		return out, err
	}
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	trade, err := d.simTradeOf(ctx, id)
	if err != nil {
		return out, err
	}
	delta := after.since(sku)
	if trade.Trade.Status == "SUCCESS" && final.Status != "PAID" {
		out.effectf("the order is %s while its trade is SUCCESS at the channel: the buyer's %d is stuck there", final.Status, trade.Trade.Amount)
	}
	if trade.Trade.Status != "SUCCESS" {
		out.effectf("the channel's trade is %s, not SUCCESS", trade.Trade.Status)
	}
	if final.Status == "PAID" && delta != (stockDelta{-1, 0, 1}) {
		out.effectf("stock %s, want available -1, reserved +0, sold +1", delta)
	}
	out.expected = "the paid order ends PAID (the close asks the channel first); stock available -1, reserved +0, sold +1"
	out.observed = fmt.Sprintf("order %s, trade %s at the channel; stock %s", final.Status, trade.Trade.Status, delta)
	out.held = fmt.Sprintf("every notification dropped; the close job asked the channel and the expired order ended PAID (the job closed %d orders)", job.Closed)
	return out, nil
}
