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

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestRechargeRoundTrip is the happy path over HTTP: create, read, notify, read the balance.
func TestRechargeRoundTrip(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
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

	n := apptest.RechargeReport(rc.RechargeID, "alipay", "T-"+apptest.RandHex(6), 100000)
	if r := s.NotifyRecharge(n); r.Status != http.StatusOK || strings.TrimSpace(string(r.Body)) != `{"result":"success"}` {
		t.Fatalf("notify: %s", r)
	}
	get := s.Do(http.MethodGet, "/v1/recharges/"+rc.RechargeID, key, nil, nil)
	var after account.RechargeView
	must(t, json.Unmarshal(get.Body, &after))
	if get.Status != http.StatusOK || after.Status != "SUCCEEDED" || after.TradeNo != n.Number || after.SucceededAt == "" {
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
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
	userID, key := s.User(t, "storm")
	const amount = 100000
	id := s.CreateRecharge(t, key, amount)
	n := apptest.RechargeReport(id, "alipay", "T-"+apptest.RandHex(6), amount)

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
	creditedOnce(t, s.DB, id, n.Number)
	if got := invariant(t, s.DB)[userID]; got != amount {
		t.Errorf("balance = %d, want %d (credited once)", got, amount)
	}
}

// TestNotifyStormDistinctTradeNos sends 50 concurrent success notifications for one recharge,
// each under its own trade_no: 50 different idempotency keys, so neither the dedup record nor
// the lock can help. The state precondition alone holds: one credit, 49 answers
// state_rejected, 49 duplicate_payment anomalies for refund.
func TestNotifyStormDistinctTradeNos(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
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
			n := apptest.RechargeReport(id, "wechat", fmt.Sprintf("D-%d-%s", i, apptest.RandHex(3)), amount)
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
	creditRounds(t, userID, key, creditPlan{servers: servers, channel: "wechat", tradePrefix: "M", rounds: 30, copies: 2, base: 1000})
}

// creditPlan describes the rounds of an I2-across-servers test.
type creditPlan struct {
	// servers are the instances every copy of a notification is sent to; the first one also
	// takes the recharges and is where the database is checked.
	servers []*apptest.Server
	// channel and tradePrefix make each round's notification: a trade of channel (one of the
	// servers' ONCEPAY_CHANNELS) numbered tradePrefix-round-random.
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
		n := apptest.RechargeReport(id, c.channel, fmt.Sprintf("%s-%d-%s", c.tradePrefix, round, apptest.RandHex(4)), amount)
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
		creditedOnce(t, first.DB, id, n.Number)
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
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
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
		n     notify.Report
	}
	jobs := make([]job, recharges)
	want := map[int64]int64{}
	for i := range jobs {
		// The recharge id (OutNo) is set once the recharge is created.
		jobs[i] = job{payer: i % users, n: apptest.RechargeReport("", "alipay", fmt.Sprintf("B-%d-%s", i, apptest.RandHex(3)), int64(100+rand.IntN(100000)))}
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
		jobs[i].n.OutNo = v.RechargeID
	})
	if t.Failed() {
		t.FailNow()
	}

	// Three copies of every notification, in random order, 16 at a time.
	copies := make([]notify.Report, 0, 3*len(jobs))
	for _, j := range jobs {
		copies = append(copies, j.n, j.n, j.n)
	}
	rand.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	var outcomes tally
	began := time.Now()
	apptest.Parallel(workers, len(copies), func(i int) {
		r, seen := s.NotifyRechargeUntilDone(copies[i])
		if r.Status != http.StatusOK {
			t.Errorf("notify %s: %s", copies[i].OutNo, r)
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
// state (balances, ledger, recharge statuses, anomalies) changed only as the row says — and,
// for a recharge report, the dedup records and claims too: a report refused before the guard
// or by the work stores and claims nothing; only one the work accepted stores its answer.
func TestRechargeBadInput(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router, accountConfig)
	ctx := context.Background()
	_, aliceKey := s.User(t, "alice")
	_, bobKey := s.User(t, "bob")
	pending := s.CreateRecharge(t, aliceKey, 5000)
	paid := s.CreateRecharge(t, aliceKey, 7000)
	paidBy := apptest.RechargeReport(paid, "alipay", "PAID-"+apptest.RandHex(4), 7000)
	if r := s.NotifyRecharge(paidBy); r.Status != http.StatusOK {
		t.Fatalf("pay the second recharge: %s", r)
	}
	body := func(n notify.Report) []byte { return n.Body() }
	ok := apptest.RechargeReport(pending, "alipay", "X-"+apptest.RandHex(4), 5000)
	with := func(f func(*notify.Report)) notify.Report { n := ok; f(&n); return n }
	signed := func(body []byte) map[string]string {
		return map[string]string{web.HeaderSignature: s.SignAs(notify.Recharge, body)}
	}
	purge := func(t *testing.T) {
		if _, err := s.App.Guard.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Second}); err != nil {
			t.Fatal(err)
		}
	}

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
		// records is the dedup records a recharge report must add (its stored answer).
		records int64
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
		{name: "notify401_wrong_signature", method: "POST", path: "/v1/recharges/notify", body: body(ok),
			headers: map[string]string{web.HeaderSignature: apptest.SignReport("another-secret", notify.Recharge, body(ok))}, status: 401, code: "invalid_signature"},
		{name: "notify401_no_signature", method: "POST", path: "/v1/recharges/notify", body: body(ok),
			status: 401, code: "invalid_signature"},
		{name: "notify401_bare_hmac", method: "POST", path: "/v1/recharges/notify", body: body(ok),
			headers: map[string]string{web.HeaderSignature: web.Sign(s.Config.ChannelSecret, body(ok))}, status: 401, code: "invalid_signature"},
		{name: "notify401_signed_as_trade", method: "POST", path: "/v1/recharges/notify", body: body(ok),
			headers: map[string]string{web.HeaderSignature: s.SignAs(notify.Trade, body(ok))}, status: 401, code: "invalid_signature"},
		{name: "notify401_timestamp_too_old", method: "POST", path: "/v1/recharges/notify", body: body(ok),
			headers: map[string]string{web.HeaderSignature: reportsig.Sign(s.Config.ChannelSecret, time.Now().Add(-6*time.Minute), string(notify.Recharge), body(ok))},
			status:  401, code: "invalid_signature"},
		{name: "notify400_amount_mismatch", method: "POST", path: "/v1/recharges/notify",
			body:  body(with(func(n *notify.Report) { n.Amount = 4999; n.Number = "MM-" + apptest.RandHex(4) })),
			times: 3, status: 400, code: "amount_mismatch", anomalies: map[string]int64{"amount_mismatch": 1}},
		{name: "notify404_unknown_recharge", method: "POST", path: "/v1/recharges/notify",
			body:  body(with(func(n *notify.Report) { n.OutNo = "123456789"; n.Number = "U-" + apptest.RandHex(4) })),
			times: 2, status: 404, code: "not_found"},
		{name: "notify404_malformed_recharge_id", method: "POST", path: "/v1/recharges/notify",
			body:   body(with(func(n *notify.Report) { n.OutNo = "abc"; n.Number = "U2-" + apptest.RandHex(4) })),
			status: 404, code: "not_found"},
		{name: "notify400_malformed_json", method: "POST", path: "/v1/recharges/notify", body: []byte(`{"channel":"alipay",`),
			status: 400, code: "invalid_request"},
		{name: "notify400_trade_no_missing", method: "POST", path: "/v1/recharges/notify",
			body: body(with(func(n *notify.Report) { n.Number = "" })), status: 400, code: "invalid_request"},
		{name: "notify400_channel_missing", method: "POST", path: "/v1/recharges/notify",
			body: body(with(func(n *notify.Report) { n.Channel = "" })), status: 400, code: "invalid_request"},
		{name: "notify400_channel_not_canonical", method: "POST", path: "/v1/recharges/notify",
			body: body(with(func(n *notify.Report) { n.Channel = "AliPay" })), status: 400, code: "invalid_request"},
		{name: "notify400_unknown_channel", method: "POST", path: "/v1/recharges/notify",
			body: body(with(func(n *notify.Report) { n.Channel = "unionpay"; n.Number = "UC-" + apptest.RandHex(4) })), status: 400, code: "unknown_channel"},
		{name: "notify400_amount_zero", method: "POST", path: "/v1/recharges/notify",
			body: body(with(func(n *notify.Report) { n.Amount = 0; n.Number = "Z-" + apptest.RandHex(4) })), status: 400, code: "invalid_request"},
		{name: "notify400_unknown_field", method: "POST", path: "/v1/recharges/notify",
			body:   []byte(`{"channel":"alipay","trade_no":"F-1","out_trade_no":"` + pending + `","amount":5000,"status":"SUCCESS","x":1}`),
			status: 400, code: "invalid_request"},
		{name: "notify200_status_not_success", method: "POST", path: "/v1/recharges/notify",
			body:  body(with(func(n *notify.Report) { n.Status = "TRADE_CLOSED"; n.Number = "NS-" + apptest.RandHex(4) })),
			times: 2, status: 200, records: 1},
		{name: "notify200_duplicate_payment", method: "POST", path: "/v1/recharges/notify",
			body: body(with(func(n *notify.Report) {
				n.OutNo = paid
				n.Amount = 7000
				n.Number = "DUP-" + apptest.RandHex(4)
			})),
			times: 2, status: 200, outcome: "state_rejected", anomalies: map[string]int64{"duplicate_payment": 1}, records: 1},
		{name: "notify200_duplicate_after_purge", method: "POST", path: "/v1/recharges/notify", body: body(paidBy),
			before: purge, status: 200, outcome: "state_rejected", records: 1},
		{name: "notify422_trade_no_of_another_recharge_after_purge", method: "POST", path: "/v1/recharges/notify",
			body:   body(with(func(n *notify.Report) { n.Number = paidBy.Number })),
			before: purge, times: 2, status: 422, code: "trade_conflict", anomalies: map[string]int64{"trade_conflict": 1}},
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
			records, claims := s.Count(t, "idempotency_records", ""), s.Count(t, "report_claims", "")
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
			if tt.path == "/v1/recharges/notify" {
				if n := s.Count(t, "idempotency_records", ""); n != records+tt.records {
					t.Errorf("%d dedup records, want %d", n, records+tt.records)
				}
				// A claim is made only by a report that applied, or kept its payment as an
				// anomaly: the duplicate_payment's trade number now belongs to the paid recharge.
				wantClaims := claims
				if tt.anomalies["duplicate_payment"] > 0 {
					wantClaims++
				}
				if n := s.Count(t, "report_claims", ""); n != wantClaims {
					t.Errorf("%d claims, want %d", n, wantClaims)
				}
			}
		})
	}
	invariant(t, s.DB)
}
