package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// The hostile suite: requests a user, an admin or a channel should never send, over HTTP and
// over Kafka, each refused with the contract's status and code, never a 5xx, and leaving the
// business state — the rows of apptest.StateTables and the values inside them — as it was,
// except for the anomaly the contract asks for. It covers what the per-package tests leave out
// (TestStrictRequests, TestHTTPConventions, TestMetricsLabelsBounded, TestConsumerRejects,
// TestMalformedCopyFirst, TestMalformedRechargeNotifyFirst, TestInventorySKUPath,
// TestIdempotencyRecordsSelectors hold the rest) and calls their helpers.

// hostileCase is one request and what the server owes it.
type hostileCase struct {
	name    string
	method  string
	path    string
	auth    string            // bearer key; "" sends no Authorization
	headers map[string]string // set last; "Authorization" here overrides auth
	body    any               // as apptest.Server.Do sends it
	sign    bool              // X-Signature: body signed now, under the instance's secret, as a report of the path's kind
	status  int
	code    string           // the problem code; "" for a success
	detail  string           // a part of the problem's detail, if any
	outcome string           // Idempotency-Outcome: "" = not checked, "-" = absent
	delta   map[string]int64 // the State change the contract asks for; nil = none
}

// runHostile sends every case to s and checks its answer and the state around it.
func runHostile(t *testing.T, s *apptest.Server, cases []hostileCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			headers := map[string]string{}
			maps.Copy(headers, tc.headers)
			if tc.sign {
				raw, _ := tc.body.(string)
				headers[web.HeaderSignature] = s.SignAs(apptest.KindOf(tc.path), []byte(raw))
			}
			before := s.State(t)
			r := s.Do(tc.method, tc.path, tc.auth, tc.body, headers)
			checkAnswer(t, tc.method, r)
			if r.Status != tc.status {
				t.Fatalf("got %s, want %d %s", r, tc.status, tc.code)
			}
			if tc.code != "" && tc.method != http.MethodHead {
				apptest.WantProblem(t, r, tc.status, tc.code)
				if d := r.Problem().Detail; !strings.Contains(d, tc.detail) {
					t.Errorf("detail %q does not say %q", d, tc.detail)
				}
			}
			switch got := r.Outcome(); {
			case tc.outcome == "-" && got != "":
				t.Errorf("Idempotency-Outcome %q on a route without idempotency", got)
			case tc.outcome != "" && tc.outcome != "-" && got != tc.outcome:
				t.Errorf("Idempotency-Outcome %q, want %q", got, tc.outcome)
			}
			want := tc.delta
			if want == nil {
				want = map[string]int64{}
			}
			if got := before.Diff(s.State(t)); !maps.Equal(got, want) {
				t.Errorf("state changed by %v, want %v", apptest.Snapshot(got), apptest.Snapshot(want))
			}
		})
	}
}

// checkAnswer holds what every answer owes, whatever the request: no 5xx, an X-Request-Id, a
// challenge on every 401 and only there, and for every error a problem document whose detail
// names no Go type.
func checkAnswer(t *testing.T, method string, r apptest.Response) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("no answer: %v", r.Err)
	}
	if r.Status >= 500 {
		t.Fatalf("5xx: %s", r)
	}
	if !requestid.Valid(r.Header.Get(requestid.Header)) {
		t.Errorf("X-Request-Id %q", r.Header.Get(requestid.Header))
	}
	if challenge := r.Header.Get("WWW-Authenticate"); (r.Status == http.StatusUnauthorized) != (challenge == web.Challenge) {
		t.Errorf("%d with WWW-Authenticate %q", r.Status, challenge)
	}
	if r.Status < 400 {
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%d with Content-Type %q", r.Status, ct)
	}
	if method == http.MethodHead {
		return
	}
	p := r.Problem()
	if p.Code == "" || p.Status != r.Status {
		t.Errorf("%d whose body is not a problem: %s", r.Status, r)
	}
	if w := goTypeIn(p.Detail); w != "" {
		t.Errorf("detail %q names a Go type (%q)", p.Detail, w)
	}
}

// goTypes are what encoding/json, fmt and reflect write when they name a Go type or value.
// Unlike goTypeWords they leave out the package-like names the API itself uses
// ("channel.trade" is a biz_type).
var goTypes = []string{"struct {", "struct{", "Go value", "Go struct", "int64", "uint64", "float64", "[]", "map[", "interface {}",
	"order.View", "createRequest", "notify.Report", "tradeWire", "refundWire", "putRequest", "json:", "reflect"}

// goTypeIn returns the first of goTypes that s holds, or "".
func goTypeIn(s string) string {
	for _, w := range goTypes {
		if strings.Contains(s, w) {
			return w
		}
	}
	return ""
}

// notifyBody is a notification body as a channel would spell it, fields in order.
func notifyBody(channel, tradeNo, outTradeNo string, amount int64) string {
	b, _ := json.Marshal(map[string]any{"channel": channel, "trade_no": tradeNo, "out_trade_no": outTradeNo, "amount": amount, "status": "SUCCESS"})
	return string(b)
}

// hostileFixture is the state the HTTP cases run against: alice's pending and paid orders, her
// pending recharge, the keys and the token that made them, and a SKU at the highest price.
type hostileFixture struct {
	pending, paid order.View
	paidTrade     string
	recharge      string
	orderKey      string // alice's key of the pending order (POST /v1/orders)
	rechargeKey   string // alice's key of the recharge (POST /v1/recharges)
	token         string // alice's token, used on POST /v1/orders
	aliceID       string
	secret        string // the instance's channel secret
}

// mismatchTrade is the trade number of the fixture's report with another amount.
func mismatchTrade(f hostileFixture) string { return "T-HOSTILE-MISMATCH-" + f.pending.OrderID }

const bigSKU = "HOSTILE-BIG"

