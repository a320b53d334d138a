package drill

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// routes are the write paths a scenario drives: the step under test goes to oncepay's route or
// to its naive lab replica. Reads (orders, stock, balance, anomalies) always go through /v1,
// because the lab replicas act on the same data and the same reads must see their damage.
type routes struct {
	// target is "oncepay" or "lab", as printed in the verdict table.
	target         string
	orders         string
	paymentNotify  string
	rechargeNotify string
	// closeOrder is the path that closes one order unconditionally; nil for oncepay, whose
	// only close is the job with its state precondition (I5).
	closeOrder func(orderID string) string
	// deliveryNotify is where I1's copy that came by entry path (callback, gateway, mq)
	// with that path's own delivery id goes: one route for every path on oncepay, whose key
	// is the notification's channel + trade_no; the lab's replica keys each path on its own id.
	deliveryNotify func(path, deliveryID string) string
	// kafka says the target consumes the payment.notifications topic; the lab does not, so
	// its runs send the Kafka path's copies over HTTP.
	kafka bool
	// redeliveryNotify is the payment route I6 pays through and redelivers to after the purge.
	redeliveryNotify string
	// formOrders is the order form's submit route (I7), and formTokens whether the form is
	// given a one-time token first.
	formOrders string
	formTokens bool
	// flashOrders is where the flash sale's buyers order.
	flashOrders string
	// pausedNotify is I10's payment route, which takes ?pause=: the holder stops that long
	// after taking its lock. Both targets' routes are under /lab/, because only the lab lets
	// a caller pause a lock holder: oncepay's is its own guard and order service with a lease
	// nothing renews; the lab's is the naive lock and unconditional write.
	pausedNotify string
	// failoverNotify is I15's payment route, which takes ?pause=: the holder loses its lease
	// to a modelled Redis failover right after taking it, then works that long. Both targets'
	// routes are under /lab/, like I10's: oncepay's is its own guard and order service, the
	// lab's the naive lock and unconditional write.
	failoverNotify string
	// refundOrder is where I8 asks for a refund of an order: oncepay's POST
	// /v1/orders/{order_id}/refunds, or the lab's refund that retries a timed-out call under a
	// new number.
	refundOrder func(orderID string) string
	// closeExpired closes one expired order without asking the channel (the lab's I9); nil
	// for oncepay, whose close is the job that asks first.
	closeExpired func(orderID string) string
	// cancelOrder is where I12 cancels an order with an Idempotency-Key: oncepay's POST
	// /v1/orders/{order_id}/cancel, which closes the trade at the channel only once the guard
	// has claimed the key, or the lab's cancel, which closes it before it asks about the key.
	cancelOrder func(orderID string) string
	// purgedNotify is I13's payment route: the order is paid through it, and the order's own
	// report is redelivered to it after the purge of every dedup record. oncepay's is
	// /v1/payments/notify; the lab's is fenced by its dedup row alone and refunds what it
	// cannot apply.
	purgedNotify string
	// announceOrders is where I17 places an order that rolls back for lack of stock: oncepay's
	// POST /v1/orders, whose order.created is written in the transaction and delivered only
	// after the commit, or the lab's, which POSTs it to the webhook endpoints before.
	announceOrders string
	// gatewayOrders is where I11's one POST goes through the gateway: oncepay's POST /v1/orders
	// with an Idempotency-Key, or the lab's order form, which keeps no key (I7's replica).
	gatewayOrders string
}

// oncepayRoutes are the contract's routes.
var oncepayRoutes = routes{
	target:           "oncepay",
	orders:           "/v1/orders",
	paymentNotify:    "/v1/payments/notify",
	rechargeNotify:   "/v1/recharges/notify",
	deliveryNotify:   func(string, string) string { return "/v1/payments/notify" },
	kafka:            true,
	redeliveryNotify: "/v1/payments/notify",
	formOrders:       "/v1/orders",
	formTokens:       true,
	flashOrders:      "/v1/orders",
	pausedNotify:     "/lab/guarded/payments/notify-after-pause",
	failoverNotify:   "/lab/guarded/payments/notify-after-failover",
	refundOrder:      func(id string) string { return "/v1/orders/" + id + "/refunds" },
	cancelOrder:      func(id string) string { return "/v1/orders/" + id + "/cancel" },
	purgedNotify:     "/v1/payments/notify",
	announceOrders:   "/v1/orders",
	gatewayOrders:    "/v1/orders",
}

// labProbePath must answer non-404 (an index of the lab, say) when the server runs with
// ONCEPAY_LAB=true; --lab=auto runs the lab scenarios only then.
const labProbePath = "/lab/"

