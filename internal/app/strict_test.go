package app_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// goTypeWords are fragments of encoding/json's messages that name Go types; no problem
// detail may hold one.
var goTypeWords = []string{"struct", "Go value", "Go struct", "int64", "order.", "account.", "payment.", "inventory.", "[]"}

// TestStrictRequests sends malformed bodies to the routes that decode one: each is refused
// with 400 invalid_request before anything is stored, and its detail names the JSON field,
// never a Go type.
func TestStrictRequests(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	items := func(n int) string {
		lines := make([]string, n)
		for i := range lines {
			lines[i] = fmt.Sprintf(`{"sku":"S-%d","quantity":1}`, i)
		}
		return `{"items":[` + strings.Join(lines, ",") + `]}`
	}
	tests := []struct {
		name   string
		path   string
		body   string
		detail string
	}{
		{"duplicate key", "/v1/orders", `{"items":[{"sku":"SKU-1001","quantity":1,"quantity":900}]}`, `duplicate field "items[0].quantity"`},
		{"duplicate top-level key", "/v1/orders", `{"items":[],"items":[{"sku":"SKU-1001","quantity":1}]}`, `duplicate field "items"`},
		{"key in another case", "/v1/orders", `{"items":[{"SKU":"SKU-1001","quantity":1}]}`, `unknown field "items[0].SKU"`},
		{"key in another case, top level", "/v1/orders", `{"Items":[{"sku":"SKU-1001","quantity":1}]}`, `unknown field "Items"`},
		{"trailing data", "/v1/orders", `{"items":[{"sku":"SKU-1001","quantity":1}]} {}`, "after the JSON value"},
		{"invalid UTF-8", "/v1/orders", "{\"items\":[{\"sku\":\"SKU-1001\xff\",\"quantity\":1}]}", "UTF-8"},
		{"wrong type", "/v1/orders", `{"items":[{"sku":"SKU-1001","quantity":"1"}]}`, `"items[0].quantity" must be an integer`},
		{"wrong container", "/v1/orders", `{"items":{"sku":"SKU-1001"}}`, `"items" must be an array`},
		{"quantity 0", "/v1/orders", `{"items":[{"sku":"SKU-1001","quantity":0}]}`, "items[0].quantity"},
		{"quantity 1001", "/v1/orders", `{"items":[{"sku":"SKU-1001","quantity":1001}]}`, "items[0].quantity"},
		{"51 items", "/v1/orders", items(51), "items"},
		{"SKU with a space", "/v1/orders", `{"items":[{"sku":"SKU 1001","quantity":1}]}`, "items[0].sku"},
		{"SKU with a slash", "/v1/orders", `{"items":[{"sku":"SKU-1002","quantity":1},{"sku":"SKU/1001","quantity":1}]}`, "items[1].sku"},
		{"SKU too long", "/v1/orders", `{"items":[{"sku":"` + strings.Repeat("S", 65) + `","quantity":1}]}`, "items[0].sku"},
		{"SKU non-ASCII", "/v1/orders", `{"items":[{"sku":"SKÜ-1001","quantity":1}]}`, "items[0].sku"},
		{"recharge amount in another case", "/v1/recharges", `{"Amount":100}`, `unknown field "Amount"`},
		{"recharge duplicate amount", "/v1/recharges", `{"amount":100,"amount":1}`, `duplicate field "amount"`},
		{"recharge wrong type", "/v1/recharges", `{"amount":"100"}`, `field "amount" must be an integer`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Snapshot(t)
			r := s.Do(http.MethodPost, tt.path, apptest.AliceKey, tt.body, apptest.IdemKey(fmt.Sprintf("strict-%d", i)))
			apptest.WantProblem(t, r, http.StatusBadRequest, "invalid_request")
			detail := r.Problem().Detail
			if !strings.Contains(detail, tt.detail) {
				t.Errorf("detail %q does not name %q", detail, tt.detail)
			}
			for _, w := range goTypeWords {
				if strings.Contains(detail, w) && !strings.Contains(tt.detail, w) {
					t.Errorf("detail %q names a Go type (%q)", detail, w)
				}
			}
			if diff := before.Diff(s.Snapshot(t)); len(diff) != 0 {
				t.Errorf("a refused request changed %v", apptest.Snapshot(diff))
			}
		})
	}

	t.Run("signed notification with a field in another case", func(t *testing.T) {
		for _, path := range []string{apptest.PaymentNotifyPath, "/v1/recharges/notify"} {
			body := []byte(`{"channel":"alipay","trade_no":"T-strict","out_trade_no":"1","AMOUNT":100,"status":"SUCCESS"}`)
			before := s.Snapshot(t)
			r := s.SignedPost(path, body)
			apptest.WantProblem(t, r, http.StatusBadRequest, "invalid_request")
			if d := r.Problem().Detail; !strings.Contains(d, `"AMOUNT"`) {
				t.Errorf("%s: detail %q does not name the field", path, d)
			}
			if diff := before.Diff(s.Snapshot(t)); len(diff) != 0 {
				t.Errorf("%s: a refused notification changed %v", path, apptest.Snapshot(diff))
			}
		}
	})

	t.Run("50 items of 1000 are within the limits", func(t *testing.T) {
		r := s.Do(http.MethodPost, "/v1/orders", apptest.AliceKey, items(50), apptest.IdemKey("strict-50"))
		if r.Code() != "unknown_sku" {
			t.Errorf("50 valid lines: %s, want them past validation (unknown_sku for the made-up SKUs)", r)
		}
	})
}