func newHostileFixture(t *testing.T, s *apptest.Server) hostileFixture {
	t.Helper()
	f := hostileFixture{orderKey: "hostile-order-" + apptest.RandHex(4), rechargeKey: "hostile-recharge-" + apptest.RandHex(4),
		secret: s.Config.ChannelSecret}
	f.pending = s.CreateOrder(t, apptest.AliceKey, f.orderKey, apptest.Item{SKU: "SKU-1002", Quantity: 1})
	f.paid = s.CreateOrder(t, apptest.AliceKey, "hostile-paid-"+apptest.RandHex(4), apptest.Item{SKU: "SKU-1002", Quantity: 1})
	f.paidTrade = "T-HOSTILE-" + f.paid.OrderID
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(f.paid, "alipay", f.paidTrade))), http.StatusOK)
	r := apptest.Must(t, s.Do(http.MethodPost, "/v1/recharges", apptest.AliceKey, `{"amount":100}`, apptest.IdemKey(f.rechargeKey)), http.StatusCreated)
	var rc struct {
		RechargeID string `json:"recharge_id"`
	}
	r.Decode(t, &rc)
	f.recharge = rc.RechargeID
	f.token = s.Token(t, apptest.AliceKey)
	apptest.Must(t, s.PostOrder(apptest.AliceKey, f.token, apptest.Item{SKU: "SKU-1002", Quantity: 1}), http.StatusCreated)
	s.PutInventory(t, bigSKU, 10_000_000_000, 1000)
	f.aliceID = f.pending.UserID
	return f
}