// labRoutes are the naive replicas of the articles' bugs, mounted under /lab/ with
// ONCEPAY_LAB=true. They are defined here, in one place, from the drill's side; the server's
// lab must serve them as follows for the lab rows to read REPRODUCED:
//
//   - POST /lab/recharges/notify: the body and X-Signature of /v1/recharges/notify; reads the
//     recharge, sees PENDING, then marks it and credits the balance (check-then-act, I2). The
//     lab run credits the second user (--other-user-key), so that it can run beside oncepay's,
//     which judges the first user's balance.
//   - POST /lab/orders: the header and body of /v1/orders; reserves stock and creates the
//     order first, then inserts the dedup row outside that transaction (I3).
//   - POST /lab/payments/notify: the body and X-Signature of /v1/payments/notify; a Redis
//     lock with a fixed 5 s TTL and no watchdog, a copy that finds it held answers 409, and
//     8 s of work between its check and its update (the article's; longer when
//     ONCEPAY_CHAOS_PAYMENT_DELAY is), so the copy at +6 s (i4Offsets) passes the check
//     too and pays again: stock confirmed twice or paid_at stamped twice (I4).
//   - POST /lab/orders/{order_id}/close: admin bearer; sets CLOSED with no precondition (I5).
//     The lab run of I5 pays its order first through POST /lab/payments/notify, one copy.
//   - POST /lab/payments/notify-per-path?path=…&delivery_id=…: a signed notification; each
//     entry path deduplicates on its own delivery id, then sets PAYING, confirms the stock
//     and, after 400 ms, sets PAID, all unconditionally: three paths confirm three times and
//     the late copy moves PAID back to PAYING (I1).
//   - POST /lab/payments/notify-unconditional: a signed notification; a dedup row keyed by
//     channel + trade_no that the purge job removes, then PAID and a stock confirm with no
//     precondition: the redelivery after the purge pays again (I6).
//   - POST /lab/orders/submit: the body of /v1/orders; no token, an order per submit (I7).
//   - POST /lab/orders/check-then-act: the body of /v1/orders; reads available, then
//     subtracts with no WHERE precondition: concurrent buyers oversell (flash sale).
//   - POST /lab/payments/notify-after-pause?pause=…: a signed notification; a 1 s lease that
//     nothing renews, a check, the pause, then an unconditional payment (I10).
//   - POST /lab/guarded/payments/notify-after-pause?pause=…: the same pause and lease around
//     oncepay's own guard and order service, which the oncepay row of I10 drives.
//   - POST /lab/payments/notify-after-failover?pause=…: a signed notification; the I4 lock,
//     a check, the lease lost to a modelled Redis failover (its key deleted), the pause, then
//     an unconditional payment: a copy during the pause pays too (I15).
//   - POST /lab/guarded/payments/notify-after-failover?pause=…: the same lost lease and pause
//     around oncepay's own guard and order service, which the oncepay row of I15 drives.
//   - POST /lab/orders/{order_id}/refunds {"amount"}: the user's bearer; calls the channel's
//     refund with a 1 s timeout and, when it times out, again under a NEW out_refund_no
//     (I8): with timeout_after_apply the channel applies both.
//   - POST /lab/orders/{order_id}/close-expired: admin bearer; closes the order if it is
//     PENDING_PAYMENT and expired, returning its stock, without asking the channel (I9).
//   - POST /lab/orders/{order_id}/cancel: the user's bearer and an Idempotency-Key; closes the
//     order's trade at the channel FIRST, then runs oncepay's own idempotency check (the same
//     rules: the key reused on another order's cancel is 422 idempotency_key_reused) and the
//     cancel: the refused cancel has already closed the trade (I12).
//   - POST /lab/payments/notify-purged: the body and X-Signature of /v1/payments/notify; a
//     dedup row keyed by channel + trade_no (which the purge job removes) in front of the
//     conditional payment; a report for an order that is not PENDING_PAYMENT is taken for a
//     payment after close and refunded at once, in full, under a NEW out_refund_no, and the
//     answer (200 success) says what was asked of the channel in refund_asked (I13).
//   - POST /lab/orders/announce-first: the header and body of /v1/orders; POSTs the order's
//     order.created, signed, to every webhook endpoint subscribed to it from inside the
//     transaction, then reserves the stock with its precondition: short stock rolls the order
//     back after its event was out (I17).
//
// I16 needs no replica of oncepay: its lab run is the merchant's naive receiver, which the
// drill plays itself.
//   - POST /lab/orders/lose-first-answer?run=…: the header and body of /v1/orders, forwarded to
//     oncepay's own route; the first answer of each run is held until the client gives up, then
//     dropped (I18). Both targets order through it: the lab's run with the incident's client,
//     which retries under a new key, oncepay's with the Go client (package client).
//
// The lab writes the same orders, stock and balances that /v1 reads.
var labRoutes = routes{
	target:         "lab",
	orders:         "/lab/orders",
	paymentNotify:  "/lab/payments/notify",
	rechargeNotify: "/lab/recharges/notify",
	closeOrder:     func(id string) string { return "/lab/orders/" + id + "/close" },
	deliveryNotify: func(path, id string) string {
		return "/lab/payments/notify-per-path?path=" + url.QueryEscape(path) + "&delivery_id=" + url.QueryEscape(id)
	},
	redeliveryNotify: "/lab/payments/notify-unconditional",
	formOrders:       "/lab/orders/submit",
	flashOrders:      "/lab/orders/check-then-act",
	pausedNotify:     "/lab/payments/notify-after-pause",
	failoverNotify:   "/lab/payments/notify-after-failover",
	refundOrder:      func(id string) string { return "/lab/orders/" + id + "/refunds" },
	closeExpired:     func(id string) string { return "/lab/orders/" + id + "/close-expired" },
	cancelOrder:      func(id string) string { return "/lab/orders/" + id + "/cancel" },
	purgedNotify:     "/lab/payments/notify-purged",
	announceOrders:   "/lab/orders/announce-first",
	gatewayOrders:    "/lab/orders/submit",
}

