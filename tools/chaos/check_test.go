package chaos

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// knownChecks are the checks this file breaks, which checker.run must perform. The checker
// may gain more; each must still find nothing in the consistent world.
var knownChecks = []string{
	"replays_byte_identical", "acknowledged_durable", "orders_exactly_once", "refunds_exactly_once",
	"recharges_exactly_once", "payments_exactly_once", "stock_conserved", "balance_equals_ledger",
	"ledger_balanced", "ledger_matches_rows", "ledger_matches_channel",
	"refunds_match_channel", "no_key_left_in_progress", "outbox_published", "kafka_consumed", "no_500",
	"instances_survive", "events_announce_commits",
}

// webhookChecks are the checks of the merchant's side, which run when the checker has a
// hookView.
var webhookChecks = []string{"webhooks_processed_once", "webhook_bodies_identical", "events_feed_in_order",
	"webhooks_delivered", "webhooks_no_resend_after_2xx", "webhook_feed_lag"}

// hookEvents writes order.created events of the orders 5001, 5002, … with the given ids, given their place
// in the feed in that order, and a hookView in which each was delivered once with a valid
// signature and its stored body, processed once, and served by the events API in order.
func hookEvents(t *testing.T, w *dbWorld, c *checker, ids ...string) {
	t.Helper()
	c.hooks = &hookView{effects: map[string]int{}, endpoint: "77"}
	for i, id := range ids {
		payload := fmt.Sprintf(`{"event_id":"%s","type":"order.created","data":{"order_id":"%d"}}`, id, 5001+i)
		w.exec(t, fmt.Sprintf(`INSERT INTO events (id, type, payload, request_id, seq, created_at) VALUES (%s, 'order.created', '%s', 'req-%s', %d, NOW(6))`, id, payload, id, i+1))
		w.exec(t, fmt.Sprintf(`INSERT INTO webhook_deliveries (id, endpoint_id, event_id, status, attempts, round_attempts, next_attempt_at, created_at, updated_at) VALUES (%d, 77, %s, 'succeeded', 1, 1, NOW(6), NOW(6), NOW(6))`, 8001+i, id))
		sum := sha256.Sum256([]byte(payload))
		c.hooks.attempts = append(c.hooks.attempts, hookAttempt{ID: fmt.Sprint("r", i+1), EventID: id, BodyHash: hex.EncodeToString(sum[:]), SigValid: true, Answer: 200})
		c.hooks.effects[id] = 1
		c.hooks.feed = append(c.hooks.feed, id)
	}
}

// answer is one HTTP answer of the history.
func answer(op, usr, key string, status int, outcome, resp string) *event {
	return &event{Kind: kindHTTP, Op: op, User: usr, Key: key, Method: "POST", Path: "/v1/" + op, Status: status, Outcome: outcome, Resp: resp}
}

// expectOnly fails the test unless check, and no other check, reported exactly n violations.
// It also requires the check to have a result whose count agrees with the listed violations.
func expectOnly(t *testing.T, c *checker, check string, n int) {
	t.Helper()
	found := false
	for _, r := range c.results {
		if r.Name != check {
			continue
		}
		found = true
		if r.Violations != n {
			t.Errorf("%s: %d violations, want %d", check, r.Violations, n)
		}
	}
	if !found {
		t.Fatalf("no result named %s among %+v", check, c.results)
	}
	got := 0
	for _, v := range c.violations {
		// The books follow the rows they post for: a world broken in its rows is broken in
		// its books too, which the ledger checks say as well. Their own cases break the books
		// alone.
		if v.Check != check && strings.HasPrefix(v.Check, "ledger_") && !strings.HasPrefix(check, "ledger_") {
			continue
		}
		if v.Check != check {
			t.Errorf("unexpected violation of %s: %s", v.Check, v.Detail)
			continue
		}
		got++
	}
	if got != n {
		t.Errorf("%s listed %d violations, want %d: %+v", check, got, n, c.violations)
	}
	if t.Failed() {
		for _, v := range c.violations {
			t.Logf("violation %s: %s", v.Check, v.Detail)
		}
	}
}

// expectDetail fails the test unless some violation of check mentions every one of words.
func expectDetail(t *testing.T, c *checker, check string, words ...string) {
	t.Helper()
	for _, v := range c.violations {
		if v.Check != check {
			continue
		}
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(v.Detail, w)
		}
		if ok {
			return
		}
	}
	t.Errorf("no violation of %s mentions %q: %+v", check, words, c.violations)
}