// TestHostileHTTP: the listed hostile classes over HTTP, on whichever dialect the suite runs on.
func TestHostileHTTP(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	f := newHostileFixture(t, s)
	order1002 := `{"items":[{"sku":"SKU-1002","quantity":1}]}`
	key := func(k string) map[string]string { return apptest.IdemKey(k) }
	fresh := func() map[string]string { return key("hostile-" + apptest.RandHex(6)) }
	orderWith := func(item string) string { return `{"items":[` + item + `]}` }
	upperTok := "tok_" + strings.ToUpper(strings.TrimPrefix(f.token, "tok_"))
	big := string(bytes.Repeat([]byte(" "), web.MaxBodyBytes+1))

	groups := []struct {
		name  string
		cases []hostileCase
	}{
		{"made-up methods", []hostileCase{
			{name: "BREW on orders", method: "BREW", path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(), body: order1002,
				status: 405, code: "method_not_allowed", outcome: "rejected"},
			{name: "lower-case get", method: "get", path: "/v1/inventory/SKU-1001", status: 405, code: "method_not_allowed", outcome: "-"},
			{name: "PROPFIND on an unknown path", method: "PROPFIND", path: "/v1/nothing", status: 405, code: "method_not_allowed", outcome: "-"},
			{name: "PUT on orders", method: http.MethodPut, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(), body: order1002,
				status: 405, code: "method_not_allowed", outcome: "rejected"},
			{name: "DELETE on recharges", method: http.MethodDelete, path: "/v1/recharges", auth: apptest.AliceKey,
				status: 405, code: "method_not_allowed", outcome: "rejected"},
			{name: "GET on payments notify", method: http.MethodGet, path: apptest.PaymentNotifyPath,
				status: 405, code: "method_not_allowed", outcome: "rejected"},
		}},
		{"a key reused on another endpoint", []hostileCase{
			{name: "order key on recharges", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: key(f.orderKey),
				body: `{"amount":100}`, status: 422, code: "idempotency_key_reused", outcome: "mismatch"},
			{name: "recharge key on orders", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: key(f.rechargeKey),
				body: order1002, status: 422, code: "idempotency_key_reused", outcome: "mismatch"},
			{name: "order key on cancel", method: http.MethodPost, path: "/v1/orders/" + f.pending.OrderID + "/cancel", auth: apptest.AliceKey,
				headers: key(f.orderKey), status: 422, code: "idempotency_key_reused", outcome: "mismatch"},
			{name: "used token on recharges", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: key(f.token),
				body: `{"amount":100}`, status: 422, code: "idempotency_key_reused", outcome: "mismatch"},
			{name: "used token on cancel", method: http.MethodPost, path: "/v1/orders/" + f.pending.OrderID + "/cancel", auth: apptest.AliceKey,
				headers: key(f.token), status: 422, code: "idempotency_key_reused", outcome: "mismatch"},
			{name: "alice's token sent by bob", method: http.MethodPost, path: "/v1/orders", auth: apptest.BobKey, headers: key(f.token),
				body: order1002, status: 400, code: "idempotency_token_invalid", outcome: "token_invalid"},
			{name: "token in upper case", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: key(upperTok),
				body: order1002, status: 400, code: "idempotency_token_invalid", outcome: "token_invalid"},
			{name: "token with a character more", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: key(f.token + "0"),
				body: order1002, status: 400, code: "idempotency_token_invalid", outcome: "token_invalid"},
			{name: "key with a space", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey,
				headers: key("a b"), body: order1002, status: 400, code: "idempotency_key_invalid", outcome: "rejected"},
			{name: "key of 256 characters", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey,
				headers: key(strings.Repeat("k", 256)), body: `{"amount":1}`, status: 400, code: "idempotency_key_invalid", outcome: "rejected"},
			{name: "non-ASCII key", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey,
				headers: key("clé"), body: `{"amount":1}`, status: 400, code: "idempotency_key_invalid", outcome: "rejected"},
		}},
		{"SKUs are byte-exact", []hostileCase{
			{name: "lower-case SKU", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"sku-1002","quantity":1}`), status: 400, code: "unknown_sku"},
			{name: "SKU with a trailing space", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU-1002 ","quantity":1}`), status: 400, code: "invalid_request", detail: "items[0].sku", outcome: "rejected"},
			{name: "percent-encoded SKU in a body", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU%2D1002","quantity":1}`), status: 400, code: "invalid_request", detail: "items[0].sku"},
			{name: "SKU with a NUL", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU-1002\u0000","quantity":1}`), status: 400, code: "invalid_request", detail: "items[0].sku"},
			{name: "GET lower-case SKU", method: http.MethodGet, path: "/v1/inventory/sku-1002", status: 404, code: "not_found"},
			{name: "GET SKU with an encoded space", method: http.MethodGet, path: "/v1/inventory/SKU-1002%20", status: 400, code: "invalid_request"},
			{name: "GET SKU encoded twice", method: http.MethodGet, path: "/v1/inventory/SKU%252D1002", status: 400, code: "invalid_request"},
			{name: "GET SKU with an encoded slash", method: http.MethodGet, path: "/v1/inventory/SKU%2F1002", status: 400, code: "invalid_request"},
			{name: "GET SKU with an encoded NUL", method: http.MethodGet, path: "/v1/inventory/SKU-1002%00", status: 400, code: "invalid_request"},
			{name: "PUT SKU encoded twice", method: http.MethodPut, path: "/v1/admin/inventory/SKU%252D1002", auth: apptest.AdminKey,
				body: `{"price":1,"available":1}`, status: 400, code: "invalid_request"},
			{name: "PUT SKU of 65 characters", method: http.MethodPut, path: "/v1/admin/inventory/" + strings.Repeat("S", 65), auth: apptest.AdminKey,
				body: `{"price":1,"available":1}`, status: 400, code: "invalid_request"},
		}},
		{"strict JSON and ranges", []hostileCase{
			{name: "order total over 10^10", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"` + bigSKU + `","quantity":2}`), status: 400, code: "invalid_request", detail: "10^10"},
			{name: "quantity -1", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU-1002","quantity":-1}`), status: 400, code: "invalid_request", detail: "items[0].quantity"},
			{name: "quantity 2^63", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU-1002","quantity":9223372036854775808}`), status: 400, code: "invalid_request", detail: "items[0].quantity"},
			{name: "quantity 1e3", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU-1002","quantity":1e3}`), status: 400, code: "invalid_request", detail: "items[0].quantity"},
			{name: "quantity NaN as a string", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU-1002","quantity":"NaN"}`), status: 400, code: "invalid_request", detail: "items[0].quantity"},
			{name: "quantity NaN bare", method: http.MethodPost, path: "/v1/orders", auth: apptest.AliceKey, headers: fresh(),
				body: orderWith(`{"sku":"SKU-1002","quantity":NaN}`), status: 400, code: "invalid_request"},
			{name: "recharge amount 0", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: fresh(),
				body: `{"amount":0}`, status: 400, code: "invalid_request", detail: "amount"},
			{name: "recharge amount 10^10+1", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: fresh(),
				body: `{"amount":10000000001}`, status: 400, code: "invalid_request", detail: "amount"},
			{name: "recharge amount 1.5", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: fresh(),
				body: `{"amount":1.5}`, status: 400, code: "invalid_request", detail: "amount"},
			{name: "recharge amount null", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: fresh(),
				body: `{"amount":null}`, status: 400, code: "invalid_request", detail: "amount"},
			{name: "recharge amount 1e400", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: fresh(),
				body: `{"amount":1e400}`, status: 400, code: "invalid_request", detail: "amount"},
			{name: "recharge deep nesting", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: fresh(),
				body: `{"amount":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, status: 400, code: "invalid_request"},
			{name: "price 0", method: http.MethodPut, path: "/v1/admin/inventory/SKU-1002", auth: apptest.AdminKey,
				body: `{"price":0,"available":1}`, status: 400, code: "invalid_request", detail: "price"},
			{name: "price 10^10+1", method: http.MethodPut, path: "/v1/admin/inventory/SKU-1002", auth: apptest.AdminKey,
				body: `{"price":10000000001,"available":1}`, status: 400, code: "invalid_request", detail: "price"},
			{name: "price twice", method: http.MethodPut, path: "/v1/admin/inventory/SKU-1002", auth: apptest.AdminKey,
				body: `{"price":1,"available":1,"price":2}`, status: 400, code: "invalid_request", detail: `duplicate field "price"`},
			{name: "Price in another case", method: http.MethodPut, path: "/v1/admin/inventory/SKU-1002", auth: apptest.AdminKey,
				body: `{"Price":1,"available":1}`, status: 400, code: "invalid_request", detail: `unknown field "Price"`},
			{name: "available invalid UTF-8 key", method: http.MethodPut, path: "/v1/admin/inventory/SKU-1002", auth: apptest.AdminKey,
				body: "{\"price\":1,\"av\xffailable\":1}", status: 400, code: "invalid_request", detail: "UTF-8"},
		}},
		{"notifications", notificationCases(f)},
		{"auth and headers", []hostileCase{
			{name: "no key on orders", method: http.MethodPost, path: "/v1/orders", headers: fresh(), body: order1002,
				status: 401, code: "unauthorized", outcome: "rejected"},
			{name: "API key in another case", method: http.MethodPost, path: "/v1/orders", auth: strings.ToUpper(apptest.AliceKey), headers: fresh(),
				body: order1002, status: 401, code: "unauthorized", outcome: "rejected"},
			{name: "API key with a character more", method: http.MethodGet, path: "/v1/accounts/me", auth: apptest.AliceKey + "x",
				status: 401, code: "unauthorized"},
			{name: "Basic scheme", method: http.MethodGet, path: "/v1/accounts/me", headers: map[string]string{"Authorization": "Basic ZGVtby1hbGljZS1rZXk6"},
				status: 401, code: "unauthorized"},
			{name: "admin key in another case", method: http.MethodGet, path: "/v1/admin/anomalies", auth: strings.ToUpper(apptest.AdminKey),
				status: 401, code: "unauthorized"},
			{name: "admin key with a suffix", method: http.MethodPost, path: "/v1/admin/jobs/close-expired-orders/run", auth: apptest.AdminKey + "-",
				status: 401, code: "unauthorized"},
			{name: "user key on an admin route", method: http.MethodPut, path: "/v1/admin/inventory/SKU-1002", auth: apptest.AliceKey,
				body: `{"price":1,"available":1}`, status: 403, code: "forbidden"},
			{name: "HEAD admin without a key", method: http.MethodHead, path: "/v1/admin/anomalies", status: 401, code: "unauthorized"},
			{name: "HEAD orders", method: http.MethodHead, path: "/v1/orders", auth: apptest.AliceKey, status: 405, code: "method_not_allowed", outcome: "rejected"},
			{name: "413 on recharges", method: http.MethodPost, path: "/v1/recharges", auth: apptest.AliceKey, headers: fresh(), body: big,
				status: 413, code: "payload_too_large", outcome: "rejected"},
			{name: "413 on recharge notify", method: http.MethodPost, path: apptest.RechargeNotifyPath, body: big,
				status: 413, code: "payload_too_large", outcome: "rejected"},
			{name: "413 on cancel", method: http.MethodPost, path: "/v1/orders/" + f.pending.OrderID + "/cancel", auth: apptest.AliceKey,
				headers: fresh(), body: big, status: 413, code: "payload_too_large", outcome: "rejected"},
			{name: "hostile X-Request-Id", method: http.MethodGet, path: "/v1/orders/1", auth: apptest.AliceKey,
				headers: map[string]string{requestid.Header: strings.Repeat("r", 129)}, status: 404, code: "not_found"},
		}},
		{"scoping", []hostileCase{
			{name: "bob reads alice's order", method: http.MethodGet, path: "/v1/orders/" + f.pending.OrderID, auth: apptest.BobKey, status: 404, code: "not_found"},
			{name: "bob cancels alice's order", method: http.MethodPost, path: "/v1/orders/" + f.pending.OrderID + "/cancel", auth: apptest.BobKey,
				headers: fresh(), status: 404, code: "not_found"},
			{name: "bob reads alice's recharge", method: http.MethodGet, path: "/v1/recharges/" + f.recharge, auth: apptest.BobKey, status: 404, code: "not_found"},
			{name: "order id with a sign", method: http.MethodGet, path: "/v1/orders/+" + f.pending.OrderID, auth: apptest.AliceKey, status: 404, code: "not_found"},
			{name: "order id with a leading zero", method: http.MethodGet, path: "/v1/orders/0" + f.pending.OrderID, auth: apptest.AliceKey, status: 404, code: "not_found"},
			{name: "order id over int64", method: http.MethodGet, path: "/v1/orders/99999999999999999999", auth: apptest.AliceKey, status: 404, code: "not_found"},
		}},
		{"policy and records", recordCases(f)},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) { runHostile(t, s, g.cases) })
	}

	body := string(apptest.Must(t, s.Do(http.MethodGet, "/metrics", "", nil, nil), http.StatusOK).Body)
	for _, label := range []string{`method="BREW"`, `method="get"`, `method="PROPFIND"`, "/v1/nothing", "sku-1002"} {
		if strings.Contains(body, label) {
			t.Errorf("/metrics holds %s, a label from a request", label)
		}
	}

	// A refused report stores nothing under its key: the channel's correct copy still applies.
	t.Run("refused reports store nothing", func(t *testing.T) {
		if n := s.Count(t, "idempotency_records", "biz_key LIKE ?", "T-HOSTILE-N-%"); n != 0 {
			t.Fatalf("%d dedup records under the refused reports' trade numbers, want none", n)
		}
		trade := mismatchTrade(f)
		if n := s.Count(t, "idempotency_records", "biz_key = ?", trade); n != 0 {
			t.Fatalf("the amount mismatch stored %d records under %s, want none", n, trade)
		}
		if n := s.Count(t, "report_claims", "channel_no = ?", trade); n != 0 {
			t.Fatalf("the amount mismatch claimed %s (%d claims), want none", trade, n)
		}
		// The same wrong copy again: refused again, its anomaly kept once.
		wrong := notifyBody("alipay", trade, f.pending.OrderID, f.pending.Amount+1)
		r := s.SignedNotify([]byte(wrong))
		apptest.WantProblem(t, r, http.StatusBadRequest, "amount_mismatch")
		if n := s.Count(t, "anomalies", "kind = ? AND trade_no = ?", anomaly.AmountMismatch, trade); n != 1 {
			t.Errorf("%d amount_mismatch anomalies for %s after two copies, want 1", n, trade)
		}
		// The channel's correct copy of that trade pays the order once.
		before := s.State(t)
		ok := apptest.Must(t, s.SignedNotify([]byte(notifyBody("alipay", trade, f.pending.OrderID, f.pending.Amount))), http.StatusOK)
		if ok.Outcome() != "executed" {
			t.Errorf("the correct copy after the mismatch: outcome %q, want executed", ok.Outcome())
		}
		if got := s.Order(t, f.pending.OrderID); got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != trade {
			t.Errorf("order %s is %s by %v, want PAID by %s", f.pending.OrderID, got.Status, got.TradeNo, trade)
		}
		d := before.Diff(s.State(t))
		if d["orders.PAID"] != 1 || d["payments"] != 1 || d["anomalies"] != 0 {
			t.Errorf("the correct copy changed %v, want the order PAID with one payment and no anomaly", apptest.Snapshot(d))
		}
		if n := s.Count(t, "idempotency_records", "biz_key = ?", trade); n != 1 {
			t.Errorf("%d records under %s after its success, want 1", n, trade)
		}
		if n := s.Count(t, "report_claims", "channel_no = ? AND owner_no = ?", trade, f.pending.OrderID); n != 1 {
			t.Errorf("%d claims of %s by order %s after its success, want 1", n, trade, f.pending.OrderID)
		}
	})

	// Byte-exact: a key that differs in case is another key, and runs (not a replay).
	t.Run("a key in another case is another key", func(t *testing.T) {
		r := s.Do(http.MethodPost, "/v1/orders", apptest.AliceKey, order1002, key(strings.ToUpper(f.orderKey)))
		if r.Status != http.StatusCreated || r.Outcome() != "executed" || r.Header.Get(httpkey.HeaderReplayed) != "" {
			t.Fatalf("%s (outcome %q): want 201 executed, a new order", r, r.Outcome())
		}
		var v order.View
		r.Decode(t, &v)
		if v.OrderID == f.pending.OrderID {
			t.Errorf("the key in another case replayed order %s", v.OrderID)
		}
	})
}

// notificationCases are refused reports on the three report paths: signature (timestamped,
// for the route's kind), configured channels, strict JSON, channel spelling and ranges. None
// claims a key or changes state; an amount that differs from the order's is recorded as an
// anomaly, as the contract asks, and stores nothing under its key either.
func notificationCases(f hostileFixture) []hostileCase {
	var out []hostileCase
	for _, path := range []string{apptest.PaymentNotifyPath, apptest.RechargeNotifyPath} {
		target, tag := f.pending.OrderID, "payment "
		if path == apptest.RechargeNotifyPath {
			target, tag = f.recharge, "recharge "
		}
		good := notifyBody("alipay", "T-HOSTILE-N-"+target, target, 0)
		with := func(old, repl string) string { return strings.Replace(good, old, repl, 1) }
		c := func(name, body string, status int, code, detail string) hostileCase {
			return hostileCase{name: tag + name, method: http.MethodPost, path: path, body: body, sign: true,
				status: status, code: code, detail: detail, outcome: "rejected"}
		}
		kind := apptest.KindOf(path)
		one := with(`"amount":0`, `"amount":1`)
		signed := func(name, signature string) hostileCase {
			return hostileCase{name: tag + name, method: http.MethodPost, path: path, body: one,
				headers: map[string]string{web.HeaderSignature: signature}, status: 401, code: "invalid_signature", outcome: "rejected"}
		}
		other := notify.Recharge
		if kind == notify.Recharge {
			other = notify.Trade
		}
		out = append(out,
			hostileCase{name: tag + "unsigned", method: http.MethodPost, path: path, body: one,
				status: 401, code: "invalid_signature", outcome: "rejected"},
			signed("signed with another secret", apptest.SignReport("another-secret", kind, []byte(one))),
			signed("signature not hex", "zz"),
			// The earlier form, a bare hex HMAC of the body under the right secret, is refused.
			signed("bare HMAC of the body", web.Sign(f.secret, []byte(one))),
			// A report signed for another kind is refused on this kind's route.
			signed("signed as a "+string(other)+" report", apptest.SignReport(f.secret, other, []byte(one))),
			// A signature older, or newer, than ONCEPAY_SIGNATURE_TOLERANCE (5m) is refused.
			signed("signed 6 minutes ago", reportsig.Sign(f.secret, time.Now().Add(-6*time.Minute), string(kind), []byte(one))),
			signed("signed 6 minutes ahead", reportsig.Sign(f.secret, time.Now().Add(6*time.Minute), string(kind), []byte(one))),
			// A channel that is not one of ONCEPAY_CHANNELS: refused before its key is claimed.
			c("unknown channel", strings.Replace(one, `"alipay"`, `"paypal"`, 1), 400, "unknown_channel", `"paypal"`),
			c("channel in upper case", with(`"alipay"`, `"ALIPAY"`), 400, "invalid_request", `"channel"`),
			c("channel with a trailing space", with(`"alipay"`, `"alipay "`), 400, "invalid_request", `"channel"`),
			c("channel with a dash", with(`"alipay"`, `"ali-pay"`), 400, "invalid_request", `"channel"`),
			c("duplicate amount", with(`"amount":0`, `"amount":1,"amount":2`), 400, "invalid_request", `duplicate field "amount"`),
			c("Trade_no in another case", with(`"trade_no"`, `"Trade_no"`), 400, "invalid_request", `unknown field "Trade_no"`),
			c("invalid UTF-8 in trade_no", with(`"T-HOSTILE`, "\"T-\xffHOSTILE"), 400, "invalid_request", "UTF-8"),
			c("amount 0", good, 400, "invalid_request", "amount"),
			c("amount 10^10+1", with(`"amount":0`, `"amount":10000000001`), 400, "invalid_request", "amount"),
			c("amount as a string", with(`"amount":0`, `"amount":"1"`), 400, "invalid_request", `"amount"`),
			c("out_trade_no as a number", with(`"out_trade_no":"`+target+`"`, `"out_trade_no":`+target), 400, "invalid_request", `"out_trade_no"`),
			c("trade_no of 129 bytes", with(`"T-HOSTILE-N-`+target, `"`+strings.Repeat("T", 129)), 400, "invalid_request", "trade_no"),
		)
	}
	// Refund reports, on their own route: the same signature rules for their kind, and a refund
	// nobody issued is refused (404) with nothing stored, nothing changed.
	refundBody := `{"channel":"alipay","refund_no":"R-HOSTILE-N","out_refund_no":"RF-HOSTILE-N","amount":1,"status":"SUCCESS"}`
	refundCase := func(name string, headers map[string]string, body string, sign bool, status int, code, outcome string) hostileCase {
		return hostileCase{name: "refund " + name, method: http.MethodPost, path: apptest.RefundNotifyPath, body: body, sign: sign,
			headers: headers, status: status, code: code, outcome: outcome}
	}
	out = append(out,
		refundCase("unsigned", nil, refundBody, false, 401, "invalid_signature", "rejected"),
		refundCase("bare HMAC of the body", map[string]string{web.HeaderSignature: web.Sign(f.secret, []byte(refundBody))}, refundBody, false,
			401, "invalid_signature", "rejected"),
		refundCase("signed as a trade report", map[string]string{web.HeaderSignature: apptest.SignReport(f.secret, notify.Trade, []byte(refundBody))},
			refundBody, false, 401, "invalid_signature", "rejected"),
		refundCase("unknown channel", nil, strings.Replace(refundBody, `"alipay"`, `"paypal"`, 1), true, 400, "unknown_channel", "rejected"),
		refundCase("trade fields", nil, notifyBody("alipay", "R-HOSTILE-N", "RF-HOSTILE-N", 1), true, 400, "invalid_request", "rejected"),
		refundCase("a refund nobody issued", nil, refundBody, true, 404, "not_found", "rejected"),
	)
	// A signed notification for alice's pending order with another amount: refused 400 and
	// kept as an anomaly (docs/contract.md), nothing else changes. The refusal is not stored under
	// the key (TestHostileHTTP checks there is no record), so that the channel's correct copy
	// still applies: the attempt was refused, nothing stored, a corrected copy runs.
	out = append(out, hostileCase{name: "payment amount mismatch", method: http.MethodPost, path: apptest.PaymentNotifyPath,
		body: notifyBody("alipay", mismatchTrade(f), f.pending.OrderID, f.pending.Amount+1), sign: true,
		status: 400, code: "amount_mismatch", outcome: "rejected",
		delta: map[string]int64{"anomalies": 1, "anomalies." + anomaly.AmountMismatch: 1}})
	return out
}

// recordCases probe the policy and the admin record routes with selectors in other spellings:
// none finds, evicts or changes anything.
func recordCases(f hostileFixture) []hostileCase {
	sel := func(v url.Values) string { return "/v1/admin/idempotency-records?" + v.Encode() }
	user := func(id, k string) string { return sel(url.Values{"user_id": {id}, "key": {k}}) }
	var out []hostileCase
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		out = append(out,
			hostileCase{name: m + " key in another case", method: m, path: user(f.aliceID, strings.ToUpper(f.orderKey)), auth: apptest.AdminKey, status: 404, code: "not_found"},
			hostileCase{name: m + " key with a trailing space", method: m, path: user(f.aliceID, f.orderKey+" "), auth: apptest.AdminKey, status: 400, code: "invalid_request"},
			hostileCase{name: m + " bob's id with alice's key", method: m, path: user(bobOf(f.aliceID), f.orderKey), auth: apptest.AdminKey, status: 404, code: "not_found"},
			hostileCase{name: m + " user id with a leading zero", method: m, path: user("0"+f.aliceID, f.orderKey), auth: apptest.AdminKey, status: 400, code: "invalid_request"},
			hostileCase{name: m + " channel scope in upper case", method: m, path: sel(url.Values{"biz_type": {notify.BizTypeTrade}, "biz_key": {f.paidTrade}, "scope": {"channel:ALIPAY"}}),
				auth: apptest.AdminKey, status: 404, code: "not_found"},
			hostileCase{name: m + " trade_no in lower case", method: m, path: sel(url.Values{"biz_type": {notify.BizTypeTrade}, "biz_key": {strings.ToLower(f.paidTrade)}}),
				auth: apptest.AdminKey, status: 404, code: "not_found"},
			hostileCase{name: m + " trade_no with a trailing space", method: m, path: sel(url.Values{"biz_type": {notify.BizTypeTrade}, "biz_key": {f.paidTrade + " "}}),
				auth: apptest.AdminKey, status: 404, code: "not_found"},
			hostileCase{name: m + " biz_type in upper case", method: m, path: sel(url.Values{"biz_type": {strings.ToUpper(notify.BizTypeTrade)}, "biz_key": {f.paidTrade}}),
				auth: apptest.AdminKey, status: 404, code: "not_found"},
			hostileCase{name: m + " selector name in another case", method: m, path: "/v1/admin/idempotency-records?User_id=" + f.aliceID + "&key=" + f.orderKey,
				auth: apptest.AdminKey, status: 400, code: "invalid_request"},
			hostileCase{name: m + " invalid escape", method: m, path: "/v1/admin/idempotency-records?user_id=" + f.aliceID + "&key=%zz",
				auth: apptest.AdminKey, status: 400, code: "invalid_request"},
		)
	}
	out = append(out,
		hostileCase{name: "DELETE a stored success", method: http.MethodDelete, path: user(f.aliceID, f.orderKey), auth: apptest.AdminKey, status: 409, code: "effect_committed"},
		hostileCase{name: "policy with a query", method: http.MethodGet, path: "/v1/idempotency-policy?scope=all&x=%zz", status: 200},
		hostileCase{name: "POST the policy", method: http.MethodPost, path: "/v1/idempotency-policy", body: `{}`, status: 405, code: "method_not_allowed"},
	)
	return out
}