// scenario is one drill. run fires the copies and judges the effect; lab says whether the
// same run also goes against the lab replica, where the incident is expected to reproduce.
type scenario struct {
	id   string
	name string
	lab  bool
	// closeJob says whether and how the oncepay run calls the close job (see closeMode); the
	// lab run closes its one order by id instead.
	closeJob closeMode
	// purgeSensitive says the run's duplicates of a create are answered from the first one's
	// stored result: I6's and I13's purges of every dedup row must not land in the middle of
	// it (a duplicate one-time token whose row is gone is answered token_invalid, I7).
	purgeSensitive bool
	// pays says the oncepay run has oncepay apply a payment, which ONCEPAY_CHAOS_PAYMENT_DELAY
	// slows inside its database transaction (see config.Payments). No lab run does: the lab's
	// payment replica sleeps outside any transaction.
	pays bool
	run  func(d *drill, ctx context.Context, rt routes) (outcome, error)
}

// closeMode is whether a run calls POST /v1/admin/jobs/close-expired-orders/run. The job closes
// every expired unpaid order on the server, other scenarios' too, even while their payment is
// on its way: orders expire after ONCEPAY_ORDER_TTL=3s and payments take
// ONCEPAY_CHAOS_PAYMENT_DELAY=7s in make drill.
type closeMode int

const (
	// noCloseJob: the run never calls the close job.
	noCloseJob closeMode = iota
	// closeAtTheEnd: the run starts with the others and, once its own order is ready (paid, or
	// expired unpaid), asks for the close job, which is called once for every such run after
	// all the others have finished (drill.closeJob).
	closeAtTheEnd
)

// closes returns how the run of s against rt calls the close job.
func (s scenario) closes(rt routes) closeMode {
	if rt.closeOrder != nil {
		return noCloseJob
	}
	return s.closeJob
}

// paying reports whether the run of s against rt has oncepay apply a slowed payment.
func (s scenario) paying(rt routes) bool { return s.pays && rt.target == oncepayRoutes.target }

// catalog lists the scenarios in the order the report prints them. I5 has two halves with the
// same id, so --only I5 selects both.
var catalog = []scenario{
	{id: "I1", name: "triple delivery", lab: true, pays: true, run: (*drill).tripleDelivery},
	{id: "I2", name: "concurrent recharge callbacks", lab: true, run: (*drill).rechargeCallbacks},
	{id: "I3", name: "same key, concurrent creates", lab: true, purgeSensitive: true, run: (*drill).sameKeyOrders},
	{id: "I4", name: "lock expiry under a slow payment", lab: true, pays: true, run: (*drill).slowPayment},
	{id: "I5", name: "late close of a paid order", lab: true, closeJob: closeAtTheEnd, pays: true, run: (*drill).lateClose},
	{id: "I5", name: payAfterCloseName, closeJob: closeAtTheEnd, pays: true, run: (*drill).payAfterClose},
	{id: "I6", name: "purge before redelivery", lab: true, pays: true, run: (*drill).purgeThenRedeliver},
	{id: "I7", name: "double click", lab: true, purgeSensitive: true, run: (*drill).doubleClick},
	{id: "flash-sale", name: "flash sale", lab: true, run: (*drill).flashSale},
	// I10's oncepay run answers its stale holder from the dedup record, which I6's purge must
	// not remove in the meantime.
	{id: "I10", name: "paused holder writes late", lab: true, purgeSensitive: true, run: lateHolder(staleWriter)},
	// I11 goes through a gateway of the drill's own (nginx, or an in-process proxy); its oncepay
	// run's retry is answered from the first copy's stored result.
	{id: "I11", name: "gateway retries a slow POST", lab: true, purgeSensitive: true, run: (*drill).gatewayRetry},
	// I14 starts a private MariaDB primary and replica of its own, and oncepay instances on
	// them: it shares nothing with the other runs and goes beside them.
	{id: "I14", name: "a failover that forgets", lab: true, run: (*drill).failoverForgets},
	// I15's oncepay run answers its first holder from the dedup record too.
	{id: "I15", name: "two holders after a Redis failover", lab: true, purgeSensitive: true, run: lateHolder(failoverHolders)},
	// I8 and I9 drive the channel simulator, whose faults are global: each holds simGate
	// alone while its fault is on. I9's oncepay run calls the close job once its order expired.
	{id: "I8", name: "refund call times out", lab: true, pays: true, run: (*drill).refundTimeout},
	{id: "I9", name: "lost notification, then close", lab: true, closeJob: closeAtTheEnd, pays: true, run: (*drill).lostNotification},
	// I12 and I13 open their order's trade and have the buyer pay it at the simulator, as I8
	// does. I12 holds purgeGate shared from its key's first use to the refused reuse; I13
	// purges every dedup record, holding purgeGate alone like I6.
	{id: "I12", name: "side effect before the key", lab: true, pays: true, run: (*drill).sideEffectBeforeKey},
	{id: "I13", name: "purged fence on a money path", lab: true, pays: true, run: (*drill).purgedFence},
	// I16 and I17 play the merchant: a receiver of the drill's own, registered as a webhook
	// endpoint. I16 pays its order; its lab run is the receiver without a dedup record.
	{id: "I16", name: "webhook processed twice", lab: true, pays: true, run: (*drill).lostAck},
	{id: "I17", name: "event announced before its commit", lab: true, run: (*drill).announcedRollback},
	// I18's both runs order through the lab's lossy network; the clients differ. The oncepay
	// run's retry is answered from the first attempt's stored result, which I6's and I13's
	// purges must not remove in between.
	{id: "I18", name: "client retries under a new key", lab: true, purgeSensitive: true, run: (*drill).newKeyRetry},
}

