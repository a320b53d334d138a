package app_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/explain"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// explainedWrite is one order's whole history, made through the service's own routes: placed
// with a one-time token as its key, its trade opened, paid at the simulator, refunded, and
// every event delivered to a merchant's endpoint.
type explainedWrite struct {
	s       *apptest.Server
	alice   string
	token   string
	payKey  string
	rfKey   string
	order   order.View
	trade   payment.TradeView
	refund  refund.View
	hooks   *hookReceiver
	eventTy []string
}

// explainServer is a channel server on db whose webhook loop polls quickly.
func explainServer(t *testing.T, db *gorm.DB) *apptest.Server {
	return apptest.StartOn(t, app.Deps{DB: db, Redis: testenv.Redis(t), Kafka: testenv.Kafka(t)}, func(c *config.Config) {
		c.CloseJobInterval, c.ReconcileJobInterval, c.RefundJobInterval = time.Hour, time.Hour, time.Hour
		c.WebhookInterval = 20 * time.Millisecond
		c.WebhookSchedule = []time.Duration{200 * time.Millisecond, 200 * time.Millisecond}
	})
}

// makeExplainedWrite runs the history on s.
func makeExplainedWrite(t *testing.T, s *apptest.Server) *explainedWrite {
	t.Helper()
	w := &explainedWrite{s: s, alice: aliceID(t, s), hooks: newHookReceiver(t), payKey: "explain-pay-" + apptest.RandHex(4),
		rfKey: "explain-refund-" + apptest.RandHex(4), eventTy: []string{"order.created", "order.paid", "order.refunded", "refund.succeeded"}}
	register(t, s, w.hooks.srv.URL, w.eventTy...)
	w.token = s.Token(t, apptest.AliceKey)
	w.order = s.CreateOrder(t, apptest.AliceKey, w.token, apptest.Item{SKU: "SKU-1002", Quantity: 1})
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+w.order.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey(w.payKey)),
		http.StatusCreated).Decode(t, &w.trade)
	if err := s.App.Channel.Pay(w.order.OrderID); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, w.order.OrderID, order.Paid)
	apptest.Must(t, postRefund(s, apptest.AliceKey, w.order.OrderID, w.rfKey, nil), http.StatusCreated).Decode(t, &w.refund)
	waitRefund(t, s, w.refund.RefundID, refund.Succeeded)
	waitStatus(t, s, w.order.OrderID, order.Refunded)
	apptest.Eventually(t, 20*time.Second, "every event delivered", func() (bool, string) {
		for _, typ := range w.eventTy {
			if len(w.hooks.ofType(typ)) != 1 {
				return false, fmt.Sprintf("%s: %d deliveries", typ, len(w.hooks.ofType(typ)))
			}
		}
		return true, ""
	})
	// The delivery's own row is updated after the receiver answered: wait for it too.
	apptest.Eventually(t, 10*time.Second, "every delivery marked succeeded", func() (bool, string) {
		n := s.Count(t, "webhook_deliveries", "status <> ?", webhook.Succeeded)
		return n == 0, fmt.Sprintf("%d deliveries not succeeded", n)
	})
	return w
}

// explainBy asks GET /v1/admin/explain with q.
func explainBy(t *testing.T, s *apptest.Server, q url.Values) explain.Explanation {
	t.Helper()
	var x explain.Explanation
	apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/explain?"+q.Encode(), apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &x)
	return x
}

