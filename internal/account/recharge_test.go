package account_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/app/apptest"
	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/testenv"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// TestRechargeRoundTrip is the happy path over HTTP: create, read, notify, read the balance.
func TestRechargeRoundTrip(t *testing.T) {
	s := apptest.StartHTTPOnly(t, accountConfig)
	userID, key := s.User(t, "alice")

	create := s.Do(http.MethodPost, "/v1/recharges", key, `{"amount":100000}`, apptest.IdemKey("k1"))
	if create.Status != http.StatusCreated || create.Outcome() != "executed" {
		t.Fatalf("create: %s", create)
	}
	var rc account.RechargeView
	must(t, json.Unmarshal(create.Body, &rc))
	if rc.Status != "PENDING" || rc.Amount != 100000 || rc.CreatedAt == "" || rc.UserID != fmt.Sprint(userID) {
		t.Errorf("created recharge = %+v", rc)
	}
	if got := create.Header.Get("Location"); got != "/v1/recharges/"+rc.RechargeID {
		t.Errorf("Location = %q", got)
	}
	// The same key again is the same recharge, replayed.
	again := s.Do(http.MethodPost, "/v1/recharges", key, `{"amount":100000}`, apptest.IdemKey("k1"))
	if again.Status != http.StatusCreated || again.Outcome() != "replayed" || string(again.Body) != string(create.Body) {
		t.Errorf("same key again: %s", again)
	}

	n := account.Notification{Channel: "alipay", TradeNo: "T-" + apptest.RandHex(6), OutTradeNo: rc.RechargeID, Amount: 100000, Status: "SUCCESS"}
	if r := s.NotifyRecharge(n); r.Status != http.StatusOK || strings.TrimSpace(string(r.Body)) != `{"result":"success"}` {
		t.Fatalf("notify: %s", r)
	}
	get := s.Do(http.MethodGet, "/v1/recharges/"+rc.RechargeID, key, nil, nil)
	var after account.RechargeView
	must(t, json.Unmarshal(get.Body, &after))
	if get.Status != http.StatusOK || after.Status != "SUCCEEDED" || after.TradeNo != n.TradeNo || after.SucceededAt == "" {
		t.Errorf("get after notify: %s", get)
	}
	me := s.Do(http.MethodGet, "/v1/accounts/me", key, nil, nil)
	var acct account.AccountView
	must(t, json.Unmarshal(me.Body, &acct))
	if me.Status != http.StatusOK || acct.Balance != 100000 || acct.UserID != fmt.Sprint(userID) {
		t.Errorf("accounts/me: %s", me)
	}
	if !strings.Contains(string(me.Body), `"user_id":"`) {
		t.Errorf("user_id is not a JSON string: %s", me.Body)
	}
	invariant(t, s.DB)
}

// TestNotifyStormCreditsOnce is I2 over HTTP: 50 copies of one success notification at once,
// each resent while it gets 409 like a channel would. The recharge is credited once, with one
// ledger row, and exactly one copy executed the use case.
func TestNotifyStormCreditsOnce(t *testing.T) {
	s := apptest.StartHTTPOnly(t, accountConfig)
	userID, key := s.User(t, "storm")
	const amount = 100000
	id := s.CreateRecharge(t, key, amount)
	n := account.Notification{Channel: "alipay", TradeNo: "T-" + apptest.RandHex(6), OutTradeNo: id, Amount: amount, Status: "SUCCESS"}

	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		outcomes tally
		finals   tally
	)
	for range 50 {
		wg.Go(func() {
			<-start
			r, seen := s.NotifyRechargeUntilDone(n)
			outcomes.add(seen...)
			finals.add(fmt.Sprintf("%d %s", r.Status, strings.TrimSpace(string(r.Body))))
		})
	}
	close(start)
	wg.Wait()

	t.Logf("answers: %s; outcomes: %s", finals.String(), outcomes.String())
	if got := finals.get(`200 {"result":"success"}`); got != 50 {
		t.Errorf("%d of 50 copies ended with 200 success; answers: %s", got, finals.String())
	}
	if got := outcomes.get("executed"); got != 1 {
		t.Errorf("the use case executed %d times, want 1 (outcomes: %s)", got, outcomes.String())
	}
	creditedOnce(t, s.DB, id, n.TradeNo)
	if got := invariant(t, s.DB)[userID]; got != amount {
		t.Errorf("balance = %d, want %d (credited once)", got, amount)
	}
}