// scenarioIDs returns the distinct scenario ids in catalog order.
func scenarioIDs() []string {
	var ids []string
	for _, s := range catalog {
		if !slices.Contains(ids, s.id) {
			ids = append(ids, s.id)
		}
	}
	return ids
}

// canonicalID maps a user's spelling of a scenario id (any case) to the catalog's.
func canonicalID(name string) (string, bool) {
	for _, id := range scenarioIDs() {
		if strings.EqualFold(id, name) {
			return id, true
		}
	}
	return "", false
}

// i1LateAt is when the lab run of I1 sends its late copy (the queue's redelivery): after the
// first two copies have paid the order (each takes about 400 ms in the lab), so that its
// unconditional PAYING moves a PAID order backwards.
const i1LateAt = 1500 * time.Millisecond

// tripleDelivery is I1: one payment notification reaches the server by three entry paths —
// the channel's callback retry, the gateway's retry, the queue's redelivery — which must all
// converge on one key, channel + trade_no. oncepay gets three HTTP copies and three Kafka
// redeliveries at once. The lab's replica keys each path on its own delivery id, so the run
// against it sends one copy per path, each with a new id, and the queue's copy late (i1LateAt),
// over HTTP because the lab consumes no topic.
func (d *drill) tripleDelivery(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	sku, o, err := d.orderOnNewSKU(ctx, rt, "I1", 1)
	if err != nil {
		return out, err
	}
	tradeNo, body := d.notification(string(o.OrderID), o.Amount)
	deliver := func(at time.Duration, label, path string) shot {
		return d.notifyShot(at, label, rt.deliveryNotify(path, randomHex(6)), body)
	}
	var shots []shot
	switch {
	case !rt.kafka:
		shots = []shot{
			deliver(0, "channel retry", "callback"),
			deliver(100*time.Millisecond, "gateway retry", "gateway"),
			deliver(i1LateAt, "kafka redelivery (late, over HTTP)", "mq"),
		}
	case d.c.kafka != nil:
		shots = []shot{deliver(0, "channel retry", "callback"), deliver(0, "gateway retry", "gateway"), deliver(0, "client retry", "callback")}
		for range 3 {
			shots = append(shots, d.kafkaShot(0, "kafka redelivery", tradeNo, body))
		}
	default:
		shots = []shot{deliver(0, "channel retry", "callback"), deliver(0, "gateway retry", "gateway"), deliver(0, "client retry", "callback")}
		out.notef("Kafka path disabled (--kafka=): only the 3 HTTP copies were fired")
	}
	w := d.watchOrder(ctx, o)
	out.copies = fireAll(ctx, shots)
	d.awaitConsumed(ctx, out.copies, &out.findings)
	final, after, err := d.finalState(ctx, w, string(o.OrderID), sku.SKU)
	if err != nil {
		return out, err
	}
	checkNotifyAnswers(&out.findings, out.copies)
	checkPaidOnce(&out.findings, w, final, after.since(sku), tradeNo)
	out.expected = "PAID once; stock available -1, reserved +0, sold +1; status never leaves PAID"
	out.observed = fmt.Sprintf("%s; stock %s; statuses %s", final.Status, after.since(sku), w.path())
	out.held = joinNonEmpty("paid once, sold +1, never regressed", stoppedSummary(out.copies))
	return out, nil
}

