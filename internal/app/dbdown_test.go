package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// dbProxy is a TCP proxy between an instance's connection pool and the real MariaDB/MySQL,
// which the test cuts — listener and every live connection closed, new ones refused, as when
// the server is killed with -9 — and restores on the same port, as when it comes back.
type dbProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]net.Conn // client side → server side
	wg    sync.WaitGroup
}

// newDBProxy listens on a free port of 127.0.0.1 and forwards every connection to target.
func newDBProxy(t *testing.T, target string) *dbProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &dbProxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]net.Conn{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *dbProxy) serve(ln net.Listener) {
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(ln, c) })
		}
	})
}

// pipe copies both ways between client and a new connection to the database until either
// side ends or Cut closes them.
func (p *dbProxy) pipe(ln net.Listener, client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	live := p.ln == ln
	if live {
		p.conns[client] = server
	}
	p.mu.Unlock()
	if !live { // cut while this connection was being accepted
		_ = client.Close()
		_ = server.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	p.mu.Unlock()
}

// Cut closes the listener and every live connection: half of them with a reset (the pool
// reads "connection reset by peer"), the others with a FIN (it reads EOF, "invalid
// connection"). New connections are refused until Restore.
func (p *dbProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	i := 0
	for client, server := range p.conns {
		if tc, ok := client.(*net.TCPConn); ok && i%2 == 0 {
			_ = tc.SetLinger(0)
		}
		_ = client.Close()
		_ = server.Close()
		delete(p.conns, client)
		i++
	}
}

// Restore listens again on the same address.
func (p *dbProxy) Restore(t *testing.T) {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	for range 100 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.serve(ln)
}

// dbDownServer starts an instance whose database pool reaches MariaDB through a dbProxy, and
// returns it with the proxy and a Server that reads the same database directly, behind the
// instance's back, whether the proxy is cut or not.
func dbDownServer(t *testing.T) (s, direct *apptest.Server, proxy *dbProxy) {
	t.Helper()
	testenv.RequireMySQL(t)
	db, dsn := testenv.DBWithDSN(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	proxy = newDBProxy(t, cfg.Addr)
	cfg.Addr = proxy.addr
	pool, err := database.Open(database.Options{MySQLDSN: cfg.FormatDSN(), MaxOpenConns: 20})
	if err != nil {
		t.Fatalf("open the pool through the proxy: %v", err)
	}
	t.Cleanup(func() { _ = database.Close(pool) })
	s = apptest.StartOn(t, app.Deps{DB: pool, Redis: testenv.Redis(t), Kafka: testenv.Kafka(t)})
	d := *s
	d.DB = db
	return s, &d, proxy
}

// dbRequest is one request of the storm sent while the database is down.
type dbRequest struct {
	name, method, path, apiKey string
	body                       any
	key                        string // Idempotency-Key, "" for none
	signed                     bool   // a channel's notification: X-Signature instead of a key
	want                       int    // the status of its retry once the database is back
}

func (q dbRequest) send(s *apptest.Server) apptest.Response {
	if q.signed {
		return s.SignedPost(q.path, q.body.([]byte))
	}
	var h map[string]string
	if q.key != "" {
		h = apptest.IdemKey(q.key)
	}
	return s.Do(q.method, q.path, q.apiKey, q.body, h)
}

// wantUnavailable reports what is wrong with r as an answer while the database is down:
// anything but 503 problem+json unavailable with a positive Retry-After.
func wantUnavailable(r apptest.Response) string {
	switch {
	case r.Err != nil:
		return r.String()
	case r.Status != http.StatusServiceUnavailable || r.Code() != "unavailable":
		return fmt.Sprintf("got %s, want 503 unavailable", r)
	case r.Header.Get("Content-Type") != "application/problem+json":
		return fmt.Sprintf("Content-Type %q, want application/problem+json", r.Header.Get("Content-Type"))
	}
	if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n <= 0 {
		return fmt.Sprintf("Retry-After %q, want a positive number of seconds", r.Header.Get("Retry-After"))
	}
	return ""
}

// TestDatabaseDown cuts the instance off its real MariaDB while requests come in (issue: 503
// not 500): every request that needs the database — orders created, read and cancelled,
// recharges, balances, stock, a signed payment notification, admin reads, a key the instance
// has never checked — is answered 503 unavailable with Retry-After, never 500 (a copy that
// meets its own key's lock gets the 409 in progress, with Retry-After too), and nothing of it
// is stored — not even as the Idempotency-Key's outcome. Once the database is back, the same
// process serves again without a restart: the same keys run their work exactly once (201 or
// 200 executed, then replayed), a payment notification that arrived on Kafka during the
// outage is applied by the consumer, and the outbox relay publishes again.
func TestDatabaseDown(t *testing.T) {
	s, direct, proxy := dbDownServer(t)
	const sku = "SKU-1002"
	item := apptest.Item{SKU: sku, Quantity: 2}

	// Before the outage: an order to read and pay later, alice's key known to the instance,
	// and a user whose key it has never checked (it will need the database to).
	paid := s.CreateOrder(t, apptest.AliceKey, "dbdown-before-"+apptest.RandHex(4), item)
	cancelled := s.CreateOrder(t, apptest.AliceKey, "dbdown-before-"+apptest.RandHex(4), item)
	apptest.Must(t, s.Do(http.MethodGet, "/v1/accounts/me", apptest.AliceKey, nil, nil), http.StatusOK)
	_, freshKey := apptest.NewUser(t, direct.DB, "dbdown")
	direct.WaitOutboxPublished(t)
	before := direct.Snapshot(t)
	rechargesBefore := direct.Count(t, "recharges", "")

	proxy.Cut()

	// A payment notification reaches the consumer while the database is down.
	tradeNo := "T-DBDOWN-" + apptest.RandHex(6)
	pub, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	notification := apptest.JSON(apptest.Notification(paid, s.Config.ChannelName, tradeNo))
	if err := apptest.PublishNotification(pub, s.Writer(t), notification); err != nil {
		t.Fatalf("publish the notification: %v", err)
	}

	var reqs []dbRequest
	for i := range 20 {
		reqs = append(reqs, dbRequest{name: "create order", method: http.MethodPost, path: "/v1/orders", apiKey: apptest.AliceKey,
			body: apptest.OrderBody(item), key: apptest.Key("dbdown-order-"+apptest.RandHex(4), i), want: http.StatusCreated})
	}
	for i := range 10 {
		reqs = append(reqs, dbRequest{name: "create recharge", method: http.MethodPost, path: "/v1/recharges", apiKey: apptest.AliceKey,
			body: map[string]int64{"amount": 1000}, key: apptest.Key("dbdown-recharge-"+apptest.RandHex(4), i), want: http.StatusCreated})
	}
	cancelKey := "dbdown-cancel-" + apptest.RandHex(4)
	for range 2 {
		reqs = append(reqs,
			dbRequest{name: "cancel order", method: http.MethodPost, path: "/v1/orders/" + cancelled.OrderID + "/cancel", apiKey: apptest.AliceKey,
				key: cancelKey, want: http.StatusOK},
			dbRequest{name: "payment notification over HTTP", method: http.MethodPost, path: apptest.PaymentNotifyPath, body: notification, signed: true},
			dbRequest{name: "read stock", method: http.MethodGet, path: "/v1/inventory/" + sku})
	}
	for range 8 {
		reqs = append(reqs,
			dbRequest{name: "get order", method: http.MethodGet, path: "/v1/orders/" + paid.OrderID, apiKey: apptest.AliceKey},
			dbRequest{name: "get account", method: http.MethodGet, path: "/v1/accounts/me", apiKey: apptest.AliceKey})
	}
	for range 2 {
		reqs = append(reqs,
			dbRequest{name: "unchecked key", method: http.MethodGet, path: "/v1/accounts/me", apiKey: freshKey},
			dbRequest{name: "unchecked key on an admin route", method: http.MethodGet, path: "/v1/admin/anomalies", apiKey: freshKey},
			dbRequest{name: "admin read", method: http.MethodGet, path: "/v1/admin/anomalies", apiKey: apptest.AdminKey})
	}
	answers := make([]apptest.Response, len(reqs))
	apptest.Parallel(8, len(reqs), func(i int) { answers[i] = reqs[i].send(s) })
	statuses := map[int]int{}
	for i, r := range answers {
		statuses[r.Status]++
		if (reqs[i].key != "" || reqs[i].signed) && r.Code() == "idempotency_key_in_use" && r.Header.Get("Retry-After") != "" {
			continue // a copy with the same key (or the consumer's) held the lock: retry later too
		}
		if msg := wantUnavailable(r); msg != "" {
			t.Errorf("database down, %s %s %s: %s", reqs[i].name, reqs[i].method, reqs[i].path, msg)
		}
	}
	t.Logf("database down: %d requests answered %v", len(reqs), statuses)
	if r := s.Do(http.MethodGet, "/readyz", "", nil, nil); r.Status != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the database down: %s, want 503", r)
	}
	time.Sleep(time.Second) // the consumer, the relay and the jobs meet the outage too

	// Nothing half-done: no row of any table, no stored outcome, no stock moved.
	if d := before.Diff(direct.Snapshot(t)); len(d) != 0 {
		t.Errorf("the outage changed the database: %v", d)
	}
	if n := direct.Count(t, "recharges", ""); n != rechargesBefore {
		t.Errorf("recharges: %d rows, want %d", n, rechargesBefore)
	}

	proxy.Restore(t)
	apptest.Eventually(t, 15*time.Second, "/readyz answers 200 again", func() (bool, string) {
		r := s.Do(http.MethodGet, "/readyz", "", nil, nil)
		return r.Status == http.StatusOK, r.String()
	})

	// The same keys run their work now, once: executed, then replayed.
	orderIDs := map[string]bool{}
	retried := map[string]bool{}
	for _, q := range reqs {
		if q.key == "" || retried[q.key] {
			continue
		}
		retried[q.key] = true
		r := q.send(s)
		if r.Status != q.want || r.Outcome() != "executed" {
			t.Errorf("database back, %s under %s: %s (Idempotency-Outcome %q), want %d executed", q.name, q.key, r, r.Outcome(), q.want)
			continue
		}
		again := q.send(s)
		if again.Status != q.want || again.Outcome() != "replayed" || string(again.Body) != string(r.Body) {
			t.Errorf("%s under %s again: %s (Idempotency-Outcome %q), want the same %d replayed", q.name, q.key, again, again.Outcome(), q.want)
		}
		if q.path == "/v1/orders" {
			var v order.View
			r.Decode(t, &v)
			orderIDs[v.OrderID] = true
		}
	}
	if len(orderIDs) != 20 {
		t.Errorf("%d distinct orders for 20 keys, want 20", len(orderIDs))
	}
	// The order paid by the notification may have moved its 2 units from reserved to sold;
	// the cancelled one gave its 2 back.
	d := before.Diff(direct.Snapshot(t))
	if d["orders"] != 20 || d[sku+".available"] != -38 || d[sku+".reserved"]+d[sku+".sold"] != 38 {
		t.Errorf("after the retries: %v, want 20 more orders and 38 more units of %s held", d, sku)
	}
	if o := direct.Order(t, cancelled.OrderID); o.Status != order.Cancelled {
		t.Errorf("order cancelled after the outage: %s, want CANCELLED", o.Status)
	}
	if n := direct.Count(t, "recharges", ""); n != rechargesBefore+10 {
		t.Errorf("recharges: %d rows, want %d", n, rechargesBefore+10)
	}
	for range 2 {
		apptest.Must(t, s.Do(http.MethodGet, "/v1/accounts/me", freshKey, nil, nil), http.StatusOK)
		apptest.Must(t, s.Do(http.MethodGet, "/v1/orders/"+paid.OrderID, apptest.AliceKey, nil, nil), http.StatusOK)
	}

	// The background loops kept going: the consumer applies the notification it could not
	// apply during the outage, and the relay publishes every event written since.
	apptest.Eventually(t, 30*time.Second, "the notification consumed during the outage is applied", func() (bool, string) {
		o := direct.Order(t, paid.OrderID)
		return o.Status == order.Paid, string(o.Status)
	})
	direct.WaitOutboxPublished(t)
}

// TestDatabaseKilledMidFlight cuts the database while a storm of order creations is running
// and restores it a moment later, as a MariaDB killed with -9 and restarted: answers are 201
// or 503 with Retry-After, never 500; retrying every key until it succeeds leaves exactly
// one order per key and the stock of exactly that many, even for the attempts whose commit
// reached the server but whose answer was lost with the connection.
func TestDatabaseKilledMidFlight(t *testing.T) {
	s, direct, proxy := dbDownServer(t)
	const (
		sku   = "SKU-1002"
		keys  = 300
		cutAt = 40 // answers before the cut
	)
	item := apptest.Item{SKU: sku, Quantity: 1}
	prefix := "midflight-" + apptest.RandHex(4)
	before := direct.Snapshot(t)

	var (
		answered atomic.Int64
		mu       sync.Mutex
		statuses = map[int]int{}
		ids      = map[int]string{}
	)
	record := func(i int, r apptest.Response) {
		mu.Lock()
		defer mu.Unlock()
		statuses[r.Status]++
		switch r.Status {
		case http.StatusCreated:
			var v order.View
			if err := json.Unmarshal(r.Body, &v); err != nil || v.OrderID == "" {
				t.Errorf("key %d: 201 without an order: %s", i, r)
			}
			ids[i] = v.OrderID
		case http.StatusServiceUnavailable:
			if msg := wantUnavailable(r); msg != "" {
				t.Errorf("key %d: %s", i, msg)
			}
		default:
			t.Errorf("key %d during the outage: %s, want 201 or 503", i, r)
		}
	}
	stormDone := make(chan struct{})
	go func() {
		defer close(stormDone)
		apptest.Parallel(8, keys, func(i int) {
			r := s.PostOrder(apptest.AliceKey, apptest.Key(prefix, i), item)
			answered.Add(1)
			record(i, r)
			if r.Status == http.StatusServiceUnavailable {
				time.Sleep(10 * time.Millisecond) // a client backing off: the storm outlasts the outage
			}
		})
	}()
	for answered.Load() < cutAt {
		time.Sleep(time.Millisecond)
	}
	proxy.Cut()
	time.Sleep(300 * time.Millisecond)
	proxy.Restore(t)
	<-stormDone
	t.Logf("storm with the database killed after %d answers: %v", cutAt, statuses)
	if statuses[http.StatusServiceUnavailable] == 0 {
		t.Errorf("no request met the outage; statuses %v", statuses)
	}

	// Every key that was refused is retried until it succeeds; one that had committed before
	// its answer was lost is replayed.
	for i := range keys {
		if ids[i] != "" {
			continue
		}
		apptest.Eventually(t, 15*time.Second, "key "+strconv.Itoa(i)+" succeeds after the restore", func() (bool, string) {
			r := s.PostOrder(apptest.AliceKey, apptest.Key(prefix, i), item)
			if r.Status == http.StatusCreated {
				var v order.View
				r.Decode(t, &v)
				ids[i] = v.OrderID
				return true, ""
			}
			if r.Status != http.StatusServiceUnavailable {
				t.Errorf("key %d after the restore: %s", i, r)
			}
			return false, r.String()
		})
	}
	distinct := map[string]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	d := before.Diff(direct.Snapshot(t))
	if len(distinct) != keys || d["orders"] != keys || d[sku+".available"] != -keys || d[sku+".reserved"] != keys {
		t.Errorf("%d keys gave %d distinct orders; database change %v; want %d orders holding %d units", keys, len(distinct), d, keys, keys)
	}
	if n := direct.Count(t, "idempotency_records", "biz_key LIKE ?", prefix+"-%"); n != keys {
		t.Errorf("%d dedup records for %d keys", n, keys)
	}
	direct.WaitOutboxPublished(t)
}
