package app_test

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// contractCodes are the problem codes docs/contract.md names; every 4xx carries one of them.
var contractCodes = map[string]bool{
	"idempotency_key_missing": true, "idempotency_key_invalid": true, "idempotency_token_invalid": true,
	"idempotency_key_in_use": true, "idempotency_key_reused": true, "invalid_request": true, "unknown_sku": true,
	"unauthorized": true, "invalid_signature": true, "forbidden": true, "not_found": true, "precondition_failed": true,
	"out_of_stock": true, "illegal_state": true, "amount_mismatch": true, "payload_too_large": true,
	"trade_conflict": true, "effect_committed": true, "method_not_allowed": true, "refund_exceeds_paid": true,
	"unknown_channel": true,
}

// TestHostileFuzz sends 2,000 requests built from a grammar of methods, paths (odd
// encodings included), headers (huge, duplicated and odd Idempotency-Key, Authorization and
// X-Signature values) and bodies (random JSON, deep nesting, huge numbers, NaN-like strings,
// invalid UTF-8, duplicate keys) to the real router, in-process. Each request is parsed the
// way the server parses it (http.ReadRequest on its raw bytes); one the HTTP server itself
// would refuse before routing is skipped. For every answer: no 5xx, an X-Request-Id, and for
// every 4xx a problem+json body with a contract code. After every refused request the
// business state (apptest.State) is what it was before it, except for the anomaly that an
// amount_mismatch or trade_conflict records. The seed is ONCEPAY_FUZZ_SEED, or the time; a
// failure prints it.
func TestHostileFuzz(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("ONCEPAY_FUZZ_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (ONCEPAY_FUZZ_SEED)", seed)
	g := newGrammar(t, s, seed)
	handler := s.App.Handler()
	n := 2000
	if testing.Short() {
		n = 300
	}
	before := s.State(t)
	deadline := time.Now().Add(40 * time.Second)
	sent, skipped := 0, 0
	statuses := map[int]int{}
	for i := 0; i < n && time.Now().Before(deadline); i++ {
		raw := g.request()
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			skipped++ // net/http answers it 400 itself, before any handler
			continue
		}
		req.RemoteAddr = "192.0.2.1:1234"
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		sent++
		res := rec.Result()
		statuses[res.StatusCode]++
		after := s.State(t)
		what := fmt.Sprintf("seed %d request %d: %.600q\n→ %d %.400s", seed, i, raw, res.StatusCode, rec.Body.Bytes())
		if res.StatusCode >= 500 {
			t.Fatalf("5xx: %s", what)
		}
		if !requestid.Valid(res.Header.Get(requestid.Header)) {
			t.Errorf("no X-Request-Id: %s", what)
		}
		if res.StatusCode >= 400 {
			if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q: %s", ct, what)
			}
			var code string
			if req.Method != http.MethodHead {
				p := apptest.Response{Status: res.StatusCode, Body: rec.Body.Bytes()}.Problem()
				code = p.Code
				if !contractCodes[p.Code] || p.Status != res.StatusCode {
					t.Errorf("not a contract problem: %s", what)
				}
				if w := goTypeIn(p.Detail); w != "" {
					t.Errorf("detail names a Go type (%q): %s", w, what)
				}
			}
			diff := before.Diff(after)
			if code == "amount_mismatch" || code == "trade_conflict" {
				for k := range diff {
					if strings.HasPrefix(k, "anomalies") {
						delete(diff, k)
					}
				}
			}
			if len(diff) != 0 {
				t.Errorf("a refused request changed %v: %s", apptest.Snapshot(diff), what)
			}
		}
		before = after
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d requests sent, %d refused by the HTTP parser before routing; answers by status %v", sent, skipped, statuses)
	if sent < n/2 {
		t.Errorf("only %d of %d requests reached the router", sent, n)
	}
}

