package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// I12 and I13: what a request that is refused, or a copy that outlived its dedup record, does
// to the money. Both go through the channel simulator like I8: the order's trade is opened
// through POST /v1/orders/{order_id}/payments, the buyer pays at /sim/trades/{out_trade_no}/pay
// while the notification is dropped, and the drill carries the channel's notification itself,
// byte for byte (see refundTimeout for why). What the channel did is read at /sim/.

// sideEffectBeforeKey is I12: a cancel whose Idempotency-Key is refused must change nothing —
// at the channel neither. The order's trade is opened; then another order of the same user is
// cancelled with key K (so that K is stored), and this order's cancel is sent with the same K,
// which both targets refuse 422 idempotency_key_reused (the fingerprint names the path). Then
// the buyer pays at the channel. oncepay closes the trade only in the guard's Before phase,
// after the key is claimed: the trade still pays and the order ends PAID. The lab's cancel
// closes the trade at the channel before it asks about the key: the trade is CLOSED, the
// buyer's payment is refused, and the order stays PENDING_PAYMENT for good.
func (d *drill) sideEffectBeforeKey(ctx context.Context, rt routes) (out outcome, err error) {
	t0 := time.Now()
	sku, o, err := d.openTrade(ctx, rt, "I12", t0, &out)
	if err != nil {
		return out, err
	}
	id := string(o.OrderID)
	key := d.key(rt, "I12-cancel")
	cancel := func(label, orderID string) copyRecord {
		return d.c.fireHTTP(ctx, t0, label, call{method: http.MethodPost, path: rt.cancelOrder(orderID), bearer: d.cfg.UserKey,
			idemKey: key, requestID: d.requestID()}, nil)
	}

	// A cancel may call the channel (the lab's always does, first): no fault may meet it.
	d.simGate.RLock()
	var other order
	_, err = d.c.expect(ctx, call{method: http.MethodPost, path: oncepayRoutes.orders, bearer: d.cfg.UserKey,
		idemKey: d.key(rt, "I12-other"), body: orderBody(sku.SKU, 1), requestID: d.requestID()}, http.StatusCreated, &other)
	var first, reused copyRecord
	if err == nil {
		// From the key's first use to its reuse, no purge: without K's record the reuse
		// would be a first use, and rightly cancel this order.
		d.purgeGate.RLock()
		first = cancel("cancel of another order (the key's first use)", string(other.OrderID))
		out.copies = append(out.copies, first)
		if first.Status == http.StatusOK {
			reused = cancel("cancel of this order, the same key", id)
			out.copies = append(out.copies, reused)
		}
		d.purgeGate.RUnlock()
	}
	d.simGate.RUnlock()
	if err != nil {
		return out, err
	}
	if first.Status != http.StatusOK {
		return out, fmt.Errorf("%s answered %s, want 200: the key's first use must be stored for its reuse to be refused", first.Route, answerSummary(first))
	}

	seen := cancelSeen{id: id, reused: reused}
	afterCancel, err := d.order(ctx, id)
	if err != nil {
		return out, err
	}
	seen.afterCancel = afterCancel.Status
	trade, err := d.simTradeOf(ctx, id)
	if err != nil {
		return out, err
	}
	seen.trade = trade.Trade.Status
	seen.pay, seen.notification, err = d.payDropped(ctx, t0, id, &out)
	if err != nil {
		return out, err
	}
	seen.final = afterCancel.Status
	if seen.notification != nil {
		deliver := d.c.fireHTTP(ctx, t0, "the channel's notification (carried by the drill)", d.notifyCall(oncepayRoutes.paymentNotify, seen.notification), nil)
		out.copies = append(out.copies, deliver)
		final, err := d.awaitOrder(ctx, id, "PAID", i8PaidWithin)
		if err != nil {
			return out, err
		}
		seen.final, seen.delivered = final.Status, deliver
	}
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	seen.stock = after.since(sku)
	checkRefusedCancel(&out.findings, seen)
	out.expected = "the cancel under another request's key is refused (422 idempotency_key_reused) and changes nothing: " +
		"the trade still WAIT_BUYER_PAY at the channel, the buyer pays, the order ends PAID; stock available -1, reserved +0, sold +1"
	out.observed = fmt.Sprintf("the reused key answered %s; then the trade was %s at the channel and the order %s; the buyer's payment answered %s; the order ends %s; stock %s",
		answerSummary(reused), seen.trade, seen.afterCancel, answerSummary(seen.pay), seen.final, seen.stock)
	out.held = fmt.Sprintf("the cancel under another order's key was refused (%s) before it touched the channel: the trade stayed payable, the buyer paid, the order ended PAID",
		answerSummary(reused))
	return out, nil
}