func TestEventFinal(t *testing.T) {
	cases := []struct {
		name string
		e    event
		want bool
	}{
		{"201 executed", event{Kind: kindHTTP, Status: 201, Outcome: "executed"}, true},
		{"201 replayed", event{Kind: kindHTTP, Status: 201, Outcome: "replayed"}, true},
		{"200 without outcome", event{Kind: kindHTTP, Status: 200}, true},
		{"422 rejected", event{Kind: kindHTTP, Status: 422, Outcome: "rejected"}, true},
		{"409 in progress", event{Kind: kindHTTP, Status: 409, Outcome: "in_progress"}, false},
		{"409 conflict", event{Kind: kindHTTP, Status: 409, Outcome: "executed"}, true},
		{"499", event{Kind: kindHTTP, Status: 499}, true},
		{"500", event{Kind: kindHTTP, Status: 500, Outcome: "executed"}, false},
		{"503", event{Kind: kindHTTP, Status: 503}, false},
		{"transport error", event{Kind: kindHTTP, Err: "connection reset by peer"}, false},
		{"error with a status", event{Kind: kindHTTP, Status: 201, Err: "body: unexpected EOF"}, false},
		{"no status", event{Kind: kindHTTP}, false},
		{"kafka", event{Kind: kindKafka, Status: 200}, false},
		{"fault", event{Kind: kindFault}, false},
		{"note", event{Kind: kindNote, Status: 200}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.e.final(); got != tc.want {
				t.Errorf("final() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckReplays(t *testing.T) {
	const a, b = `{"order_id":"1","status":"PENDING_PAYMENT"}`, `{"order_id":"2","status":"PENDING_PAYMENT"}`
	cases := []struct {
		name   string
		events []*event
		want   int
		detail []string
	}{
		{"replay differs from the original", []*event{
			answer("order", "u1", "k1", 201, "executed", a),
			answer("order", "u1", "k1", 201, "replayed", b),
		}, 1, []string{"u1 key k1", "2 different answers"}},
		{"key executed twice", []*event{
			answer("pay", "u1", "k1", 201, "executed", a),
			answer("pay", "u1", "k1", 201, "executed", a),
		}, 1, []string{"u1 key k1", "executed 2 times"}},
		{"key executed twice with different answers", []*event{
			answer("recharge", "u1", "k1", 201, "executed", a),
			answer("recharge", "u1", "k1", 201, "executed", b),
		}, 2, []string{"executed 2 times"}},
		{"a refusal replayed differently", []*event{
			answer("refund", "u1", "k1", 422, "executed", `{"code":"not_paid"}`),
			answer("refund", "u1", "k1", 422, "replayed", `{"code":"not_paid","detail":"x"}`),
		}, 1, []string{"different answers"}},
		{"consistent replays", []*event{
			answer("order", "u1", "k1", 201, "executed", a),
			answer("order", "u1", "k1", 201, "replayed", a),
			answer("order", "u1", "k1", 201, "replayed", a),
		}, 0, nil},
		{"503 and 409 in_progress answers differ but are not final", []*event{
			answer("order", "u1", "k1", 503, "", `{"code":"unavailable"}`),
			answer("order", "u1", "k1", 409, "in_progress", `{"code":"idempotency_key_in_use"}`),
			answer("order", "u1", "k1", 201, "executed", a),
			answer("order", "u1", "k1", 500, "executed", b),
			answer("order", "u1", "k1", 409, "in_progress", `{"code":"idempotency_key_in_use"}`),
			answer("order", "u1", "k1", 201, "replayed", a),
		}, 0, nil},
		{"transport errors are not answers", []*event{
			{Kind: kindHTTP, Op: "order", User: "u1", Key: "k1", Err: "timeout"},
			answer("order", "u1", "k1", 201, "executed", a),
			{Kind: kindHTTP, Op: "order", User: "u1", Key: "k1", Status: 201, Outcome: "replayed", Resp: `{"order_id"`, Err: "unexpected EOF"},
		}, 0, nil},
		{"rejected answers are not the key's outcome", []*event{
			answer("order", "u1", "k1", 422, "rejected", `{"code":"fingerprint_mismatch"}`),
			answer("order", "u1", "k1", 201, "executed", a),
		}, 0, nil},
		{"one key name of two users", []*event{
			answer("order", "u1", "k1", 201, "executed", a),
			answer("order", "u2", "k1", 201, "executed", b),
		}, 0, nil},
		{"two keys of one user", []*event{
			answer("order", "u1", "k1", 201, "executed", a),
			answer("order", "u1", "k2", 201, "executed", b),
		}, 0, nil},
		{"notifications are not user writes", []*event{
			answer("notify", "", "T1", 200, "executed", `{"code":"success"}`),
			answer("notify", "", "T1", 200, "executed", `{"code":"success","again":true}`),
		}, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{events: tc.events}
			if err := c.checkReplays(context.Background()); err != nil {
				t.Fatal(err)
			}
			expectOnly(t, c, "replays_byte_identical", tc.want)
			if tc.detail != nil {
				expectDetail(t, c, "replays_byte_identical", tc.detail...)
			}
		})
	}
}

func TestCheckAnswers(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		want    int
		checked int
	}{
		{"500", 500, 1, 3},
		{"501", 501, 1, 3},
		{"503", 503, 0, 3},
		{"502", 502, 0, 3},
		{"409", 409, 0, 3},
		{"transport error", 0, 0, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{events: []*event{
				answer("order", "u1", "k1", 201, "executed", "{}"),
				{Kind: kindKafka, Key: "T1"},
				{Kind: kindNote, Detail: "settle"},
				{Seq: 7, Kind: kindHTTP, Op: "pay", Method: "POST", Path: "/v1/orders/1/pay", Inst: 2, Status: tc.status, Resp: `{"code":"internal"}`},
				answer("notify", "", "T1", 200, "", `{"code":"success"}`),
			}}
			c.checkAnswers()
			expectOnly(t, c, "no_500", tc.want)
			if tc.want > 0 {
				expectDetail(t, c, "no_500", "#7", "/v1/orders/1/pay", "oncepay-2")
			}
			if got := c.results[0].Checked; got != tc.checked {
				t.Errorf("checked %d answers, want %d", got, tc.checked)
			}
		})
	}
}

func TestCheckInstances(t *testing.T) {
	cases := []struct {
		name  string
		exits map[string]int
		want  int
	}{
		{"none ran", nil, 0},
		{"all survived", map[string]int{"oncepay-1": 0, "oncepay-2": 0, "oncepay-3": 0}, 0},
		{"one died", map[string]int{"oncepay-1": 0, "oncepay-2": 2, "oncepay-3": 0}, 1},
		{"two died", map[string]int{"oncepay-1": 1, "oncepay-2": 0, "oncepay-3": 1}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{exits: tc.exits}
			c.checkInstances()
			expectOnly(t, c, "instances_survive", tc.want)
			if tc.name == "one died" {
				expectDetail(t, c, "instances_survive", "oncepay-2", "2 times")
			}
		})
	}
}

func TestCheckKafka(t *testing.T) {
	events := []*event{{Kind: kindKafka, Key: "T1"}, {Kind: kindKafka, Key: "T2"}, answer("notify", "", "T1", 200, "", "{}")}
	cases := []struct {
		name     string
		lag, dlq int64
		want     int
		detail   string
	}{
		{"consumed", 0, 0, 0, ""},
		{"lag", 3, 0, 1, "3 messages behind"},
		{"dlq", 0, 2, 1, "2 valid notifications"},
		{"lag and dlq", 1, 1, 2, notify.Group},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{events: events, kafkaLag: tc.lag, dlq: tc.dlq}
			c.checkKafka()
			expectOnly(t, c, "kafka_consumed", tc.want)
			if tc.detail != "" {
				expectDetail(t, c, "kafka_consumed", tc.detail)
			}
			if got := c.results[0].Checked; got != 2 {
				t.Errorf("checked %d messages, want 2", got)
			}
		})
	}
}

