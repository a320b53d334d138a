package idempotent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestMain keeps the per-attempt "idempotency" log lines and go-redis's dial errors (Redis
// down tests make thousands of both) out of the output; set ONCEPAY_TEST_LOG=1 to see them.
func TestMain(m *testing.M) {
	if os.Getenv("ONCEPAY_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1})))
		redis.SetLogger(quietLogger{})
	}
	fmt.Fprintln(os.Stderr, "idempotent tests: default dialect", idemtest.Default())
	os.Exit(m.Run())
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

// Printf drops the line.
func (quietLogger) Printf(context.Context, string, ...any) {}

// env is one test's own database (the kit's table and a side_effects table) and Redis
// database.
type env struct {
	db *gorm.DB
	// dialect is the database's: mysql, sqlite or postgres (idemtest).
	dialect string
	// rdb is a plain client on one server (TestRoundTrips copies its options). The cluster
	// tests build their own guard on a cluster client (cluster_test.go).
	rdb *redis.Client
}

// newEnv gives the test a fresh database of the default dialect (idemtest.Default) with a
// side_effects table and an isolated Redis; everything is dropped when the test ends.
func newEnv(tb testing.TB) *env {
	tb.Helper()
	return newEnvOn(tb, idemtest.Default())
}

// newEnvOn is newEnv on dialect.
func newEnvOn(tb testing.TB, dialect string) *env {
	tb.Helper()
	db := idemtest.DB(tb, dialect)
	createSideEffects(tb, db)
	return &env{db: db, dialect: dialect, rdb: idemtest.Redis(tb)}
}

// guard returns a guard on the env's database and Redis with cfg and its own registry.
func (e *env) guard(cfg idempotent.Config) *idempotent.Guard {
	return e.guardWith(e.rdb, cfg)
}

// guardWith is guard with another Redis client, e.g. testenv.Unreachable for Redis down.
// It tells the guard what a database error means with the dialect's classifier (mysqlerr,
// sqliteerr, pgerr), and registers its metrics on a registry of its own, so that a
// registration conflict would fail the test.
func (e *env) guardWith(rdb redis.UniversalClient, cfg idempotent.Config) *idempotent.Guard {
	if cfg.Classify == nil {
		cfg.Classify = idemtest.Classify(e.dialect)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	return idempotent.New(e.db, rdb, cfg)
}

// recordID is the id of a dedup record a test inserts itself: a random positive int63,
// like the guard's default NewID.
func recordID() int64 { return rand.Int64() | 1 }

// sideEffect is a row of side_effects: the business effect the tests count in the database.
type sideEffect struct {
	ID int64
	K  string
}

// TableName is the test table created by createSideEffects.
func (sideEffect) TableName() string { return "side_effects" }

// createSideEffects creates the side_effects table in db, in db's dialect.
func createSideEffects(tb testing.TB, db *gorm.DB) {
	tb.Helper()
	ddl := map[string]string{
		idemtest.SQLite:   "CREATE TABLE side_effects (id INTEGER PRIMARY KEY, k VARCHAR(64) NOT NULL)",
		idemtest.MySQL:    "CREATE TABLE side_effects (id BIGINT PRIMARY KEY AUTO_INCREMENT, k VARCHAR(64) NOT NULL) ENGINE=InnoDB",
		idemtest.Postgres: "CREATE TABLE side_effects (id BIGSERIAL PRIMARY KEY, k VARCHAR(64) NOT NULL)",
	}[db.Dialector.Name()]
	if err := db.Exec(ddl).Error; err != nil {
		tb.Fatalf("create side_effects: %v", err)
	}
}

// countEffects counts the committed side_effects rows of k, read outside any transaction.
func countEffects(tb testing.TB, db *gorm.DB, k string) int64 {
	tb.Helper()
	var n int64
	if err := db.Model(&sideEffect{}).Where("k = ?", k).Count(&n).Error; err != nil {
		tb.Fatalf("count side_effects: %v", err)
	}
	return n
}

// countRecords counts the committed idempotency_records rows of key.
func countRecords(tb testing.TB, db *gorm.DB, key idempotent.Key) int64 {
	tb.Helper()
	var n int64
	err := db.Model(&idempotent.Record{}).
		Where("scope = ? AND biz_type = ? AND biz_key = ?", key.Scope, key.BizType, key.BizKey).
		Count(&n).Error
	if err != nil {
		tb.Fatalf("count idempotency_records: %v", err)
	}
	return n
}

// insertEffect writes one side_effects row for k through tx (inside Guard.Do, the dedup
// transaction the work receives) and returns its id.
func insertEffect(tx *gorm.DB, k string) (int64, error) {
	row := sideEffect{K: k}
	if err := tx.Create(&row).Error; err != nil {
		return 0, err
	}
	return row.ID, nil
}

// effectWork is the business change of most tests: insert one side_effects row for k through
// the work's transaction, sleep (inside the transaction, holding it open), answer status with
// a JSON body naming the row. The row id makes every execution's body unique, so an equal
// body proves a replay.
func effectWork(k string, sleep time.Duration, status int) idempotent.Work {
	return idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		id, err := insertEffect(tx, k)
		if err != nil {
			return idempotent.Response{}, err
		}
		time.Sleep(sleep)
		return jsonResponse(status, map[string]any{"id": id, "k": k}), nil
	})
}

// jsonResponse is a Response with status and v as its JSON body.
func jsonResponse(status int, v any) idempotent.Response {
	body, _ := json.Marshal(v)
	return idempotent.Response{
		Status: status,
		Header: map[string]string{"Content-Type": "application/json"},
		Body:   body,
	}
}

// fp is the fingerprint of a POST to route with body.
func fp(route, body string) string {
	return idempotent.Fingerprint("POST", route, []byte(body))
}

// request is a Request for key with the fingerprint of a POST /things with body.
func request(key idempotent.Key, body string) idempotent.Request {
	return idempotent.Request{Key: key, Fingerprint: fp("/things", body)}
}

// leased is req with work outside its transaction — a Before that does nothing — so that it
// takes the lease (I4): a request without such work is fenced by its record alone.
func leased(req idempotent.Request) idempotent.Request {
	req.Before = func(context.Context) error { return nil }
	return req
}

// testKey returns a key unique to the test, so that keys never meet across tests.
func testKey(tb testing.TB, scope, bizKey string) idempotent.Key {
	tb.Helper()
	name := strings.NewReplacer("/", "-", " ", "_").Replace(tb.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return idempotent.Key{Scope: scope, BizType: "test", BizKey: name + "-" + bizKey}
}

// call is the answer of one Guard.Do, as storms collect them.
type call struct {
	res idempotent.Result
	err error
}

// storm runs n copies of do at once, released together by a barrier, and returns every
// answer.
func storm(n int, do func(i int) (idempotent.Result, error)) []call {
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		out   = make([]call, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := do(i)
			out[i] = call{res, err}
		})
	}
	close(start)
	wg.Wait()
	return out
}

// after runs fn in a goroutine once d has passed and returns a channel closed when it is
// done; tests use it to stage a second attempt while the first is still running.
func after(d time.Duration, fn func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d)
		fn()
	}()
	return done
}

// code returns the contract's error code carried by err ("unavailable", "idempotency_key_in_use"
// …), or "" when err is not a refusal of the guard.
func code(err error) string {
	var e *idempotent.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