// bobOf is a user id that is not alice's.
func bobOf(alice string) string {
	n, _ := strconv.ParseInt(alice, 10, 64)
	return strconv.FormatInt(n+1, 10)
}

// TestOneSpellingPerChannel: a channel name has one canonical form. On the same trade number,
// "ALIPAY" is refused (400 before any key is claimed, over HTTP; dead-lettered as unparseable
// over Kafka) and "alipay" applies, so one trade can no longer pay two orders, or credit two
// recharges, through two spellings of its channel.
func TestOneSpellingPerChannel(t *testing.T) {
	s := apptest.Start(t)
	a := s.CreateOrder(t, apptest.AliceKey, "spell-a", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	b := s.CreateOrder(t, apptest.AliceKey, "spell-b", apptest.Item{SKU: "SKU-1002", Quantity: 2})
	tradeNo := "T-SPELL-" + a.OrderID

	// Over HTTP: the upper-case spelling first, for B, then the canonical one for A.
	before := s.State(t)
	for _, ch := range []string{"ALIPAY", "Alipay", "alipay ", " alipay"} {
		apptest.WantProblem(t, s.SignedNotify(apptest.JSON(apptest.Notification(b, ch, tradeNo))), http.StatusBadRequest, "invalid_request")
	}
	if d := before.Diff(s.State(t)); len(d) != 0 {
		t.Fatalf("refused spellings changed %v", apptest.Snapshot(d))
	}
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(a, "alipay", tradeNo))), http.StatusOK)
	apptest.WantProblem(t, s.SignedNotify(apptest.JSON(apptest.Notification(b, "ALIPAY", tradeNo))), http.StatusBadRequest, "invalid_request")
	apptest.WantProblem(t, s.SignedNotify(apptest.JSON(apptest.Notification(b, "alipay", tradeNo))), http.StatusUnprocessableEntity, anomaly.TradeConflict)

	// Over Kafka: the upper-case spelling for B is dead-lettered as unparseable.
	w := s.Writer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	upper := apptest.JSON(apptest.Notification(b, "ALIPAY", tradeNo))
	if err := apptest.PublishNotification(ctx, w, upper); err != nil {
		t.Fatal(err)
	}
	s.WaitConsumed(t)
	if got := s.Order(t, b.OrderID); got.Status != order.PendingPayment {
		t.Errorf("order B is %s, want PENDING_PAYMENT", got.Status)
	}
	if n := s.Count(t, "payments", "trade_no = ?", tradeNo); n != 1 {
		t.Errorf("%d payments rows for trade %s, want 1", n, tradeNo)
	}
	wantDeadLetter(t, s, upper, notify.ReasonUnparseable, `"channel"`)

	// Recharges: the same rule, through the same function.
	_, key := s.User(t, "spell")
	rc := s.CreateRecharge(t, key, 500)
	n := func(ch string) []byte {
		return []byte(notifyBody(ch, "T-SPELL-RC-"+rc, rc, 500))
	}
	apptest.WantProblem(t, s.SignedPost(apptest.RechargeNotifyPath, n("WECHAT")), http.StatusBadRequest, "invalid_request")
	apptest.Must(t, s.SignedPost(apptest.RechargeNotifyPath, n("wechat")), http.StatusOK)
	apptest.WantProblem(t, s.SignedPost(apptest.RechargeNotifyPath, n("Wechat")), http.StatusBadRequest, "invalid_request")
	var me struct{ Balance int64 }
	apptest.Must(t, s.Do(http.MethodGet, "/v1/accounts/me", key, nil, nil), http.StatusOK).Decode(t, &me)
	if me.Balance != 500 {
		t.Errorf("balance %d after wechat's one payment of 500 and two other spellings, want 500", me.Balance)
	}
}