// TestCheckerPrintsEveryViolationWithItsHistory: every violation is listed, however many,
// each with its invariant, the keys its detail names and the history lines that carry them,
// so that a CI log shows what happened without the run's files.
func TestCheckerPrintsEveryViolationWithItsHistory(t *testing.T) {
	c := &checker{events: []*event{
		{Seq: 1, Kind: kindHTTP, Op: "order", User: "u1", Key: "ord-key-000001", Inst: 2, Method: "POST", Path: "/v1/orders", Status: 201, Outcome: "executed", Resp: `{"order_id":"1900000000000000001"}`},
		{Seq: 2, Kind: kindHTTP, Op: "notify", Key: "T-2026-000000042", Inst: 1, Method: "POST", Path: "/v1/payments/notify", Req: `{"out_trade_no":"1900000000000000001"}`, Status: 200, Outcome: "executed"},
		{Seq: 3, Kind: kindHTTP, Op: "order", Key: "unrelated-key-9", Inst: 1, Method: "POST", Path: "/v1/orders", Status: 201},
	}}
	vs := make([]string, 45)
	for i := range vs {
		vs[i] = fmt.Sprintf("order 1900000000000000001 is PAID without a payment row (%d)", i)
	}
	c.add("payments_exactly_once", "one payment per paid order", 100, vs)
	if c.results[0].Violations != 45 || len(c.violations) != 45 {
		t.Fatalf("counted %d, listed %d violations; want 45 and 45", c.results[0].Violations, len(c.violations))
	}
	v := c.violations[0]
	if v.Invariant != "one payment per paid order" || !slices.Equal(v.Keys, []string{"1900000000000000001"}) || len(v.History) != 2 {
		t.Fatalf("violation %+v: want its invariant, the order id as its key and the two history lines that name it", v)
	}
	var out strings.Builder
	printSummary(&out, summary{Total: 45, Violations: c.violations, Checks: c.results}, "out")
	for _, want := range []string{"VIOLATION [payments_exactly_once] order 1900000000000000001 is PAID without a payment row (44)", "invariant: one payment per paid order",
		"#2", "POST /v1/payments/notify key=T-2026-000000042"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printed summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "unrelated-key-9") {
		t.Error("the printed summary shows a history line the violation does not name")
	}
}

// dbWorld is a small, consistent aftermath of a chaos run in a real MySQL database and Redis,
// which each case of TestCheckerDatabase breaks in one way.
type dbWorld struct {
	db     *sql.DB
	rdb    redis.UniversalClient
	prefix string
}

// The consistent world: chaos-01 recharged 5000, paid order 5001 (2 × CHAOS-SCARCE) and has
// order 5002 (3 × CHAOS-A) pending; chaos-02's order 5003 (CHAOS-B) was closed and paid after
// close, recorded and refunded, and its order 5004 (CHAOS-B) was paid and refunded in full.
const (
	body5001     = `{"order_id":"5001","amount":5998,"status":"PENDING_PAYMENT"}`
	body5002     = `{"order_id":"5002","amount":5997,"status":"PENDING_PAYMENT"}`
	body5003     = `{"order_id":"5003","amount":49900,"status":"PENDING_PAYMENT"}`
	body5004     = `{"order_id":"5004","amount":49900,"status":"PENDING_PAYMENT"}`
	bodyRecharge = `{"recharge_id":"7001","amount":5000,"status":"PENDING"}`
	bodyPay      = `{"order_id":"5001","trade_no":"T1","pay_url":"http://sim/pay/T1"}`
	bodyRefund   = `{"refund_id":"9504","order_id":"5004","amount":49900,"status":"PENDING"}`
)

// chaosTestUsers are the buyers of the consistent world.
var chaosTestUsers = []user{{id: 1001, name: "chaos-01"}, {id: 1002, name: "chaos-02"}}

// newDBWorld opens a fresh, migrated database and an isolated Redis. It skips without MySQL
// (the checker's queries are MySQL's) and fails in CI.
func newDBWorld(t *testing.T) *dbWorld {
	t.Helper()
	testenv.RequireMySQL(t)
	gdb, dsn := testenv.DBWithDSN(t)
	// DBWithDSN migrates already; migrating again must find nothing to do.
	if err := database.Migrate(context.Background(), gdb); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn := testenv.Redis(t)
	var rdb redis.UniversalClient = conn.Client
	return &dbWorld{db: db, rdb: rdb, prefix: "chaostest:" + randomHex(6) + ":"}
}

