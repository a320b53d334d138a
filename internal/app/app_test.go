package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// The keys these tests use: the demo user keys of docs/contract.md, and an admin key that is not
// the dev default, so a test passing proves the configured key is the one checked.
const (
	aliceKey = "demo-alice-key"
	adminKey = "test-admin-key"
)

// testConfig is the configuration every test starts from: apptest's defaults, with demo data,
// and with an admin key and channel secret that are not the dev defaults.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	return apptest.Config(t, func(cfg *config.Config) {
		cfg.AdminKey = adminKey
		cfg.ChannelSecret = "test-channel-secret"
	})
}

// newApp builds an instance on d. Close, when the test ends, stops only what the instance
// opened itself (its channel simulator, its Kafka writer): the dependencies belong to the
// test, and testenv closes them.
func newApp(t *testing.T, d app.Deps) *app.App {
	t.Helper()
	a, err := app.New(context.Background(), testConfig(t), d)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	return a
}

// newServer serves a fresh instance's handler over real HTTP.
func newServer(t *testing.T) (*app.App, *httptest.Server) {
	t.Helper()
	a := newApp(t, apptest.NewDeps(t))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return a, srv
}

// call sends one request and returns the response with its body read.
func call(t *testing.T, method, url, key, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// wantProblem checks that a response is a problem+json with status and code.
func wantProblem(t *testing.T, res *http.Response, body []byte, status int, code string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p web.Problem
	if err := json.Unmarshal(body, &p); err != nil || p.Code != code || p.Status != status {
		t.Errorf("problem %+v (err %v), want status %d code %q; body %s", p, err, status, code, body)
	}
}

func TestHealthz(t *testing.T) {
	_, srv := newServer(t)
	res, body := call(t, http.MethodGet, srv.URL+"/healthz", "", "")
	if res.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"ok"`)) {
		t.Errorf("GET /healthz = %d %s, want 200 ok", res.StatusCode, body)
	}
}

func TestRequestIDEchoed(t *testing.T) {
	_, srv := newServer(t)
	tests := []struct {
		name, path string
		status     int
	}{
		{"success", "/healthz", http.StatusOK},
		{"problem", "/no-such-route", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := call(t, http.MethodGet, srv.URL+tt.path, "", "", "X-Request-Id", "req-test-"+tt.name)
			if got := res.Header.Get("X-Request-Id"); res.StatusCode != tt.status || got != "req-test-"+tt.name {
				t.Errorf("status %d X-Request-Id %q, want %d and the caller's id", res.StatusCode, got, tt.status)
			}
			if tt.status >= 400 && !bytes.Contains(body, []byte(`"request_id":"req-test-`+tt.name+`"`)) {
				t.Errorf("the problem does not carry the request id: %s", body)
			}
		})
	}
	t.Run("generated", func(t *testing.T) {
		res, _ := call(t, http.MethodGet, srv.URL+"/healthz", "", "")
		if !strings.HasPrefix(res.Header.Get("X-Request-Id"), "req_") {
			t.Errorf("X-Request-Id %q, want a generated req_ id", res.Header.Get("X-Request-Id"))
		}
	})
}

func TestUnknownRoute(t *testing.T) {
	_, srv := newServer(t)
	res, body := call(t, http.MethodGet, srv.URL+"/v1/nothing-here", "", "")
	wantProblem(t, res, body, http.StatusNotFound, "not_found")
}

func TestMetricsNameRoutePatterns(t *testing.T) {
	_, srv := newServer(t)
	for _, sku := range []string{"SKU-1001", "SKU-1002"} {
		if res, body := call(t, http.MethodGet, srv.URL+"/v1/inventory/"+sku, "", ""); res.StatusCode != http.StatusOK {
			t.Fatalf("GET inventory %s = %d %s", sku, res.StatusCode, body)
		}
	}
	res, body := call(t, http.MethodGet, srv.URL+"/metrics", "", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", res.StatusCode)
	}
	want := `oncepay_http_requests_total{method="GET",route="/v1/inventory/{sku}",status="200"} 2`
	if !bytes.Contains(body, []byte(want)) {
		t.Errorf("/metrics lacks %s", want)
	}
	if bytes.Contains(body, []byte(`route="/v1/inventory/SKU-1001"`)) {
		t.Error("/metrics labels a raw path instead of the route pattern")
	}
}

func TestAdminInventory(t *testing.T) {
	_, srv := newServer(t)
	url := srv.URL + "/v1/admin/inventory/SKU-1001"
	put := `{"price":45900,"available":80}`
	tests := []struct {
		name   string
		key    string
		status int
		code   string
	}{
		{"user key", aliceKey, http.StatusForbidden, "forbidden"},
		{"no key", "", http.StatusUnauthorized, "unauthorized"},
		{"unknown key", "nobody-key", http.StatusUnauthorized, "unauthorized"},
		{"dev admin key is not the configured one", "dev-admin-key", http.StatusUnauthorized, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := call(t, http.MethodPut, url, tt.key, put)
			wantProblem(t, res, body, tt.status, tt.code)
		})
	}
	if got := getInventory(t, srv.URL, "SKU-1001"); got.Price != 49900 || got.Available != 100 {
		t.Fatalf("a refused PUT changed SKU-1001: %+v", got)
	}

	t.Run("admin key sets absolute values", func(t *testing.T) {
		for i := 0; i < 2; i++ { // Twice: absolute values make the PUT naturally idempotent.
			res, body := call(t, http.MethodPut, url, adminKey, put)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("PUT #%d = %d %s", i+1, res.StatusCode, body)
			}
		}
		got := getInventory(t, srv.URL, "SKU-1001")
		if got.SKU != "SKU-1001" || got.Price != 45900 || got.Available != 80 || got.Reserved != 0 || got.Sold != 0 {
			t.Errorf("GET after PUT = %+v, want price 45900 available 80", got)
		}
	})

}

// inventoryView is the JSON of GET /v1/inventory/{sku}.
type inventoryView struct {
	SKU                              string
	Price, Available, Reserved, Sold int64
}

// getInventory reads one SKU over HTTP.
func getInventory(t *testing.T, base, sku string) inventoryView {
	t.Helper()
	res, body := call(t, http.MethodGet, base+"/v1/inventory/"+sku, "", "")
	var got inventoryView
	if err := json.Unmarshal(body, &got); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/inventory/%s = %d %s (%v)", sku, res.StatusCode, body, err)
	}
	return got
}

// TestSeedIsIdempotent starts two instances on one database, as a restart or a second
// instance would, and checks that the demo data exists once.
func TestSeedIsIdempotent(t *testing.T) {
	d := apptest.NewDeps(t)
	newApp(t, d)
	newApp(t, d)
	counts := []struct {
		table string
		want  int64
	}{
		{"users", 2},
		{"api_keys", 2},
		{"accounts", 2},
		{"inventory", 3},
	}
	for _, c := range counts {
		if got := count(t, d.DB, c.table); got != c.want {
			t.Errorf("%s has %d rows after two seeds, want %d", c.table, got, c.want)
		}
	}
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// running is an instance served by App.Run on a local listener.
type running struct {
	url    string
	cancel context.CancelFunc
	done   chan error
}

// run starts a.Run on a free local port; the test must stop it with cancel, or it is
// stopped when the test ends.
func run(t *testing.T, a *app.App) *running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{url: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of the test's end")
		}
	})
	return r
}

// readyzBody is the JSON of /readyz.
type readyzBody struct {
	Status string
	Checks map[string]string
}

// waitKafkaReady polls /readyz until its kafka check is ok (the consumers have joined their
// groups) and returns that answer; the other checks may still fail.
func waitKafkaReady(t *testing.T, url string) (int, readyzBody) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, body := call(t, http.MethodGet, url+"/readyz", "", "")
		var got readyzBody
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("/readyz body: %v\n%s", err, body)
		}
		if got.Checks["kafka"] == "ok" {
			return res.StatusCode, got
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz kafka check still not ok after 30s: %d %s", res.StatusCode, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, url string) readyzBody {
	t.Helper()
	status, got := waitKafkaReady(t, url)
	if status != http.StatusOK {
		t.Fatalf("/readyz = %d %+v once Kafka was ready, want 200", status, got)
	}
	return got
}

// TestReadyz runs an instance and checks that it becomes ready, naming each dependency.
func TestReadyz(t *testing.T) {
	r := run(t, newApp(t, apptest.NewDeps(t)))
	got := waitReady(t, r.url)
	if got.Status != "ready" {
		t.Errorf("status %q, want ready", got.Status)
	}
	for _, dep := range []string{"database", "redis", "kafka"} {
		if got.Checks[dep] != "ok" {
			t.Errorf("check %s = %q, want ok (%+v)", dep, got.Checks[dep], got)
		}
	}
}

// TestReadyzWithRedisDown checks both failure modes while Redis is unreachable: degrade
// stays ready (the database layers still hold), reject is not ready.
func TestReadyzWithRedisDown(t *testing.T) {
	tests := []struct {
		mode   config.RedisFailureMode
		status int
		answer string
	}{
		{config.RedisDegrade, http.StatusOK, "degraded"},
		{config.RedisReject, http.StatusServiceUnavailable, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.RedisFailureMode = tt.mode
			d := apptest.NewDeps(t)
			d.Redis = &redisx.Conn{Client: testenv.Unreachable(t)}
			a, err := app.New(context.Background(), cfg, d)
			if err != nil {
				t.Fatalf("app.New: %v", err)
			}
			t.Cleanup(a.Close)
			status, got := waitKafkaReady(t, run(t, a).url)
			if status != tt.status || !strings.HasPrefix(got.Checks["redis"], tt.answer) || got.Checks["database"] != "ok" {
				t.Errorf("/readyz = %d %+v, want %d with redis %s", status, got, tt.status, tt.answer)
			}
		})
	}
}

// TestGracefulShutdown cancels Run's context while a request is in flight and checks that
// the request still gets its answer, that Run returns nil promptly, and that the listener is
// closed afterwards. The in-flight request is a /readyz whose Redis PING a proxy holds back.
func TestGracefulShutdown(t *testing.T) {
	d := apptest.NewDeps(t)
	proxy := newSlowProxy(t, d.Redis.Addrs()[0])
	d.Redis = &redisx.Conn{Client: redisx.NewClient(proxy.addr, d.Redis.DB())}
	t.Cleanup(func() { _ = d.Redis.Client.Close() })
	r := run(t, newApp(t, d))
	waitReady(t, r.url)

	proxy.hold(400 * time.Millisecond)
	type answer struct {
		status int
		err    error
	}
	inFlight := make(chan answer, 1)
	go func() {
		res, err := http.Get(r.url + "/readyz")
		if err != nil {
			inFlight <- answer{err: err}
			return
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		inFlight <- answer{status: res.StatusCode, err: err}
	}()
	select {
	case <-proxy.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the /readyz request never reached Redis")
	}

	cancelled := time.Now()
	r.cancel()
	select {
	case got := <-inFlight:
		if got.err != nil || got.status != http.StatusOK {
			t.Errorf("in-flight /readyz: status %d, err %v; want 200", got.status, got.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight request got no answer")
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run = %v, want nil after a graceful shutdown", err)
		}
		if took := time.Since(cancelled); took > 5*time.Second {
			t.Errorf("Run took %v to return after cancel, want under 5s", took)
		}
		r.done <- err // For the cleanup in run.
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of cancel")
	}
	if _, err := http.Get(r.url + "/healthz"); err == nil {
		t.Error("the server still accepts requests after Run returned")
	}
}

// slowProxy forwards TCP to Redis, holding back a client's PING while armed, so that a
// /readyz request stays in flight for as long as a test needs.
type slowProxy struct {
	addr string
	held chan struct{} // Receives once per held PING.

	mu    sync.Mutex
	delay time.Duration
}

func newSlowProxy(t *testing.T, target string) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{addr: ln.Addr().String(), held: make(chan struct{}, 16)}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			conns.Add(2)
			go func() { defer conns.Done(); p.pipe(server, client, true); server.Close() }()
			go func() { defer conns.Done(); p.pipe(client, server, false); client.Close() }()
		}
	}()
	return p
}

// hold makes the next PINGs wait d before they reach Redis.
func (p *slowProxy) hold(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// pipe copies src to dst; toServer marks the client→Redis direction, where PINGs are held.
func (p *slowProxy) pipe(dst, src net.Conn, toServer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if toServer && bytes.Contains(bytes.ToLower(buf[:n]), []byte("ping")) {
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				if d > 0 {
					select {
					case p.held <- struct{}{}:
					default:
					}
					time.Sleep(d)
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