// wantDeadLetter fails the test unless value was dead-lettered with a reason starting with
// reason and holding detail.
func wantDeadLetter(t *testing.T, s *apptest.Server, value []byte, reason, detail string) {
	t.Helper()
	for _, m := range s.Messages(t, kafkax.TopicPaymentNotificationsDLQ) {
		if bytes.Equal(m.Value, value) {
			got := apptest.Header(m, notify.HeaderRejectReason)
			if !strings.HasPrefix(got, reason) || !strings.Contains(got, detail) {
				t.Errorf("dead letter %s: reason %q, want %q… naming %s", value, got, reason, detail)
			}
			return
		}
	}
	t.Errorf("%s was not dead-lettered", value)
}

// TestHostileKafka: over Kafka, copies that are unsigned, wrongly signed (another secret or
// body, the earlier bare HMAC, another kind, a timestamp older than the redelivery window),
// from a channel that is not configured, or signed but malformed (channel spellings, duplicate
// and case-folded fields, invalid UTF-8, amounts out of range, a trade_no in another case for
// the same order) arrive before the channel's correct copy. Each one is dead-lettered with its
// reason and changes nothing; then the correct copy, signed an hour ago, pays the order once.
func TestHostileKafka(t *testing.T) {
	s := apptest.Start(t)
	w := s.Writer(t)
	o := s.CreateOrder(t, apptest.AliceKey, "hostile-kafka", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	tradeNo := "T-HK-" + o.OrderID
	good := []byte(notifyBody("alipay", tradeNo, o.OrderID, o.Amount))
	with := func(old, repl string) []byte { return bytes.Replace(good, []byte(old), []byte(repl), 1) }
	sigAt := func(secret string, at time.Time, kind notify.Kind, v []byte) []kafka.Header {
		return []kafka.Header{{Key: web.HeaderSignature, Value: []byte(reportsig.Sign(secret, at, string(kind), v))}}
	}
	sig := func(secret string, v []byte) []kafka.Header { return sigAt(secret, time.Now(), notify.Trade, v) }
	secret := s.Config.ChannelSecret
	// A copy may wait in the topic as long as any path may redeliver, and no longer.
	tooOld := time.Now().Add(-s.Config.MaxRedeliveryWindow - time.Hour)
	cases := []struct {
		name    string
		value   []byte
		headers []kafka.Header // nil: the correct signature of value
		reason  string
	}{
		{"unsigned", good, []kafka.Header{}, notify.ReasonUnsigned},
		{"empty signature", good, []kafka.Header{{Key: web.HeaderSignature}}, notify.ReasonUnsigned},
		{"signature header in lower case", good, []kafka.Header{{Key: "x-signature", Value: sig(secret, good)[0].Value}}, notify.ReasonUnsigned},
		{"another secret", good, sig("another-secret", good), notify.ReasonInvalidSignature},
		{"signature of another body", good, sig(secret, append([]byte(" "), good...)), notify.ReasonInvalidSignature},
		{"signature not hex", good, []kafka.Header{{Key: web.HeaderSignature, Value: []byte("zz")}}, notify.ReasonInvalidSignature},
		{"bare HMAC of the body", good, []kafka.Header{{Key: web.HeaderSignature, Value: []byte(web.Sign(secret, good))}}, notify.ReasonInvalidSignature},
		{"signed as a recharge report", good, sigAt(secret, time.Now(), notify.Recharge, good), notify.ReasonInvalidSignature},
		{"signed before the redelivery window", good, sigAt(secret, tooOld, notify.Trade, good), notify.ReasonInvalidSignature},
		{"unknown channel", with(`"alipay"`, `"paypal"`), nil, notify.ReasonUnknownChannel},
		{"channel in upper case", with(`"alipay"`, `"ALIPAY"`), nil, notify.ReasonUnparseable},
		{"channel with a trailing space", with(`"alipay"`, `"alipay "`), nil, notify.ReasonUnparseable},
		{"duplicate amount", with(`"amount":`, `"amount":1,"amount":`), nil, notify.ReasonUnparseable},
		{"Amount in another case", with(`"amount"`, `"Amount"`), nil, notify.ReasonUnparseable},
		{"invalid UTF-8", with(`"T-HK-`, "\"T-\xffHK-"), nil, notify.ReasonUnparseable},
		{"amount 10^10+1", with(`"amount":`+strconv.FormatInt(o.Amount, 10), `"amount":10000000001`), nil, notify.ReasonUnparseable},
		{"amount 0", with(`"amount":`+strconv.FormatInt(o.Amount, 10), `"amount":0`), nil, notify.ReasonUnparseable},
		{"Go-typed detail bait", with(`"out_trade_no":"`+o.OrderID+`"`, `"out_trade_no":{"a":1}`), nil, notify.ReasonUnparseable},
	}
	before := s.State(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range cases {
		h := c.headers
		if h == nil {
			h = sig(secret, c.value)
		}
		if err := w.WriteMessages(ctx, kafka.Message{Topic: kafkax.TopicPaymentNotifications, Key: []byte(tradeNo), Value: c.value, Headers: h}); err != nil {
			t.Fatal(err)
		}
	}
	s.WaitConsumed(t)
	if d := before.Diff(s.State(t)); len(d) != 0 {
		t.Errorf("dead-lettered copies changed %v", apptest.Snapshot(d))
	}
	letters := s.Messages(t, kafkax.TopicPaymentNotificationsDLQ)
	if len(letters) != len(cases) {
		t.Errorf("%d dead letters, want %d", len(letters), len(cases))
	}
	for i, c := range cases {
		if i >= len(letters) {
			break
		}
		got := apptest.Header(letters[i], notify.HeaderRejectReason)
		if !bytes.Equal(letters[i].Value, c.value) || !strings.HasPrefix(got, c.reason) {
			t.Errorf("%s: dead letter %d has reason %q, want %q", c.name, i, got, c.reason)
		}
		if w := goTypeIn(got); w != "" {
			t.Errorf("%s: reason %q names a Go type (%q)", c.name, got, w)
		}
	}
	if n := s.Count(t, "idempotency_records", "biz_key = ?", tradeNo); n != 0 {
		t.Errorf("the rejected copies claimed the key: %d records", n)
	}

	// The channel's correct copy, signed an hour ago: older than an HTTP report may be
	// (ONCEPAY_SIGNATURE_TOLERANCE), well within the redelivery window a message may wait.
	if err := w.WriteMessages(ctx, kafka.Message{Topic: kafkax.TopicPaymentNotifications, Key: []byte(tradeNo), Value: good,
		Headers: sigAt(secret, time.Now().Add(-time.Hour), notify.Trade, good)}); err != nil {
		t.Fatal(err)
	}
	s.WaitConsumed(t)
	if got := s.Order(t, o.OrderID); got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != tradeNo {
		t.Errorf("order %s, want PAID by %s", got.Status, tradeNo)
	}
	if n := s.Count(t, "payments", "trade_no = ?", tradeNo); n != 1 {
		t.Errorf("%d payments rows, want 1", n)
	}
}

// TestTradeNumbersByteExact: trade numbers compare byte for byte, as keys do. The same
// channel's "t-…" is another trade than "T-…": over HTTP it pays a second order; for the order
// the first trade already paid, a variant (another case, a trailing space) is another payment,
// recorded as duplicate_payment for refund — never folded into the first and never a second
// PAID.
func TestTradeNumbersByteExact(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	a := s.CreateOrder(t, apptest.AliceKey, "bx-a", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	b := s.CreateOrder(t, apptest.AliceKey, "bx-b", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	trade := "T-BX-" + a.OrderID
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(a, "alipay", trade))), http.StatusOK)
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(b, "alipay", strings.ToLower(trade)))), http.StatusOK)
	for _, o := range []order.View{a, b} {
		if got := s.Order(t, o.OrderID); got.Status != order.Paid {
			t.Errorf("order %s is %s, want PAID", o.OrderID, got.Status)
		}
	}
	for _, variant := range []string{strings.ToUpper(trade) + "X", trade + " "} {
		before := s.State(t)
		apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(a, "alipay", variant))), http.StatusOK)
		// The payment kept for refund: its anomaly, and its trade captured into suspense.
		want := map[string]int64{"anomalies": 1, "anomalies." + anomaly.DuplicatePayment: 1, "ledger_transfers": 1, "ledger_postings": 2}
		if d := before.Diff(s.State(t)); !maps.Equal(d, want) {
			t.Errorf("trade %q for the paid order changed %v, want %v", variant, apptest.Snapshot(d), apptest.Snapshot(want))
		}
	}
	if got := s.Order(t, a.OrderID); got.TradeNo == nil || *got.TradeNo != trade {
		t.Errorf("order A's trade is %v, want %s", got.TradeNo, trade)
	}
}

