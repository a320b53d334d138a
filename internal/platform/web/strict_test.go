package web_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// createRequest has the shape of POST /v1/orders' body, with an anonymous element type whose
// Go name must never reach a problem's detail.
type createRequest struct {
	Items []struct {
		SKU      string `json:"sku"`
		Quantity int64  `json:"quantity"`
	} `json:"items"`
}

// notification has the shape of a channel's notification, with a pointer, an embedded struct
// and a field that is never decoded.
type notification struct {
	Channel string `json:"channel"`
	Amount  *int64 `json:"amount"`
	meta
	Internal string `json:"-"`
}

type meta struct {
	Status string `json:"status"`
}

// TestDecodeBytesStrict is the strict decoder's table: what it accepts, and for every refusal
// the JSON path its detail names. No detail may name a Go type.
func TestDecodeBytesStrict(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		target func() any
		detail string // "" accepts; otherwise a part of the invalid_request detail
	}{
		{"order", `{"items":[{"sku":"SKU-1","quantity":2}]}`, order, ""},
		{"escaped key is the same key", `{"items":[{"\u0073ku":"SKU-1","quantity":2}]}`, order, ""},
		{"escapes in values", `{"items":[{"sku":"A\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","quantity":1}]}`, order, ""},
		{"null leaves a field alone", `{"items":null}`, order, ""},
		{"whitespace around", " \n\t{\"items\":[]}\r\n ", order, ""},
		{"embedded field", `{"channel":"alipay","amount":5,"status":"SUCCESS"}`, notif, ""},
		{"any value", `{"a":[1,{"b":null}],"c":"d"}`, anyValue, ""},
		{"max int64", `{"items":[{"sku":"A","quantity":9223372036854775807}]}`, order, ""},
		{"min int64", `{"items":[{"sku":"A","quantity":-9223372036854775808}]}`, order, ""},

		{"empty", ``, order, "the body is empty"},
		{"only spaces", "  \n", order, "the body is empty"},
		{"not JSON", `sku=SKU-1`, order, "invalid character"},
		{"truncated", `{"items":[{"sku":"A"`, order, "ends in the middle"},
		{"trailing object", `{"items":[]}{"items":[]}`, order, "after the JSON value"},
		{"trailing garbage", `{"items":[]} x`, order, "after the JSON value"},
		{"trailing comma", `{"items":[],}`, order, "expected a field name"},
		{"leading zero", `{"items":[{"sku":"A","quantity":01}]}`, order, "expected ','"},
		{"control character in string", "{\"items\":[{\"sku\":\"A\x01\"}]}", order, "control character"},
		{"bad escape", `{"items":[{"sku":"A\x"}]}`, order, "invalid escape"},
		{"too deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), anyValue, "nest more than"},

		{"invalid UTF-8 in a value", "{\"items\":[{\"sku\":\"A\xff\",\"quantity\":1}]}", order, "not valid UTF-8"},
		{"invalid UTF-8 in a key", "{\"it\xc3ems\":[]}", order, "not valid UTF-8"},
		{"invalid UTF-8 after the value", "{\"items\":[]}\xff", order, "not valid UTF-8"},
		{"lone high surrogate", `{"items":[{"sku":"\ud800","quantity":1}]}`, order, "unpaired surrogate"},
		{"lone low surrogate", `{"items":[{"sku":"\udc00x","quantity":1}]}`, order, "unpaired surrogate"},
		{"high surrogate then a letter", `{"items":[{"sku":"\ud800\u0041","quantity":1}]}`, order, "unpaired surrogate"},

		{"duplicate top-level key", `{"items":[],"items":[]}`, order, `duplicate field "items"`},
		{"duplicate nested key", `{"items":[{"sku":"A","quantity":1,"sku":"B"}]}`, order, `duplicate field "items[0].sku"`},
		{"duplicate key spelled with an escape", `{"items":[{"sku":"A","\u0073ku":"B"}]}`, order, `duplicate field "items[0].sku"`},
		{"duplicate key in an unknown-shape value", `{"a":{"b":1,"b":2}}`, anyValue, `duplicate field "a.b"`},
		{"duplicate key in a map", `{"k":1,"k":2}`, mapValue, `duplicate field "k"`},
		{"duplicate among many keys", manyKeys(40, true), mapValue, `duplicate field "k0"`},
		{"many distinct keys", manyKeys(40, false), mapValue, ""},
		{"duplicate embedded field", `{"status":"A","status":"B"}`, notif, `duplicate field "status"`},

		{"unknown field", `{"items":[],"price":1}`, order, `unknown field "price"`},
		{"unknown nested field", `{"items":[{"sku":"A","qty":1}]}`, order, `unknown field "items[0].qty"`},
		{"field in upper case", `{"items":[{"SKU":"A","quantity":1}]}`, order, `unknown field "items[0].SKU": field names are case-sensitive, did you mean "sku"?`},
		{"field in title case", `{"Items":[]}`, order, `unknown field "Items"`},
		{"field with a long s, which encoding/json folds to s", `{"items":[{"\u017fku":"A","quantity":1}]}`, order, `unknown field "items[0].ſku"`},
		{"field tagged out", `{"Internal":"x"}`, notif, `unknown field "Internal"`},
		{"unexported field", `{"meta":{}}`, notif, `unknown field "meta"`},

		{"string for an integer", `{"items":[{"sku":"A","quantity":"two"}]}`, order, `field "items[0].quantity" must be an integer`},
		{"fraction for an integer", `{"items":[{"sku":"A","quantity":1.5}]}`, order, `field "items[0].quantity" must be an integer`},
		{"exponent for an integer", `{"items":[{"sku":"A","quantity":1e3}]}`, order, `field "items[0].quantity" must be an integer`},
		{"integer overflow", `{"items":[{"sku":"A","quantity":9223372036854775808}]}`, order, `field "items[0].quantity" is out of range`},
		{"integer underflow", `{"items":[{"sku":"A","quantity":-9223372036854775809}]}`, order, `field "items[0].quantity" is out of range`},
		{"huge integer", `{"amount":123456789012345678901234567890}`, notif, `field "amount" is out of range`},
		{"number for a string", `{"items":[{"sku":1}]}`, order, `field "items[0].sku" must be a string`},
		{"object for an array", `{"items":{"sku":"A"}}`, order, `field "items" must be an array`},
		{"array for an object", `{"items":[{},{},{},[1]]}`, order, `field "items[3]" must be an object`},
		{"bool for a pointer to an integer", `{"amount":true}`, notif, `field "amount" must be an integer`},
		{"array for the body", `[1]`, order, "the body must be an object"},
		{"string for the body", `"x"`, order, "the body must be an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := tt.target()
			err := web.DecodeBytes([]byte(tt.body), dst)
			if tt.detail == "" {
				if err != nil {
					t.Fatalf("DecodeBytes(%s): %v, want success", tt.body, err)
				}
				var want any = tt.target()
				if jerr := json.Unmarshal([]byte(tt.body), want); jerr != nil {
					t.Fatalf("encoding/json refuses the body: %v", jerr)
				}
				if !reflect.DeepEqual(dst, want) {
					t.Errorf("decoded %+v, encoding/json decodes %+v", dst, want)
				}
				return
			}
			e, ok := apperr.As(err)
			if !ok || !errors.Is(err, apperr.ErrInvalidRequest) {
				t.Fatalf("DecodeBytes(%q) = %v, want invalid_request", tt.body, err)
			}
			if !strings.Contains(e.Detail, tt.detail) {
				t.Errorf("detail %q does not say %q", e.Detail, tt.detail)
			}
			for _, goWord := range []string{"struct", "web_test", "int64", "*", "Go value", "[]"} {
				if strings.Contains(e.Detail, goWord) && !strings.Contains(tt.detail, goWord) {
					t.Errorf("detail %q names a Go type (%q)", e.Detail, goWord)
				}
			}
		})
	}
}

