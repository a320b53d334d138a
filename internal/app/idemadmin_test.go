package app_test

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// recordsPath is the admin route of idempotency records, with the selector q.
func recordsPath(q url.Values) string { return "/v1/admin/idempotency-records?" + q.Encode() }

// userSelector is the selector of a client's key.
func userSelector(userID, key string) url.Values {
	return url.Values{"user_id": {userID}, "key": {key}}
}

// aliceID is the user id of the demo user alice, read from GET /v1/accounts/me.
func aliceID(t *testing.T, s *apptest.Server) string {
	t.Helper()
	var me struct {
		UserID string `json:"user_id"`
	}
	apptest.Must(t, s.Do(http.MethodGet, "/v1/accounts/me", apptest.AliceKey, nil, nil), http.StatusOK).Decode(t, &me)
	if me.UserID == "" {
		t.Fatal("GET /v1/accounts/me answered no user_id")
	}
	return me.UserID
}

// TestIdempotencyPolicy: the policy is public, names the configured retention, and lists as
// requiring a key exactly the routes api/openapi.yaml marks so — each of which does answer
// 400 idempotency_key_missing without one. The list is read from the routes' marks
// (idem.KeyRequired), and TestSpecOperations holds the spec to the same marks.
func TestIdempotencyPolicy(t *testing.T) {
	s := apptest.StartHTTPOnly(t, func(c *config.Config) { c.DedupRetention = 100 * time.Hour })
	r := apptest.Must(t, s.Do(http.MethodGet, "/v1/idempotency-policy", "", nil, nil), http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var p idem.Policy
	r.Decode(t, &p)

	if p.Header != "Idempotency-Key" || p.Key.MinLength != 1 || p.Key.MaxLength != 255 {
		t.Errorf("header %q key %d..%d, want Idempotency-Key 1..255", p.Header, p.Key.MinLength, p.Key.MaxLength)
	}
	if p.Scope.Per != "user" || !strings.Contains(p.Scope.Description, "whatever the endpoint") {
		t.Errorf("scope %+v, want per user, one key one write whatever the endpoint", p.Scope)
	}
	if p.Retention.Duration != "100h0m0s" || p.Retention.Seconds != 360000 {
		t.Errorf("retention %+v, want the configured 100h", p.Retention)
	}
	if !slices.Equal(p.Fingerprint.Fields, []string{"method", "path", "body"}) {
		t.Errorf("fingerprint fields %v, want method, path, body", p.Fingerprint.Fields)
	}
	if !slices.Equal(p.Stored.NeverStored, []string{"401", "403", "408", "429", "5xx"}) ||
		!slices.Equal(p.Stored.Headers, []string{"Content-Type", "Location"}) {
		t.Errorf("stored %+v, want never 401/403/408/429/5xx and the headers Content-Type, Location", p.Stored)
	}
	if e := p.Errors["in_progress"]; e.Status != http.StatusConflict || e.Code != "idempotency_key_in_use" || !e.RetryAfter {
		t.Errorf("in_progress answer %+v, want 409 idempotency_key_in_use with Retry-After", e)
	}
	if e := p.Errors["reused"]; e.Status != http.StatusUnprocessableEntity || e.Code != "idempotency_key_reused" {
		t.Errorf("reused answer %+v, want 422 idempotency_key_reused", e)
	}
	if p.Tokens.Endpoint != "POST /v1/idempotency-tokens" || p.Tokens.Prefix != "tok_" {
		t.Errorf("tokens %+v, want POST /v1/idempotency-tokens, tok_", p.Tokens)
	}

	// required_on is the spec's list, and the router's behaviour.
	var inSpec []string
	spec := loadSpec(t)
	for path, item := range spec.Paths {
		for method, op := range item {
			for _, param := range op.Parameters {
				if pm := spec.deref(t, param); pm["in"] == "header" && pm["name"] == "Idempotency-Key" {
					inSpec = append(inSpec, strings.ToUpper(method)+" "+path)
				}
			}
		}
	}
	slices.Sort(inSpec)
	got := slices.Sorted(slices.Values(p.RequiredOn))
	if !slices.Equal(got, inSpec) {
		t.Errorf("policy required_on %v, want the routes api/openapi.yaml marks: %v", got, inSpec)
	}
	for _, route := range p.RequiredOn {
		method, path, _ := strings.Cut(route, " ")
		path = strings.ReplaceAll(path, "{order_id}", "1861234567890123456")
		path = strings.ReplaceAll(path, "{endpoint_id}", "1861234567890123457")
		who := apptest.AliceKey
		if strings.HasPrefix(path, "/v1/admin/") {
			who = apptest.AdminKey
		}
		apptest.WantProblem(t, s.Do(method, path, who, `{}`, nil), http.StatusBadRequest, "idempotency_key_missing")
	}
}

// TestEvictStoredRefusal walks the operator's story: an order refused out_of_stock is stored
// and replayed even after the stock is refilled; the admin looks the key up, evicts it, and
// the client's retry with the same key now runs and creates the order.
func TestEvictStoredRefusal(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	alice := aliceID(t, s)
	const key = "evict-me-1"
	big := apptest.Item{SKU: "SKU-1003", Quantity: 6} // 5 in stock

	apptest.WantProblem(t, s.PostOrder(apptest.AliceKey, key, big), http.StatusConflict, "out_of_stock")
	s.PutInventory(t, "SKU-1003", 89900, 100)
	r := s.PostOrder(apptest.AliceKey, key, big)
	apptest.WantProblem(t, r, http.StatusConflict, "out_of_stock")
	if r.Outcome() != "replayed" {
		t.Fatalf("the retry after the refill: outcome %q, want replayed (the refusal is stored)", r.Outcome())
	}

	var rec idem.RecordView
	apptest.Must(t, s.Do(http.MethodGet, recordsPath(userSelector(alice, key)), apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &rec)
	want := idem.RecordView{
		Scope: "user:" + alice, BizType: "idempotency-key", BizKey: key, UserID: alice,
		Status: "COMPLETED", Outcome: "client_error", ResponseStatus: http.StatusConflict,
		ResponseCode: "out_of_stock", Evictable: true,
	}
	if rec.Scope != want.Scope || rec.BizType != want.BizType || rec.BizKey != want.BizKey || rec.UserID != want.UserID ||
		rec.Status != want.Status || rec.Outcome != want.Outcome || rec.ResponseStatus != want.ResponseStatus ||
		rec.ResponseCode != want.ResponseCode || rec.Evictable != want.Evictable {
		t.Errorf("GET record = %+v, want %+v", rec, want)
	}
	if len(rec.Fingerprint) != 64 || rec.RequestID == "" || rec.CreatedAt == nil || rec.CreatedAt.IsZero() ||
		rec.ExpiresAt == nil || !rec.ExpiresAt.After(*rec.CreatedAt) {
		t.Errorf("GET record = %+v: want a fingerprint, a request id and timestamps", rec)
	}

	var evicted idem.RecordView
	apptest.Must(t, s.Do(http.MethodDelete, recordsPath(userSelector(alice, key)), apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &evicted)
	if !evicted.Evicted || evicted.ResponseStatus != http.StatusConflict {
		t.Errorf("DELETE answered %+v, want the evicted 409 record", evicted)
	}
	apptest.WantProblem(t, s.Do(http.MethodGet, recordsPath(userSelector(alice, key)), apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")

	r = apptest.Must(t, s.PostOrder(apptest.AliceKey, key, big), http.StatusCreated)
	if r.Outcome() != "executed" {
		t.Errorf("the retry after the eviction: outcome %q, want executed", r.Outcome())
	}
	if again := s.PostOrder(apptest.AliceKey, key, big); again.Status != http.StatusCreated || again.Outcome() != "replayed" {
		t.Errorf("the next retry: %s outcome %q, want the 201 replayed", again, again.Outcome())
	}
	apptest.WantProblem(t, s.Do(http.MethodDelete, recordsPath(userSelector(alice, key)), apptest.AdminKey, nil, nil), http.StatusConflict, "effect_committed")

	metrics := string(apptest.Must(t, s.Do(http.MethodGet, "/metrics", "", nil, nil), http.StatusOK).Body)
	for _, line := range []string{
		`oncepay_idempotency_admin_lookups_total{result="found"} 1`,
		`oncepay_idempotency_admin_lookups_total{result="not_found"} 1`,
		`oncepay_idempotency_admin_evictions_total{result="evicted"} 1`,
		`oncepay_idempotency_admin_evictions_total{result="effect_committed"} 1`,
	} {
		if !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// TestEvictRefusesSuccess: a stored 2xx is shown as success, not evictable, and DELETE refuses
// it with 409 effect_committed, leaving it in place: a retry is still a replay.
func TestEvictRefusesSuccess(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	alice := aliceID(t, s)
	const key = "keep-me-1"
	item := apptest.Item{SKU: "SKU-1002", Quantity: 1}
	s.CreateOrder(t, apptest.AliceKey, key, item)

	var rec idem.RecordView
	apptest.Must(t, s.Do(http.MethodGet, recordsPath(userSelector(alice, key)), apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &rec)
	if rec.Outcome != "success" || rec.Evictable || rec.ResponseStatus != http.StatusCreated {
		t.Errorf("GET record = %+v, want a 201 success, not evictable", rec)
	}
	apptest.WantProblem(t, s.Do(http.MethodDelete, recordsPath(userSelector(alice, key)), apptest.AdminKey, nil, nil), http.StatusConflict, "effect_committed")
	if r := s.PostOrder(apptest.AliceKey, key, item); r.Status != http.StatusCreated || r.Outcome() != "replayed" {
		t.Errorf("retry after the refused eviction: %s outcome %q, want the 201 replayed", r, r.Outcome())
	}
	if n := s.Count(t, "orders", "user_id = ?", alice); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestIdempotencyRecordsNotifications: a notification's record is named by biz_type and
// biz_key, with scope=channel:<channel> when the trade number is stored in several scopes.
func TestIdempotencyRecordsNotifications(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	const tradeNo = "T-2026-0001"
	for _, channel := range []string{"alipay", "wechat"} {
		o := s.CreateOrder(t, apptest.AliceKey, "pay-"+channel, apptest.Item{SKU: "SKU-1002", Quantity: 1})
		apptest.Must(t, s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, channel, tradeNo))), http.StatusOK)
	}
	biz := url.Values{"biz_type": {notify.BizTypeTrade}, "biz_key": {tradeNo}}
	apptest.WantProblem(t, s.Do(http.MethodGet, recordsPath(biz), apptest.AdminKey, nil, nil), http.StatusBadRequest, "invalid_request")

	biz.Set("scope", "channel:wechat")
	var rec idem.RecordView
	apptest.Must(t, s.Do(http.MethodGet, recordsPath(biz), apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &rec)
	if rec.Scope != "channel:wechat" || rec.BizKey != tradeNo || rec.Outcome != "success" || rec.UserID != "" {
		t.Errorf("GET record = %+v, want wechat's successful payment", rec)
	}
	apptest.WantProblem(t, s.Do(http.MethodDelete, recordsPath(biz), apptest.AdminKey, nil, nil), http.StatusConflict, "effect_committed")

	one := url.Values{"biz_type": {notify.BizTypeTrade}, "biz_key": {tradeNo}, "scope": {"channel:unknown"}}
	apptest.WantProblem(t, s.Do(http.MethodGet, recordsPath(one), apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")

	// A recharge's report is keyed like an order's: a trade number is one key whatever it pays.
	_, key := s.User(t, "records")
	rc := s.CreateRecharge(t, key, 700)
	const rechargeTrade = "T-2026-0002"
	if r, _ := s.NotifyRechargeUntilDone(apptest.RechargeReport(rc, "alipay", rechargeTrade, 700)); r.Status != http.StatusOK {
		t.Fatalf("the recharge's report: %s", r)
	}
	paid := url.Values{"biz_type": {notify.BizTypeTrade}, "biz_key": {rechargeTrade}}
	apptest.Must(t, s.Do(http.MethodGet, recordsPath(paid), apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &rec)
	if rec.Scope != "channel:alipay" || rec.BizType != notify.BizTypeTrade || rec.BizKey != rechargeTrade || rec.Outcome != "success" {
		t.Errorf("GET record = %+v, want alipay's successful recharge under %s", rec, notify.BizTypeTrade)
	}
	// The biz types of before name nothing any more.
	for _, old := range []string{"payment.notify", "recharge.notify"} {
		gone := url.Values{"biz_type": {old}, "biz_key": {rechargeTrade}, "scope": {"channel:alipay"}}
		apptest.WantProblem(t, s.Do(http.MethodGet, recordsPath(gone), apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")
	}
}

// TestIdempotencyRecordsSelectors: the admin key is required, and a missing, partial, mixed,
// repeated or unknown selector is 400 invalid_request; an unknown key is 404 not_found.
func TestIdempotencyRecordsSelectors(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	alice := aliceID(t, s)
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			path := recordsPath(userSelector(alice, "k"))
			apptest.WantProblem(t, s.Do(method, path, "", nil, nil), http.StatusUnauthorized, "unauthorized")
			apptest.WantProblem(t, s.Do(method, path, apptest.AliceKey, nil, nil), http.StatusForbidden, "forbidden")
			apptest.WantProblem(t, s.Do(method, path, apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")

			for _, raw := range []string{
				"",
				"user_id=" + alice,
				"key=k",
				"biz_type=" + notify.BizTypeTrade,
				"biz_key=T1",
				"scope=channel:alipay&biz_key=T1",
				"biz_type=" + notify.BizTypeTrade + "&biz_key=T1&scope=",
				"user_id=" + alice + "&key=k&biz_type=" + notify.BizTypeTrade,
				"user_id=" + alice + "&key=k&scope=user:" + alice,
				"user_id=alice&key=k",
				"user_id=-1&key=k",
				"user_id=" + alice + "&key=" + url.QueryEscape("has space"),
				"user_id=" + alice + "&key=" + strings.Repeat("k", 256),
				"user_id=" + alice + "&key=k&key=k",
				"user_id=" + alice + "&key=k&userid=1",
			} {
				apptest.WantProblem(t, s.Do(method, "/v1/admin/idempotency-records?"+raw, apptest.AdminKey, nil, nil), http.StatusBadRequest, "invalid_request")
			}
			apptest.WantProblem(t, s.Do(method, recordsPath(url.Values{"biz_type": {notify.BizTypeTrade}, "biz_key": {"nope"}}), apptest.AdminKey, nil, nil),
				http.StatusNotFound, "not_found")
		})
	}
	// Another user's key is another record: alice's key seen under bob's id is not found.
	s.CreateOrder(t, apptest.AliceKey, "mine", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	aliceNum, _ := strconv.ParseInt(alice, 10, 64)
	other := strconv.FormatInt(aliceNum+1, 10)
	apptest.WantProblem(t, s.Do(http.MethodGet, recordsPath(userSelector(other, "mine")), apptest.AdminKey, nil, nil), http.StatusNotFound, "not_found")
}

// The kit names its metrics idempotency_*; oncepay publishes them under its own prefix, as
// docs/contract.md and the dashboards know them.
func TestGuardMetricsCarryOncepaysPrefix(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	key := "metrics-" + t.Name()
	apptest.Must(t, s.PostOrder(apptest.AliceKey, key, apptest.Item{SKU: "SKU-1001", Quantity: 1}), http.StatusCreated)
	apptest.Must(t, s.PostOrder(apptest.AliceKey, key, apptest.Item{SKU: "SKU-1001", Quantity: 1}), http.StatusCreated)
	metrics := string(apptest.Must(t, s.Do(http.MethodGet, "/metrics", "", nil, nil), http.StatusOK).Body)
	for _, line := range []string{
		`oncepay_idempotency_outcomes_total{biz_type="idempotency-key",layer="work",outcome="executed"} 1`,
		`oncepay_idempotency_outcomes_total{biz_type="idempotency-key",layer="cache",outcome="replayed"} 1`,
	} {
		if !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(metrics, "\nidempotency_") {
		t.Error("/metrics has the kit's unprefixed idempotency_* names")
	}
}