// TestSecretsNeverLeak runs an instance with its own admin key and channel secret and sends
// them where a careless server would echo them — a wrong admin key that is the channel secret,
// the admin key as an Idempotency-Key, as a signature, as an X-Request-Id — then checks that no
// log line, no answer, /metrics, the policy, and no Redis key or value holds either secret or
// any 8-byte piece of it.
func TestSecretsNeverLeak(t *testing.T) {
	adminKey, channelSecret := "A"+apptest.RandHex(16), "C"+apptest.RandHex(16)
	var logs testenv.SyncBuffer
	previous := slog.Default()
	s := apptest.StartHTTPOnly(t, func(c *config.Config) { c.AdminKey, c.ChannelSecret = adminKey, channelSecret })
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(previous) })

	var answers bytes.Buffer
	record := func(r apptest.Response) {
		answers.WriteString(fmt.Sprint(r.Status, r.Header, string(r.Body)))
	}
	body := notifyBody("alipay", "T-SECRET", "1", 100)
	for _, req := range []struct {
		method, path, auth string
		headers            map[string]string
		body               any
	}{
		{http.MethodGet, "/v1/admin/anomalies", channelSecret, nil, nil},
		{http.MethodGet, "/v1/admin/anomalies", adminKey, nil, nil},
		{http.MethodGet, "/v1/accounts/me", adminKey, nil, nil},
		{http.MethodPost, "/v1/recharges", apptest.AliceKey, apptest.IdemKey(channelSecret), `{"amount":0}`},
		{http.MethodPost, apptest.PaymentNotifyPath, "", map[string]string{web.HeaderSignature: channelSecret}, body},
		{http.MethodPost, apptest.PaymentNotifyPath, "", map[string]string{web.HeaderSignature: web.Sign(channelSecret, []byte(body))}, body},
		{http.MethodPost, apptest.PaymentNotifyPath, "", map[string]string{web.HeaderSignature: apptest.SignReport(channelSecret, notify.Trade, []byte(body))}, body},
		{http.MethodPost, apptest.RechargeNotifyPath, "", map[string]string{web.HeaderSignature: apptest.SignReport(adminKey, notify.Recharge, []byte(body))}, body},
		// A token leaves a key in Redis for the scan below to read.
		{http.MethodPost, "/v1/idempotency-tokens", apptest.AliceKey, nil, nil},
		{http.MethodGet, "/v1/orders/1", apptest.AliceKey, map[string]string{requestid.Header: "not a valid id " + adminKey}, nil},
		{http.MethodPost, "/v1/admin/jobs/purge-dedup-records/run", adminKey, nil, `{"older_than":"0s"}`},
		{http.MethodGet, "/metrics", "", nil, nil},
		{http.MethodGet, "/v1/idempotency-policy", "", nil, nil},
	} {
		r := s.Do(req.method, req.path, req.auth, req.body, req.headers)
		checkAnswer(t, req.method, r)
		record(r)
	}
	slog.SetDefault(previous)

	var stored bytes.Buffer
	ctx := context.Background()
	rdb := s.Deps.Redis.Client
	iter := rdb.Scan(ctx, 0, s.Config.RedisPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		stored.WriteString(k + "\n")
		switch typ, _ := rdb.Type(ctx, k).Result(); typ {
		case "string":
			stored.WriteString(rdb.Get(ctx, k).Val())
		case "hash":
			fmt.Fprint(&stored, rdb.HGetAll(ctx, k).Val())
		case "list":
			fmt.Fprint(&stored, rdb.LRange(ctx, k, 0, -1).Val())
		case "zset":
			fmt.Fprint(&stored, rdb.ZRange(ctx, k, 0, -1).Val())
		case "set":
			fmt.Fprint(&stored, rdb.SMembers(ctx, k).Val())
		}
		stored.WriteString("\n")
	}
	if stored.Len() == 0 {
		t.Errorf("no Redis key under %q: the scan looked in the wrong place", s.Config.RedisPrefix)
	}
	for name, text := range map[string]string{"the logs": logs.String(), "the answers": answers.String(), "Redis": stored.String()} {
		for _, secret := range []string{adminKey, channelSecret} {
			for i := 0; i+8 <= len(secret); i++ {
				if piece := secret[i : i+8]; strings.Contains(text, piece) {
					t.Errorf("%s hold %q, a piece of a secret", name, piece)
					break
				}
			}
		}
	}
	if !strings.Contains(logs.String(), "http request") {
		t.Errorf("no request was logged: the capture missed the instance's logs")
	}
}