// grammar builds hostile raw HTTP/1.1 requests.
type grammar struct {
	rng      *rand.Rand
	s        *apptest.Server
	orderIDs []string
	tokens   []string
}

func newGrammar(t *testing.T, s *apptest.Server, seed uint64) *grammar {
	g := &grammar{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), s: s}
	o := s.CreateOrder(t, apptest.AliceKey, "fuzz-seed-order", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	g.orderIDs = []string{o.OrderID, "1", "0", "-1", "+" + o.OrderID, "0" + o.OrderID, "99999999999999999999", "1e3", "%31", "abc"}
	g.tokens = []string{s.Token(t, apptest.AliceKey), s.Token(t, apptest.BobKey)}
	return g
}

func (g *grammar) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *grammar) chance(p float64) bool { return g.rng.Float64() < p }

// word is a random string over alphabet of up to n bytes.
func (g *grammar) word(alphabet string, n int) string {
	b := make([]byte, 1+g.rng.IntN(n))
	for i := range b {
		b[i] = alphabet[g.rng.IntN(len(alphabet))]
	}
	return string(b)
}

const (
	alnum   = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	oddPath = "abcXYZ019-._~%2F%00%2e%25%zz%C3%A9%FF;,=+!$&'()*@:"
)

func (g *grammar) method() string {
	switch g.rng.IntN(10) {
	case 0:
		return g.pick("BREW", "PROPFIND", "get", "M-SEARCH", "TRACE", "CONNECTX", strings.Repeat("X", 200))
	case 1:
		return g.pick("PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")
	case 2, 3, 4:
		return "GET"
	default:
		return "POST"
	}
}

func (g *grammar) segment() string {
	switch g.rng.IntN(8) {
	case 0:
		return g.word(oddPath, 12)
	case 1:
		return strings.Repeat("A", 1+g.rng.IntN(3000))
	case 2:
		return g.pick("..", ".", "%2e%2e", "%252F", "SKU%2D1001", "sku-1001", "SKU-1001%20", "%C3%A9", "%", "%zz")
	case 3:
		return g.pick("SKU-1001", "SKU-1002", "SKU-1003", "HOSTILE-BIG")
	default:
		return g.orderIDs[g.rng.IntN(len(g.orderIDs))]
	}
}

// routes are the router's routes, method first, with {} for a path parameter.
var fuzzRoutes = []string{
	"POST /v1/orders", "GET /v1/orders/{}", "POST /v1/orders/{}/cancel", "POST /v1/recharges", "GET /v1/recharges/{}",
	"POST /v1/recharges/notify", "POST /v1/payments/notify", "POST /v1/refunds/notify", "GET /v1/accounts/me", "GET /v1/inventory/{}",
	"PUT /v1/admin/inventory/{}", "POST /v1/idempotency-tokens", "GET /v1/idempotency-policy", "GET /v1/admin/anomalies",
	"GET /v1/admin/idempotency-records", "DELETE /v1/admin/idempotency-records", "POST /v1/admin/jobs/close-expired-orders/run",
	"POST /v1/admin/jobs/purge-dedup-records/run", "GET /healthz", "GET /v1/{}", "GET /{}/{}", "POST //v1//orders",
	"POST /v1/orders/", "POST /V1/ORDERS",
}

// route returns a method and a path: mostly a route's own method, sometimes another.
func (g *grammar) route() (method, path string) {
	method, p, _ := strings.Cut(fuzzRoutes[g.rng.IntN(len(fuzzRoutes))], " ")
	if g.chance(0.25) {
		method = g.method()
	}
	for strings.Contains(p, "{}") {
		p = strings.Replace(p, "{}", g.segment(), 1)
	}
	if strings.Contains(p, "idempotency-records") || g.chance(0.1) {
		q := []string{"user_id=" + g.segment(), "key=" + g.pick("fuzz-seed-order", g.word(oddPath, 20)), "biz_type=" + notify.BizTypeTrade,
			"biz_key=" + g.word(alnum, 10), "scope=channel:ALIPAY", "limit=" + g.pick("-1", "0", "1000000", "NaN", "1e9"), "%zz=1", "a=%"}
		p += "?" + strings.Join([]string{g.pick(q...), g.pick(q...)}, "&")
	}
	return method, p
}

