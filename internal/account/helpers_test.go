package account_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/app/apptest"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/platform/testenv"
	"github.com/oncepay/oncepay/internal/platform/web"
)

const testSecret = "test-channel-secret"

// testConfig is the contract's defaults with the secrets and node id a test instance needs.
func testConfig(t testing.TB, nodeID int64) config.Config {
	t.Helper()
	return apptest.Config(t, func(cfg *config.Config) {
		cfg.SeedDemo = false
		cfg.NodeID = nodeID
		cfg.ChannelSecret = testSecret
		cfg.AdminKey = "test-admin-key"
	})
}

// instance is one running oncepay: the real app behind an httptest server.
type instance struct {
	app *app.App
	url string
}

// startInstance builds the real app on deps and serves it on a free port.
func startInstance(t testing.TB, nodeID int64, deps app.Deps) *instance {
	t.Helper()
	a, err := app.New(context.Background(), testConfig(t, nodeID), deps)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return &instance{app: a, url: srv.URL}
}

// env is one database shared by one or more instances, and the users created in it.
type env struct {
	t         testing.TB
	db        *gorm.DB
	instances []*instance
	users     *account.Users
}

// newEnv starts one instance on a fresh database, Redis and Kafka.
func newEnv(t testing.TB) *env {
	t.Helper()
	deps := apptest.NewDeps(t)
	e := &env{t: t, db: deps.DB, users: account.NewUsers(deps.DB, testIDs(t))}
	e.instances = []*instance{startInstance(t, 1, deps)}
	return e
}

// newMultiEnv starts n instances on one database, each with its own connection pool, its own
// Redis client on one shared Redis database and its own node id, sharing one Kafka: n
// servers behind a load balancer.
func newMultiEnv(t testing.TB, n int) *env {
	t.Helper()
	db, dsn := testenv.DBWithDSN(t)
	shared := testenv.Redis(t)
	opts := shared.Client.Options()
	cluster := testenv.Kafka(t)
	e := &env{t: t, db: db, users: account.NewUsers(db, testIDs(t))}
	for i := range n {
		pool := openPool(t, db, dsn)
		rdb := redisx.NewClient(opts.Addr, opts.DB)
		t.Cleanup(func() { _ = rdb.Close() })
		e.instances = append(e.instances, startInstance(t, int64(i+1), app.Deps{DB: pool, Redis: &redisx.Conn{Client: rdb}, Kafka: cluster}))
	}
	return e
}

// openPool opens another connection pool on the test database (MySQL), standing for another
// server; on SQLite there is one file and one pool.
func openPool(t testing.TB, db *gorm.DB, dsn string) *gorm.DB {
	t.Helper()
	if dsn == "" {
		return db
	}
	pool, err := database.Open(database.Options{MySQLDSN: dsn, MaxOpenConns: 20})
	if err != nil {
		t.Fatalf("open another pool: %v", err)
	}
	t.Cleanup(func() { _ = database.Close(pool) })
	return pool
}

// testIDs is the tests' own id generator, on a node no instance uses.
func testIDs(t testing.TB) *ids.Generator {
	gen, err := ids.New(1000)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// user creates a user with a fresh API key and returns its id and key.
func (e *env) user(name string) (int64, string) {
	e.t.Helper()
	key := "key-" + name + "-" + randHex(6)
	id, err := e.users.Ensure(context.Background(), name+"-"+randHex(4), key)
	if err != nil {
		e.t.Fatalf("ensure user %s: %v", name, err)
	}
	return id, key
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var httpClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second},
}