// cancelSeen is what I12 saw of order id after its cancel under a reused key.
type cancelSeen struct {
	id string
	// reused is the answer to the cancel under the reused key.
	reused copyRecord
	// afterCancel and trade are the order's status and its trade's at the channel right after.
	afterCancel, trade string
	// pay is the buyer's POST /sim/trades/{out_trade_no}/pay, and notification the channel's
	// report of the payment when it took it; delivered is that report carried to oncepay.
	pay, delivered copyRecord
	notification   []byte
	// final is the order's status once the payment was carried (or the pay refused), and stock
	// how the SKU moved since before the two orders (the other one cancelled).
	final string
	stock stockDelta
}

// checkRefusedCancel judges I12: a cancel that its key refused left no trace, at the channel
// neither: the trade still pays, and the order ends PAID through the channel's report.
func checkRefusedCancel(f *findings, s cancelSeen) {
	if s.reused.Status != http.StatusUnprocessableEntity || s.reused.Code != "idempotency_key_reused" {
		f.answerf("the cancel under another request's key answered %s, want 422 idempotency_key_reused", answerSummary(s.reused))
	}
	if s.afterCancel != "PENDING_PAYMENT" {
		f.effectf("the refused cancel moved the order to %s", s.afterCancel)
	}
	if s.trade != "WAIT_BUYER_PAY" {
		f.effectf("the refused cancel (%s) had already closed the order's trade at the channel: %s", answerSummary(s.reused), s.trade)
	}
	switch {
	case s.pay.Error != "" || s.pay.Status != http.StatusOK:
		f.effectf("the buyer cannot pay: POST /sim/trades/%s/pay answered %s; the order stays %s and can never be paid",
			s.id, answerSummary(s.pay), s.final)
	case s.final != "PAID":
		f.effectf("the buyer paid at the channel and its report (answered %s) left the order %s, not PAID", answerSummary(s.delivered), s.final)
	case s.stock != (stockDelta{-1, 0, 1}):
		f.effectf("stock %s, want available -1, reserved +0, sold +1", s.stock)
	}
}

// i13RefundedWithin is how long I13 waits for its full refund to end the order REFUNDED: the
// simulator settles a refund a second after taking it and reports it at once.
const i13RefundedWithin = 10 * time.Second

