package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/notify"
	okafka "github.com/oncepay/oncepay/internal/platform/kafka"
)

// violation is one broken invariant, named by the check that found it.
type violation struct {
	Check string `json:"check"`
	// Invariant is the rule the check holds, in words.
	Invariant string `json:"invariant"`
	Detail    string `json:"detail"`
	// Keys are the ids, keys and numbers the detail names that the history knows.
	Keys []string `json:"keys,omitempty"`
	// History are the lines of the history (and of the channel's notifications) that name
	// one of Keys, oldest first: what a person reads to see how it happened.
	History []string `json:"history,omitempty"`
	// Logs are the oncepay instances' log lines that name one of Keys (a request id, an
	// Idempotency-Key): the cause a 500 logged and never sent. They are printed with the
	// violation, so that a CI run whose output is all that is kept still shows them.
	Logs []string `json:"logs,omitempty"`
}

// checkResult is one invariant and how it fared.
type checkResult struct {
	Name       string `json:"name"`
	Invariant  string `json:"invariant"`
	Checked    int    `json:"checked"` // how many items it looked at
	Violations int    `json:"violations"`
}

// checker reads the history, the database, Redis, Kafka and the channel's books after the
// run has settled, and reports every invariant broken.
type checker struct {
	events []*event
	// start is when the history began: an event's AtMs counts from it.
	start   time.Time
	db      *sql.DB
	rdb     redis.UniversalClient
	state   channelsim.State
	users   []user
	lockTTL time.Duration
	prefix  string
	// kafkaLag and dlq are read by the caller (offsets need the broker).
	kafkaLag, dlq int64
	exits         map[string]int

	results    []checkResult
	violations []violation

	// serverLogs are the oncepay instances' log files, read for a violation's evidence;
	// logText holds their text once read.
	serverLogs []string
	logText    []string

	// gatewayLog is the gateway's access log by request id (gateway.go); nil without one.
	gatewayLog map[string]gatewayLine

	// hooks is what the merchant's receiver saw and what the events API served (receiver.go);
	// nil skips the webhook checks.
	hooks *hookView
	// feedLag is the longest an event waited for its place in the feed (webhook_feed_lag).
	feedLag time.Duration

	// kafka is what the broker holds after the run (check_kafka.go); nil skips its checks.
	kafka *kafkaView

	// tokensIssued and tokensRefused count the one-time tokens of the history and the writes
	// sent after their token's expiry that were refused (check_clock.go).
	tokensIssued, tokensRefused int

	// recs and dbOrders are read once, by the first check that needs them.
	recs     map[[2]string]record
	dbOrders map[string]dbOrder
}

// maxEvidence bounds the history lines kept per violation; every violation is listed.
const maxEvidence = 60

// add records the result of one check and every one of its violations, each with the
// history lines that show it.
func (c *checker) add(name, invariant string, checked int, vs []string) {
	c.results = append(c.results, checkResult{Name: name, Invariant: invariant, Checked: checked, Violations: len(vs)})
	for _, v := range vs {
		keys, lines := c.evidence(v)
		c.violations = append(c.violations, violation{Check: name, Invariant: invariant, Detail: v, Keys: keys, History: lines, Logs: c.logEvidence(keys)})
	}
}