// check holds x to the history: every layer present, with the write's ids.
func (w *explainedWrite) check(t *testing.T, x explain.Explanation) {
	t.Helper()
	oid, ch, tradeNo, outRefundNo := w.order.OrderID, w.trade.Channel, w.trade.TradeNo, w.refund.OutRefundNo
	if x.Subject != (explain.Subject{Kind: "order", ID: oid}) {
		t.Fatalf("subject %+v, want order %s", x.Subject, oid)
	}
	if len(x.Truncated) != 0 {
		t.Errorf("sections truncated: %v", x.Truncated)
	}

	// Idempotency: the token, the three client keys with their attempts, the channel's reports.
	records := map[string]explain.Record{}
	for _, r := range x.Idempotency.Records {
		records[r.Scope+" "+r.BizType+" "+r.BizKey] = r
	}
	user := "user:" + w.alice
	for _, key := range []string{w.token, w.payKey, w.rfKey} {
		r, ok := records[user+" idempotency-key "+key]
		if !ok {
			t.Errorf("no record of key %s among %v", key, slices.Collect(mapKeys(records)))
			continue
		}
		if r.Outcome != "success" || r.ResponseStatus != http.StatusCreated || len(r.Attempts) == 0 || r.Attempts[0].Outcome != "executed" {
			t.Errorf("record of key %s: %+v, want a stored 201 with its executed attempt", key, r)
		}
	}
	if _, ok := records["channel:"+ch+" channel.trade "+tradeNo]; !ok {
		t.Errorf("no record of the channel's trade report %s among %v", tradeNo, slices.Collect(mapKeys(records)))
	}
	if w.refund.RefundNo == nil {
		rf := getRefund(t, w.s, w.refund.RefundID)
		w.refund.RefundNo = rf.RefundNo
	}
	if _, ok := records["channel:"+ch+" channel.refund "+*w.refund.RefundNo]; !ok {
		t.Errorf("no record of the channel's refund report %s among %v", *w.refund.RefundNo, slices.Collect(mapKeys(records)))
	}

	// The order, its stock and its transitions.
	if x.Order == nil || x.Order.Status != "REFUNDED" || len(x.Order.Movements) < 2 {
		t.Fatalf("order section %+v, want the REFUNDED order with its stock movements", x.Order)
	}
	var to []string
	for _, tr := range x.Order.Transitions {
		to = append(to, tr.To)
	}
	if !slices.Equal(to, []string{"PENDING_PAYMENT", "PAID", "REFUNDED"}) {
		t.Errorf("transitions %v, want PENDING_PAYMENT, PAID, REFUNDED", to)
	}
	var topics []string
	for _, m := range x.Outbox {
		if m.MsgKey != oid {
			t.Errorf("outbox message %+v is not the order's", m)
		}
		topics = append(topics, m.Type)
	}
	if !slices.Equal(topics, []string{"order.created", "order.paid", "order.refunded"}) {
		t.Errorf("outbox messages %v, want order.created, order.paid, order.refunded", topics)
	}

	// The merchant's events, each delivered once with a 200.
	var types []string
	for _, ev := range x.Events {
		types = append(types, ev.Type)
		if len(ev.Delivery) != 1 || ev.Delivery[0].Status != string(webhook.Succeeded) || len(ev.Delivery[0].Sent) != 1 || ev.Delivery[0].Sent[0].StatusCode != 200 {
			t.Errorf("event %s deliveries %+v, want one succeeded with one 200 attempt", ev.Type, ev.Delivery)
		}
	}
	slices.Sort(types)
	if want := slices.Sorted(slices.Values(w.eventTy)); !slices.Equal(types, want) {
		t.Errorf("events %v, want %v", types, want)
	}

	// The channel: the trade, its payment, the refund, the numbers claimed.
	c := x.Channel
	if len(c.Trades) != 1 || c.Trades[0].TradeNo == nil || *c.Trades[0].TradeNo != tradeNo || c.Trades[0].OutTradeNo != oid {
		t.Errorf("trades %+v, want the order's trade %s", c.Trades, tradeNo)
	}
	if len(c.Payments) != 1 || c.Payments[0].TradeNo != tradeNo || c.Payments[0].Channel != ch {
		t.Errorf("payments %+v, want one of trade %s", c.Payments, tradeNo)
	}
	if len(c.Refunds) != 1 || c.Refunds[0].OutRefundNo != outRefundNo || c.Refunds[0].Status != "SUCCEEDED" {
		t.Errorf("refunds %+v, want %s SUCCEEDED", c.Refunds, outRefundNo)
	}
	claimed := map[string]string{}
	for _, cl := range c.Claims {
		claimed[cl.Space+" "+cl.ChannelNo] = cl.OwnerKind + " " + cl.OwnerNo
	}
	if claimed["trade "+tradeNo] != "trade "+oid {
		t.Errorf("claims %v, want trade %s claimed by the order", claimed, tradeNo)
	}

	// The books: the capture, the refund's hold and its posted end.
	books := map[string]string{}
	for _, tr := range x.Ledger.Transfers {
		books[tr.ID] = tr.Kind
	}
	refundID := "refund:" + ch + ":" + outRefundNo
	want := map[string]string{"trade:" + ch + ":" + tradeNo: "capture", refundID: "pending", refundID + ":end": "post"}
	for id, kind := range want {
		if books[id] != kind {
			t.Errorf("ledger transfers %v, want %s %s", books, id, kind)
		}
	}

	// One timeline, sorted, with every layer.
	layers := map[string]int{}
	for i, e := range x.Timeline {
		layers[e.Layer]++
		if i > 0 && e.At.Before(x.Timeline[i-1].At) {
			t.Errorf("timeline entry %d (%s) is before the one above it (%s)", i, e.At, x.Timeline[i-1].At)
		}
		if len(e.IDs) == 0 {
			t.Errorf("timeline entry %+v names no row", e)
		}
	}
	for _, l := range []string{"idempotency", "order", "outbox", "webhook", "channel", "ledger"} {
		if layers[l] == 0 {
			t.Errorf("the timeline has no %s entry: %v", l, layers)
		}
	}
}