// TestNotifyStormDistinctTradeNos sends 50 concurrent success notifications for one recharge,
// each under its own trade_no: 50 different idempotency keys, so neither the dedup record nor
// the lock can help. The state precondition alone holds: one credit, 49 answers
// state_rejected, 49 duplicate_payment anomalies for refund.
func TestNotifyStormDistinctTradeNos(t *testing.T) {
	s := apptest.StartHTTPOnly(t, accountConfig)
	userID, key := s.User(t, "distinct")
	const amount = 2500
	id := s.CreateRecharge(t, key, amount)

	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		outcomes tally
	)
	for i := range 50 {
		wg.Go(func() {
			n := account.Notification{Channel: "wechat", TradeNo: fmt.Sprintf("D-%d-%s", i, apptest.RandHex(3)), OutTradeNo: id, Amount: amount, Status: "SUCCESS"}
			<-start
			r, seen := s.NotifyRechargeUntilDone(n)
			if r.Status != http.StatusOK {
				t.Errorf("copy %d: %s", i, r)
			}
			outcomes.add(seen[len(seen)-1])
		})
	}
	close(start)
	wg.Wait()

	t.Logf("outcomes: %s", outcomes.String())
	if outcomes.get("executed") != 1 || outcomes.get("state_rejected") != 49 {
		t.Errorf("outcomes %s, want executed=1 state_rejected=49", outcomes.String())
	}
	if got := invariant(t, s.DB)[userID]; got != amount {
		t.Errorf("balance = %d, want %d", got, amount)
	}
	if snap := takeSnapshot(t, s.DB); snap.LedgerRows != 1 || snap.Anomalies["duplicate_payment"] != 49 {
		t.Errorf("ledger rows %d (want 1), duplicate_payment anomalies %d (want 49)", snap.LedgerRows, snap.Anomalies["duplicate_payment"])
	}
}

// TestThreeInstancesCreditOnce is I2 across servers: three app instances, each with its own
// connection pool, Redis client and node id, on one MariaDB and one Redis. Every round sends
// the same notification to all three at once, twice each; every recharge is credited once.
// A process-local mutex could not give this (see TestStrategies).
func TestThreeInstancesCreditOnce(t *testing.T) {
	testenv.RequireMySQL(t)
	servers := apptest.Replicas(t, 3, accountConfig)
	userID, key := servers[0].User(t, "multi")
	creditRounds(t, userID, key, creditPlan{servers: servers, channel: "unionpay", tradePrefix: "M", rounds: 30, copies: 2, base: 1000})
}

// creditPlan describes the rounds of an I2-across-servers test.
type creditPlan struct {
	// servers are the instances every copy of a notification is sent to; the first one also
	// takes the recharges and is where the database is checked.
	servers []*apptest.Server
	// channel and tradePrefix make each round's notification: a trade of channel numbered
	// tradePrefix-round-random.
	channel, tradePrefix string
	// rounds is how many recharges are made; copies is how many copies of each notification
	// every server gets at once.
	rounds, copies int
	// base is the amount of the first recharge; each round adds 1.
	base int64
}

// creditRounds runs the rounds of c for the user with userID and key: each round creates a
// recharge and sends its success notification c.copies times to every server at once, and
// every recharge must be credited once. At the end one copy per round must have executed, and
// the balance must be the sum of the recharges.
func creditRounds(t testing.TB, userID int64, key string, c creditPlan) {
	t.Helper()
	first := c.servers[0]
	var (
		outcomes tally
		want     int64
	)
	for round := range c.rounds {
		amount := c.base + int64(round)
		want += amount
		id := first.CreateRecharge(t, key, amount)
		n := account.Notification{Channel: c.channel, TradeNo: fmt.Sprintf("%s-%d-%s", c.tradePrefix, round, apptest.RandHex(4)), OutTradeNo: id, Amount: amount, Status: "SUCCESS"}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, s := range c.servers {
			for range c.copies {
				wg.Go(func() {
					<-start
					r, seen := s.NotifyRechargeUntilDone(n)
					if r.Status != http.StatusOK {
						t.Errorf("round %d: %s", round, r)
					}
					outcomes.add(seen...)
				})
			}
		}
		close(start)
		wg.Wait()
		creditedOnce(t, first.DB, id, n.TradeNo)
	}
	t.Logf("%d rounds x %d copies over %d servers: outcomes %s", c.rounds, c.copies*len(c.servers), len(c.servers), outcomes.String())
	if got := outcomes.get("executed"); got != c.rounds {
		t.Errorf("executed %d times over %d rounds, want once per round", got, c.rounds)
	}
	if got := invariant(t, first.DB)[userID]; got != want {
		t.Errorf("balance = %d, want %d", got, want)
	}
}