func (g *grammar) bearer() string {
	if g.chance(0.6) {
		return g.pick(apptest.AliceKey, apptest.AliceKey, apptest.BobKey, apptest.AdminKey)
	}
	return g.pick(apptest.AliceKey, apptest.BobKey, apptest.AdminKey, strings.ToUpper(apptest.AliceKey), apptest.AliceKey+" ",
		"", "tok_x", strings.Repeat("k", 8000), "\x01", g.word(alnum, 40))
}

func (g *grammar) idemKey() string {
	return g.pick(g.word(alnum, 30), g.word(alnum, 30), "", " ", strings.Repeat("K", 256), strings.Repeat("K", 255), "tok_"+g.word(alnum, 32),
		g.tokens[g.rng.IntN(len(g.tokens))], strings.ToUpper(g.tokens[0]), "a b", "clé", "\x7f", "fuzz-seed-order", "{hash}tag", "*")
}

// headers returns header lines: Authorization, Idempotency-Key and X-Signature, sometimes
// twice, sometimes huge, sometimes absent; X-Request-Id, If-Match and Content-Type at random.
func (g *grammar) headers(path string, body []byte) []string {
	var h []string
	if g.chance(0.8) {
		scheme := g.pick("Bearer ", "Bearer ", "Bearer ", "Bearer ", "bearer ", "BEARER  ", "Basic ", "Token ", "")
		h = append(h, "Authorization: "+scheme+g.bearer())
		if g.chance(0.05) {
			h = append(h, "Authorization: Bearer "+g.bearer())
		}
	}
	if g.chance(0.7) {
		h = append(h, "Idempotency-Key: "+g.idemKey())
		if g.chance(0.08) {
			h = append(h, "Idempotency-Key: "+g.idemKey())
		}
	}
	if strings.HasSuffix(path, "/notify") || g.chance(0.1) {
		// The report's own signature (t=…,v1=…, its path's kind), and what a careless or
		// hostile sender signs: another kind, a stale timestamp, the earlier bare HMAC.
		secret, kind := g.s.Config.ChannelSecret, string(apptest.KindOf(path))
		now := time.Now()
		sig := g.pick(reportsig.Sign(secret, now, kind, body), reportsig.Sign(secret, now, kind, body), reportsig.Sign(secret, now, "refund", body),
			reportsig.Sign(secret, now.Add(-time.Hour), kind, body), reportsig.Sign("x", now, kind, body), web.Sign(secret, body),
			strings.ToUpper(web.Sign("x", body)), "zz", "", strings.Repeat("0", 64), "t=1,v1="+strings.Repeat("0", 64))
		h = append(h, "X-Signature: "+sig)
		if g.chance(0.1) {
			h = append(h, "X-Signature: "+sig)
		}
	}
	if g.chance(0.2) {
		h = append(h, "X-Request-Id: "+g.pick(g.word(alnum, 200), "a b", "", "req-1"))
	}
	if g.chance(0.1) {
		h = append(h, "If-Match: "+g.pick(`"1"`, "*", `W/"1"`, "garbage", `"-1", "x"`))
	}
	if g.chance(0.5) {
		h = append(h, "Content-Type: "+g.pick("application/json", "text/plain", "application/json; charset=latin1", "multipart/form-data"))
	}
	return h
}