// rechargeCallbacks is I2: twenty concurrent signed callbacks for one recharge must credit the
// balance once. The balance is the user's, not the scenario's, so the lab run recharges the
// second user: the two runs go at the same time without reading each other's credits.
func (d *drill) rechargeCallbacks(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	const amount = 100000
	user := d.cfg.UserKey
	if rt.target == labRoutes.target {
		user = d.cfg.OtherUserKey
	}
	bal0, err := d.balance(ctx, user)
	if err != nil {
		return out, err
	}
	var rc recharge
	_, err = d.c.expect(ctx, call{method: http.MethodPost, path: "/v1/recharges", bearer: user,
		idemKey: d.key(rt, "I2"), body: []byte(`{"amount":100000}`), requestID: d.requestID()}, http.StatusCreated, &rc)
	if err != nil {
		return out, err
	}
	tradeNo, body := d.notification(string(rc.RechargeID), amount)
	shots := make([]shot, 20)
	for i := range shots {
		shots[i] = d.notifyShot(0, "recharge callback", rt.rechargeNotify, body)
	}
	out.copies = fireAll(ctx, shots)
	var final recharge
	if _, err := d.c.expect(ctx, d.get("/v1/recharges/"+string(rc.RechargeID), user), http.StatusOK, &final); err != nil {
		return out, err
	}
	bal1, err := d.balance(ctx, user)
	if err != nil {
		return out, err
	}
	credited := bal1 - bal0
	// The channel's bill has one trade of amount. oncepay's books hold one transfer for it,
	// whose id is the trade (internal/ledger); the lab keeps no books but the balance it
	// credited.
	books := credited
	if rt.target == oncepayRoutes.target {
		if books, err = d.captured(ctx, tradeNo); err != nil {
			return out, err
		}
	}
	checkNotifyAnswers(&out.findings, out.copies)
	if credited != amount {
		out.effectf("balance %+d for one recharge of %d (credited %s)", credited, amount, times(credited, amount))
	}
	if books != amount && books != credited {
		out.effectf("the books captured %+d of the channel's trade of %d", books, amount)
	}
	if final.Status == "PENDING" {
		out.effectf("recharge still PENDING after its callbacks")
	}
	out.expected = fmt.Sprintf("balance %+d once; recharge no longer PENDING; the books equal the channel's bill (%+d)", amount, amount)
	out.observed = fmt.Sprintf("balance %+d; recharge %s; books %+d against the bill's %+d", credited, final.Status, books, amount)
	out.held = joinNonEmpty("credited once", stoppedSummary(out.copies))
	return out, nil
}

// sameKeyOrders is I3: twenty concurrent creates with one Idempotency-Key and one body must
// make exactly one order, however the server orders its dedup row and business change.
func (d *drill) sameKeyOrders(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	const qty = 2
	sku, err := d.newSKU(ctx, rt, "I3", 1999, 100)
	if err != nil {
		return out, err
	}
	key, body := d.key(rt, "I3"), orderBody(sku.SKU, qty)
	shots := make([]shot, 20)
	for i := range shots {
		shots[i] = d.httpShot(0, "resubmission", call{method: http.MethodPost, path: rt.orders,
			bearer: d.cfg.UserKey, idemKey: key, body: body})
	}
	out.copies = fireAll(ctx, shots)
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	delta := after.since(sku)
	ids := refsOf(out.copies, http.StatusCreated)
	if bad := unexpected(out.copies, func(c copyRecord) bool {
		return c.Status == http.StatusCreated || (c.Status == http.StatusConflict && c.Code == "idempotency_key_in_use")
	}); bad != "" {
		out.answerf("answers other than 201 or 409 idempotency_key_in_use: %s", bad)
	}
	if n := countOutcome(out.copies, "executed"); n > 1 {
		out.answerf("%d copies report Idempotency-Outcome: executed", n)
	}
	if len(ids) > 1 {
		out.effectf("%d different order_ids for one key", len(ids))
	}
	if want := (stockDelta{-qty, qty, 0}); delta != want {
		out.effectf("stock %s, want %s (%s orders' worth)", delta, want, times(delta.reserved, qty))
	}
	out.expected = fmt.Sprintf("one order: stock %s; every 201 has the same order_id", stockDelta{-qty, qty, 0})
	out.observed = fmt.Sprintf("%d order_id(s); stock %s", len(ids), delta)
	out.held = joinNonEmpty(fmt.Sprintf("one order, reserved +%d once", qty), stoppedSummary(out.copies))
	return out, nil
}

// i4Offsets space the copies of I4 across a slow payment. 0, +1 s and +3 s land while the
// first copy still holds its lock; +6 s is the incident's retry (the article's came ~6 s
// after the first): after a fixed 5 s lease has run out, with a second to spare for the
// first copy to reach the lock on a loaded machine (at +5.5 s the lab's lease was, once, not
// yet over), and before the first copy is done — the lab's after its 8 s of work, oncepay's
// after ONCEPAY_CHAOS_PAYMENT_DELAY=7s (make drill), a second past the retry, and no more,
// because it slows every payment of the drill. So the lab replica pays twice, and oncepay must hold the copy off with a lock its
// watchdog renews past ONCEPAY_LOCK_TTL=5s, and with its dedup record behind it.
var i4Offsets = []time.Duration{0, time.Second, 3 * time.Second, 6 * time.Second}

// slowPayment is I4: copies of one notification spaced across a slow payment. The drill
// cannot slow the server; it reports whether the server was slow enough to test the lock.
func (d *drill) slowPayment(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	sku, o, err := d.orderOnNewSKU(ctx, rt, "I4", 1)
	if err != nil {
		return out, err
	}
	tradeNo, body := d.notification(string(o.OrderID), o.Amount)
	shots := make([]shot, len(i4Offsets))
	for i, at := range i4Offsets {
		label := "first delivery"
		if at > 0 {
			label = "retry +" + at.String()
		}
		shots[i] = d.notifyShot(at, label, rt.paymentNotify, body)
	}
	w := d.watchOrder(ctx, o)
	out.copies = fireAll(ctx, shots)
	final, after, err := d.finalState(ctx, w, string(o.OrderID), sku.SKU)
	if err != nil {
		return out, err
	}
	checkNotifyAnswers(&out.findings, out.copies)
	checkPaidOnce(&out.findings, w, final, after.since(sku), tradeNo)
	slowest := 0.0
	for _, c := range out.copies {
		slowest = max(slowest, c.DurationMS)
	}
	if slowest < 1000 {
		out.notef("the server answered every copy within %.0fms, so no copy overlapped a held lock; "+
			"start it with ONCEPAY_CHAOS_PAYMENT_DELAY=7s and ONCEPAY_LOCK_TTL=5s to replay I4", slowest)
	}
	out.expected = "PAID once; stock available -1, reserved +0, sold +1"
	out.observed = fmt.Sprintf("%s; stock %s; slowest answer %.0fms", final.Status, after.since(sku), slowest)
	out.held = joinNonEmpty(fmt.Sprintf("paid once across copies spread over %s", i4Offsets[len(i4Offsets)-1]), stoppedSummary(out.copies))
	return out, nil
}

