package app_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// hookReceiver records every webhook request it gets and answers 200.
type hookReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []hookHit
}

type hookHit struct {
	header http.Header
	body   []byte
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.hits = append(h.hits, hookHit{header: r.Header.Clone(), body: body})
		h.mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) got() []hookHit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.hits)
}

// ofType returns the hits carrying an event of typ.
func (h *hookReceiver) ofType(typ string) []hookHit {
	var out []hookHit
	for _, x := range h.got() {
		if x.header.Get(webhook.HeaderEventType) == typ {
			out = append(out, x)
		}
	}
	return out
}

// signedBy reports whether some v1= of the signature header is secret's HMAC of "<t>.<body>".
func signedBy(header string, body []byte, secret string) bool {
	var ts string
	var sigs []string
	for _, p := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(p, "=")
		if k == "t" {
			ts = v
		} else if k == "v1" {
			sigs = append(sigs, v)
		}
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := hex.EncodeToString(mac.Sum(nil))
	return slices.Contains(sigs, want)
}

// webhookServer is a channel server whose webhook loop polls quickly.
func webhookServer(t *testing.T) *apptest.Server {
	return channelServer(t, func(c *config.Config) {
		c.WebhookInterval = 20 * time.Millisecond
		c.WebhookSchedule = []time.Duration{200 * time.Millisecond, 200 * time.Millisecond}
	})
}

// register registers an endpoint for url and types and returns it with its secret.
func register(t *testing.T, s *apptest.Server, url string, types ...string) webhook.EndpointView {
	t.Helper()
	var e webhook.EndpointView
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints", apptest.AdminKey,
		map[string]any{"url": url, "event_types": types, "description": "test"}, nil), http.StatusCreated).Decode(t, &e)
	if e.Secret == "" || e.Status != webhook.Enabled || e.EndpointID == "" {
		t.Fatalf("registered %+v", e)
	}
	return e
}