// body returns a body from the grammar: near-valid requests of every route, random JSON,
// and the classics — deep nesting, huge numbers, NaN-like strings, invalid UTF-8, duplicates.
func (g *grammar) body() []byte {
	switch g.rng.IntN(15) {
	case 0:
		return nil
	case 1:
		return []byte(strings.Repeat("[", 1+g.rng.IntN(20000)) + strings.Repeat("]", g.rng.IntN(20000)))
	case 2:
		return []byte(`{"items":[{"sku":"` + g.segment() + `","quantity":` + g.number() + `}]}`)
	case 3:
		return []byte(`{"amount":` + g.number() + `}`)
	case 4:
		return []byte(`{"price":` + g.number() + `,"available":` + g.number() + `}`)
	case 5:
		return []byte(`{"channel":"` + g.pick("alipay", "ALIPAY", "alipay ", "wechat", "", "a-b", "paypal") + `","trade_no":"` + g.word(alnum, 20) +
			`","out_trade_no":"` + g.orderIDs[g.rng.IntN(len(g.orderIDs))] + `","amount":` + g.number() + `,"status":"` + g.pick("SUCCESS", "success", "WAIT", "") + `"}`)
	case 6:
		return []byte("{\"items\":[{\"sku\":\"SKU-1001\xff\xfe\",\"quantity\":1}]}")
	case 7:
		return []byte(`{"amount":1,"amount":2,"Amount":3}`)
	case 8:
		return []byte(`{"older_than":"` + g.pick("0s", "-1h", "NaN", "9999999h", "1e9s", "") + `"}`)
	case 9:
		return []byte(strings.Repeat(" ", web.MaxBodyBytes+g.rng.IntN(10)-5))
	case 10:
		return []byte(`{"channel":"` + g.pick("alipay", "simpay", "paypal", "") + `","refund_no":"` + g.word(alnum, 20) +
			`","out_refund_no":"RF` + g.word(alnum, 18) + `","amount":` + g.number() + `,"status":"` + g.pick("SUCCESS", "FAILED", "CLOSED", "") + `"}`)
	default:
		var b bytes.Buffer
		g.json(&b, 0)
		return b.Bytes()
	}
}

func (g *grammar) number() string {
	return g.pick("1", "0", "-1", "1000", "1001", "10000000000", "10000000001", "9223372036854775807", "9223372036854775808",
		"-9223372036854775809", "1e400", "1.5", "-0", "0.0", "NaN", "Infinity", `"NaN"`, `"1"`, "null", "true", "[]", "{}",
		strings.Repeat("9", 400), "01", "0x10", "1E2")
}

// json writes a random JSON value of the API's field names, up to depth 6.
func (g *grammar) json(b *bytes.Buffer, depth int) {
	switch k := g.rng.IntN(7); {
	case depth > 5 || k == 0:
		b.WriteString(g.number())
	case k == 1:
		fmt.Fprintf(b, "%q", g.pick("SKU-1001", "NaN", "", "\u0000", "tok_", "alipay", strings.Repeat("x", 300), "\xed\xa0\x80"))
	case k == 2:
		b.WriteString("[")
		for i := range g.rng.IntN(4) {
			if i > 0 {
				b.WriteString(",")
			}
			g.json(b, depth+1)
		}
		b.WriteString("]")
	default:
		names := []string{"items", "sku", "quantity", "amount", "channel", "trade_no", "out_trade_no", "status", "price", "available",
			"older_than", "Items", "SKU", "AMOUNT", "x", "__proto__", "constructor"}
		b.WriteString("{")
		for i := range g.rng.IntN(5) {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(b, "%q:", g.pick(names...))
			g.json(b, depth+1)
		}
		b.WriteString("}")
	}
}

// request returns one raw HTTP/1.1 request.
func (g *grammar) request() []byte {
	body := g.body()
	method, path := g.route()
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: oncepay.test\r\n", method, path)
	for _, h := range g.headers(path, body) {
		b.WriteString(h + "\r\n")
	}
	if body != nil {
		if g.chance(0.9) {
			fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
		} else {
			// A streamed body: chunked, so that only reading it finds its size.
			b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			fmt.Fprintf(&b, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
			return b.Bytes()
		}
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}
