package chaos

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// requireNginx skips a test without nginx on PATH, and fails it in CI, where .ci/run installs
// it.
func requireNginx(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("nginx"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nginx is not on PATH but CI=true: %v", err)
		}
		t.Skip("needs nginx on PATH (Debian: apt-get install nginx)")
	}
}

// lateAnswers is an HTTP server in front of target that passes every request on at once and
// holds the answer back for delay: an instance that did the work but answers slowly, as an
// instance does whose answer is stuck behind a GC pause or a full socket buffer.
func lateAnswers(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(*http.Response) error { time.Sleep(delay); return nil }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestGatewayRetriesASlowPOSTOnce is incident I11 through a real nginx with the chaos run's
// gateway configuration: two instances on one database and one Redis, the first of which
// answers 2 s late (lateAnswers), longer than the gateway's read timeout. nginx times out on
// the first and sends the same POST /v1/orders — the same Idempotency-Key, the same
// X-Request-Id — to the second. Each order is created once (one order row, the stock taken
// once) although both instances ran the copy; the client gets 201 with the very body the first
// instance executed; the gateway's access log shows the retry (two upstreams, the first 504)
// under the client's request id, and the dedup record keeps that id.
func TestGatewayRetriesASlowPOSTOnce(t *testing.T) {
	requireNginx(t)
	servers := apptest.Replicas(t, 2)
	slow := lateAnswers(t, servers[0].URL, 2*time.Second)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	gw := newGateway(t.TempDir(), net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err := gw.start(context.Background(), []string{slow, strings.TrimPrefix(servers[1].URL, "http://")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.stop)
	via := apptest.At(t, gw.base(), servers[1].Config, servers[1].DB)
	item := apptest.Item{SKU: "SKU-1002", Quantity: 1}
	before := servers[1].Inventory(t, item.SKU)

	// nginx sends requests to the two instances in turn: of four orders, two go to the slow
	// one first.
	const orders = 4
	keys := make([]string, orders)
	answers := make([]apptest.Response, orders)
	for i := range orders {
		keys[i] = "i11-" + apptest.RandHex(6)
		answers[i] = via.Do(http.MethodPost, "/v1/orders", apptest.AliceKey, apptest.OrderBody(item),
			map[string]string{"Idempotency-Key": keys[i], "X-Request-Id": "rid-" + keys[i]})
	}
	time.Sleep(2500 * time.Millisecond) // the slow instance's late answers have come and gone
	gw.stop()
	lines, err := readAccessLog(gw.accessLog)
	if err != nil {
		t.Fatal(err)
	}
	byRID := map[string]gatewayLine{}
	for _, l := range lines {
		byRID[l.RID] = l
	}
	retried := 0
	for i, key := range keys {
		r := answers[i]
		if r.Status != http.StatusCreated {
			t.Errorf("%s through the gateway: %s, want 201", key, r)
			continue
		}
		if n := servers[1].Count(t, "orders", "id = ?", orderID(t, r.Body)); n != 1 {
			t.Errorf("%s: its order is %d rows, want 1", key, n)
		}
		if n := servers[1].Count(t, "idempotency_records", "biz_key = ? AND request_id = ?", key, "rid-"+key); n != 1 {
			t.Errorf("%s: %d dedup records keep the client's request id, want 1", key, n)
		}
		l, ok := byRID["rid-"+key]
		if !ok {
			t.Errorf("%s: request id rid-%s is not in the gateway's log: %+v", key, key, lines)
			continue
		}
		if !l.retried() {
			continue
		}
		retried++
		if l.Upstreams[0] != slow || l.UStatuses[0] != "504" || l.UStatuses[1] != "201" {
			t.Errorf("%s: the gateway sent it to %v answered %v, want the slow instance's 504, then 201 from the next", key, l.Upstreams, l.UStatuses)
		}
		if r.Outcome() != "replayed" {
			t.Errorf("%s: the gateway's retry answered Idempotency-Outcome %q, want replayed (the slow instance executed it)", key, r.Outcome())
		}
		t.Logf("%s: gateway sent it to %s, answered %s; the client got 201 %s", key, l.Upstream, l.UStatus, r.Outcome())
	}
	if retried == 0 {
		t.Fatalf("the gateway retried none of %d orders, want those that went to the slow instance first: %+v", orders, lines)
	}
	after := servers[1].Inventory(t, item.SKU)
	if got := before.Available - after.Available; got != orders {
		t.Errorf("stock of %s taken %d times for %d orders (%d of them retried by the gateway), want %d", item.SKU, got, orders, retried, orders)
	}
}

// orderID reads order_id from an order's JSON body.
func orderID(t *testing.T, body []byte) string {
	t.Helper()
	m := regexp.MustCompile(`"order_id":"(\d+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no order_id in %s", body)
	}
	return string(m[1])
}

// TestGatewayRulesMatchDeploy: the chaos run's gateway retries and forwards the request id by
// the rules of deploy/nginx/nginx.conf, the configuration docker-compose.yml runs.
func TestGatewayRulesMatchDeploy(t *testing.T) {
	deploy, err := os.ReadFile("../../deploy/nginx/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	var chaos strings.Builder
	if err := gatewayConf.Execute(&chaos, gatewayParams{Prefix: "/p", Listen: "127.0.0.1:1", Upstreams: []string{"127.0.0.1:2"},
		Connect: "1ms", Read: "1ms", Total: "1ms", Tries: 2}); err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{
		`proxy_next_upstream error timeout non_idempotent;`,
		`proxy_set_header X-Request-Id $oncepay_request_id;`,
		`map $http_x_request_id $oncepay_request_id {`,
		`""      $request_id;`,
		`default $http_x_request_id;`,
	} {
		if !strings.Contains(string(deploy), rule) || !strings.Contains(chaos.String(), rule) {
			t.Errorf("the rule %q is not in both deploy/nginx/nginx.conf and the chaos run's gateway", rule)
		}
	}
}