// TestWebhookEndToEnd: an endpoint registered over the admin API hears, signed with its
// secret, every event of the types it subscribed to as orders are created, paid, cancelled
// and refunded and a recharge is credited, each with the resource as it was; the delivery
// log shows every attempt; a redelivery is the same event; a rotation signs with both
// secrets; an order that rolled back (out of stock) announced nothing.
func TestWebhookEndToEnd(t *testing.T) {
	s := webhookServer(t)
	rcv := newHookReceiver(t)
	all := []string{"order.created", "order.paid", "order.cancelled", "order.refunded", "refund.succeeded", "recharge.succeeded"}
	e := register(t, s, rcv.srv.URL, all...)

	// The secret is shown once: never by get or list.
	got := apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/webhook-endpoints/"+e.EndpointID, apptest.AdminKey, nil, nil), http.StatusOK)
	if strings.Contains(string(got.Body), e.Secret) || strings.Contains(string(got.Body), "secret") {
		t.Errorf("get shows the secret: %s", got.Body)
	}
	list := apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/webhook-endpoints", apptest.AdminKey, nil, nil), http.StatusOK)
	if strings.Contains(string(list.Body), e.Secret) || !strings.Contains(string(list.Body), e.EndpointID) {
		t.Errorf("list: %s", list.Body)
	}

	eventsBefore := s.Count(t, "events", "1 = 1")
	s.PutInventory(t, "SKU-1003", 89900, 0)
	apptest.WantProblem(t, s.PostOrder(apptest.AliceKey, "wh-oos", apptest.Item{SKU: "SKU-1003", Quantity: 1}), http.StatusConflict, "out_of_stock")
	if n := s.Count(t, "events", "1 = 1"); n != eventsBefore {
		t.Errorf("an order rolled back for lack of stock left %d events (I17)", n-eventsBefore)
	}

	paid := paidOrder(t, s, "wh-paid")
	cancelled := s.CreateOrder(t, apptest.AliceKey, "wh-cancel", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+cancelled.OrderID+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("wh-c")), http.StatusOK)
	var rf refund.View
	apptest.Must(t, postRefund(s, apptest.AliceKey, paid.OrderID, "wh-r", nil), http.StatusCreated).Decode(t, &rf)
	waitRefund(t, s, rf.RefundID, refund.Succeeded)
	waitStatus(t, s, paid.OrderID, order.Refunded)
	rid := s.CreateRecharge(t, apptest.AliceKey, 5000)
	apptest.Must(t, s.NotifyRecharge(apptest.RechargeReport(rid, "simpay", "T-wh-"+rid, 5000)), http.StatusOK)

	want := map[string]int{"order.created": 2, "order.paid": 1, "order.cancelled": 1, "order.refunded": 1, "refund.succeeded": 1, "recharge.succeeded": 1}
	apptest.Eventually(t, 20*time.Second, "every event delivered", func() (bool, string) {
		for typ, n := range want {
			if len(rcv.ofType(typ)) != n {
				return false, fmt.Sprintf("%s: %d of %d", typ, len(rcv.ofType(typ)), n)
			}
		}
		return true, ""
	})
	for _, h := range rcv.got() {
		if !signedBy(h.header.Get(webhook.HeaderSignature), h.body, e.Secret) {
			t.Errorf("%s: signature %q does not verify", h.header.Get(webhook.HeaderEventType), h.header.Get(webhook.HeaderSignature))
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(h.body, &raw); err != nil || raw["event_id"] == nil || raw["data"] == nil || raw["created_at"] == nil {
			t.Errorf("body %s is not an event", h.body)
		}
		if id := h.header.Get(webhook.HeaderEventID); !strings.Contains(string(raw["event_id"]), id) || id == "" {
			t.Errorf("Oncepay-Event-Id %q, body's event_id %s", id, raw["event_id"])
		}
	}
	var paidData struct {
		Data order.View `json:"data"`
	}
	if err := json.Unmarshal(rcv.ofType("order.paid")[0].body, &paidData); err != nil || paidData.Data.OrderID != paid.OrderID ||
		paidData.Data.Status != order.Paid || paidData.Data.TradeNo == nil || paidData.Data.PaidAt == nil {
		t.Errorf("order.paid data %+v (%v): want the order as it was when paid", paidData.Data, err)
	}
	var refundData struct {
		Data refund.View `json:"data"`
	}
	if err := json.Unmarshal(rcv.ofType("refund.succeeded")[0].body, &refundData); err != nil || refundData.Data.RefundID != rf.RefundID || refundData.Data.Status != refund.Succeeded {
		t.Errorf("refund.succeeded data %+v (%v)", refundData.Data, err)
	}

	// The delivery log, filtered by event.
	paidHit := rcv.ofType("order.paid")[0]
	paidID := paidHit.header.Get(webhook.HeaderEventID)
	var log struct {
		Deliveries []webhook.AttemptView `json:"deliveries"`
	}
	apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/deliveries?event_id="+paidID, apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &log)
	if len(log.Deliveries) != 1 || log.Deliveries[0].StatusCode != 200 || log.Deliveries[0].Attempt != 1 || *log.Deliveries[0].ResponseSnippet != "ok" {
		t.Errorf("log %+v", log.Deliveries)
	}

	// Redeliver: the same event, same body, a new attempt; a retry of the call queues nothing more.
	redeliver := func(key string) apptest.Response {
		return s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/redeliver", apptest.AdminKey,
			map[string]string{"event_id": paidID}, apptest.IdemKey(key))
	}
	apptest.Must(t, redeliver("rd-1"), http.StatusAccepted)
	replay := apptest.Must(t, redeliver("rd-1"), http.StatusAccepted)
	if replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the retried redeliver was not a replay: %s", replay)
	}
	apptest.Eventually(t, 10*time.Second, "the redelivery", func() (bool, string) {
		n := len(rcv.ofType("order.paid"))
		return n == 2, fmt.Sprint(n)
	})
	time.Sleep(300 * time.Millisecond)
	again := rcv.ofType("order.paid")
	if len(again) != 2 || string(again[1].body) != string(paidHit.body) || again[1].header.Get(webhook.HeaderEventID) != paidID ||
		again[1].header.Get(webhook.HeaderAttempt) != "2" {
		t.Errorf("redelivery: %d copies, attempt %q; want the same event once more as attempt 2", len(again), again[len(again)-1].header.Get(webhook.HeaderAttempt))
	}

	// Rotation: the new secret and the old one both sign, for the grace.
	apptest.WantProblem(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/rotate-secret", apptest.AdminKey, nil, nil),
		http.StatusBadRequest, "idempotency_key_missing")
	var rot struct{ Secret string }
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/rotate-secret", apptest.AdminKey,
		map[string]string{"grace": "1h"}, apptest.IdemKey("rot-1")), http.StatusOK).Decode(t, &rot)
	var rot2 struct{ Secret string }
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/rotate-secret", apptest.AdminKey,
		map[string]string{"grace": "1h"}, apptest.IdemKey("rot-1")), http.StatusOK).Decode(t, &rot2)
	if rot.Secret == "" || rot.Secret == e.Secret || rot2.Secret != rot.Secret {
		t.Fatalf("rotation answered %q then %q (old %q): want one new secret, replayed", rot.Secret, rot2.Secret, e.Secret)
	}
	// The dedup record holds no secret (docs/security.md): only its fingerprint.
	if n := s.Count(t, "idempotency_records", "response_body LIKE ?", "%"+rot.Secret+"%"); n != 0 {
		t.Errorf("%d dedup records hold the rotated secret", n)
	}
	apptest.Must(t, redeliver("rd-2"), http.StatusAccepted)
	apptest.Eventually(t, 10*time.Second, "the redelivery after the rotation", func() (bool, string) {
		n := len(rcv.ofType("order.paid"))
		return n == 3, fmt.Sprint(n)
	})
	last := rcv.ofType("order.paid")[2]
	sig := last.header.Get(webhook.HeaderSignature)
	if strings.Count(sig, "v1=") != 2 || !signedBy(sig, last.body, rot.Secret) || !signedBy(sig, last.body, e.Secret) {
		t.Errorf("signature during the rotation %q: want two v1=, by the new and the old secret", sig)
	}
	// Rotated again under another key: a replay of the first rotation no longer shows a
	// secret that does not sign.
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/rotate-secret", apptest.AdminKey,
		nil, apptest.IdemKey("rot-2")), http.StatusOK)
	apptest.WantProblem(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/rotate-secret", apptest.AdminKey,
		map[string]string{"grace": "1h"}, apptest.IdemKey("rot-1")), http.StatusConflict, "illegal_state")
}