// mapKeys iterates over the keys of m.
func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestExplainEveryHandle: an order placed with a one-time token, paid at the simulator,
// refunded and announced to a merchant is explained alike from each of its four handles — the
// key, the order id, the trade number, the out_refund_no — with every layer's rows and one
// sorted timeline. The key's explanation also shows the token, used, of alice's scope. On
// SQLite and on MariaDB.
func TestExplainEveryHandle(t *testing.T) {
	testenv.OnBothDialects(t, func(t *testing.T, db *gorm.DB) {
		s := explainServer(t, db)
		w := makeExplainedWrite(t, s)
		for name, q := range map[string]url.Values{
			"key":                    {"key": {w.token}, "user_id": {w.alice}},
			"order":                  {"order": {w.order.OrderID}},
			"trade":                  {"trade": {w.trade.TradeNo}},
			"trade with its channel": {"trade": {w.trade.TradeNo}, "channel": {w.trade.Channel}},
			"refund":                 {"refund": {w.refund.OutRefundNo}},
		} {
			t.Run(name, func(t *testing.T) {
				x := explainBy(t, s, q)
				w.check(t, x)
				tok := x.Idempotency.Token
				if name == "key" && (tok == nil || !tok.Found || !tok.Used || tok.Scope != "user:"+w.alice) {
					t.Errorf("token %+v, want alice's, used", tok)
				}
				if name != "key" && tok != nil {
					t.Errorf("token %+v in an explanation that did not start from a key", tok)
				}
			})
		}
	})
}

// TestExplainRefusals: a request that names no handle, two, an unknown parameter or a
// malformed value is 400 invalid_request; a well-formed handle that names nothing is 404
// not_found; a user's key is 403, no key 401. Nothing is ever a 500. The page shows the same
// refusals, as HTML with the same status.
func TestExplainRefusals(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	o := s.CreateOrder(t, apptest.AliceKey, "explain-refusals", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	alice := aliceID(t, s)
	for _, q := range []string{
		"", "order=" + o.OrderID + "&refund=R1", "key=k1", "user_id=" + alice, "order=abc", "order=0" + o.OrderID,
		"order=" + o.OrderID + "&order=" + o.OrderID, "order=" + o.OrderID + "&channel=simpay", "trade=T1&channel=Sim-Pay",
		"refund=", "trade=" + strings.Repeat("x", 129), "key=k1&user_id=alice", "order=" + o.OrderID + "&limit=5",
	} {
		t.Run("400 "+q, func(t *testing.T) {
			apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/explain?"+q, apptest.AdminKey, nil, nil), http.StatusBadRequest, "invalid_request")
		})
	}
	for _, q := range []string{
		"order=1861234567890123456", "trade=T-nobody", "trade=T-nobody&channel=simpay", "refund=RF-nobody",
		"key=never-used&user_id=" + alice, "key=explain-refusals&user_id=1861234567890123456",
	} {
		t.Run("404 "+q, func(t *testing.T) {
			apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/explain?"+q, apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")
		})
	}
	x := explainBy(t, s, url.Values{"key": {"explain-refusals"}, "user_id": {alice}})
	if x.Subject.ID != o.OrderID || x.Order == nil || x.Order.Status != "PENDING_PAYMENT" {
		t.Errorf("the order's key explains %+v, order %+v; want the pending order %s", x.Subject, x.Order, o.OrderID)
	}
	// The page: its forms alone, then a refusal shown on the page with the API's status, then
	// the explanation; always HTML that is never cached, framed or scripted.
	for _, c := range []struct {
		q      string
		status int
		want   string
	}{
		{"", http.StatusOK, `name="order"`},
		{"order=&refund=&trade=&channel=&key=&user_id=", http.StatusOK, `name="refund"`},
		{"order=abc", http.StatusBadRequest, "400 invalid_request"},
		{"refund=RF-nobody", http.StatusNotFound, "404 not_found"},
		{"order=" + o.OrderID + "&refund=", http.StatusOK, `data-layer="order"`},
	} {
		r := s.Do(http.MethodGet, "/v1/admin/explain/page?"+c.q, apptest.AdminKey, nil, nil)
		if r.Status != c.status || !strings.Contains(string(r.Body), c.want) {
			t.Errorf("page ?%s: %d, want %d with %q:\n%s", c.q, r.Status, c.status, c.want, r.Body)
		}
		if ct, csp := r.Header.Get("Content-Type"), r.Header.Get("Content-Security-Policy"); ct != "text/html; charset=utf-8" ||
			!strings.HasPrefix(csp, "default-src 'none'") || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("page ?%s: Content-Type %q, CSP %q, Cache-Control %q", c.q, ct, csp, r.Header.Get("Cache-Control"))
		}
		if strings.Contains(string(r.Body), "<script") {
			t.Errorf("page ?%s has a script", c.q)
		}
	}
	apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/explain?order="+o.OrderID, apptest.AliceKey, nil, nil), http.StatusForbidden, "forbidden")
	apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/explain?order="+o.OrderID, "", nil, nil), http.StatusUnauthorized, "unauthorized")
	apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/explain/page?order="+o.OrderID, "", nil, nil), http.StatusUnauthorized, "unauthorized")
}