// TestManyRechargesKeepTheInvariant creates 1,000 recharges over 20 users and notifies each
// three times, all copies shuffled and sent 16 at a time. Afterwards, for every user,
// balance == sum(ledger) == sum of that user's recharge amounts. Without MySQL it runs a
// tenth of the volume on SQLite.
func TestManyRechargesKeepTheInvariant(t *testing.T) {
	recharges, users, workers := 1000, 20, 16
	if !testenv.UsingMySQL() {
		recharges = 100
	}
	s := apptest.StartHTTPOnly(t, accountConfig)
	type payer struct {
		id  int64
		key string
	}
	payers := make([]payer, users)
	for i := range payers {
		payers[i].id, payers[i].key = s.User(t, fmt.Sprintf("u%02d", i))
	}

	// Create the recharges, 16 at a time, over HTTP.
	type job struct {
		payer int
		n     account.Notification
	}
	jobs := make([]job, recharges)
	want := map[int64]int64{}
	for i := range jobs {
		jobs[i] = job{payer: i % users, n: account.Notification{
			Channel: "alipay", TradeNo: fmt.Sprintf("B-%d-%s", i, apptest.RandHex(3)), Amount: int64(100 + rand.IntN(100000)), Status: "SUCCESS",
		}}
		want[payers[i%users].id] += jobs[i].n.Amount
	}
	apptest.Parallel(workers, len(jobs), func(i int) {
		p := payers[jobs[i].payer]
		r := s.Do(http.MethodPost, "/v1/recharges", p.key, fmt.Appendf(nil, `{"amount":%d}`, jobs[i].n.Amount),
			apptest.IdemKey(fmt.Sprintf("bulk-%d", i)))
		var v account.RechargeView
		if r.Status != http.StatusCreated || json.Unmarshal(r.Body, &v) != nil {
			t.Errorf("create %d: %s", i, r)
			return
		}
		jobs[i].n.OutTradeNo = v.RechargeID
	})
	if t.Failed() {
		t.FailNow()
	}

	// Three copies of every notification, in random order, 16 at a time.
	copies := make([]account.Notification, 0, 3*len(jobs))
	for _, j := range jobs {
		copies = append(copies, j.n, j.n, j.n)
	}
	rand.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	var outcomes tally
	began := time.Now()
	apptest.Parallel(workers, len(copies), func(i int) {
		r, seen := s.NotifyRechargeUntilDone(copies[i])
		if r.Status != http.StatusOK {
			t.Errorf("notify %s: %s", copies[i].OutTradeNo, r)
		}
		outcomes.add(seen[len(seen)-1])
	})
	t.Logf("%d notifications in %s: final outcomes %s", len(copies), time.Since(began).Round(time.Millisecond), outcomes.String())

	balances := invariant(t, s.DB)
	for _, p := range payers {
		if balances[p.id] != want[p.id] {
			t.Errorf("user %d: balance %d, want the sum of their recharges %d", p.id, balances[p.id], want[p.id])
		}
	}
	snap := takeSnapshot(t, s.DB)
	if snap.LedgerRows != int64(recharges) {
		t.Errorf("%d ledger rows, want %d", snap.LedgerRows, recharges)
	}
	for id, st := range snap.Statuses {
		if st != "SUCCEEDED" {
			t.Errorf("recharge %d is %s", id, st)
		}
	}
}