// TestWebhookRefusals: a registration or change the contract refuses is 400 with its code
// and stores nothing.
func TestWebhookRefusals(t *testing.T) {
	s := apptest.StartHTTPOnly(t, func(c *config.Config) { c.WebhookDev = false })
	post := func(body any) apptest.Response {
		return s.Do(http.MethodPost, "/v1/admin/webhook-endpoints", apptest.AdminKey, body, nil)
	}
	for name, body := range map[string]any{
		"http outside dev":     map[string]any{"url": "http://example.com/hook", "event_types": []string{"order.paid"}},
		"an invalid port":      map[string]any{"url": "https://example.com:99999/hook", "event_types": []string{"order.paid"}},
		"not a url":            map[string]any{"url": "hook", "event_types": []string{"order.paid"}},
		"unknown type":         map[string]any{"url": "https://example.com/hook", "event_types": []string{"order.shipped"}},
		"no types":             map[string]any{"url": "https://example.com/hook", "event_types": []string{}},
		"a type twice":         map[string]any{"url": "https://example.com/hook", "event_types": []string{"order.paid", "order.paid"}},
		"unknown field":        map[string]any{"url": "https://example.com/hook", "event_types": []string{"order.paid"}, "secret": "mine"},
		"user info in the url": map[string]any{"url": "https://u:p@example.com/hook", "event_types": []string{"order.paid"}},
	} {
		t.Run(name, func(t *testing.T) { apptest.WantProblem(t, post(body), http.StatusBadRequest, "invalid_request") })
	}
	if n := s.Count(t, "webhook_endpoints", "1 = 1"); n != 0 {
		t.Errorf("%d endpoints stored by refused registrations", n)
	}
	apptest.WantProblem(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints", apptest.AliceKey,
		map[string]any{"url": "https://example.com/hook", "event_types": []string{"order.paid"}}, nil), http.StatusForbidden, "forbidden")

	e := register(t, s, "https://example.com/hook", "order.paid")
	path := "/v1/admin/webhook-endpoints/" + e.EndpointID
	apptest.WantProblem(t, s.Do(http.MethodPatch, path, apptest.AdminKey, map[string]any{"status": "failing"}, nil), http.StatusBadRequest, "invalid_request")
	apptest.WantProblem(t, s.Do(http.MethodPatch, path, apptest.AdminKey, map[string]any{}, nil), http.StatusBadRequest, "invalid_request")
	apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/webhook-endpoints/123", apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")
	var patched webhook.EndpointView
	apptest.Must(t, s.Do(http.MethodPatch, path, apptest.AdminKey, map[string]any{"status": "disabled", "event_types": []string{"order.paid", "refund.failed"}}, nil), http.StatusOK).Decode(t, &patched)
	if patched.Status != webhook.Disabled || len(patched.EventTypes) != 2 {
		t.Errorf("patched %+v", patched)
	}
	apptest.WantProblem(t, s.Do(http.MethodPost, path+"/redeliver", apptest.AdminKey, map[string]any{"event_id": "1", "from": "2026-01-01T00:00:00Z"}, apptest.IdemKey("x")),
		http.StatusBadRequest, "invalid_request")
	apptest.WantProblem(t, s.Do(http.MethodPost, path+"/redeliver", apptest.AdminKey, map[string]any{"event_id": "12345"}, apptest.IdemKey("y")),
		http.StatusNotFound, "not_found")
	apptest.WantProblem(t, s.Do(http.MethodPost, path+"/rotate-secret", apptest.AdminKey, map[string]any{"grace": "forever"}, apptest.IdemKey("z")),
		http.StatusBadRequest, "invalid_request")
	for _, q := range []string{"?after=nope", "?limit=0", "?type=order.shipped", "?x=1", "?limit=1&limit=2"} {
		apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/events"+q, apptest.AdminKey, nil, nil), http.StatusBadRequest, "invalid_request")
	}
}