// lateClose is the first half of I5: a close that runs late must not close a paid order.
// oncepay's close is the job with its precondition; the lab's is an unconditional UPDATE.
// Each target pays the order through its own route, with one copy: the lab's payment replica
// is then right (its bug needs a second copy, I4), and its slowed work holds no database
// transaction, so on the embedded SQLite the lab run does not queue behind oncepay's payments.
func (d *drill) lateClose(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	p, err := d.payNewOrder(ctx, rt, rt.paymentNotify, "I5", "payment", &out)
	if err != nil {
		return out, err
	}
	var closing copyRecord
	var closed int64
	if rt.closeOrder != nil {
		closing = d.c.fireHTTP(ctx, p.t0, "late close", call{method: http.MethodPost, path: rt.closeOrder(p.id),
			bearer: d.cfg.AdminKey, requestID: d.requestID()}, nil)
	} else {
		wait, _, err := d.closeJob(ctx, p.t0)
		if err != nil {
			return out, err
		}
		if closing, closed, err = wait(); err != nil {
			return out, err
		}
	}
	out.copies = append(out.copies, closing)
	if rt.closeOrder == nil && closing.Status != http.StatusOK {
		return out, fmt.Errorf("%s answered %d %s, want 200", closing.Route, closing.Status, closing.Code)
	}
	final, err := d.order(ctx, p.id)
	if err != nil {
		return out, err
	}
	after, err := d.stock(ctx, p.before.SKU)
	if err != nil {
		return out, err
	}
	if final.Status != "PAID" {
		out.effectf("the paid order is now %s", final.Status)
	}
	if delta := after.since(p.stock); delta != (stockDelta{}) {
		out.effectf("the close moved the paid order's stock: %s", delta)
	}
	out.expected = "order stays PAID; stock unchanged by the close"
	out.observed = fmt.Sprintf("%s; stock %s", final.Status, after.since(p.stock))
	out.held = fmt.Sprintf("paid order stayed PAID after the close job (which closed %d expired orders)", closed)
	if rt.closeOrder != nil {
		out.held = "paid order stayed PAID after the late close"
	}
	return out, nil
}

// payAfterCloseName names I5's second half.
const payAfterCloseName = "payment after close"

// maxDrillTTL is the longest order TTL the drill waits out for the second half of I5.
const maxDrillTTL = 5 * time.Second

// payAfterClose is the second half of I5: an order that expired and was closed, then paid,
// stays CLOSED with its stock untouched, and the payment is recorded for refund. It needs a
// server started with a tiny ONCEPAY_ORDER_TTL; otherwise it is skipped. Its order expires
// while the other scenarios run; the close job waits for them (closeAtTheEnd).
func (d *drill) payAfterClose(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	sku, o, err := d.orderOnNewSKU(ctx, rt, "I5X", 1)
	if d.ordered != nil {
		d.ordered()
	}
	if err != nil {
		return out, err
	}
	id := string(o.OrderID)
	created := time.Now()
	ttl, err := o.ttl()
	if err != nil {
		return out, err
	}
	if ttl > maxDrillTTL {
		out.skipped = fmt.Sprintf("ORDER_TTL too long: %s; start the server with ONCEPAY_ORDER_TTL=%s or less to run this half", ttl, maxDrillTTL)
		return out, nil
	}
	if err := sleep(ctx, time.Until(created.Add(ttl+time.Second))); err != nil {
		return out, err
	}
	t0 := time.Now()
	wait, jobDone, err := d.closeJob(ctx, t0)
	if err != nil {
		return out, err
	}
	// The job is shared with I9's oncepay run, whose order it pays (7 s under make drill): the
	// late payment goes as soon as this order is CLOSED, not once the job is over.
	closed, err := d.awaitOrderUntil(ctx, id, "CLOSED", jobDone)
	if err != nil {
		return out, err
	}
	if closed.Status != "CLOSED" {
		out.effectf("the expired order is %s after the close job, want CLOSED", closed.Status)
	}
	closedStock, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	if delta := closedStock.since(sku); delta != (stockDelta{}) {
		out.effectf("closing did not release the reservation: stock %s since before the order", delta)
	}
	tradeNo, body := d.notification(id, o.Amount)
	pay := d.c.fireHTTP(ctx, t0, "late payment", d.notifyCall(oncepayRoutes.paymentNotify, body), nil)
	job, _, err := wait()
	if err != nil {
		return out, err
	}
	out.copies = append(out.copies, job, pay)
	if pay.Status != http.StatusOK {
		out.answerf("the payment for a closed order answered %d %s, want 200 so the channel stops", pay.Status, pay.Code)
	}
	final, err := d.order(ctx, id)
	if err != nil {
		return out, err
	}
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	if final.Status != closed.Status {
		out.effectf("the payment moved the closed order to %s", final.Status)
	}
	if delta := after.since(closedStock); delta != (stockDelta{}) {
		out.effectf("the payment moved a closed order's stock: %s", delta)
	}
	found, err := d.hasAnomaly(ctx, "paid_after_close", id, tradeNo)
	if err != nil {
		return out, err
	}
	if !found {
		out.effectf("no paid_after_close anomaly for the order: the payment would be neither applied nor refunded")
	}
	out.expected = "order stays CLOSED; stock unchanged by the payment; anomaly paid_after_close recorded"
	out.observed = fmt.Sprintf("%s; stock %s; anomaly recorded: %t", final.Status, after.since(closedStock), found)
	out.held = "closed order stayed CLOSED after a late payment, stock unchanged, paid_after_close recorded"
	return out, nil
}