// response is what a request answered.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Code is the problem code of an error response, or "".
func (r response) Code() string {
	var p web.Problem
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

// Outcome is the Idempotency-Outcome header.
func (r response) Outcome() string { return r.Header.Get("Idempotency-Outcome") }

func (r response) String() string {
	return fmt.Sprintf("%d %s %s", r.Status, r.Outcome(), bytes.TrimSpace(r.Body))
}

// send makes one request; headers are name, value pairs.
func send(t testing.TB, method, url string, body []byte, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return response{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// createRecharge asks instance 0 for a recharge of amount as the user with apiKey.
func (e *env) createRecharge(apiKey string, amount int64) string {
	e.t.Helper()
	r := send(e.t, http.MethodPost, e.instances[0].url+"/v1/recharges", fmt.Appendf(nil, `{"amount":%d}`, amount),
		"Authorization", "Bearer "+apiKey, "Idempotency-Key", "rc-"+randHex(8))
	if r.Status != http.StatusCreated {
		e.t.Fatalf("create recharge: %s", r)
	}
	var v account.RechargeView
	if err := json.Unmarshal(r.Body, &v); err != nil || v.RechargeID == "" {
		e.t.Fatalf("create recharge: body %s: %v", r.Body, err)
	}
	return v.RechargeID
}

// signedNotify posts n, signed with the channel secret, to the instance at url.
func signedNotify(t testing.TB, url string, n account.Notification) response {
	t.Helper()
	body, _ := json.Marshal(n)
	return send(t, http.MethodPost, url+"/v1/recharges/notify", body, web.HeaderSignature, web.Sign(testSecret, body))
}

// notifyUntilDone behaves like a channel: it resends n while the answer is 409 (a copy is in
// flight elsewhere) and returns the final answer and every outcome seen on the way.
func notifyUntilDone(t testing.TB, url string, n account.Notification) (response, []string) {
	t.Helper()
	var outcomes []string
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 0; ; attempt++ {
		r := signedNotify(t, url, n)
		outcomes = append(outcomes, r.Outcome())
		if r.Status != http.StatusConflict || time.Now().After(deadline) {
			return r, outcomes
		}
		time.Sleep(time.Duration(2+attempt%8) * time.Millisecond)
	}
}

// tally counts strings, for logging which layer answered.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *tally) add(keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	for _, k := range keys {
		c.m[k]++
	}
}

func (c *tally) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c.m[k])
	}
	return strings.Join(parts, " ")
}

// snapshot is the business state the bad-input tests compare before and after.
type snapshot struct {
	Balances   map[int64]int64
	Statuses   map[int64]string
	LedgerRows int64
	Recharges  int64
	Anomalies  map[string]int64
}

func takeSnapshot(t testing.TB, db *gorm.DB) snapshot {
	t.Helper()
	s := snapshot{Balances: map[int64]int64{}, Statuses: map[int64]string{}, Anomalies: map[string]int64{}}
	var accts []account.Account
	must(t, db.Find(&accts).Error)
	for _, a := range accts {
		s.Balances[a.UserID] = a.Balance
	}
	var rcs []account.Recharge
	must(t, db.Find(&rcs).Error)
	for _, rc := range rcs {
		s.Statuses[rc.ID] = string(rc.Status)
	}
	s.Recharges = int64(len(rcs))
	must(t, db.Model(&account.Entry{}).Count(&s.LedgerRows).Error)
	var an []anomaly.Anomaly
	must(t, db.Find(&an).Error)
	for _, a := range an {
		s.Anomalies[a.Kind]++
	}
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// invariant checks balance == sum(ledger amounts) for every account, and returns the balances.
func invariant(t testing.TB, db *gorm.DB) map[int64]int64 {
	t.Helper()
	var rows []struct {
		UserID  int64
		Balance int64
		Ledger  int64
	}
	must(t, db.Raw(`SELECT a.user_id, a.balance, COALESCE(SUM(l.amount), 0) AS ledger
		FROM accounts a LEFT JOIN account_ledger l ON l.user_id = a.user_id
		GROUP BY a.user_id, a.balance`).Scan(&rows).Error)
	out := map[int64]int64{}
	for _, r := range rows {
		if r.Balance != r.Ledger {
			t.Errorf("user %d: balance %d != sum(ledger) %d", r.UserID, r.Balance, r.Ledger)
		}
		out[r.UserID] = r.Balance
	}
	return out
}

// creditedOnce checks that the recharge is SUCCEEDED by tradeNo with exactly one ledger row.
func creditedOnce(t testing.TB, db *gorm.DB, rechargeID, tradeNo string) {
	t.Helper()
	var rc account.Recharge
	must(t, db.Where("id = ?", rechargeID).Take(&rc).Error)
	if rc.Status != account.RechargeSucceeded || rc.TradeNo == nil || *rc.TradeNo != tradeNo {
		t.Errorf("recharge %s: status %s trade_no %v, want SUCCEEDED by %s", rechargeID, rc.Status, rc.TradeNo, tradeNo)
	}
	var rows int64
	must(t, db.Model(&account.Entry{}).Where("biz_type = ? AND biz_id = ?", account.BizTypeRecharge, rechargeID).Count(&rows).Error)
	if rows != 1 {
		t.Errorf("recharge %s: %d ledger rows, want 1", rechargeID, rows)
	}
}
