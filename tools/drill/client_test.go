package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/segmentio/kafka-go"
)

// These are pure unit tests of the drill's client side; they need no oncepay server.

func TestSignCoversTimestampKindAndBody(t *testing.T) {
	body := []byte(`{"channel":"drill"}`)
	got := sign([]byte("key"), "recharge", body)
	if err := reportsig.Verify("key", got, "recharge", body, time.Now(), time.Minute); err != nil {
		t.Fatalf("sign = %s: %v", got, err)
	}
	if err := reportsig.Verify("key", got, "trade", body, time.Now(), time.Minute); err == nil {
		t.Fatalf("sign = %s verifies as another kind", got)
	}
	for path, kind := range map[string]string{"/v1/payments/notify": "trade", "/lab/recharges/notify": "recharge", "/v1/refunds/notify": "refund"} {
		if got := kindOf(path); got != kind {
			t.Errorf("kindOf(%s) = %s, want %s", path, got, kind)
		}
	}
}

func TestDoSignsTheExactBytesItSends(t *testing.T) {
	body := []byte(`{"channel":"drill","trade_no":"T1","out_trade_no":"42","amount":1999,"status":"SUCCESS"}`)
	var gotSig, gotBody, gotKey, gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody, gotSig = string(b), r.Header.Get("X-Signature")
		gotKey, gotAuth = r.Header.Get("Idempotency-Key"), r.Header.Get("Authorization")
		w.Header().Set("Idempotency-Outcome", "replayed")
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"code":"idempotency_key_in_use"}`))
	}))
	defer srv.Close()
	c := newClient(config{URL: srv.URL, ChannelSecret: "dev-channel-secret"})
	defer c.close()

	a, err := c.do(t.Context(), call{method: http.MethodPost, path: "/v1/payments/notify", body: body, signed: true, bearer: "k", idemKey: "idem"})
	if err != nil {
		t.Fatal(err)
	}
	if gotBody != string(body) || reportsig.Verify("dev-channel-secret", gotSig, "trade", body, time.Now(), time.Minute) != nil {
		t.Errorf("server saw body %q signature %q", gotBody, gotSig)
	}
	if gotKey != "idem" || gotAuth != "Bearer k" {
		t.Errorf("server saw Idempotency-Key %q, Authorization %q", gotKey, gotAuth)
	}
	if a.status != 409 || a.outcome != "replayed" || !a.replayed || a.code != "idempotency_key_in_use" {
		t.Errorf("answer = %+v", a)
	}
}

func TestParseCountersKeepsOnlyPrefixedCounters(t *testing.T) {
	text := `# HELP oncepay_idempotency_outcomes_total Answers by layer.
# TYPE oncepay_idempotency_outcomes_total counter
oncepay_idempotency_outcomes_total{layer="dedup",outcome="replayed"} 12
oncepay_idempotency_outcomes_total{layer="lock",outcome="in_progress"} 7 1712345678000
# TYPE oncepay_idempotency_lock_seconds histogram
oncepay_idempotency_lock_seconds_bucket{le="0.1"} 3
oncepay_idempotency_lock_seconds_count 3
# TYPE oncepay_idempotency_inflight gauge
oncepay_idempotency_inflight 2
oncepay_idempotency_untyped_total{detail="a b}c"} 4
http_requests_total{code="200"} 99
`
	got, err := parseCounters(strings.NewReader(text), counterPrefix)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`oncepay_idempotency_outcomes_total{layer="dedup",outcome="replayed"}`:   12,
		`oncepay_idempotency_outcomes_total{layer="lock",outcome="in_progress"}`: 7,
		`oncepay_idempotency_untyped_total{detail="a b}c"}`:                      4,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	d := counterDelta(map[string]float64{"a": 1, "b": 2}, map[string]float64{"a": 1, "b": 5, "c": 1})
	if len(d) != 2 || d["b"] != 3 || d["c"] != 1 {
		t.Errorf("counterDelta = %v", d)
	}
}

func TestFlexIDAcceptsStringsAndNumbers(t *testing.T) {
	var v struct {
		A, B, C flexID
	}
	if err := json.Unmarshal([]byte(`{"A":"1790000000000000001","B":1790000000000000002,"C":null}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != "1790000000000000001" || v.B != "1790000000000000002" || v.C != "" {
		t.Errorf("got %+v", v)
	}
}

func TestPartitionForIsTheJavaClientsMurmur2(t *testing.T) {
	partitions := []int{0, 1, 2}
	seen := map[int]bool{}
	for i := range 50 {
		key := fmt.Sprintf("DRILL-T-%d", i)
		got := partitionFor(key, len(partitions))
		if want := (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(key)}, partitions...); got != want {
			t.Fatalf("%s: partition %d, murmur2 says %d", key, got, want)
		}
		seen[got] = true
	}
	if len(seen) != len(partitions) {
		t.Errorf("50 keys landed on partitions %v only", seen)
	}
}