// TestWebhookAddressSpellings: outside dev, every spelling of a loopback, private, link-local,
// unique-local or metadata address is refused 400 url_refused naming its rule, at registration
// and by a PATCH of the URL, and nothing is stored (issue 27).
func TestWebhookAddressSpellings(t *testing.T) {
	s := apptest.StartHTTPOnly(t, func(c *config.Config) { c.WebhookDev = false })
	e := register(t, s, "https://example.com/hook", "order.paid")
	for _, u := range []string{
		"https://10.0.0.7", "https://172.16.5.4", "https://192.168.1.20", "https://[fd00::1]", "https://127.1",
		"https://2130706433", "https://0x7f000001", "https://0177.0.0.1", "https://[::1%25lo]",
		"https://[::ffff:127.0.0.1%25lo]", "https://[fe80::1%25eth0]", "https://[::ffff:127.0.0.1]",
		"https://100.100.100.200", "https://[fd00:ec2::254]", "https://169.254.169.254/latest",
		"https://127.0.0.1/hook", "https://localhost:8443/hook", "https://100.64.0.9",
	} {
		t.Run(u, func(t *testing.T) {
			r := s.Do(http.MethodPost, "/v1/admin/webhook-endpoints", apptest.AdminKey,
				map[string]any{"url": u, "event_types": []string{"order.paid"}}, nil)
			apptest.WantProblem(t, r, http.StatusBadRequest, "url_refused")
			if d := r.Problem().Detail; !strings.Contains(d, "rule ") {
				t.Errorf("detail %q names no rule", d)
			}
			apptest.WantProblem(t, s.Do(http.MethodPatch, "/v1/admin/webhook-endpoints/"+e.EndpointID, apptest.AdminKey,
				map[string]any{"url": u}, nil), http.StatusBadRequest, "url_refused")
		})
	}
	if n := s.Count(t, "webhook_endpoints", "url <> 'https://example.com/hook'"); n != 0 {
		t.Errorf("%d refused URLs stored", n)
	}
}

// TestEventsAPIPages: the events API pages the feed by its cursor in order of creation,
// filtered by type, and a client that keeps passing next_cursor sees each event once.
func TestEventsAPIPages(t *testing.T) {
	s := webhookServer(t)
	var orders []string
	for i := range 3 {
		o := s.CreateOrder(t, apptest.AliceKey, apptest.Key("feed", i), apptest.Item{SKU: "SKU-1002", Quantity: 1})
		orders = append(orders, o.OrderID)
	}
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+orders[1]+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("feed-c")), http.StatusOK)
	type page struct {
		Events []struct {
			EventID string `json:"event_id"`
			Type    string `json:"type"`
			Data    struct {
				OrderID string `json:"order_id"`
			} `json:"data"`
		} `json:"events"`
		NextCursor string `json:"next_cursor"`
		HasMore    bool   `json:"has_more"`
	}
	var seen []string
	apptest.Eventually(t, 10*time.Second, "four events in the feed", func() (bool, string) {
		seen = nil
		cursor := ""
		for range 10 {
			var p page
			q := "?limit=1"
			if cursor != "" {
				q += "&after=" + cursor
			}
			apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/events"+q, apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &p)
			for _, e := range p.Events {
				seen = append(seen, e.Type+" "+e.Data.OrderID)
			}
			cursor = p.NextCursor
			if !p.HasMore {
				break
			}
		}
		return len(seen) == 4, strings.Join(seen, ", ")
	})
	want := []string{"order.created " + orders[0], "order.created " + orders[1], "order.created " + orders[2], "order.cancelled " + orders[1]}
	if !slices.Equal(seen, want) {
		t.Errorf("feed %v, want %v", seen, want)
	}
	var cancelled page
	apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/events?type=order.cancelled", apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &cancelled)
	if len(cancelled.Events) != 1 || cancelled.Events[0].Data.OrderID != orders[1] {
		t.Errorf("type filter: %+v", cancelled.Events)
	}
}