// purgedFence is I13: the report of the trade that paid an order, sent again after the order
// was refunded in full and every dedup record purged, must change nothing. The order is paid
// through the channel (its report carried to the target's payment route), refunded in full
// through POST /v1/orders/{order_id}/refunds, every dedup record is purged, and the same
// report — the body the channel sent, signed anew — goes to the target again. oncepay knows
// the trade that paid the order whatever became of the order since (a duplicate: 200
// state_rejected): no anomaly, no refund, still REFUNDED. The lab's handler, fenced by its
// purged dedup row alone, takes it for a payment after close and asks the channel for a
// second full refund under a new number, which only the channel's cap refuses.
func (d *drill) purgedFence(ctx context.Context, rt routes) (out outcome, err error) {
	t0 := time.Now()
	sku, o, body, err := d.openAndPay(ctx, rt, "I13", t0, &out)
	if err != nil {
		return out, err
	}
	id := string(o.OrderID)
	var report notificationBody
	if err := json.Unmarshal(body, &report); err != nil {
		return out, fmt.Errorf("the channel's notification of trade %s is not JSON: %w", id, err)
	}
	deliver := d.c.fireHTTP(ctx, t0, "the channel's notification (carried by the drill)", d.notifyCall(rt.purgedNotify, body), nil)
	out.copies = append(out.copies, deliver)
	paid, err := d.awaitOrder(ctx, id, "PAID", i8PaidWithin)
	if err != nil {
		return out, err
	}
	if paid.Status != "PAID" {
		return out, fmt.Errorf("order %s is %s after the channel's notification (answered %s); I13 needs a paid order", id, paid.Status, answerSummary(deliver))
	}
	if err := d.refundInFull(ctx, t0, rt, paid, &out); err != nil {
		return out, err
	}
	purged, err := d.purgeDedupRecords(ctx, &out)
	if err != nil {
		return out, err
	}

	seen := redeliverySeen{layered: rt.target == oncepayRoutes.target}
	if seen.refundsBefore, err = d.refundsAtChannel(ctx, id); err != nil {
		return out, err
	}
	if seen.anomaliesBefore, err = d.anomaliesOf(ctx, id, report.TradeNo); err != nil {
		return out, err
	}
	before, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	// The lab's replica calls the channel before it answers: no fault may meet the call.
	// oncepay's report path calls no channel, and its slowed payment path would hold simGate
	// for the whole chaos delay.
	if rt.target == labRoutes.target {
		d.simGate.RLock()
	}
	var answer struct {
		RefundAsked *askedRefund `json:"refund_asked"`
	}
	seen.answer = d.c.fireHTTP(ctx, t0, "the order's own report, redelivered after the purge", d.notifyCall(rt.purgedNotify, body), &answer)
	if rt.target == labRoutes.target {
		d.simGate.RUnlock()
	}
	out.copies = append(out.copies, seen.answer)
	seen.asked = answer.RefundAsked
	final, err := d.order(ctx, id)
	if err != nil {
		return out, err
	}
	seen.status = final.Status
	if seen.refundsAfter, err = d.refundsAtChannel(ctx, id); err != nil {
		return out, err
	}
	if seen.anomaliesAfter, err = d.anomaliesOf(ctx, id, report.TradeNo); err != nil {
		return out, err
	}
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	seen.stock = after.since(before)
	checkPurgedRedelivery(&out.findings, seen)
	out.expected = fmt.Sprintf("the order's own report changes nothing: 200 with Idempotency-Outcome: state_rejected; no second refund asked of the channel "+
		"(it keeps 1 refund of %d); no new anomaly; the order stays REFUNDED, its stock unchanged", o.Amount)
	out.observed = fmt.Sprintf("the redelivery answered %s in %s; a second refund asked: %s; the channel shows %s of the trade; new anomalies: %s; order %s; stock %s",
		answerSummary(seen.answer), fmtMS(seen.answer.DurationMS), seen.asked.text(), refundList(seen.refundsAfter),
		orNone(strings.Join(seen.newAnomalies(), ", ")), seen.status, seen.stock)
	out.held = fmt.Sprintf("after purging %d dedup rows, the refunded order's own report changed nothing (%s): no anomaly, no second refund, still REFUNDED",
		purged, answerSummary(seen.answer))
	return out, nil
}

// refundInFull refunds the paid order o in full through oncepay's POST
// /v1/orders/{order_id}/refunds and waits until the order is REFUNDED, which the channel's
// refund notification does; if it has not within i13RefundedWithin, it runs resume-refunds,
// which asks the channel, and waits once more. It holds simGate shared throughout: the
// refund's call and its notification must meet no fault.
func (d *drill) refundInFull(ctx context.Context, t0 time.Time, rt routes, o order, out *outcome) error {
	d.simGate.RLock()
	defer d.simGate.RUnlock()
	id := string(o.OrderID)
	body, _ := json.Marshal(map[string]any{"amount": o.Amount, "reason": "drill I13"})
	ask := d.c.fireHTTP(ctx, t0, "refund in full", call{method: http.MethodPost, path: oncepayRoutes.refundOrder(id), bearer: d.cfg.UserKey,
		idemKey: d.key(rt, "I13-refund"), body: body, requestID: d.requestID()}, nil)
	out.copies = append(out.copies, ask)
	if ask.Status != http.StatusCreated {
		return fmt.Errorf("POST %s answered %s, want 201", oncepayRoutes.refundOrder(id), answerSummary(ask))
	}
	refunded, err := d.awaitOrder(ctx, id, "REFUNDED", i13RefundedWithin)
	if err == nil && refunded.Status != "REFUNDED" {
		job := d.c.fireHTTP(ctx, t0, "resume-refunds", call{method: http.MethodPost, path: "/v1/admin/jobs/resume-refunds/run",
			bearer: d.cfg.AdminKey, requestID: d.requestID()}, nil)
		out.copies = append(out.copies, job)
		refunded, err = d.awaitOrder(ctx, id, "REFUNDED", i13RefundedWithin)
	}
	switch {
	case err != nil:
		return err
	case refunded.Status != "REFUNDED":
		return fmt.Errorf("order %s is %s %s after its full refund was asked; I13 needs a refunded order", id, refunded.Status, 2*i13RefundedWithin)
	}
	return nil
}

