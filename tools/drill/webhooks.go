package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// I16 and I17: the merchant's side of the chain. The drill plays the merchant: it starts a
// webhook receiver of its own on loopback, registers it as an endpoint
// (POST /v1/admin/webhook-endpoints; the server must allow a loopback URL,
// ONCEPAY_WEBHOOK_DEV=true, the default with the embedded database) and judges what the
// receiver was told and what it did.

// hookWait is how long a scenario waits for a webhook: the sequencer's poll, a delivery, and
// for I16 the retry after the first pause of ONCEPAY_WEBHOOK_SCHEDULE (1 s in make drill).
const hookWait = 30 * time.Second

// hookCall is one webhook the drill's receiver got.
type hookCall struct {
	eventID, typ, attempt string
	at                    time.Time
	body                  []byte
}

// hookEvent is the part of an event body the drill reads.
type hookEvent struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	Data    struct {
		OrderID string `json:"order_id"`
		Items   []struct {
			SKU string `json:"sku"`
		} `json:"items"`
	} `json:"data"`
}

// hookReceiver is the drill's merchant. Its effect is a shipment per order.paid it processes.
// With dedup it records the event id in the same critical section as the shipment (the
// example receiver's transaction, examples/webhook-receiver) and answers a copy it has seen
// 200 without shipping; without it (the naive receiver of I16) it ships on every copy. With
// loseFirstAck it ships and then drops the connection instead of answering the first copy of
// each event: the 2xx lost on its way back.
type hookReceiver struct {
	ln           net.Listener
	srv          *http.Server
	dedup        bool
	loseFirstAck bool

	mu        sync.Mutex
	calls     []hookCall
	processed map[string]bool
	shipped   map[string]int // order id → shipments
}

func newHookReceiver(dedup, loseFirstAck bool) (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the drill's webhook receiver: %w", err)
	}
	h := &hookReceiver{ln: ln, dedup: dedup, loseFirstAck: loseFirstAck, processed: map[string]bool{}, shipped: map[string]int{}}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

func (h *hookReceiver) url() string { return "http://" + h.ln.Addr().String() + "/webhooks" }

func (h *hookReceiver) close() { _ = h.srv.Close() }

func (h *hookReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var ev hookEvent
	_ = json.Unmarshal(body, &ev)
	h.mu.Lock()
	first := true
	for _, c := range h.calls {
		if c.eventID == ev.EventID {
			first = false
		}
	}
	h.calls = append(h.calls, hookCall{eventID: r.Header.Get("Oncepay-Event-Id"), typ: ev.Type,
		attempt: r.Header.Get("Oncepay-Delivery-Attempt"), at: time.Now(), body: body})
	switch {
	case h.dedup && h.processed[ev.EventID]: // a copy of one already processed: 2xx, no effect
	case ev.Type == "order.paid":
		h.processed[ev.EventID] = true
		h.shipped[ev.Data.OrderID]++
	default:
		h.processed[ev.EventID] = true
	}
	h.mu.Unlock()
	if first && h.loseFirstAck {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close() // processed, and the answer never leaves
				return
			}
		}
	}
	w.WriteHeader(http.StatusOK)
}

// got returns the calls so far.
func (h *hookReceiver) got() []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookCall(nil), h.calls...)
}

// shipments is how often order id was shipped.
func (h *hookReceiver) shipments(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.shipped[id]
}

// errWebhooksRefused means the server would not register the drill's loopback receiver.
var errWebhooksRefused = errors.New("the server refused the drill's loopback receiver")