// TestRechargeBadInput sends each bad request and checks its answer and that the business
// state (balances, ledger, recharge statuses, anomalies) changed only as the row says.
func TestRechargeBadInput(t *testing.T) {
	s := apptest.StartHTTPOnly(t, accountConfig)
	ctx := context.Background()
	_, aliceKey := s.User(t, "alice")
	_, bobKey := s.User(t, "bob")
	pending := s.CreateRecharge(t, aliceKey, 5000)
	paid := s.CreateRecharge(t, aliceKey, 7000)
	paidBy := account.Notification{Channel: "alipay", TradeNo: "PAID-" + apptest.RandHex(4), OutTradeNo: paid, Amount: 7000, Status: "SUCCESS"}
	if r := s.NotifyRecharge(paidBy); r.Status != http.StatusOK {
		t.Fatalf("pay the second recharge: %s", r)
	}
	notify := func(n account.Notification) []byte { b, _ := json.Marshal(n); return b }
	ok := account.Notification{Channel: "alipay", TradeNo: "X-" + apptest.RandHex(4), OutTradeNo: pending, Amount: 5000, Status: "SUCCESS"}
	with := func(f func(*account.Notification)) account.Notification { n := ok; f(&n); return n }
	signed := func(body []byte) map[string]string { return map[string]string{web.HeaderSignature: s.Sign(body)} }

	tests := []struct {
		name   string
		method string
		path   string
		body   []byte
		// apiKey is the bearer key the request is sent with, if any.
		apiKey  string
		headers map[string]string
		// times sends the request this many times (default 1); every answer must match.
		times   int
		before  func(t *testing.T)
		status  int
		code    string
		outcome string
		// anomalies is the anomaly rows the request must add, by kind; nothing else changes.
		anomalies map[string]int64
	}{
		{name: "create400_amount_zero", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":0}`),
			apiKey: aliceKey, headers: apptest.IdemKey("bad-0"), status: 400, code: "invalid_request"},
		{name: "create400_amount_negative", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":-5}`),
			apiKey: aliceKey, headers: apptest.IdemKey("bad-neg"), status: 400, code: "invalid_request"},
		{name: "create400_amount_over_1e10", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":10000000001}`),
			apiKey: aliceKey, headers: apptest.IdemKey("bad-big"), status: 400, code: "invalid_request"},
		{name: "create400_amount_missing", method: "POST", path: "/v1/recharges", body: []byte(`{}`),
			apiKey: aliceKey, headers: apptest.IdemKey("bad-none"), status: 400, code: "invalid_request"},
		{name: "create400_amount_fraction", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":1.5}`),
			apiKey: aliceKey, headers: apptest.IdemKey("bad-frac"), status: 400, code: "invalid_request"},
		{name: "create400_malformed_json", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":`),
			apiKey: aliceKey, headers: apptest.IdemKey("bad-json"), status: 400, code: "invalid_request"},
		{name: "create400_unknown_field", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":100,"bonus":1}`),
			apiKey: aliceKey, headers: apptest.IdemKey("bad-field"), status: 400, code: "invalid_request"},
		{name: "create400_key_missing", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":100}`),
			apiKey: aliceKey, status: 400, code: "idempotency_key_missing"},
		{name: "create401_no_user", method: "POST", path: "/v1/recharges", body: []byte(`{"amount":100}`),
			headers: apptest.IdemKey("anon"), status: 401, code: "unauthorized"},
		{name: "get404_other_users", method: "GET", path: "/v1/recharges/" + pending,
			apiKey: bobKey, status: 404, code: "not_found"},
		{name: "get404_unknown", method: "GET", path: "/v1/recharges/123456789", apiKey: aliceKey, status: 404, code: "not_found"},
		{name: "get404_malformed", method: "GET", path: "/v1/recharges/not-an-id", apiKey: aliceKey, status: 404, code: "not_found"},
		{name: "notify401_wrong_signature", method: "POST", path: "/v1/recharges/notify", body: notify(ok),
			headers: map[string]string{web.HeaderSignature: web.Sign("another-secret", notify(ok))}, status: 401, code: "invalid_signature"},
		{name: "notify401_no_signature", method: "POST", path: "/v1/recharges/notify", body: notify(ok),
			status: 401, code: "invalid_signature"},
		{name: "notify400_amount_mismatch", method: "POST", path: "/v1/recharges/notify",
			body:  notify(with(func(n *account.Notification) { n.Amount = 4999; n.TradeNo = "MM-" + apptest.RandHex(4) })),
			times: 3, status: 400, code: "amount_mismatch", anomalies: map[string]int64{"amount_mismatch": 1}},
		{name: "notify404_unknown_recharge", method: "POST", path: "/v1/recharges/notify",
			body:   notify(with(func(n *account.Notification) { n.OutTradeNo = "123456789"; n.TradeNo = "U-" + apptest.RandHex(4) })),
			status: 404, code: "not_found"},
		{name: "notify404_malformed_recharge_id", method: "POST", path: "/v1/recharges/notify",
			body:   notify(with(func(n *account.Notification) { n.OutTradeNo = "abc"; n.TradeNo = "U2-" + apptest.RandHex(4) })),
			status: 404, code: "not_found"},
		{name: "notify400_malformed_json", method: "POST", path: "/v1/recharges/notify", body: []byte(`{"channel":"alipay",`),
			status: 400, code: "invalid_request"},
		{name: "notify400_trade_no_missing", method: "POST", path: "/v1/recharges/notify",
			body: notify(with(func(n *account.Notification) { n.TradeNo = "" })), status: 400, code: "invalid_request"},
		{name: "notify400_channel_missing", method: "POST", path: "/v1/recharges/notify",
			body: notify(with(func(n *account.Notification) { n.Channel = "" })), status: 400, code: "invalid_request"},
		{name: "notify400_amount_zero", method: "POST", path: "/v1/recharges/notify",
			body: notify(with(func(n *account.Notification) { n.Amount = 0; n.TradeNo = "Z-" + apptest.RandHex(4) })), status: 400, code: "invalid_request"},
		{name: "notify400_unknown_field", method: "POST", path: "/v1/recharges/notify",
			body:   []byte(`{"channel":"alipay","trade_no":"F-1","out_trade_no":"` + pending + `","amount":5000,"status":"SUCCESS","x":1}`),
			status: 400, code: "invalid_request"},
		{name: "notify200_status_not_success", method: "POST", path: "/v1/recharges/notify",
			body:  notify(with(func(n *account.Notification) { n.Status = "TRADE_CLOSED"; n.TradeNo = "NS-" + apptest.RandHex(4) })),
			times: 2, status: 200},
		{name: "notify200_duplicate_payment", method: "POST", path: "/v1/recharges/notify",
			body: notify(with(func(n *account.Notification) {
				n.OutTradeNo = paid
				n.Amount = 7000
				n.TradeNo = "DUP-" + apptest.RandHex(4)
			})),
			times: 2, status: 200, outcome: "state_rejected", anomalies: map[string]int64{"duplicate_payment": 1}},
		{name: "notify200_duplicate_after_purge", method: "POST", path: "/v1/recharges/notify", body: notify(paidBy),
			before: func(t *testing.T) {
				if _, err := s.App.Guard.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Second}); err != nil {
					t.Fatal(err)
				}
			},
			status: 200, outcome: "state_rejected"},
		{name: "notify422_trade_no_of_another_recharge_after_purge", method: "POST", path: "/v1/recharges/notify",
			body: notify(with(func(n *account.Notification) { n.TradeNo = paidBy.TradeNo })),
			before: func(t *testing.T) {
				if _, err := s.App.Guard.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Second}); err != nil {
					t.Fatal(err)
				}
			},
			times: 2, status: 422, code: "trade_conflict", anomalies: map[string]int64{"trade_conflict": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			headers := tt.headers
			if tt.path == "/v1/recharges/notify" && headers == nil && tt.code != "invalid_signature" {
				headers = signed(tt.body)
			}
			before := takeSnapshot(t, s.DB)
			for i := range max(tt.times, 1) {
				r := s.Do(tt.method, tt.path, tt.apiKey, tt.body, headers)
				if r.Status != tt.status || r.Code() != tt.code {
					t.Errorf("copy %d: got %s, want %d %s", i+1, r, tt.status, tt.code)
				}
				if tt.outcome != "" && i == 0 && r.Outcome() != tt.outcome {
					t.Errorf("Idempotency-Outcome = %q, want %q", r.Outcome(), tt.outcome)
				}
			}
			after := takeSnapshot(t, s.DB)
			for kind, n := range tt.anomalies {
				before.Anomalies[kind] += n
			}
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Errorf("business state changed:\nbefore (+ expected anomalies) %+v\nafter  %+v", before, after)
			}
		})
	}
	invariant(t, s.DB)
}