// purgeThenRedeliver is I6: after the dedup rows are purged, a redelivery over HTTP and Kafka
// must still find the order PAID and change nothing, through the state precondition alone.
// The lab's replica keeps a dedup row too, which the same purge removes, but its update has
// no precondition: its redelivery (over HTTP only; the lab consumes no topic) pays again.
func (d *drill) purgeThenRedeliver(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	p, err := d.payNewOrder(ctx, rt, rt.redeliveryNotify, "I6", "first delivery", &out)
	if err != nil {
		return out, err
	}
	purged, err := d.purgeDedupRecords(ctx, &out)
	if err != nil {
		return out, err
	}
	shots := []shot{
		d.notifyShot(0, "channel redelivery", rt.redeliveryNotify, p.body),
		d.notifyShot(0, "gateway redelivery", rt.redeliveryNotify, p.body),
	}
	switch {
	case rt.kafka && d.c.kafka != nil:
		shots = append(shots, d.kafkaShot(0, "kafka redelivery", p.tradeNo, p.body), d.kafkaShot(0, "kafka redelivery", p.tradeNo, p.body))
	case rt.kafka:
		out.notef("Kafka path disabled (--kafka=): the redelivery went over HTTP only")
	}
	w := d.watchOrder(ctx, p.order)
	redelivered := fireAll(ctx, shots)
	d.awaitConsumed(ctx, redelivered, &out.findings)
	out.copies = append(out.copies, redelivered...)
	final, after, err := d.finalState(ctx, w, p.id, p.before.SKU)
	if err != nil {
		return out, err
	}
	checkNotifyAnswers(&out.findings, redelivered)
	checkPaidOnce(&out.findings, w, final, after.since(p.before), p.tradeNo)
	out.expected = fmt.Sprintf("still PAID at %s; stock unchanged by the redelivery", p.order.PaidAt)
	out.observed = fmt.Sprintf("%s at %s; stock %s since the first payment", final.Status, final.PaidAt, after.since(p.stock))
	out.held = joinNonEmpty(fmt.Sprintf("still PAID once after purging %d dedup rows, sold unchanged", purged), stoppedSummary(redelivered))
	return out, nil
}

// purgeDedupRecords runs the purge job on every dedup record (older_than 0s), as I6 and I13
// do, holding purgeGate alone for the one call: it waits for the runs whose duplicates are
// answered from their records (purgeSensitive), and for I12 between its key's first use and
// its reuse. It returns how many records went, noting in out when none did.
func (d *drill) purgeDedupRecords(ctx context.Context, out *outcome) (int64, error) {
	var purge struct {
		Purged int64 `json:"purged"`
	}
	purgeCall := call{method: http.MethodPost, path: "/v1/admin/jobs/purge-dedup-records/run", bearer: d.cfg.AdminKey,
		body: []byte(`{"older_than":"0s"}`), requestID: d.requestID()}
	d.purgeGate.Lock()
	_, err := d.c.expect(ctx, purgeCall, http.StatusOK, &purge)
	d.purgeGate.Unlock()
	if err == nil && purge.Purged == 0 {
		out.notef("the purge removed no dedup rows, so the redelivery may have met the row it was meant to miss")
	}
	return purge.Purged, err
}