// TestHTTPConventions checks the headers every answer owes: X-Request-Id on every response
// (also the 413 refused by Content-Length alone and the 401s), and WWW-Authenticate on every
// 401, whether from a user route, an admin route or a notification's signature.
func TestHTTPConventions(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	// A report from a configured channel: its signature is checked (a report naming no
	// configured channel is refused 400 before that, since its channel picks the secret).
	report := `{"channel":"alipay","trade_no":"T-CONV","out_trade_no":"1","amount":100,"status":"SUCCESS"}`
	refundReport := `{"channel":"alipay","refund_no":"R-CONV","out_refund_no":"RF1","amount":100,"status":"SUCCESS"}`
	tests := []struct {
		name   string
		method string
		path   string
		key    string
		header map[string]string
		body   any
		status int
	}{
		{"user route without a key", http.MethodGet, "/v1/accounts/me", "", nil, nil, http.StatusUnauthorized},
		{"user route with an unknown key", http.MethodPost, "/v1/orders", "nobody-key", apptest.IdemKey("k"), `{}`, http.StatusUnauthorized},
		{"admin route without a key", http.MethodPut, "/v1/admin/inventory/SKU-1001", "", nil, `{"price":1,"available":1}`, http.StatusUnauthorized},
		{"admin route with an unknown key", http.MethodPost, "/v1/admin/jobs/close-expired-orders/run", "nobody-key", nil, nil, http.StatusUnauthorized},
		{"notification without a signature", http.MethodPost, apptest.PaymentNotifyPath, "", nil, report, http.StatusUnauthorized},
		{"notification with a wrong signature", http.MethodPost, "/v1/recharges/notify", "", map[string]string{web.HeaderSignature: "00"}, report, http.StatusUnauthorized},
		{"notification with the bare HMAC", http.MethodPost, apptest.PaymentNotifyPath, "", map[string]string{web.HeaderSignature: web.Sign(s.Config.ChannelSecret, []byte(report))}, report, http.StatusUnauthorized},
		{"refund notification without a signature", http.MethodPost, apptest.RefundNotifyPath, "", nil, refundReport, http.StatusUnauthorized},
		{"not found", http.MethodGet, "/nothing", "", nil, nil, http.StatusNotFound},
		{"success", http.MethodGet, "/v1/inventory/SKU-1001", "", nil, nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.Do(tt.method, tt.path, tt.key, tt.body, tt.header)
			if r.Status != tt.status {
				t.Fatalf("got %s, want %d", r, tt.status)
			}
			if id := r.Header.Get(requestid.Header); id == "" {
				t.Errorf("no X-Request-Id")
			}
			challenge := r.Header.Get("WWW-Authenticate")
			switch {
			case tt.status == http.StatusUnauthorized && challenge != `Bearer realm="oncepay"`:
				t.Errorf("401 with WWW-Authenticate %q, want Bearer realm=\"oncepay\"", challenge)
			case tt.status != http.StatusUnauthorized && challenge != "":
				t.Errorf("%d with WWW-Authenticate %q", tt.status, challenge)
			}
		})
	}

	t.Run("413 by Content-Length", func(t *testing.T) {
		for _, path := range []string{"/v1/orders", "/v1/payments/notify", "/v1/admin/inventory/SKU-1001"} {
			body := bytes.Repeat([]byte(" "), web.MaxBodyBytes+1)
			req, err := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+apptest.AliceKey)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusRequestEntityTooLarge || res.Header.Get(requestid.Header) == "" {
				t.Errorf("%s: %d with X-Request-Id %q, want 413 with an id", path, res.StatusCode, res.Header.Get(requestid.Header))
			}
		}
	})
}

// TestMetricsLabelsBounded sends 500 requests with made-up methods and paths through the
// whole router: /metrics must not grow a series per method or path. Before, 3,000 such
// requests grew it from 70 KB to 12 MB.
func TestMetricsLabelsBounded(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	metricsSize := func() int {
		return len(apptest.Must(t, s.Do(http.MethodGet, "/metrics", "", nil, nil), http.StatusOK).Body)
	}
	// One of each known method first, so that the baseline holds their series already.
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"} {
		s.Do(m, "/v1/inventory/SKU-1001", "", nil, nil)
		s.Do(m, "/nope", "", nil, nil)
	}
	before := metricsSize()
	rng := rand.New(rand.NewPCG(7, 11))
	word := func() string {
		const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		b := make([]byte, 3+rng.IntN(10))
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	for i := range 500 {
		path := "/" + strings.ToLower(word()) + "/" + word()
		if i%2 == 0 {
			path = "/v1/inventory/" + word()
		}
		if r := s.Do(word(), path, "", nil, nil); r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
	}
	after := metricsSize()
	if after > before+4096 {
		t.Errorf("/metrics grew from %d to %d bytes after 500 made-up methods and paths", before, after)
	}
	body := string(apptest.Must(t, s.Do(http.MethodGet, "/metrics", "", nil, nil), http.StatusOK).Body)
	if !strings.Contains(body, `method="OTHER"`) || !strings.Contains(body, `route="unmatched"`) {
		t.Errorf("/metrics lacks the OTHER method and unmatched route labels")
	}
}