func order() any    { return &createRequest{} }
func notif() any    { return &notification{} }
func anyValue() any { var v any; return &v }
func mapValue() any { return &map[string]int{} }

// manyKeys is an object of n keys k0..k(n-1), with k0 again at the end when dup.
func manyKeys(n int, dup bool) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	if dup {
		b.WriteString(`,"k0":1`)
	}
	b.WriteString("}")
	return b.String()
}

// TestDecodeBytesLeavesTargetAlone checks that a refused body changes nothing in the target,
// since the body is decoded into a fresh value that replaces the target only when accepted.
func TestDecodeBytesLeavesTargetAlone(t *testing.T) {
	var req createRequest
	err := web.DecodeBytes([]byte(`{"items":[{"sku":"A","quantity":1}],"items":[]}`), &req)
	if err == nil || req.Items != nil {
		t.Errorf("err %v, target %+v: want an error and the target untouched", err, req)
	}
	if err := web.DecodeBytes([]byte(`{}`), createRequest{}); err == nil || errors.Is(err, apperr.ErrInvalidRequest) {
		t.Errorf("a non-pointer target: %v, want a programming error (500), not a client error", err)
	}
}

// FuzzDecodeBytes checks the strict decoder against encoding/json: whatever it accepts,
// encoding/json accepts too and decodes the same way.
func FuzzDecodeBytes(f *testing.F) {
	for _, s := range []string{`{"items":[{"sku":"A","quantity":1}]}`, `{"items":[]}`, `{"a":1}`, `[`, `{"items":[{"sku":"\u00e9"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var strict, plain createRequest
		if err := web.DecodeBytes(body, &strict); err != nil {
			return
		}
		if err := json.Unmarshal(body, &plain); err != nil {
			t.Fatalf("strict accepted %q, encoding/json refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(strict, plain) {
			t.Fatalf("strict decoded %+v, encoding/json %+v", strict, plain)
		}
	})
}

// BenchmarkDecodeBytes measures the strict decoder on an order body, and on the same body
// refused for a duplicate key (the refusal reads the body's tokens once more to word the
// error), against encoding/json's decoder with unknown fields disallowed.
func BenchmarkDecodeBytes(b *testing.B) {
	body := []byte(`{"items":[{"sku":"SKU-1001","quantity":1},{"sku":"SKU-1002","quantity":3},{"sku":"SKU-1003","quantity":2}]}`)
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req createRequest
			if err := web.DecodeBytes(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	refused := []byte(`{"items":[{"sku":"SKU-1001","quantity":1},{"sku":"SKU-1002","quantity":3},{"sku":"SKU-1003","quantity":2,"quantity":900}]}`)
	b.Run("strict-refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req createRequest
			if err := web.DecodeBytes(refused, &req); err == nil {
				b.Fatal("accepted")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req createRequest
			dec := json.NewDecoder(strings.NewReader(string(body)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPathParam checks that a path parameter reads the same whether the client escaped it or
// not, and that a malformed escape is a client error.
func TestPathParam(t *testing.T) {
	tests := []struct {
		path string
		want string
		err  bool
	}{
		{"/v1/inventory/ENC-1", "ENC-1", false},
		{"/v1/inventory/ENC%2D1", "ENC-1", false},
		{"/v1/inventory/%45NC%2d1", "ENC-1", false},
		{"/v1/inventory/A%20B", "A B", false},
		{"/v1/inventory/A%2FB", "A/B", false},
		{"/v1/inventory/%FF", "\xff", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var got string
			var err error
			r := chi.NewRouter()
			r.Get("/v1/inventory/{sku}", func(w http.ResponseWriter, req *http.Request) {
				got, err = web.PathParam(req, "sku")
			})
			serve(r, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if got != tt.want || (err != nil) != tt.err {
				t.Errorf("PathParam = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestMetricsBounded sends requests with 500 random methods and paths: the number of series
// must stay within the fixed label sets — methods GET…OPTIONS or OTHER, the routes' patterns
// or "unmatched" — whatever clients send.
func TestMetricsBounded(t *testing.T) {
	captureLog(t)
	reg := prometheus.NewRegistry()
	m := web.NewMetrics(reg)
	r := chi.NewRouter()
	r.Use(m.Middleware)
	r.NotFound(web.NotFound)
	r.MethodNotAllowed(web.MethodNotAllowed)
	r.Get("/v1/inventory/{sku}", ok)
	r.Route("/v1/orders", func(r chi.Router) { r.Get("/{id}", ok) })

	rng := rand.New(rand.NewPCG(1, 2))
	token := func() string {
		const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, 1+rng.IntN(12))
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	methods := []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}
	for i := range 500 {
		method := strings.ToUpper(token())
		if i%5 == 0 {
			method = methods[rng.IntN(len(methods))]
		}
		path := "/" + token() + "/" + token()
		switch i % 4 {
		case 1:
			path = "/v1/inventory/" + token()
		case 2:
			path = "/v1/orders/" + token() + "/" + token()
		}
		serve(r, httptest.NewRequest(method, path, nil))
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowedMethods := map[string]bool{"OTHER": true}
	for _, m := range methods {
		allowedMethods[m] = true
	}
	allowedRoutes := map[string]bool{"unmatched": true, "/v1/inventory/{sku}": true, "/v1/orders/{id}": true}
	series := 0
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			series++
			for _, l := range metric.GetLabel() {
				switch l.GetName() {
				case "method":
					if !allowedMethods[l.GetValue()] {
						t.Errorf("%s has method label %q", f.GetName(), l.GetValue())
					}
				case "route":
					if !allowedRoutes[l.GetValue()] {
						t.Errorf("%s has route label %q", f.GetName(), l.GetValue())
					}
				}
			}
		}
	}
	// 8 methods × 3 routes × a few statuses for the counter, 8 × 3 for the histogram.
	if series > 8*3*4+8*3 {
		t.Errorf("%d series after 500 random requests; the label sets are not bounded", series)
	}
}

// TestUnauthorizedChallenge checks that every 401 carries WWW-Authenticate (RFC 9110) and
// X-Request-Id, from the user check, the admin check and the signature check alike, even
// without the RequestID middleware in front.
func TestUnauthorizedChallenge(t *testing.T) {
	tests := []struct {
		name    string
		handler http.Handler
		auth    string
		code    string
	}{
		{"user: no key", web.RequireUser(users)(whoAmI), "", "unauthorized"},
		{"user: unknown key", web.RequireUser(users)(whoAmI), "Bearer nobody", "unauthorized"},
		{"admin: no key", web.RequireAdmin(adminKey, users)(whoAmI), "", "unauthorized"},
		{"admin: unknown key", web.RequireAdmin(adminKey, users)(whoAmI), "Bearer nobody", "unauthorized"},
		{"signature: wrong", web.RequireReportSignature("secret", "trade", time.Minute)(ok), "", "invalid_signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, withRequestID := range []bool{true, false} {
				h := tt.handler
				if withRequestID {
					h = web.RequestID(h)
				}
				req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{}`))
				req.Header.Set(web.HeaderSignature, "00")
				if tt.auth != "" {
					req.Header.Set("Authorization", tt.auth)
				}
				res := serve(h, req)
				p := readProblem(t, res, http.StatusUnauthorized, tt.code)
				if got := res.Header.Get("WWW-Authenticate"); got != `Bearer realm="oncepay"` {
					t.Errorf("WWW-Authenticate = %q, want Bearer realm=\"oncepay\"", got)
				}
				if id := res.Header.Get(requestid.Header); id == "" || id != p.RequestID {
					t.Errorf("X-Request-Id %q, problem request_id %q: want the same, non-empty", id, p.RequestID)
				}
			}
		})
	}
	t.Run("403 carries no challenge", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		res := serve(web.RequireAdmin(adminKey, users)(whoAmI), req)
		readProblem(t, res, http.StatusForbidden, "forbidden")
		if got := res.Header.Get("WWW-Authenticate"); got != "" {
			t.Errorf("a 403 carries WWW-Authenticate %q", got)
		}
	})
}

// TestTooLargeByLengthHasRequestID checks the 413 that LimitBody answers from Content-Length
// alone, before any body is read: it is a problem with X-Request-Id, with or without the
// RequestID middleware in front.
func TestTooLargeByLengthHasRequestID(t *testing.T) {
	for _, h := range []http.Handler{web.RequestID(web.LimitBody(ok)), web.LimitBody(ok)} {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader("{}"))
		req.ContentLength = web.MaxBodyBytes + 1
		res := serve(h, req)
		p := readProblem(t, res, http.StatusRequestEntityTooLarge, "payload_too_large")
		if id := res.Header.Get(requestid.Header); id == "" || id != p.RequestID {
			t.Errorf("X-Request-Id %q, problem request_id %q: want the same, non-empty", id, p.RequestID)
		}
	}
}