// doubleClick is I7: an order form submitted twice with its one-time token, first one after
// the other and then five times at once with a second token, makes one order per token. The
// lab's form has no token: each submit is an order.
func (d *drill) doubleClick(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	sku, err := d.newSKU(ctx, rt, "I7", 1999, 100)
	if err != nil {
		return out, err
	}
	body := orderBody(sku.SKU, 1)
	click := func(token string) call {
		return call{method: http.MethodPost, path: rt.formOrders, bearer: d.cfg.UserKey, idemKey: token, body: body}
	}
	form := func() (string, error) { // the form is shown: with its token, if the target issues one
		if !rt.formTokens {
			return "", nil
		}
		return d.token(ctx)
	}
	tok1, err := form()
	if err != nil {
		return out, err
	}
	sequential := fireInOrder(ctx, []shot{d.httpShot(0, "first click", click(tok1)), d.httpShot(0, "second click", click(tok1))})
	tok2, err := form()
	if err != nil {
		return out, err
	}
	shots := make([]shot, 5)
	for i := range shots {
		shots[i] = d.httpShot(0, "rapid click", click(tok2))
	}
	concurrent := fireAll(ctx, shots)
	out.copies = append(sequential, concurrent...)
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	for _, group := range [][]copyRecord{sequential, concurrent} {
		checkOneResult(&out.findings, group)
	}
	ids := refsOf(out.copies, http.StatusCreated)
	if want := (stockDelta{-2, 2, 0}); after.since(sku) != want {
		out.effectf("stock %s for two forms, want %s", after.since(sku), want)
	}
	out.expected = "one order per form (2 orders); stock available -2, reserved +2, sold +0"
	out.observed = fmt.Sprintf("%d order_id(s); stock %s", len(ids), after.since(sku))
	out.held = joinNonEmpty("one order per token", stoppedSummary(out.copies))
	return out, nil
}

// checkOneResult checks the copies of one form (sent with one token): the first 201 is the
// order, every duplicate is that same order replayed or a 409 while it is still being made.
func checkOneResult(f *findings, group []copyRecord) {
	if ids := refsOf(group, http.StatusCreated); len(ids) > 1 {
		f.effectf("one form made %d orders", len(ids))
	}
	fresh := 0
	for _, c := range group {
		if c.Status == http.StatusCreated && !c.Replayed {
			fresh++
		}
	}
	if fresh > 1 {
		f.answerf("%d answers to one token are not marked Idempotent-Replayed: true", fresh)
	}
	if bad := unexpected(group, func(c copyRecord) bool {
		return c.Status == http.StatusCreated || (c.Status == http.StatusConflict && c.Code == "idempotency_key_in_use")
	}); bad != "" {
		f.answerf("a duplicate must get the first result, got: %s", bad)
	}
}

// flashSale sells 5 units to 50 concurrent buyers with distinct keys: exactly 5 orders, 45
// out_of_stock, and stock never below zero. The lab's replica checks the stock and then
// subtracts with no precondition, so the buyers who read the same stock all buy.
func (d *drill) flashSale(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	const units, buyers = 5, 50
	sku, err := d.newSKU(ctx, rt, "FLASH", 100, units)
	if err != nil {
		return out, err
	}
	body := orderBody(sku.SKU, 1)
	shots := make([]shot, buyers)
	for i := range shots {
		key := d.cfg.UserKey
		if i%2 == 1 {
			key = d.cfg.OtherUserKey
		}
		shots[i] = d.httpShot(0, "buyer", call{method: http.MethodPost, path: rt.flashOrders, bearer: key,
			idemKey: d.key(rt, "FLASH-"+strconv.Itoa(i)), body: body})
	}
	var mu sync.Mutex
	lowest := sku.Available
	stop := poll(ctx, 10*time.Millisecond, func(ctx context.Context) {
		if s, err := d.stock(ctx, sku.SKU); err == nil {
			mu.Lock()
			lowest = min(lowest, s.Available)
			mu.Unlock()
		}
	})
	out.copies = fireAll(ctx, shots)
	stop()
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	lowest = min(lowest, after.Available)
	sold, soldOut := 0, 0
	for _, c := range out.copies {
		switch {
		case c.Status == http.StatusCreated:
			sold++
		case c.Status == http.StatusConflict && c.Code == "out_of_stock":
			soldOut++
		}
	}
	if bad := unexpected(out.copies, func(c copyRecord) bool {
		return c.Status == http.StatusCreated || (c.Status == http.StatusConflict && c.Code == "out_of_stock")
	}); bad != "" {
		out.answerf("answers other than 201 or 409 out_of_stock: %s", bad)
	}
	switch {
	case sold > units:
		out.effectf("oversold: %d orders for %d units", sold, units)
	case sold < units:
		out.effectf("undersold: %d orders while %d units were available", sold, units)
	}
	if ids := refsOf(out.copies, http.StatusCreated); len(ids) != sold {
		out.effectf("%d created answers carry %d distinct order_ids", sold, len(ids))
	}
	if lowest < 0 {
		out.effectf("available went negative (%d)", lowest)
	}
	if after.Available != 0 || after.Reserved != units {
		out.effectf("stock ends at available %d, reserved %d; want 0 and %d", after.Available, after.Reserved, units)
	}
	out.expected = fmt.Sprintf("%d × 201, %d × 409 out_of_stock; available 0, reserved %d, never negative", units, buyers-units, units)
	out.observed = fmt.Sprintf("%d × 201, %d × 409 out_of_stock; available %d, reserved %d, lowest seen %d", sold, soldOut, after.Available, after.Reserved, lowest)
	out.held = fmt.Sprintf("%d sold, %d × out_of_stock, available never below 0", sold, soldOut)
	return out, nil
}

// answerSummary is a copy's answer in a few words, e.g. "200 replayed" or "409 idempotency_key_in_use".
func answerSummary(c copyRecord) string {
	if c.Error != "" {
		return "no answer"
	}
	return strings.TrimSpace(statusText(c) + " " + c.Outcome)
}