// askedRefund is what the lab's replica says it asked of the channel when it took a report
// for a payment to give back (refund_asked): the number, the amount and the channel's answer.
// oncepay's answer has none.
type askedRefund struct {
	OutRefundNo string `json:"out_refund_no"`
	Amount      int64  `json:"amount"`
	Status      int    `json:"status"`
	Code        string `json:"code"`
	Error       string `json:"error"`
}

// text says what was asked and what the channel answered, e.g.
// "LAB-RF-1 of 1999, refused 409 refund_exceeds"; "none" when nothing was asked.
func (a *askedRefund) text() string {
	switch {
	case a == nil:
		return "none"
	case a.Error != "":
		return fmt.Sprintf("%s of %d, no answer (%s)", a.OutRefundNo, a.Amount, a.Error)
	case a.Status == http.StatusOK:
		return fmt.Sprintf("%s of %d, accepted", a.OutRefundNo, a.Amount)
	}
	return fmt.Sprintf("%s of %d, refused %s", a.OutRefundNo, a.Amount, strings.TrimSpace(fmt.Sprintf("%d %s", a.Status, a.Code)))
}

// redeliverySeen is what I13 saw around the redelivery of the order's own report.
type redeliverySeen struct {
	// answer is the target's answer, and asked the refund it said it asked of the channel;
	// layered says the target names its idempotency layer (oncepay; the lab has none).
	answer  copyRecord
	asked   *askedRefund
	layered bool
	// The channel's refunds of the trade and the order's anomalies, before and after.
	refundsBefore, refundsAfter     []simRefund
	anomaliesBefore, anomaliesAfter []string
	// status is the order's status after, and stock how its SKU moved.
	status string
	stock  stockDelta
}

// newAnomalies lists the kinds recorded for the order by the redelivery (anomaliesOf lists
// them newest first).
func (s redeliverySeen) newAnomalies() []string {
	if n := len(s.anomaliesAfter) - len(s.anomaliesBefore); n > 0 {
		return s.anomaliesAfter[:n]
	}
	return nil
}

// checkPurgedRedelivery judges I13: the refunded order's own report, redelivered once its
// dedup record was purged, must ask the channel for nothing and record nothing.
func checkPurgedRedelivery(f *findings, s redeliverySeen) {
	switch {
	case s.answer.Error != "" || s.answer.Status != http.StatusOK:
		f.answerf("the redelivered report answered %s, want 200 so that the channel stops", answerSummary(s.answer))
	case s.layered && s.answer.Outcome != "state_rejected":
		f.answerf("the redelivered report answered %s, want Idempotency-Outcome: state_rejected (the payment the order already shows)", answerSummary(s.answer))
	}
	if s.asked != nil {
		stopped := ""
		if s.asked.Code == "refund_exceeds" {
			stopped = "; only the channel's cap refused it"
		}
		f.effectf("the redelivered report was taken for a payment after close: a second refund (%s) was asked of the channel for an order already refunded in full%s",
			s.asked.text(), stopped)
	}
	if len(s.refundsAfter) > len(s.refundsBefore) {
		f.effectf("the channel shows %s of the trade after the redelivery, %s before", refundList(s.refundsAfter), refundList(s.refundsBefore))
	}
	if kinds := s.newAnomalies(); len(kinds) > 0 {
		f.effectf("the redelivery recorded %s for the order: resume-refunds would refund its payment a second time", strings.Join(kinds, ", "))
	}
	if s.status != "REFUNDED" {
		f.effectf("the redelivery moved the refunded order to %s", s.status)
	}
	if s.stock != (stockDelta{}) {
		f.effectf("the redelivery moved the stock: %s", s.stock)
	}
}

// refundList prints a trade's refunds at the channel, e.g. "1 refund (RF1 1999)".
func refundList(refunds []simRefund) string {
	parts := make([]string, len(refunds))
	for i, r := range refunds {
		parts[i] = fmt.Sprintf("%s %d", r.OutRefundNo, r.Amount)
	}
	s := fmt.Sprintf("%d %s", len(refunds), plural(len(refunds), "refund", "refunds"))
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}