// register registers h for types and returns the endpoint's id; disable stops it.
func (d *drill) registerHook(ctx context.Context, h *hookReceiver, types ...string) (string, error) {
	body, _ := json.Marshal(map[string]any{"url": h.url(), "event_types": types, "description": "drill " + d.runID})
	var e struct {
		EndpointID string `json:"endpoint_id"`
	}
	a, err := d.c.do(ctx, call{method: http.MethodPost, path: "/v1/admin/webhook-endpoints", bearer: d.cfg.AdminKey, body: body, requestID: d.requestID()})
	switch {
	case err != nil:
		return "", err
	case a.status == http.StatusBadRequest:
		return "", errWebhooksRefused
	case a.status != http.StatusCreated:
		return "", fmt.Errorf("POST /v1/admin/webhook-endpoints answered %d %s", a.status, a.code)
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.EndpointID == "" {
		return "", fmt.Errorf("POST /v1/admin/webhook-endpoints: no endpoint_id in %s", a.body)
	}
	return e.EndpointID, nil
}

// disableHook stops deliveries to endpoint id, so that later runs' events do not pile up on a
// receiver that is gone.
func (d *drill) disableHook(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = d.c.do(ctx, call{method: http.MethodPatch, path: "/v1/admin/webhook-endpoints/" + id, bearer: d.cfg.AdminKey,
		body: []byte(`{"status":"disabled"}`), requestID: d.requestID()})
}

// skippedHooks is the outcome of a webhook scenario the server would not run.
func skippedHooks(out outcome, err error) (outcome, error) {
	if errors.Is(err, errWebhooksRefused) {
		out.skipped = "the server refused a loopback webhook URL: run it with ONCEPAY_WEBHOOK_DEV=true on the drill's machine"
		return out, nil
	}
	return out, err
}

// lostAck is I16: the receiver ships the paid order, its 2xx is lost, oncepay retries the same
// event. oncepay's side is at-least-once with the event id in Oncepay-Event-Id; the receiver
// that records that id with its effect (examples/webhook-receiver) ships once; the lab run's
// naive receiver ships again.
func (d *drill) lostAck(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	h, err := newHookReceiver(rt.target == oncepayRoutes.target, true)
	if err != nil {
		return out, err
	}
	defer h.close()
	endpoint, err := d.registerHook(ctx, h, "order.paid")
	if err != nil {
		return skippedHooks(out, err)
	}
	defer d.disableHook(endpoint)
	p, err := d.payNewOrder(ctx, rt, oncepayRoutes.paymentNotify, "I16", "payment", &out)
	if err != nil {
		return out, err
	}
	var mine []hookCall
	deadline := time.Now().Add(hookWait)
	for time.Now().Before(deadline) {
		mine = callsFor(h.got(), "order.paid", p.id, "")
		if len(mine) >= 2 {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return out, err
		}
	}
	shipped := h.shipments(p.id)
	switch {
	case len(mine) == 0:
		out.answerf("no order.paid for order %s reached the receiver within %s", p.id, hookWait)
	case len(mine) == 1:
		out.answerf("the lost 2xx was not retried within %s: one attempt only", hookWait)
	case mine[0].eventID != mine[1].eventID || mine[0].eventID == "":
		out.answerf("the retry carried Oncepay-Event-Id %q, the first %q: a receiver cannot deduplicate", mine[1].eventID, mine[0].eventID)
	case string(mine[0].body) != string(mine[1].body):
		out.answerf("the retry's body differs from the first attempt's")
	}
	if shipped != 1 {
		out.effectf("order %s shipped %d times for one payment (%d deliveries of event %s)", p.id, shipped, len(mine), firstID(mine))
	}
	attempts := make([]string, len(mine))
	for i, c := range mine {
		attempts[i] = c.attempt
	}
	out.expected = "one shipment; the retry is the same event (same Oncepay-Event-Id and body)"
	out.observed = fmt.Sprintf("%d deliveries (attempts %s); %d shipment(s)", len(mine), strings.Join(attempts, ","), shipped)
	out.held = "the lost 2xx was retried as the same event and the receiver's dedup record answered it without shipping again"
	return out, nil
}

// announcedRollback is I17: an order whose stock is short rolls back after its order.created
// was written. The receiver must never hear of it. oncepay writes the event in the
// transaction and delivers it only after the commit; the lab's replica sends it from inside
// the transaction. Then a committed order on a SKU with stock proves the receiver was
// listening: its event arrives, and the rolled-back one never did.
func (d *drill) announcedRollback(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	h, err := newHookReceiver(true, false)
	if err != nil {
		return out, err
	}
	defer h.close()
	endpoint, err := d.registerHook(ctx, h, "order.created")
	if err != nil {
		return skippedHooks(out, err)
	}
	defer d.disableHook(endpoint)
	empty, err := d.newSKU(ctx, rt, "I17-EMPTY", 1999, 0)
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	refused := d.c.fireHTTP(ctx, t0, "order on empty stock", call{method: http.MethodPost, path: rt.announceOrders,
		bearer: d.cfg.UserKey, idemKey: d.key(rt, "I17"), body: orderBody(empty.SKU, 1), requestID: d.requestID()}, nil)
	out.copies = append(out.copies, refused)
	if refused.Status != http.StatusConflict || refused.Code != "out_of_stock" {
		return out, fmt.Errorf("the order on an empty SKU answered %d %s, want 409 out_of_stock: no rollback to watch", refused.Status, refused.Code)
	}
	_, witness, err := d.orderOnNewSKU(ctx, rt, "I17-OK", 1)
	if err != nil {
		return out, err
	}
	deadline := time.Now().Add(hookWait)
	for time.Now().Before(deadline) && len(callsFor(h.got(), "order.created", string(witness.OrderID), "")) == 0 {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return out, err
		}
	}
	if len(callsFor(h.got(), "order.created", string(witness.OrderID), "")) == 0 {
		out.answerf("the committed order %s was not announced within %s: the receiver heard nothing to judge by", witness.OrderID, hookWait)
	}
	phantoms := callsFor(h.got(), "order.created", "", empty.SKU)
	for _, c := range phantoms {
		var ev hookEvent
		_ = json.Unmarshal(c.body, &ev)
		a, err := d.c.do(ctx, d.get("/v1/orders/"+ev.Data.OrderID, d.cfg.UserKey))
		if err == nil && a.status == http.StatusNotFound {
			out.effectf("the receiver was told of order %s (event %s), which does not exist: its transaction rolled back", ev.Data.OrderID, c.eventID)
		} else if err == nil {
			out.effectf("the receiver was told of order %s on the empty SKU (GET answered %d)", ev.Data.OrderID, a.status)
		}
	}
	out.expected = "no event for the rolled-back order; the committed order's event arrives"
	out.observed = fmt.Sprintf("%d event(s) for the rolled-back order; the committed one's: %d", len(phantoms),
		len(callsFor(h.got(), "order.created", string(witness.OrderID), "")))
	out.held = "the rolled-back order announced nothing; the committed one was delivered after its commit"
	return out, nil
}

// callsFor returns the calls carrying an event of typ about order id (any when ""), or on a
// line of sku (any when "").
func callsFor(calls []hookCall, typ, id, sku string) []hookCall {
	var out []hookCall
	for _, c := range calls {
		var ev hookEvent
		if json.Unmarshal(c.body, &ev) != nil || ev.Type != typ || (id != "" && ev.Data.OrderID != id) {
			continue
		}
		if sku != "" && !hasSKU(ev, sku) {
			continue
		}
		out = append(out, c)
	}
	return out
}

func hasSKU(ev hookEvent, sku string) bool {
	for _, it := range ev.Data.Items {
		if it.SKU == sku {
			return true
		}
	}
	return false
}

func firstID(calls []hookCall) string {
	if len(calls) == 0 {
		return "-"
	}
	return calls[0].eventID
}