// exec runs statements, failing the test on the first error.
func (w *dbWorld) exec(t *testing.T, queries ...string) {
	t.Helper()
	for _, q := range queries {
		if _, err := w.db.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// reset empties the tables and the run's Redis keys and writes the consistent world.
func (w *dbWorld) reset(t *testing.T) {
	t.Helper()
	for _, table := range []string{"users", "accounts", "inventory", "orders", "order_items", "payments", "recharges", "account_ledger", "idempotency_records", "outbox", "events", "webhook_deliveries", "webhook_attempts", "anomalies", "trades", "refunds", "ledger_transfers", "ledger_postings"} {
		w.exec(t, "DELETE FROM "+table)
	}
	ctx := context.Background()
	keys, err := w.rdb.Keys(ctx, w.prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := w.rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var stock []string
	for _, s := range chaosSKUs {
		// CHAOS-SCARCE: 2 sold to order 5001; CHAOS-A: 3 reserved by order 5002; CHAOS-B: the
		// closed order and the refunded one gave theirs back.
		var reserved, sold int64
		switch s.sku {
		case "CHAOS-SCARCE":
			sold = 2
		case "CHAOS-A":
			reserved = 3
		}
		stock = append(stock, fmt.Sprintf("('%s', '%s', %d, %d, %d, %d, NOW(6))", s.sku, s.sku, s.price, s.initial-reserved-sold, reserved, sold))
	}
	w.exec(t,
		`INSERT INTO users (id, name, created_at) VALUES (1001, 'chaos-01', NOW(6)), (1002, 'chaos-02', NOW(6))`,
		`INSERT INTO accounts (user_id, balance, version, updated_at) VALUES (1001, 5000, 1, NOW(6)), (1002, 0, 0, NOW(6))`,
		`INSERT INTO recharges (id, user_id, amount, status, channel, trade_no, created_at, updated_at, succeeded_at) VALUES (7001, 1001, 5000, 'SUCCEEDED', 'sim', 'TR1', NOW(6), NOW(6), NOW(6))`,
		`INSERT INTO account_ledger (id, user_id, biz_type, biz_id, amount, balance_after, created_at) VALUES (8001, 1001, 'recharge', '7001', 5000, 5000, NOW(6))`,
		`INSERT INTO inventory (sku, name, price, available, reserved, sold, updated_at) VALUES `+strings.Join(stock, ", "),
		`INSERT INTO orders (id, user_id, status, amount, currency, channel, trade_no, created_at, updated_at, expires_at, paid_at) VALUES
			(5001, 1001, 'PAID', 5998, 'CNY', 'sim', 'T1', NOW(6), NOW(6), NOW(6), NOW(6)),
			(5002, 1001, 'PENDING_PAYMENT', 5997, 'CNY', 'sim', NULL, NOW(6), NOW(6), NOW(6), NULL),
			(5003, 1002, 'CLOSED', 49900, 'CNY', 'sim', NULL, NOW(6), NOW(6), NOW(6), NULL),
			(5004, 1002, 'REFUNDED', 49900, 'CNY', 'sim', 'T4', NOW(6), NOW(6), NOW(6), NOW(6))`,
		`INSERT INTO order_items (order_id, sku, quantity, price) VALUES
			(5001, 'CHAOS-SCARCE', 2, 2999), (5002, 'CHAOS-A', 3, 1999), (5003, 'CHAOS-B', 1, 49900), (5004, 'CHAOS-B', 1, 49900)`,
		`INSERT INTO payments (id, channel, trade_no, order_id, amount, status, request_id, created_at) VALUES
			(6001, 'sim', 'T1', 5001, 5998, 'SUCCEEDED', 'req-n1', NOW(6)),
			(6004, 'sim', 'T4', 5004, 49900, 'SUCCEEDED', 'req-n4', NOW(6))`,
		`INSERT INTO anomalies (id, kind, order_id, channel, trade_no, amount, detail, request_id, created_at) VALUES
			(9003, 'paid_after_close', 5003, 'sim', 'T3', 49900, 'paid after the order closed', 'req-n3', NOW(6))`,
		`INSERT INTO refunds (id, order_id, user_id, anomaly_id, channel, out_trade_no, out_refund_no, refund_no, amount, reason, status, created_at, updated_at) VALUES
			(9503, 5003, 1002, 9003, 'sim', '5003', 'RF3', 'CR3', 49900, 'paid after close', 'SUCCEEDED', NOW(6), NOW(6)),
			(9504, 5004, 1002, NULL, 'sim', '5004', 'RF4', 'CR4', 49900, 'buyer asked', 'SUCCEEDED', NOW(6), NOW(6))`,
		// The books of that money (internal/ledger): four trades captured, two refunds held
		// and posted — RF3 gives back the payment kept from suspense, RF4 the order's from revenue.
		`INSERT INTO ledger_transfers (id, kind, pending_id, capture_id, channel, number, amount, created_at) VALUES
			('trade:sim:T1', 'capture', NULL, NULL, 'sim', 'T1', 5998, NOW(6)),
			('trade:sim:T3', 'capture', NULL, NULL, 'sim', 'T3', 49900, NOW(6)),
			('trade:sim:T4', 'capture', NULL, NULL, 'sim', 'T4', 49900, NOW(6)),
			('trade:sim:TR1', 'capture', NULL, NULL, 'sim', 'TR1', 5000, NOW(6)),
			('refund:sim:RF3', 'pending', NULL, 'trade:sim:T3', 'sim', 'RF3', 49900, NOW(6)),
			('refund:sim:RF3:end', 'post', 'refund:sim:RF3', NULL, 'sim', 'RF3', 49900, NOW(6)),
			('refund:sim:RF4', 'pending', NULL, 'trade:sim:T4', 'sim', 'RF4', 49900, NOW(6)),
			('refund:sim:RF4:end', 'post', 'refund:sim:RF4', NULL, 'sim', 'RF4', 49900, NOW(6))`,
		`INSERT INTO ledger_postings (id, transfer_id, account, amount, pending, created_at) VALUES
			(1, 'trade:sim:T1', 'channel:sim', -5998, FALSE, NOW(6)), (2, 'trade:sim:T1', 'merchant:revenue', 5998, FALSE, NOW(6)),
			(3, 'trade:sim:T3', 'channel:sim', -49900, FALSE, NOW(6)), (4, 'trade:sim:T3', 'suspense', 49900, FALSE, NOW(6)),
			(5, 'trade:sim:T4', 'channel:sim', -49900, FALSE, NOW(6)), (6, 'trade:sim:T4', 'merchant:revenue', 49900, FALSE, NOW(6)),
			(7, 'trade:sim:TR1', 'channel:sim', -5000, FALSE, NOW(6)), (8, 'trade:sim:TR1', 'customer:1001', 5000, FALSE, NOW(6)),
			(9, 'refund:sim:RF3', 'suspense', -49900, TRUE, NOW(6)), (10, 'refund:sim:RF3', 'channel:sim', 49900, TRUE, NOW(6)),
			(11, 'refund:sim:RF3:end', 'suspense', -49900, FALSE, NOW(6)), (12, 'refund:sim:RF3:end', 'channel:sim', 49900, FALSE, NOW(6)),
			(13, 'refund:sim:RF4', 'merchant:revenue', -49900, TRUE, NOW(6)), (14, 'refund:sim:RF4', 'channel:sim', 49900, TRUE, NOW(6)),
			(15, 'refund:sim:RF4:end', 'merchant:revenue', -49900, FALSE, NOW(6)), (16, 'refund:sim:RF4:end', 'channel:sim', 49900, FALSE, NOW(6))`,
		`INSERT INTO outbox (id, topic, msg_key, payload, request_id, attempts, created_at, published_at) VALUES
			(9901, 'order.events', '5001', '{}', 'req-o1', 1, NOW(6), NOW(6))`,
		`INSERT INTO idempotency_records (id, scope, biz_type, biz_key, request_id, fingerprint, status, response_status, response_body, created_at, updated_at, expires_at) VALUES `+
			strings.Join([]string{
				recordRow(1, 1001, "order-1", body5001), recordRow(2, 1001, "order-2", body5002), recordRow(3, 1001, "recharge-1", bodyRecharge),
				recordRow(4, 1002, "order-3", body5003), recordRow(5, 1002, "order-4", body5004),
				recordRow(6, 1001, "pay-1", bodyPay), recordRow(7, 1002, "refund-4", bodyRefund),
			}, ", "),
	)
}

// recordRow is the values of a completed idempotency record of userID's key holding a 201
// answer with body.
func recordRow(id, userID int64, key, body string) string {
	return fmt.Sprintf("(%d, 'user:%d', 'idempotency-key', %s, 'req-%d', REPEAT('f', 64), 'COMPLETED', 201, %s, NOW(6), NOW(6), NOW(6) + INTERVAL 1 DAY)",
		id, userID, quote(key), id, quote(body))
}

// keyed stores the 201 answer with body of u's key for op, as the idempotency layer does, and
// adds the answer, executed, to the history of c.
func (w *dbWorld) keyed(t *testing.T, c *checker, id int64, u user, op, key, body string) {
	t.Helper()
	w.exec(t, `INSERT INTO idempotency_records (id, scope, biz_type, biz_key, request_id, fingerprint, status, response_status, response_body, created_at, updated_at, expires_at) VALUES `+
		recordRow(id, u.id, key, body))
	c.events = append(c.events, answer(op, u.name, key, 201, "executed", body))
}

// quote is s as a MySQL string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

// notification is the body of a channel notification for trade of order.
func notification(trade, order string, amount int64) string {
	b, _ := json.Marshal(channelsim.TradeNotification{Channel: "sim", TradeNo: trade, OutTradeNo: order, Amount: amount, Status: channelsim.TradeSuccess})
	return string(b)
}

// consistentHistory is the consistent world's history: every write acknowledged, some after a retry.
func consistentHistory() []*event {
	n1 := answer("notify", "", "T1", 200, "", `{"code":"success"}`)
	n1.Req = notification("T1", "5001", 5998)
	nr := answer("recharge_notify", "", "TR1", 200, "", `{"code":"success"}`)
	nr.Req = notification("TR1", "7001", 5000)
	return []*event{
		{Kind: kindNote, Detail: "start"},
		{Kind: kindHTTP, Op: "order", User: "chaos-01", Key: "order-1", Err: "context deadline exceeded"},
		answer("order", "chaos-01", "order-1", 201, "executed", body5001),
		answer("order", "chaos-01", "order-1", 201, "replayed", body5001),
		answer("order", "chaos-01", "order-2", 503, "", `{"code":"unavailable"}`),
		answer("order", "chaos-01", "order-2", 409, "in_progress", `{"code":"idempotency_key_in_use"}`),
		answer("order", "chaos-01", "order-2", 201, "replayed", body5002),
		answer("recharge", "chaos-01", "recharge-1", 201, "executed", bodyRecharge),
		answer("order", "chaos-02", "order-3", 201, "executed", body5003),
		answer("order", "chaos-02", "order-4", 201, "executed", body5004),
		answer("pay", "chaos-01", "pay-1", 201, "executed", bodyPay),
		answer("refund", "chaos-02", "refund-4", 504, "", `{"code":"gateway_timeout"}`),
		answer("refund", "chaos-02", "refund-4", 201, "replayed", bodyRefund),
		answer("order", "chaos-02", "order-5", 422, "executed", `{"code":"out_of_stock"}`),
		{Kind: kindKafka, Key: "T1"},
		n1, nr,
		{Kind: kindFault, Detail: "kill oncepay-2"},
	}
}

// consistentState is the channel's books of the consistent world.
func consistentState() channelsim.State {
	trade := func(no, order, status string, amount int64) channelsim.TradeRecord {
		return channelsim.TradeRecord{Trade: channelsim.Trade{TradeNo: no, OutTradeNo: order, Status: status, Amount: amount}}
	}
	refund := func(no, out, order string, amount int64) channelsim.RefundRecord {
		return channelsim.RefundRecord{Refund: channelsim.Refund{RefundNo: no, OutRefundNo: out, OutTradeNo: order, Status: channelsim.RefundSuccess, Amount: amount}}
	}
	return channelsim.State{
		Channel: "sim",
		Trades: []channelsim.TradeRecord{
			trade("T1", "5001", channelsim.TradeSuccess, 5998),
			trade("T2", "5002", channelsim.TradeWaitBuyerPay, 5997),
			trade("T3", "5003", channelsim.TradeSuccess, 49900),
			trade("T4", "5004", channelsim.TradeSuccess, 49900),
			{Trade: channelsim.Trade{TradeNo: "TR1", OutTradeNo: "7001", Status: channelsim.TradeSuccess, Amount: 5000}, Kind: channelsim.KindRecharge},
		},
		Refunds: []channelsim.RefundRecord{refund("CR3", "RF3", "5003", 49900), refund("CR4", "RF4", "5004", 49900)},
	}
}

// checker returns a checker of the world with the consistent history and channel books.
func (w *dbWorld) checker() *checker {
	return &checker{
		events: consistentHistory(), db: w.db, rdb: w.rdb, state: consistentState(), users: chaosTestUsers,
		lockTTL: 30 * time.Second, prefix: w.prefix, exits: map[string]int{"oncepay-1": 0, "oncepay-2": 0},
	}
}

func TestCheckerDatabase(t *testing.T) {
	w := newDBWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cases := []struct {
		name   string
		breaks func(t *testing.T, c *checker) // breaks the consistent world; nil keeps it
		check  string                         // the one check that must report it
		n      int                            // how many violations
		detail []string                       // words one of them must contain
	}{
		{name: "consistent world"},
		{"order no key names", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO orders (id, user_id, status, amount, currency, created_at, updated_at, expires_at) VALUES (5009, 1001, 'CANCELLED', 1999, 'CNY', NOW(6), NOW(6), NOW(6))`)
		}, "orders_exactly_once", 1, []string{"order 5009", "outside the guard"}},
		{"order named by two keys", func(t *testing.T, c *checker) {
			w.keyed(t, c, 9, chaosTestUsers[0], "order", "order-9", body5001)
		}, "orders_exactly_once", 1, []string{"order 5001", "2 keys"}},
		{"acknowledged order missing", func(t *testing.T, c *checker) {
			w.keyed(t, c, 9, chaosTestUsers[1], "order", "order-7", `{"order_id":"5077","amount":1999,"status":"PENDING_PAYMENT"}`)
		}, "orders_exactly_once", 1, []string{"order 5077", "not in the database"}},
		{"refund no key names", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO refunds (id, order_id, user_id, channel, out_trade_no, out_refund_no, amount, reason, status, created_at, updated_at)
				VALUES (9501, 5001, 1001, 'sim', '5001', 'RF1', 1000, 'buyer asked', 'FAILED', NOW(6), NOW(6))`)
		}, "refunds_exactly_once", 1, []string{"refund 9501", "outside the guard"}},
		{"refund named by two keys", func(t *testing.T, c *checker) {
			w.keyed(t, c, 9, chaosTestUsers[1], "refund", "refund-9", bodyRefund)
		}, "refunds_exactly_once", 1, []string{"refund 9504", "2 keys"}},
		{"recharge no key names", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO recharges (id, user_id, amount, status, created_at, updated_at) VALUES (7003, 1002, 100, 'FAILED', NOW(6), NOW(6))`)
		}, "recharges_exactly_once", 1, []string{"recharge 7003", "outside the guard"}},
		{"acknowledged recharge missing", func(t *testing.T, c *checker) {
			w.keyed(t, c, 9, chaosTestUsers[1], "recharge", "recharge-9", `{"recharge_id":"7009","amount":100,"status":"PENDING"}`)
		}, "recharges_exactly_once", 1, []string{"recharge 7009", "not in the database"}},
		{"stock lost", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE inventory SET available = available - 1 WHERE sku = 'CHAOS-A'`)
		}, "stock_conserved", 1, []string{"CHAOS-A", "started with 100000"}},
		{"reserved is not the pending orders", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE inventory SET available = available - 1, reserved = reserved + 1 WHERE sku = 'CHAOS-A'`)
		}, "stock_conserved", 1, []string{"CHAOS-A", "reserved 4", "PENDING_PAYMENT orders hold 3"}},
		{"sold is not the paid orders", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE inventory SET available = available + 2, sold = sold - 2 WHERE sku = 'CHAOS-SCARCE'`)
		}, "stock_conserved", 1, []string{"CHAOS-SCARCE", "sold 0", "PAID orders hold 2"}},
		{"negative stock", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE inventory SET available = -1, sold = sold + 39 WHERE sku = 'CHAOS-SCARCE'`)
		}, "stock_conserved", 2, []string{"CHAOS-SCARCE", "negative stock"}},
		{"a posting of the books altered", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE ledger_postings SET amount = amount + 1 WHERE id = 2`)
		}, "ledger_balanced", 3, []string{"transfer_unbalanced", "trade:sim:T1"}},
		{"a refund the channel carried out is not posted", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE ledger_transfers SET amount = 49000 WHERE id = 'refund:sim:RF4:end'`,
				`UPDATE ledger_postings SET amount = -49000 WHERE id = 15`, `UPDATE ledger_postings SET amount = 49000 WHERE id = 16`)
		}, "ledger_matches_channel", 2, []string{"RF4", "the books posted 49000"}},
		{"balance is not the ledger", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE accounts SET balance = balance + 100 WHERE user_id = 1001`)
		}, "balance_equals_ledger", 1, []string{"chaos-01", "balance 5100", "sum(ledger) 5000"}},
		{"recharge the channel took is not credited", func(t *testing.T, c *checker) {
			c.state.Trades = append(c.state.Trades, channelsim.TradeRecord{Trade: channelsim.Trade{TradeNo: "TR9", OutTradeNo: "7009", Status: channelsim.TradeSuccess, Amount: 300}, Kind: channelsim.KindRecharge})
		}, "balance_equals_ledger", 1, []string{"LOST", "recharge 7009", "trade TR9"}},
		{"recharge credited by a trade the channel never took", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE recharges SET trade_no = 'TR7' WHERE id = 7001`)
		}, "balance_equals_ledger", 2, []string{"recharge 7001", "TR7", "never took"}},
		{"ledger is not the recharges", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO account_ledger (id, user_id, biz_type, biz_id, amount, balance_after, created_at) VALUES (8002, 1002, 'recharge', '7002', 300, 300, NOW(6))`,
				`UPDATE accounts SET balance = 300 WHERE user_id = 1002`)
		}, "balance_equals_ledger", 1, []string{"chaos-02", "sum(succeeded recharges) 0"}},
		{"acknowledged recharge not credited", func(t *testing.T, c *checker) {
			nr := answer("recharge_notify", "", "TR2", 200, "", `{"code":"success"}`)
			nr.Req = notification("TR2", "7002", 100)
			w.exec(t, `INSERT INTO recharges (id, user_id, amount, status, created_at, updated_at) VALUES (7002, 1002, 100, 'PENDING', NOW(6), NOW(6))`)
			w.keyed(t, c, 9, chaosTestUsers[1], "recharge", "recharge-2", `{"recharge_id":"7002","amount":100,"status":"PENDING"}`)
			c.events = append(c.events, nr)
		}, "balance_equals_ledger", 1, []string{"recharge 7002", "PENDING"}},
		{"payment lost on a closed order", func(t *testing.T, c *checker) {
			w.exec(t, `DELETE FROM anomalies WHERE trade_no = 'T3'`)
		}, "payments_exactly_once", 1, []string{"LOST", "order 5003", "CLOSED"}},
		{"payment the channel never took", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO payments (id, channel, trade_no, order_id, amount, status, request_id, created_at) VALUES (6002, 'sim', 'T2', 5002, 5997, 'SUCCEEDED', 'req-n2', NOW(6))`)
		}, "payments_exactly_once", 1, []string{"order 5002", "never took"}},
		{"payment applied twice", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO payments (id, channel, trade_no, order_id, amount, status, request_id, created_at) VALUES (6011, 'sim', 'T1-again', 5001, 5998, 'SUCCEEDED', 'req-n1b', NOW(6))`)
			// The payment read last may be either row, so the trade may also mismatch.
		}, "payments_exactly_once", -1, []string{"order 5001", "2 payment rows"}},
		{"paid order without payment", func(t *testing.T, c *checker) {
			w.exec(t, `DELETE FROM payments WHERE order_id = 5001`)
		}, "payments_exactly_once", 2, []string{"order 5001", "without a payment row"}},
		{"acknowledged notification not applied", func(t *testing.T, c *checker) {
			n := answer("notify", "", "T2", 200, "", `{"code":"success"}`)
			n.Req = notification("T2", "5002", 5997)
			c.events = append(c.events, n)
		}, "payments_exactly_once", 1, []string{"notification for T2", "PENDING_PAYMENT"}},
		{"refund left pending", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO refunds (id, order_id, user_id, channel, out_trade_no, out_refund_no, amount, reason, status, created_at, updated_at)
				VALUES (9501, 5001, 1001, 'sim', '5001', 'RF1', 1000, 'buyer asked', 'PENDING', NOW(6), NOW(6))`)
			w.keyed(t, c, 9, chaosTestUsers[0], "refund", "refund-1", `{"refund_id":"9501","order_id":"5001","amount":1000,"status":"PENDING"}`)
		}, "refunds_match_channel", 1, []string{"refund RF1", "left PENDING"}},
		{"refund the channel made that oncepay does not know", func(t *testing.T, c *checker) {
			c.state.Refunds = append(c.state.Refunds, channelsim.RefundRecord{Refund: channelsim.Refund{RefundNo: "CR9", OutRefundNo: "RF9", OutTradeNo: "5001", Status: channelsim.RefundSuccess, Amount: 100}})
		}, "refunds_match_channel", 1, []string{"RF9", "does not know"}},
		{"refund amount differs from the channel's", func(t *testing.T, c *checker) {
			c.state.Refunds[1].Amount = 100
		}, "refunds_match_channel", 1, []string{"refund RF4", "asked 49900", "refunded 100"}},
		{"refund succeeded that the channel never made", func(t *testing.T, c *checker) {
			c.state.Refunds = c.state.Refunds[:1]
		}, "refunds_match_channel", 1, []string{"RF4", "never refunded"}},
		{"payment after close not refunded", func(t *testing.T, c *checker) {
			w.exec(t, `DELETE FROM refunds WHERE out_refund_no = 'RF3'`)
			c.state.Refunds = c.state.Refunds[1:]
		}, "refunds_match_channel", 1, []string{"order 5003", "0 refunded"}},
		{"unpublished outbox event", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO outbox (id, topic, msg_key, payload, request_id, created_at) VALUES (9902, 'order.events', '5002', '{}', 'req-o2', NOW(6))`)
		}, "outbox_published", 1, []string{"1 of 2"}},
		{"event of an order that rolled back", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO events (id, type, payload, request_id, created_at) VALUES (9903, 'order.created', '{"data":{"order_id":"5999"}}', 'req-e1', NOW(6))`)
		}, "events_announce_commits", 1, []string{"event 9903", "5999", "does not exist"}},
		{"paid event of an unpaid order, twice", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO events (id, type, payload, request_id, created_at) VALUES
				(9904, 'order.paid', '{"data":{"order_id":"5002"}}', 'req-e2', NOW(6)),
				(9905, 'order.paid', '{"data":{"order_id":"5002"}}', 'req-e3', NOW(6))`)
		}, "events_announce_commits", 3, []string{"order 5002", "two order.paid events"}},
		{"event of a refund that rolled back, and one of a refund that ended otherwise", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO events (id, type, payload, request_id, created_at) VALUES
				(9906, 'refund.succeeded', '{"data":{"refund_id":"9599"}}', 'req-e4', NOW(6)),
				(9907, 'refund.failed', '{"data":{"refund_id":"9504"}}', 'req-e5', NOW(6))`)
		}, "events_announce_commits", 2, []string{"event 9906", "refund \"9599\"", "does not exist"}},
		{"event of a recharge that rolled back", func(t *testing.T, c *checker) {
			w.exec(t, `INSERT INTO events (id, type, payload, request_id, created_at) VALUES
				(9908, 'recharge.succeeded', '{"data":{"recharge_id":"7999"}}', 'req-e6', NOW(6)),
				(9909, 'recharge.succeeded', '{"data":{"recharge_id":"7001"}}', 'req-e7', NOW(6))`)
		}, "events_announce_commits", 1, []string{"event 9908", "recharge \"7999\""}},
		{"webhooks delivered, processed once, served in order", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911", "9912")
			// A lost 2xx: the same body again, a duplicate the receiver does not repeat.
			c.hooks.attempts = append(c.hooks.attempts, c.hooks.attempts[1])
		}, "", 0, nil},
		{"event never delivered", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911")
			c.hooks.attempts = c.hooks.attempts[:1]
			c.hooks.effects["9911"] = 0
		}, "webhooks_processed_once", 2, []string{"event 9911", "never delivered"}},
		{"event processed twice", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911")
			c.hooks.attempts = append(c.hooks.attempts, c.hooks.attempts[0])
			c.hooks.effects["9910"] = 2
		}, "webhooks_processed_once", 1, []string{"event 9910", "processed 2 times"}},
		{"event delivered only with an invalid signature", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910")
			c.hooks.attempts[0].SigValid = false
		}, "webhooks_processed_once", 1, []string{"event 9910", "never with a valid signature"}},
		{"effect of an event oncepay has no record of", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910")
			c.hooks.effects["9999"] = 1
		}, "webhooks_processed_once", 1, []string{"event 9999", "no record"}},
		{"a retry of an event with another body", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911")
			c.hooks.attempts = append(c.hooks.attempts, hookAttempt{EventID: "9911", BodyHash: strings.Repeat("0", 64), SigValid: true})
		}, "webhook_bodies_identical", 1, []string{"event 9911", "2 different bodies"}},
		{"every attempt with a body that is not the stored payload", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910")
			c.hooks.attempts[0].BodyHash = strings.Repeat("0", 64)
		}, "webhook_bodies_identical", 1, []string{"event 9910", "not its stored payload"}},
		{"events API skips an event", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911", "9912")
			c.hooks.feed = []string{"9910", "9912"}
		}, "events_feed_in_order", 1, []string{"never served event 9911"}},
		{"events API out of order", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911", "9912")
			c.hooks.feed = []string{"9910", "9912", "9911"}
		}, "events_feed_in_order", 1, []string{"event 9912 at position 1", "event 9911"}},
		{"events API serves an event twice", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911")
			c.hooks.feed = append(c.hooks.feed, "9910")
		}, "events_feed_in_order", 1, []string{"event 9910 twice"}},
		{"events API read stopped", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911")
			c.hooks.feed, c.hooks.feedErr = c.hooks.feed[:1], "GET /v1/admin/events: 400"
		}, "events_feed_in_order", 1, []string{"stopped after 1 of 2 events", "400"}},
		{"event never given its place in the feed", func(t *testing.T, c *checker) {
			hookEvents(t, w, c, "9910", "9911")
			w.exec(t, `UPDATE events SET seq = NULL WHERE id = 9911`)
			c.hooks.feed = c.hooks.feed[:1]
		}, "events_feed_in_order", 1, []string{"event 9911", "never given its place"}},
		{"acknowledged answer differs from its record", func(t *testing.T, c *checker) {
			w.exec(t, `UPDATE idempotency_records SET response_body = '{"recharge_id":"7001","amount":5000,"status":"SUCCEEDED"}' WHERE biz_key = 'recharge-1'`)
		}, "acknowledged_durable", 1, []string{"chaos-01 key recharge-1", "acknowledged 201"}},
		{"acknowledged answer without a record", func(t *testing.T, c *checker) {
			w.exec(t, `DELETE FROM idempotency_records WHERE biz_key = 'pay-1'`)
		}, "acknowledged_durable", 1, []string{"chaos-01 key pay-1", "no record"}},
		{"lease left without TTL", func(t *testing.T, c *checker) {
			set(ctx, t, w.rdb, w.prefix+"idem:{x}:lock", 0)
			set(ctx, t, w.rdb, w.prefix+"idem:{x}:resp", 0)          // not a lease
			set(ctx, t, w.rdb, "other:"+w.prefix+"idem:{y}:lock", 0) // another prefix
		}, "no_key_left_in_progress", 1, []string{w.prefix + "idem:{x}:lock", "lease with TTL"}},
		{"lease still held", func(t *testing.T, c *checker) {
			set(ctx, t, w.rdb, w.prefix+"idem:{user:1001|order-2}:lock", 10*time.Second)
		}, "no_key_left_in_progress", 1, []string{"still leased"}},
		{"lease longer than the lock TTL", func(t *testing.T, c *checker) {
			set(ctx, t, w.rdb, w.prefix+"idem:{z}:lock", time.Hour)
		}, "no_key_left_in_progress", 1, []string{"lock TTL 30s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.reset(t)
			c := w.checker()
			if tc.breaks != nil {
				tc.breaks(t, c)
			}
			if err := c.run(ctx); err != nil {
				t.Fatalf("run: %v", err)
			}
			var names []string
			for _, r := range c.results {
				if slices.Contains(names, r.Name) {
					t.Errorf("check %s ran twice", r.Name)
				}
				names = append(names, r.Name)
			}
			for _, name := range knownChecks {
				if !slices.Contains(names, name) {
					t.Errorf("check %s did not run; ran %v", name, names)
				}
			}
			for _, name := range webhookChecks {
				if c.hooks != nil && !slices.Contains(names, name) {
					t.Errorf("check %s did not run with a hookView; ran %v", name, names)
				}
			}
			if tc.check == "" {
				for _, v := range c.violations {
					t.Errorf("violation of %s in a consistent world: %s", v.Check, v.Detail)
				}
				return
			}
			n := tc.n
			if n < 0 {
				n = 0
				for _, v := range c.violations {
					if v.Check == tc.check {
						n++
					}
				}
				if n == 0 {
					t.Fatalf("%s reported nothing", tc.check)
				}
			}
			expectOnly(t, c, tc.check, n)
			expectDetail(t, c, tc.check, tc.detail...)
		})
	}
}

// set writes key with ttl, or without one when ttl is 0.
func set(ctx context.Context, t *testing.T, rdb redis.UniversalClient, key string, ttl time.Duration) {
	t.Helper()
	if err := rdb.Set(ctx, key, "token", ttl).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestA500ShowsWhatItsInstanceLogged: a 500 sends nothing of its cause; the instance logged
// it under the request's id. The violation carries the instances' log lines that name the
// request id or the Idempotency-Key, and the printed summary shows them, so that a CI run
// whose output is all that is kept still says why.
func TestA500ShowsWhatItsInstanceLogged(t *testing.T) {
	dir := t.TempDir()
	logs := map[string]string{
		"oncepay-1.log": `{"level":"INFO","msg":"http request","request_id":"chaos-0123456789ab","status":201}` + "\n" +
			`{"level":"ERROR","msg":"request failed","request_id":"chaos-0123456789ab","err":"Error 1062 (23000): Duplicate entry"}` + "\n",
		"oncepay-2.log": `{"level":"INFO","msg":"http request","request_id":"chaos-ffffffffffff","status":201}` + "\n",
	}
	c := &checker{events: []*event{
		{Seq: 7, Kind: kindHTTP, Op: "order", Key: "order-7ce9d558f195c2547a08", ReqID: "chaos-0123456789ab", Inst: 1, Method: "POST", Path: "/v1/orders", Status: 500, Resp: `{"code":"internal","detail":"an unexpected error occurred; it has been logged"}`},
	}}
	for name, text := range logs {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		c.serverLogs = append(c.serverLogs, path)
	}
	slices.Sort(c.serverLogs)
	c.checkAnswers()
	expectOnly(t, c, "no_500", 1)
	v := c.violations[0]
	if len(v.Logs) != 2 || !strings.Contains(v.Logs[1], "Duplicate entry") || !strings.HasPrefix(v.Logs[1], "oncepay-1.log: ") {
		t.Fatalf("the violation's log lines %q: want oncepay-1's two lines of the request, the error among them", v.Logs)
	}
	var out strings.Builder
	printSummary(&out, summary{Total: 1, Violations: c.violations, Checks: c.results}, "out")
	if !strings.Contains(out.String(), `"msg":"request failed","request_id":"chaos-0123456789ab"`) || strings.Contains(out.String(), "chaos-ffffffffffff") {
		t.Errorf("the printed summary does not show the request's log lines alone:\n%s", out.String())
	}
}