// evidence finds the keys a violation's detail names — the words of ten characters or more
// made of letters, digits, '-' and '_': order, refund and recharge ids, trade numbers,
// Idempotency-Keys — and the history events and channel notifications that carry one of
// them, rendered one per line, at most maxEvidence of them.
func (c *checker) evidence(detail string) ([]string, []string) {
	var keys []string
	for _, w := range strings.FieldsFunc(detail, func(r rune) bool {
		return !(r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) {
		if len(w) >= 10 && !slices.Contains(keys, w) {
			keys = append(keys, w)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	names := func(s string) bool {
		for _, k := range keys {
			if strings.Contains(s, k) {
				return true
			}
		}
		return false
	}
	var lines []string
	for _, e := range c.events {
		if len(lines) == maxEvidence {
			lines = append(lines, "… (more in history.jsonl)")
			break
		}
		if slices.Contains(keys, e.Key) || names(e.Path) || names(e.Req) || names(e.Resp) || names(e.Detail) {
			lines = append(lines, e.line())
		}
	}
	for _, n := range c.state.Notifications {
		if names(n.OutTradeNo) || names(n.OutRefundNo) || names(string(n.Body)) {
			lines = append(lines, fmt.Sprintf("channel notification %s %s %s: %s after %d rounds, %d attempts", n.ID, n.Kind, n.Body, n.Status, n.Rounds, len(n.Attempts)))
		}
	}
	return keys, lines
}

// logEvidence returns the lines of the instances' logs that name one of keys — those with a
// digit in them, ids rather than words of the detail — each prefixed with its file's name, at
// most maxEvidence of them.
func (c *checker) logEvidence(all []string) []string {
	keys := slices.DeleteFunc(slices.Clone(all), func(k string) bool { return !strings.ContainsAny(k, "0123456789") })
	if len(keys) == 0 {
		return nil
	}
	if c.logText == nil {
		c.logText = make([]string, len(c.serverLogs))
		for i, path := range c.serverLogs {
			if b, err := os.ReadFile(path); err == nil {
				c.logText[i] = string(b)
			}
		}
	}
	var lines []string
	for i, path := range c.serverLogs {
		for l := range strings.Lines(c.logText[i]) {
			for _, k := range keys {
				if !strings.Contains(l, k) {
					continue
				}
				if len(lines) == maxEvidence {
					return append(lines, "… (more in the instances' logs)")
				}
				lines = append(lines, filepath.Base(path)+": "+clipLine(strings.TrimSpace(l)))
				break
			}
		}
	}
	return lines
}

// clipLine shortens a log line to what a CI log shows well.
func clipLine(s string) string {
	const max = 1200
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// userWrites are the operations that carry an Idempotency-Key.
var userWrites = []string{"order", "pay", "cancel", "refund", "recharge"}

// run performs every check.
func (c *checker) run(ctx context.Context) error {
	steps := []func(context.Context) error{
		c.checkReplays, c.checkRecords, c.checkOrders, c.checkRefundRows, c.checkRecharges, c.checkPayments, c.checkStock,
		c.checkBalances, c.checkLedger, c.checkRefunds, c.checkLeases, c.checkOutbox, c.checkEvents, c.checkWebhooks, c.checkBroker,
		c.checkClock,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	c.checkKafka()
	c.checkAnswers()
	c.checkInstances()
	c.checkGateway()
	return nil
}

// byKey groups the final HTTP answers of idempotent user writes by user and key.
func (c *checker) byKey() map[[2]string][]*event {
	out := map[[2]string][]*event{}
	for _, e := range c.events {
		if e.Kind == kindHTTP && slices.Contains(userWrites, e.Op) {
			k := [2]string{e.User, e.Key}
			out[k] = append(out[k], e)
		}
	}
	return out
}

// checkReplays: every answer a key got from its stored outcome is the original answer, byte
// for byte, and a key was executed to a final answer at most once.
func (c *checker) checkReplays(context.Context) error {
	var vs []string
	keys := c.byKey()
	for k, es := range keys {
		var bodies []string
		executed := 0
		for _, e := range es {
			if !e.final() || (e.Outcome != "executed" && e.Outcome != "replayed") {
				continue
			}
			if e.Outcome == "executed" && e.Status < 300 {
				executed++
			}
			if !slices.Contains(bodies, e.Resp) {
				bodies = append(bodies, e.Resp)
			}
		}
		if executed > 1 {
			vs = append(vs, fmt.Sprintf("%s key %s: executed %d times", k[0], k[1], executed))
		}
		if len(bodies) > 1 {
			vs = append(vs, fmt.Sprintf("%s key %s: %d different answers: %s | %s", k[0], k[1], len(bodies), clip(bodies[0]), clip(bodies[1])))
		}
	}
	c.add("replays_byte_identical", "every replay of a key equals its original answer byte for byte; no key executed twice", len(keys), vs)
	return nil
}

// record is a row of idempotency_records.
type record struct {
	status int
	body   string
}

// records reads the stored outcomes of the users' keys (once).
func (c *checker) records(ctx context.Context) (map[[2]string]record, error) {
	if c.recs != nil {
		return c.recs, nil
	}
	names := map[string]string{}
	for _, u := range c.users {
		names["user:"+strconv.FormatInt(u.id, 10)] = u.name
	}
	rows, err := c.db.QueryContext(ctx, `SELECT scope, biz_key, response_status, COALESCE(response_body, '') FROM idempotency_records WHERE scope LIKE 'user:%'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[[2]string]record{}
	for rows.Next() {
		var scope, key, body string
		var status int
		if err := rows.Scan(&scope, &key, &status, &body); err != nil {
			return nil, err
		}
		out[[2]string{names[scope], key}] = record{status, body}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.recs = out
	return out, nil
}

// checkRecords: every acknowledged write has its durable record, and the record holds the
// very answer the client got.
func (c *checker) checkRecords(ctx context.Context) error {
	recs, err := c.records(ctx)
	if err != nil {
		return err
	}
	var vs []string
	acked := 0
	for k, es := range c.byKey() {
		for _, e := range es {
			if !e.final() || e.Status >= 300 || (e.Outcome != "executed" && e.Outcome != "replayed") {
				continue
			}
			acked++
			r, ok := recs[k]
			switch {
			case !ok:
				vs = append(vs, fmt.Sprintf("%s key %s: acknowledged %d but no record is stored", k[0], k[1], e.Status))
			case r.status != e.Status || r.body != e.Resp:
				vs = append(vs, fmt.Sprintf("%s key %s: acknowledged %d %s, stored %d %s", k[0], k[1], e.Status, clip(e.Resp), r.status, clip(r.body)))
			}
			break
		}
	}
	c.add("acknowledged_durable", "every acknowledged write has one stored record holding the answer the client got", acked, vs)
	return nil
}

// checkOrders, checkRefundRows and checkRecharges: every row a keyed write creates was made
// by exactly one key (no effect without its key's record, no key with two effects), and every
// row a client was told of exists.
func (c *checker) checkOrders(ctx context.Context) error {
	return c.checkMadeOnce(ctx, "orders_exactly_once", "order", "order_id", `SELECT CAST(id AS CHAR) FROM orders`)
}

func (c *checker) checkRefundRows(ctx context.Context) error {
	// Refunds of anomalies are opened by resume-refunds, not by a key.
	return c.checkMadeOnce(ctx, "refunds_exactly_once", "refund", "refund_id", `SELECT CAST(id AS CHAR) FROM refunds WHERE anomaly_id IS NULL`)
}

func (c *checker) checkRecharges(ctx context.Context) error {
	return c.checkMadeOnce(ctx, "recharges_exactly_once", "recharge", "recharge_id", `SELECT CAST(id AS CHAR) FROM recharges`)
}

// checkMadeOnce holds the rows query lists to the stored 201 answers of op's keys, which
// name each row by the JSON field idField.
func (c *checker) checkMadeOnce(ctx context.Context, name, op, idField, query string) error {
	recs, err := c.records(ctx)
	if err != nil {
		return err
	}
	keys := map[[2]string]bool{}
	for _, e := range c.events {
		if e.Kind == kindHTTP && e.Op == op {
			keys[[2]string{e.User, e.Key}] = true
		}
	}
	named := map[string][]string{}
	for k := range keys {
		r, ok := recs[k]
		if !ok || r.status != http.StatusCreated {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(r.body), &body); err != nil {
			continue
		}
		if id, _ := body[idField].(string); id != "" {
			named[id] = append(named[id], k[1])
		}
	}
	ids, err := c.column(ctx, query)
	if err != nil {
		return err
	}
	var vs []string
	inDB := map[string]bool{}
	for _, id := range ids {
		inDB[id] = true
		switch keys := named[id]; len(keys) {
		case 1:
		case 0:
			vs = append(vs, fmt.Sprintf("%s %s exists but no %s key's record names it (an effect outside the guard)", op, id, op))
		default:
			vs = append(vs, fmt.Sprintf("%s %s is named by %d keys %v", op, id, len(keys), keys))
		}
	}
	for id := range named {
		if !inDB[id] {
			vs = append(vs, fmt.Sprintf("%s %s was acknowledged but is not in the database", op, id))
		}
	}
	c.add(name, fmt.Sprintf("each %s key made at most one %s; each acknowledged %s exists", op, op, op), len(ids), vs)
	return nil
}

// column reads one string column.
func (c *checker) column(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := c.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// dbOrder is an order as the database holds it.
type dbOrder struct {
	status  string
	amount  int64
	tradeNo string
}

// orders reads every order's status, amount and trade (once).
func (c *checker) orders(ctx context.Context) (map[string]dbOrder, error) {
	if c.dbOrders != nil {
		return c.dbOrders, nil
	}
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(id AS CHAR), status, amount, COALESCE(trade_no, '') FROM orders`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]dbOrder{}
	for rows.Next() {
		var id string
		var o dbOrder
		if err := rows.Scan(&id, &o.status, &o.amount, &o.tradeNo); err != nil {
			return nil, err
		}
		out[id] = o
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.dbOrders = out
	return out, nil
}

// checkPayments: no payment the channel took is lost, none is applied twice, and oncepay's
// paid orders are the channel's paid trades.
func (c *checker) checkPayments(ctx context.Context) error {
	orders, err := c.orders(ctx)
	if err != nil {
		return err
	}
	type pay struct {
		n      int
		amount int64
		trade  string
	}
	pays := map[string]*pay{}
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(order_id AS CHAR), trade_no, amount FROM payments`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, trade string
		var amount int64
		if err := rows.Scan(&id, &trade, &amount); err != nil {
			rows.Close()
			return err
		}
		p := pays[id]
		if p == nil {
			p = &pay{}
			pays[id] = p
		}
		p.n++
		p.amount, p.trade = amount, trade
	}
	rows.Close()
	anomalies := map[string]string{}
	arows, err := c.db.QueryContext(ctx, `SELECT trade_no, kind FROM anomalies`)
	if err != nil {
		return err
	}
	for arows.Next() {
		var trade, kind string
		if err := arows.Scan(&trade, &kind); err != nil {
			arows.Close()
			return err
		}
		anomalies[trade] = kind
	}
	arows.Close()

	var vs []string
	success := 0
	channelPaid := map[string]bool{}
	for _, t := range c.state.Trades {
		if t.Status != "SUCCESS" || t.Kind == channelsim.KindRecharge {
			continue // checkBalances holds recharges to the channel
		}
		success++
		channelPaid[t.OutTradeNo] = true
		o, ok := orders[t.OutTradeNo]
		switch {
		case !ok:
			vs = append(vs, "channel trade "+t.TradeNo+" paid for unknown order "+t.OutTradeNo)
		case o.status == "PAID" || o.status == "REFUNDED":
			p := pays[t.OutTradeNo]
			if p == nil || p.trade != t.TradeNo || p.amount != t.Amount {
				vs = append(vs, fmt.Sprintf("order %s is %s but its payment row does not match channel trade %s (%d)", t.OutTradeNo, o.status, t.TradeNo, t.Amount))
			}
		case anomalies[t.TradeNo] == "paid_after_close":
			// Recorded for refund; checkRefunds holds the refund to it.
		default:
			vs = append(vs, fmt.Sprintf("LOST: the channel took %d for order %s (trade %s) but the order is %s and no anomaly records it; %s",
				t.Amount, t.OutTradeNo, t.TradeNo, o.status, c.deliveryStory(t.OutTradeNo)))
		}
	}
	for id, p := range pays {
		if p.n > 1 {
			vs = append(vs, fmt.Sprintf("order %s has %d payment rows", id, p.n))
		}
		if !channelPaid[id] {
			vs = append(vs, fmt.Sprintf("order %s has a payment (trade %s) the channel never took", id, p.trade))
		}
	}
	for id, o := range orders {
		if (o.status == "PAID" || o.status == "REFUNDED") && pays[id] == nil {
			vs = append(vs, fmt.Sprintf("order %s is %s without a payment row", id, o.status))
		}
	}
	// Every notification acknowledged to a sender names a payment that is applied or recorded.
	for _, e := range c.events {
		if e.Kind == kindHTTP && e.Op == "notify" && e.Status == http.StatusOK && strings.Contains(e.Resp, `"success"`) {
			var n channelsim.TradeNotification
			if json.Unmarshal([]byte(e.Req), &n) != nil {
				continue
			}
			o := orders[n.OutTradeNo]
			if o.status != "PAID" && o.status != "REFUNDED" && anomalies[n.TradeNo] == "" {
				vs = append(vs, fmt.Sprintf("notification for %s acknowledged but order %s is %s with no anomaly", n.TradeNo, n.OutTradeNo, o.status))
			}
		}
	}
	c.add("payments_exactly_once", "every payment the channel took is applied once (or recorded for refund); no payment without the channel's", success, vs)
	return nil
}

// deliveryStory tells how the channel's payment notification for order outTradeNo fared:
// its final status and the answer of each attempt, for reading a LOST payment.
func (c *checker) deliveryStory(outTradeNo string) string {
	for _, n := range c.state.Notifications {
		if n.Kind != channelsim.KindTrade || n.OutTradeNo != outTradeNo {
			continue
		}
		answers := make([]string, 0, len(n.Attempts))
		for _, a := range n.Attempts {
			switch {
			case a.Dropped:
				answers = append(answers, "dropped")
			case a.Error != "":
				answers = append(answers, "error "+a.Error)
			default:
				answers = append(answers, fmt.Sprintf("%d %s", a.Status, a.Answer))
			}
		}
		return fmt.Sprintf("the channel's notification %s: %s after %d rounds (%s)", n.ID, n.Status, n.Rounds, strings.Join(answers, " | "))
	}
	return "the channel sent no notification"
}

// checkStock: stock is conserved per SKU and equals what the orders' states say.
func (c *checker) checkStock(ctx context.Context) error {
	var vs []string
	for _, s := range chaosSKUs {
		var avail, reserved, sold int64
		if err := c.db.QueryRowContext(ctx, `SELECT available, reserved, sold FROM inventory WHERE sku = ?`, s.sku).Scan(&avail, &reserved, &sold); err != nil {
			return err
		}
		if avail < 0 || reserved < 0 || sold < 0 {
			vs = append(vs, fmt.Sprintf("%s: negative stock (available %d, reserved %d, sold %d)", s.sku, avail, reserved, sold))
		}
		if avail+reserved+sold != s.initial {
			vs = append(vs, fmt.Sprintf("%s: available %d + reserved %d + sold %d = %d, started with %d", s.sku, avail, reserved, sold, avail+reserved+sold, s.initial))
		}
		var wantReserved, wantSold sql.NullInt64
		q := `SELECT SUM(i.quantity) FROM order_items i JOIN orders o ON o.id = i.order_id WHERE i.sku = ? AND o.status = ?`
		if err := c.db.QueryRowContext(ctx, q, s.sku, "PENDING_PAYMENT").Scan(&wantReserved); err != nil {
			return err
		}
		if err := c.db.QueryRowContext(ctx, q, s.sku, "PAID").Scan(&wantSold); err != nil {
			return err
		}
		if reserved != wantReserved.Int64 {
			vs = append(vs, fmt.Sprintf("%s: reserved %d, but PENDING_PAYMENT orders hold %d", s.sku, reserved, wantReserved.Int64))
		}
		if sold != wantSold.Int64 {
			vs = append(vs, fmt.Sprintf("%s: sold %d, but PAID orders hold %d", s.sku, sold, wantSold.Int64))
		}
	}
	c.add("stock_conserved", "per SKU: available + reserved + sold = initial; reserved = PENDING_PAYMENT orders; sold = PAID orders", len(chaosSKUs), vs)
	return nil
}

// checkBalances: balance = sum(ledger) = sum(succeeded recharges) per user, and every
// acknowledged recharge notification credited its recharge.
func (c *checker) checkBalances(ctx context.Context) error {
	var vs []string
	for _, u := range c.users {
		var balance int64
		var ledger, recharged sql.NullInt64
		if err := c.db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE user_id = ?`, u.id).Scan(&balance); err != nil && err != sql.ErrNoRows {
			return err
		}
		if err := c.db.QueryRowContext(ctx, `SELECT SUM(amount) FROM account_ledger WHERE user_id = ?`, u.id).Scan(&ledger); err != nil {
			return err
		}
		if err := c.db.QueryRowContext(ctx, `SELECT SUM(amount) FROM recharges WHERE user_id = ? AND status = 'SUCCEEDED'`, u.id).Scan(&recharged); err != nil {
			return err
		}
		if balance != ledger.Int64 || ledger.Int64 != recharged.Int64 {
			vs = append(vs, fmt.Sprintf("%s: balance %d, sum(ledger) %d, sum(succeeded recharges) %d", u.name, balance, ledger.Int64, recharged.Int64))
		}
	}
	for _, e := range c.events {
		if e.Kind == kindHTTP && e.Op == "recharge_notify" && e.Status == http.StatusOK && strings.Contains(e.Resp, `"success"`) {
			var n channelsim.TradeNotification
			if json.Unmarshal([]byte(e.Req), &n) != nil {
				continue
			}
			var status string
			if err := c.db.QueryRowContext(ctx, `SELECT status FROM recharges WHERE id = ?`, n.OutTradeNo).Scan(&status); err != nil || status != "SUCCEEDED" {
				vs = append(vs, fmt.Sprintf("recharge %s notified and acknowledged but it is %q (%v)", n.OutTradeNo, status, err))
			}
		}
	}
	// Every recharge the channel took is credited once, by its own trade, and no recharge is
	// credited by a trade the channel never took.
	took := map[string]string{}
	for _, t := range c.state.Trades {
		if t.Kind == channelsim.KindRecharge && t.Status == "SUCCESS" {
			took[t.OutTradeNo] = t.TradeNo
		}
	}
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(id AS CHAR), status, COALESCE(trade_no, '') FROM recharges`)
	if err != nil {
		return err
	}
	credited := map[string]string{}
	for rows.Next() {
		var id, status, trade string
		if err := rows.Scan(&id, &status, &trade); err != nil {
			rows.Close()
			return err
		}
		if status == "SUCCEEDED" {
			credited[id] = trade
		}
	}
	rows.Close()
	for id, trade := range took {
		if got, ok := credited[id]; !ok || got != trade {
			vs = append(vs, fmt.Sprintf("LOST: the channel took recharge %s (trade %s) but oncepay credited it by %q", id, trade, got))
		}
	}
	for id, trade := range credited {
		if took[id] != trade {
			vs = append(vs, fmt.Sprintf("recharge %s is credited by trade %s the channel never took", id, trade))
		}
	}
	c.add("balance_equals_ledger", "per user: balance = sum(ledger) = sum(succeeded recharges); acknowledged recharges credited; every recharge the channel took credited by its trade", len(c.users)+len(took), vs)
	return nil
}

// checkRefunds: every refund reached an end state, none exceeds what was paid, REFUNDED
// orders are refunded in full, and the channel refunded exactly what oncepay asked.
func (c *checker) checkRefunds(ctx context.Context) error {
	orders, err := c.orders(ctx)
	if err != nil {
		return err
	}
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(order_id AS CHAR), out_refund_no, amount, status, anomaly_id IS NOT NULL FROM refunds`)
	if err != nil {
		return err
	}
	type ref struct {
		order, status string
		amount        int64
		anomaly       bool
	}
	ours := map[string]ref{}
	for rows.Next() {
		var outRefundNo string
		var r ref
		if err := rows.Scan(&r.order, &outRefundNo, &r.amount, &r.status, &r.anomaly); err != nil {
			rows.Close()
			return err
		}
		ours[outRefundNo] = r
	}
	rows.Close()
	var vs []string
	refunded := map[string]int64{}
	for no, r := range ours {
		switch r.status {
		case "SUCCEEDED":
			refunded[r.order] += r.amount
		case "FAILED":
		default:
			vs = append(vs, fmt.Sprintf("refund %s of order %s left %s", no, r.order, r.status))
		}
	}
	paid := map[string]int64{}
	for _, t := range c.state.Trades {
		if t.Status == "SUCCESS" {
			paid[t.OutTradeNo] = t.Amount
		}
	}
	for id, sum := range refunded {
		if sum > paid[id] {
			vs = append(vs, fmt.Sprintf("order %s: refunded %d of %d paid", id, sum, paid[id]))
		}
	}
	for id, o := range orders {
		if o.status == "REFUNDED" && refunded[id] != o.amount {
			vs = append(vs, fmt.Sprintf("order %s is REFUNDED but %d of %d came back", id, refunded[id], o.amount))
		}
		if o.status == "PAID" && refunded[id] >= o.amount && o.amount > 0 {
			vs = append(vs, fmt.Sprintf("order %s is refunded in full but still PAID", id))
		}
	}
	theirs := map[string]bool{}
	for _, r := range c.state.Refunds {
		theirs[r.OutRefundNo] = true
		o, ok := ours[r.OutRefundNo]
		switch {
		case !ok:
			vs = append(vs, fmt.Sprintf("the channel refunded %d under %s, which oncepay does not know", r.Amount, r.OutRefundNo))
		case o.amount != r.Amount:
			vs = append(vs, fmt.Sprintf("refund %s: oncepay asked %d, the channel refunded %d", r.OutRefundNo, o.amount, r.Amount))
		case r.Status == "SUCCESS" && o.status != "SUCCEEDED":
			vs = append(vs, fmt.Sprintf("refund %s succeeded at the channel but is %s in oncepay", r.OutRefundNo, o.status))
		}
	}
	for no, r := range ours {
		if r.status == "SUCCEEDED" && !theirs[no] {
			vs = append(vs, fmt.Sprintf("refund %s is SUCCEEDED in oncepay but the channel never refunded it", no))
		}
	}
	// Every payment recorded after close is refunded, once.
	for _, t := range c.state.Trades {
		o := orders[t.OutTradeNo]
		if t.Status == "SUCCESS" && (o.status == "CANCELLED" || o.status == "CLOSED") && refunded[t.OutTradeNo] != t.Amount {
			vs = append(vs, fmt.Sprintf("order %s was %s and paid %d after; %d refunded", t.OutTradeNo, o.status, t.Amount, refunded[t.OutTradeNo]))
		}
	}
	c.add("refunds_match_channel", "refunds end SUCCEEDED or FAILED, never exceed the payment, and equal the channel's refunds", len(ours), vs)
	return nil
}

// keyGone is what go-redis's PTTL answers for a key that does not exist (Redis's -2).
const keyGone = -2 * time.Nanosecond

// checkLeases: no idempotency key is left in progress beyond its lease.
func (c *checker) checkLeases(ctx context.Context) error {
	var vs []string
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, c.prefix+"idem:*:lock", 500).Iterator()
		for iter.Next(ctx) {
			ttl, err := node.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			switch {
			case ttl == keyGone:
				// Expired (or released) between SCAN and PTTL: a lease no one holds any more.
			case ttl < 0 || ttl > c.lockTTL:
				vs = append(vs, fmt.Sprintf("%s: lease with TTL %s (lock TTL %s)", iter.Val(), ttl, c.lockTTL))
			case strings.Contains(iter.Val(), "{jobs:job:"):
				// A scheduled job of a live instance holds its lock now; its TTL is bounded.
			default:
				vs = append(vs, fmt.Sprintf("%s: still leased %s after the run settled", iter.Val(), ttl))
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, c.rdb.(*redis.Client))
	}
	if err != nil {
		return err
	}
	// Checked: every key the run used; any lease found is a violation.
	keys := map[string]bool{}
	for _, e := range c.events {
		if e.Kind == kindHTTP && e.Key != "" {
			keys[e.User+"\x00"+e.Key] = true
		}
	}
	c.add("no_key_left_in_progress", "after the run settles, no idempotency key holds a lease", len(keys), vs)
	return nil
}

// checkOutbox: every event of the outbox is published.
func (c *checker) checkOutbox(ctx context.Context) error {
	var total, pending int
	if err := c.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(published_at IS NULL), 0) FROM outbox`).Scan(&total, &pending); err != nil {
		return err
	}
	var vs []string
	if pending > 0 {
		vs = append(vs, fmt.Sprintf("%d of %d outbox events are not published", pending, total))
	}
	c.add("outbox_published", "every order event of the outbox reached Kafka", total, vs)
	return nil
}

// orderEventStatus is the status an order must have for each of its events to have happened:
// an order.paid event of an order that is not PAID or REFUNDED announced a payment that
// rolled back.
var orderEventStatus = map[string][]string{
	"order.paid":      {"PAID", "REFUNDED"},
	"order.cancelled": {"CANCELLED"},
	"order.closed":    {"CLOSED"},
	"order.refunded":  {"REFUNDED"},
}

// resourceEventStatus is the status a refund or a recharge must have for its event to have
// happened: a refund.succeeded event of a refund that is not SUCCEEDED announced a move that
// rolled back.
var resourceEventStatus = map[string]string{
	"refund.succeeded":   "SUCCEEDED",
	"refund.failed":      "FAILED",
	"recharge.succeeded": "SUCCEEDED",
}

// checkEvents: the merchant's events (webhooks and the events API) announce committed changes
// only, each once (I17): every order event names an order that exists, in a status the event
// leads to; every refund and recharge event names a refund or recharge that exists in the
// status the event announces; and no resource has two events of one type.
func (c *checker) checkEvents(ctx context.Context) error {
	orders, err := c.orders(ctx)
	if err != nil {
		return err
	}
	status := map[string]map[string]string{"refund": {}, "recharge": {}}
	for kind, q := range map[string]string{
		"refund":   `SELECT CAST(id AS CHAR), status FROM refunds`,
		"recharge": `SELECT CAST(id AS CHAR), status FROM recharges`,
	} {
		rows, err := c.db.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return err
			}
			status[kind][id] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(id AS CHAR), type, payload FROM events`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var vs []string
	seen := map[[2]string]string{}
	n := 0
	for rows.Next() {
		var id, typ string
		var payload []byte
		if err := rows.Scan(&id, &typ, &payload); err != nil {
			return err
		}
		n++
		var ev struct {
			Data struct {
				OrderID    string `json:"order_id"`
				RefundID   string `json:"refund_id"`
				RechargeID string `json:"recharge_id"`
			} `json:"data"`
		}
		_ = json.Unmarshal(payload, &ev)
		var resource string
		switch kind, _, _ := strings.Cut(typ, "."); kind {
		case "order":
			resource = ev.Data.OrderID
			o, ok := orders[resource]
			switch {
			case !ok:
				vs = append(vs, fmt.Sprintf("event %s (%s) announces order %q, which does not exist: a change that rolled back", id, typ, resource))
				continue
			case orderEventStatus[typ] != nil && !slices.Contains(orderEventStatus[typ], o.status):
				vs = append(vs, fmt.Sprintf("event %s (%s) announces order %s, which is %s", id, typ, resource, o.status))
			}
		case "refund", "recharge":
			resource = ev.Data.RefundID
			if kind == "recharge" {
				resource = ev.Data.RechargeID
			}
			st, ok := status[kind][resource]
			switch {
			case !ok:
				vs = append(vs, fmt.Sprintf("event %s (%s) announces %s %q, which does not exist: a change that rolled back", id, typ, kind, resource))
				continue
			case st != resourceEventStatus[typ]:
				vs = append(vs, fmt.Sprintf("event %s (%s) announces %s %s, which is %s", id, typ, kind, resource, st))
			}
		default:
			vs = append(vs, fmt.Sprintf("event %s has the unknown type %q", id, typ))
			continue
		}
		key := [2]string{resource, typ}
		if first, dup := seen[key]; dup {
			vs = append(vs, fmt.Sprintf("%s has two %s events, %s and %s", resourceName(typ, resource), typ, first, id))
		}
		seen[key] = id
	}
	if err := rows.Err(); err != nil {
		return err
	}
	c.add("events_announce_commits", "every event names a committed change, once", n, vs)
	return nil
}

// resourceName is how a violation names the resource of an event: "order 5002".
func resourceName(typ, id string) string {
	kind, _, _ := strings.Cut(typ, ".")
	return kind + " " + id
}

// checkKafka: the consumer group read every notification, and none valid went to the DLQ.
func (c *checker) checkKafka() {
	var vs []string
	if c.kafkaLag != 0 {
		vs = append(vs, fmt.Sprintf("group %s is %d messages behind", notify.Group, c.kafkaLag))
	}
	if c.dlq != 0 {
		vs = append(vs, fmt.Sprintf("%d valid notifications went to the DLQ", c.dlq))
	}
	sent := 0
	for _, e := range c.events {
		if e.Kind == kindKafka {
			sent++
		}
	}
	c.add("kafka_consumed", "the consumer group consumed every notification; the DLQ holds none of them", sent, vs)
}

// checkAnswers: no request was answered 500 (a dependency down is 503 unavailable).
func (c *checker) checkAnswers() {
	var vs []string
	n := 0
	for _, e := range c.events {
		if e.Kind != kindHTTP || e.Status == 0 {
			continue
		}
		n++
		if e.Status == http.StatusInternalServerError || e.Status == http.StatusNotImplemented {
			vs = append(vs, fmt.Sprintf("#%d %s %s on oncepay-%d (key %s, request %s): %d %s", e.Seq, e.Method, e.Path, e.Inst, e.Key, e.ReqID, e.Status, clip(e.Resp)))
		}
	}
	c.add("no_500", "no answer is a 500: a dependency that is down is 503 unavailable", n, vs)
}

// checkInstances: no instance died on its own.
func (c *checker) checkInstances() {
	var vs []string
	names := make([]string, 0, len(c.exits))
	for n := range c.exits {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if c.exits[n] > 0 {
			vs = append(vs, fmt.Sprintf("%s exited %d times without being killed", n, c.exits[n]))
		}
	}
	c.add("instances_survive", "no process exits unless killed", len(c.exits), vs)
}

// kafkaBacklog returns how many messages the payment consumer group has not committed yet,
// and how many messages the DLQ holds.
func kafkaBacklog(ctx context.Context, brokers []string) (lag, dlq int64, err error) {
	cl, closeClient := brokerClient(brokers, 5*time.Second)
	defer closeClient()
	meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{okafka.TopicPaymentNotifications, okafka.TopicPaymentNotificationsDLQ}})
	if err != nil {
		return 0, 0, err
	}
	ends := map[string][]kafka.OffsetRequest{}
	parts := map[string][]int{}
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			ends[t.Name] = append(ends[t.Name], kafka.LastOffsetOf(p.ID))
			parts[t.Name] = append(parts[t.Name], p.ID)
		}
	}
	offs, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: ends})
	if err != nil {
		return 0, 0, err
	}
	committed, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: notify.Group, Topics: map[string][]int{okafka.TopicPaymentNotifications: parts[okafka.TopicPaymentNotifications]}})
	if err != nil {
		return 0, 0, err
	}
	done := map[int]int64{}
	for _, p := range committed.Topics[okafka.TopicPaymentNotifications] {
		done[p.Partition] = max(p.CommittedOffset, 0)
	}
	for _, p := range offs.Topics[okafka.TopicPaymentNotifications] {
		lag += p.LastOffset - done[p.Partition]
	}
	for _, p := range offs.Topics[okafka.TopicPaymentNotificationsDLQ] {
		dlq += p.LastOffset
	}
	return lag, dlq, nil
}

// clip shortens a body for a violation line.
func clip(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}
