package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/ledger"
)

// order is the contract's order JSON, as far as the drill reads it.
type order struct {
	OrderID   flexID `json:"order_id"`
	Status    string `json:"status"`
	Amount    int64  `json:"amount"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at"`
	PaidAt    string `json:"paid_at"`
	TradeNo   string `json:"trade_no"`
}

// ttl is how long the server gives the order before it expires.
func (o order) ttl() (time.Duration, error) {
	created, err1 := time.Parse(time.RFC3339Nano, o.CreatedAt)
	expires, err2 := time.Parse(time.RFC3339Nano, o.ExpiresAt)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("order %s: created_at/expires_at are not RFC 3339: %w", o.OrderID, err)
	}
	return expires.Sub(created), nil
}

// recharge is the contract's recharge JSON.
type recharge struct {
	RechargeID flexID `json:"recharge_id"`
	Status     string `json:"status"`
	Amount     int64  `json:"amount"`
}

// stock is GET /v1/inventory/{sku}.
type stock struct {
	SKU       string `json:"sku"`
	Price     int64  `json:"price"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
}

// stockDelta is how a SKU's stock moved between two readings.
type stockDelta struct{ available, reserved, sold int64 }

// since returns s minus an earlier reading.
func (s stock) since(before stock) stockDelta {
	return stockDelta{s.Available - before.Available, s.Reserved - before.Reserved, s.Sold - before.Sold}
}

// String prints the delta as the report shows it.
func (d stockDelta) String() string {
	return fmt.Sprintf("available %+d, reserved %+d, sold %+d", d.available, d.reserved, d.sold)
}

// get is a GET with a bearer key.
func (d *drill) get(path, bearer string) call {
	return call{method: http.MethodGet, path: path, bearer: bearer, requestID: d.requestID()}
}

// newSKU puts a SKU of its own in stock for one scenario, so that no other order, close job or
// earlier run moves the stock the scenario judges.
func (d *drill) newSKU(ctx context.Context, rt routes, tag string, price, available int64) (stock, error) {
	var s stock
	name := "SKU-DRILL-" + d.runID + "-" + strings.ToUpper(rt.target) + "-" + tag
	body, _ := json.Marshal(map[string]int64{"price": price, "available": available})
	_, err := d.c.expect(ctx, call{method: http.MethodPut, path: "/v1/admin/inventory/" + name, bearer: d.cfg.AdminKey,
		body: body, requestID: d.requestID()}, http.StatusOK, &s)
	if err == nil && s.SKU == "" {
		s.SKU = name
	}
	return s, err
}

// orderOnNewSKU makes a SKU for the scenario and one order of qty units on it through /v1.
// It returns the stock as it was before the order.
func (d *drill) orderOnNewSKU(ctx context.Context, rt routes, tag string, qty int) (stock, order, error) {
	s, err := d.newSKU(ctx, rt, tag, 1999, 100)
	if err != nil {
		return s, order{}, err
	}
	var o order
	_, err = d.c.expect(ctx, call{method: http.MethodPost, path: oncepayRoutes.orders, bearer: d.cfg.UserKey,
		idemKey: d.key(rt, tag), body: orderBody(s.SKU, qty), requestID: d.requestID()}, http.StatusCreated, &o)
	if err == nil && o.OrderID == "" {
		err = errors.New("POST /v1/orders answered 201 without an order_id")
	}
	return s, o, err
}

// paidOrder is one unit ordered on a new SKU and paid with one notification, as read back
// once paid: where the scenarios about what may still happen to a paid order (I5, I6) start.
type paidOrder struct {
	// before is the SKU's stock before the order.
	before stock
	// id is the order id; tradeNo and body are the notification that paid it.
	id      string
	tradeNo string
	body    []byte
	// t0 is when the payment was sent, the origin of the scenario's copy timings.
	t0 time.Time
	// order and stock are the order and the SKU's stock once paid.
	order order
	stock stock
}

// payNewOrder orders one unit on a new SKU tagged tag and pays it through route, one of rt's
// payment routes, recording the payment as a copy named path in out. The scenario cannot go
// on without a paid order, so an order that is not PAID afterwards is an error.
func (d *drill) payNewOrder(ctx context.Context, rt routes, route, tag, path string, out *outcome) (paidOrder, error) {
	var p paidOrder
	before, o, err := d.orderOnNewSKU(ctx, rt, tag, 1)
	if err != nil {
		return p, err
	}
	p.before, p.id = before, string(o.OrderID)
	p.tradeNo, p.body = d.notification(p.id, o.Amount)
	p.t0 = time.Now()
	pay := d.c.fireHTTP(ctx, p.t0, path, d.notifyCall(route, p.body), nil)
	out.copies = append(out.copies, pay)
	if p.order, err = d.order(ctx, p.id); err != nil {
		return p, err
	}
	if p.order.Status != "PAID" {
		return p, fmt.Errorf("the order is %s after its %s answered %d %s; %s needs a paid order", p.order.Status, path, pay.Status, pay.Code, tag)
	}
	p.stock, err = d.stock(ctx, before.SKU)
	return p, err
}

// orderBody is the body of POST /v1/orders for one item.
func orderBody(sku string, qty int) []byte {
	b, _ := json.Marshal(map[string]any{"items": []map[string]any{{"sku": sku, "quantity": qty}}})
	return b
}

// stock reads GET /v1/inventory/{sku}.
func (d *drill) stock(ctx context.Context, sku string) (stock, error) {
	var s stock
	_, err := d.c.expect(ctx, d.get("/v1/inventory/"+sku, ""), http.StatusOK, &s)
	return s, err
}

// order reads GET /v1/orders/{id} as the user who placed it.
func (d *drill) order(ctx context.Context, id string) (order, error) {
	var o order
	_, err := d.c.expect(ctx, d.get("/v1/orders/"+id, d.cfg.UserKey), http.StatusOK, &o)
	return o, err
}

// balance reads the balance of the user whose API key is user from GET /v1/accounts/me.
func (d *drill) balance(ctx context.Context, user string) (int64, error) {
	var acct struct {
		Balance int64 `json:"balance"`
	}
	_, err := d.c.expect(ctx, d.get("/v1/accounts/me", user), http.StatusOK, &acct)
	return acct.Balance, err
}

// captured is what oncepay's books captured of the drill channel's trade tradeNo: the amount
// of its transfer (GET /v1/admin/ledger/transfers/{id}), 0 when there is none.
func (d *drill) captured(ctx context.Context, tradeNo string) (int64, error) {
	var t struct {
		Amount int64 `json:"amount"`
	}
	a, err := d.c.do(ctx, d.get("/v1/admin/ledger/transfers/"+url.PathEscape(ledger.TradeID(drillChannel, tradeNo)), d.cfg.AdminKey))
	switch {
	case err != nil:
		return 0, err
	case a.status == http.StatusNotFound:
		return 0, nil
	case a.status != http.StatusOK:
		return 0, fmt.Errorf("GET the transfer of trade %s answered %d %s", tradeNo, a.status, a.code)
	}
	err = json.Unmarshal(a.body, &t)
	return t.Amount, err
}

// token asks for a one-time idempotency token (I7).
func (d *drill) token(ctx context.Context) (string, error) {
	var t struct {
		Token string `json:"token"`
	}
	_, err := d.c.expect(ctx, call{method: http.MethodPost, path: "/v1/idempotency-tokens", bearer: d.cfg.UserKey,
		requestID: d.requestID()}, http.StatusCreated, &t)
	if err == nil && t.Token == "" {
		err = errors.New("POST /v1/idempotency-tokens answered 201 without a token")
	}
	return t.Token, err
}

// anomaly is one entry of GET /v1/admin/anomalies, as far as the drill reads it.
type anomaly struct {
	Kind    string `json:"kind"`
	OrderID flexID `json:"order_id"`
	TradeNo string `json:"trade_no"`
}

// hasAnomaly reports whether GET /v1/admin/anomalies lists kind for the order or trade_no.
func (d *drill) hasAnomaly(ctx context.Context, kind, orderID, tradeNo string) (bool, error) {
	kinds, err := d.anomaliesOf(ctx, orderID, tradeNo)
	return slices.Contains(kinds, kind), err
}

// anomaliesOf returns the kinds of the anomalies GET /v1/admin/anomalies lists for the order
// or trade_no, newest first, from the newest 1000 (the drill's own are the newest).
func (d *drill) anomaliesOf(ctx context.Context, orderID, tradeNo string) ([]string, error) {
	var list struct {
		Anomalies []anomaly `json:"anomalies"`
	}
	if _, err := d.c.expect(ctx, d.get("/v1/admin/anomalies?limit=1000", d.cfg.AdminKey), http.StatusOK, &list); err != nil {
		return nil, err
	}
	var kinds []string
	for _, a := range list.Anomalies {
		if (orderID != "" && string(a.OrderID) == orderID) || (tradeNo != "" && a.TradeNo == tradeNo) {
			kinds = append(kinds, a.Kind)
		}
	}
	return kinds, nil
}

// finalState stops the watch and reads the order and the SKU's stock once more.
func (d *drill) finalState(ctx context.Context, w *orderWatch, orderID, sku string) (order, stock, error) {
	w.halt()
	o, err := d.order(ctx, orderID)
	if err != nil {
		return o, stock{}, err
	}
	w.seen(o)
	s, err := d.stock(ctx, sku)
	return o, s, err
}

// orderWatch polls an order in the background and keeps each status and paid_at it saw, in
// order: the black-box evidence that the order never moved backwards (I1) and that it was not
// paid twice (paid_at stamped again).
type orderWatch struct {
	mu       sync.Mutex
	statuses []string
	paidAts  []string
	stop     func()
}

// watchOrder starts polling GET /v1/orders/{id}, from the reading the caller already has.
func (d *drill) watchOrder(ctx context.Context, from order) *orderWatch {
	w := &orderWatch{}
	w.seen(from)
	id := string(from.OrderID)
	w.stop = poll(ctx, 25*time.Millisecond, func(ctx context.Context) {
		if o, err := d.order(ctx, id); err == nil {
			w.seen(o)
		}
	})
	return w
}

// seen records one reading, collapsing repeats.
func (w *orderWatch) seen(o order) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.statuses); n == 0 || w.statuses[n-1] != o.Status {
		w.statuses = append(w.statuses, o.Status)
	}
	if n := len(w.paidAts); o.PaidAt != "" && (n == 0 || w.paidAts[n-1] != o.PaidAt) {
		w.paidAts = append(w.paidAts, o.PaidAt)
	}
}

// halt stops polling.
func (w *orderWatch) halt() { w.stop() }

// path prints the statuses seen, e.g. "PENDING_PAYMENT → PAID".
func (w *orderWatch) path() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.statuses, " → ")
}

// regressed reports whether the order left PAID after reaching it.
func (w *orderWatch) regressed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.Index(w.statuses, "PAID")
	return i >= 0 && i < len(w.statuses)-1
}

// checkPaidOnce judges an order that one payment should have paid exactly once.
func checkPaidOnce(f *findings, w *orderWatch, final order, delta stockDelta, tradeNo string) {
	if final.Status != "PAID" {
		f.effectf("the order is %s, not PAID", final.Status)
	}
	if w.regressed() {
		f.effectf("the order moved backwards: %s", w.path())
	}
	w.mu.Lock()
	stamps := slices.Clone(w.paidAts)
	w.mu.Unlock()
	if len(stamps) > 1 {
		f.effectf("paid_at changed %d %s (%s): paid more than once", len(stamps)-1, plural(len(stamps)-1, "time", "times"), strings.Join(stamps, " → "))
	}
	if want := (stockDelta{-1, 0, 1}); delta != want {
		f.effectf("stock %s, want %s", delta, want)
	}
	if final.TradeNo != "" && final.TradeNo != tradeNo {
		f.effectf("the order's trade_no is %q, not the notification's %q", final.TradeNo, tradeNo)
	}
}

// checkNotifyAnswers checks that every HTTP copy of a notification got what the contract
// promises a channel: 200 success, or 409 while the first copy is still being processed.
func checkNotifyAnswers(f *findings, copies []copyRecord) {
	if bad := unexpected(copies, func(c copyRecord) bool {
		return c.Status == http.StatusOK || c.Status == http.StatusConflict
	}); bad != "" {
		f.answerf("notifications must answer 200 or 409, got: %s", bad)
	}
	for _, c := range copies {
		if c.Via == "kafka" && c.Error != "" {
			f.notef("a Kafka copy was not published: %s", c.Error)
			break
		}
	}
}

// unexpected lists, grouped, the HTTP copies that ok rejects, e.g. "2 × 500, 1 × no answer".
// Kafka copies are not judged here: they have no answer.
func unexpected(copies []copyRecord, ok func(copyRecord) bool) string {
	counts := map[string]int{}
	for _, c := range copies {
		if c.Via == "kafka" || (c.Error == "" && ok(c)) {
			continue
		}
		label := strings.TrimSpace(strconv.Itoa(c.Status) + " " + c.Code)
		if c.Error != "" {
			label = "no answer (" + c.Error + ")"
		}
		counts[label]++
	}
	return countList(counts, " × ")
}

// stoppedSummary tells which layers stopped the duplicate HTTP copies, e.g.
// "19 copies stopped: 12 replayed, 7 in_progress", and how many Kafka copies were published.
func stoppedSummary(copies []copyRecord) string {
	stopped, bare := map[string]int{}, map[string]int{}
	nStopped, nKafka := 0, 0
	for _, c := range copies {
		switch {
		case c.Via == "kafka":
			if c.Error == "" {
				nKafka++
			}
		case c.Error != "" || c.Outcome == "executed":
			// Not stopped: the copy that did the work, or one that got no answer.
		case c.Outcome == "":
			bare[strconv.Itoa(c.Status)]++
		default:
			stopped[c.Outcome]++
			nStopped++
		}
	}
	var parts []string
	if nStopped > 0 {
		parts = append(parts, fmt.Sprintf("%d %s stopped: %s", nStopped, plural(nStopped, "copy", "copies"), countList(stopped, " ")))
	}
	if len(bare) > 0 {
		parts = append(parts, "answered without Idempotency-Outcome: "+countList(bare, " × "))
	}
	if nKafka > 0 {
		parts = append(parts, fmt.Sprintf("%d Kafka %s absorbed", nKafka, plural(nKafka, "copy", "copies")))
	}
	return strings.Join(parts, "; ")
}

// countList prints counts largest first, then by label: "12 replayed, 7 in_progress".
func countList(counts map[string]int, sep string) string {
	labels := make([]string, 0, len(counts))
	for l := range counts {
		labels = append(labels, l)
	}
	sort.Slice(labels, func(i, j int) bool {
		if counts[labels[i]] != counts[labels[j]] {
			return counts[labels[i]] > counts[labels[j]]
		}
		return labels[i] < labels[j]
	})
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = strconv.Itoa(counts[l]) + sep + l
	}
	return strings.Join(parts, ", ")
}

// countOutcome counts the copies whose Idempotency-Outcome is outcome.
func countOutcome(copies []copyRecord, outcome string) int {
	n := 0
	for _, c := range copies {
		if c.Outcome == outcome {
			n++
		}
	}
	return n
}

// refsOf returns the distinct order or recharge ids in the answers with the given status.
func refsOf(copies []copyRecord, status int) []string {
	var ids []string
	for _, c := range copies {
		if c.Status == status && c.Ref != "" && !slices.Contains(ids, c.Ref) {
			ids = append(ids, c.Ref)
		}
	}
	return ids
}

// times says how many times unit fits in n, e.g. "2×" or "1.5×".
func times(n, unit int64) string {
	if unit == 0 {
		return "?"
	}
	return strconv.FormatFloat(float64(n)/float64(unit), 'f', -1, 64) + "×"
}

// plural picks the word for n things.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// joinNonEmpty joins the non-empty parts with "; ".
func joinNonEmpty(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), "; ")
}

// paidAtPath prints the paid_at stamps seen, e.g. "2026-…Z → 2026-…Z" for an order paid twice.
func (w *orderWatch) paidAtPath() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.paidAts, " → ")
}

// awaitOrderUntil reads order id every 50 ms until it has status want, or until done is closed
// (the step that was to move it has ended), and returns what it read last.
func (d *drill) awaitOrderUntil(ctx context.Context, id, want string, done <-chan struct{}) (order, error) {
	for {
		o, err := d.order(ctx, id)
		if err != nil || o.Status == want {
			return o, err
		}
		select {
		case <-done:
			return d.order(ctx, id)
		case <-ctx.Done():
			return o, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
