package drill

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

// fakeOncepay stands in for the server with just what scenario I2 needs. It is a fake on
// purpose: these are unit tests of the drill's own plumbing (firing copies concurrently,
// signing, reading the effect back, judging and reporting). The drill's real run against
// oncepay is `make drill`, which calls run() with the live server's URL.
type fakeOncepay struct {
	secret string
	// naive makes /v1/recharges/notify check-then-act, as in incident I2.
	naive bool
	// lab mounts /lab/ with its naive /lab/recharges/notify.
	lab bool

	mu sync.Mutex
	// balance is per API key: the lab's I2 run recharges the second user.
	balance   map[string]int64
	recharges map[string]*fakeRecharge
	dedup     map[string]string
	outcomes  map[string]int
	// captured is the fake's books: what each credit posted, by transfer id.
	captured map[string]int64
	nextID   int
}

type fakeRecharge struct {
	User   string
	Status string
	Amount int64
}

func newFakeOncepay(naive, lab bool) *fakeOncepay {
	return &fakeOncepay{secret: "dev-channel-secret", naive: naive, lab: lab,
		balance: map[string]int64{}, recharges: map[string]*fakeRecharge{}, dedup: map[string]string{}, outcomes: map[string]int{}, captured: map[string]int64{}}
}

func (f *fakeOncepay) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	if f.lab {
		mux.HandleFunc("GET /lab/{$}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		mux.HandleFunc("POST /lab/recharges/notify", f.signed(f.notifyNaive))
	}
	mux.HandleFunc("GET /metrics", f.metrics)
	mux.HandleFunc("GET /v1/accounts/me", f.user(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSONBody(w, http.StatusOK, map[string]any{"user_id": "1", "balance": f.balance[r.Header.Get("Authorization")]})
	}))
	mux.HandleFunc("POST /v1/recharges", f.user(f.createRecharge))
	mux.HandleFunc("GET /v1/recharges/{id}", f.user(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		rc, ok := f.recharges[r.PathValue("id")]
		if !ok {
			problem(w, http.StatusNotFound, "not_found")
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"recharge_id": r.PathValue("id"), "status": rc.Status, "amount": rc.Amount})
	}))
	mux.HandleFunc("GET /v1/admin/ledger/transfers/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		amount, ok := f.captured[r.PathValue("id")]
		if r.Header.Get("Authorization") != "Bearer dev-admin-key" || !ok {
			problem(w, http.StatusNotFound, "not_found")
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "kind": "capture", "amount": amount})
	})
	if f.naive {
		mux.HandleFunc("POST /v1/recharges/notify", f.signed(f.notifyNaive))
	} else {
		mux.HandleFunc("POST /v1/recharges/notify", f.signed(f.notifyOnce))
	}
	return mux
}

func (f *fakeOncepay) user(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != "Bearer demo-alice-key" && a != "Bearer demo-bob-key" {
			problem(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		next(w, r)
	}
}

// signed checks X-Signature over the raw body and hands the decoded notification on.
func (f *fakeOncepay) signed(next func(http.ResponseWriter, notificationBody)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if reportsig.Verify(f.secret, r.Header.Get("X-Signature"), kindOf(r.URL.Path), raw, time.Now(), time.Minute) != nil {
			problem(w, http.StatusUnauthorized, "invalid_signature")
			return
		}
		var n notificationBody
		if err := json.Unmarshal(raw, &n); err != nil {
			problem(w, http.StatusBadRequest, "invalid_request")
			return
		}
		next(w, n)
	}
}

func (f *fakeOncepay) createRecharge(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Idempotency-Key") == "" {
		problem(w, http.StatusBadRequest, "idempotency_key_missing")
		return
	}
	var req struct {
		Amount int64 `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		problem(w, http.StatusBadRequest, "invalid_request")
		return
	}
	f.mu.Lock()
	f.nextID++
	id := strconv.Itoa(1790000000000000000 + f.nextID)
	f.recharges[id] = &fakeRecharge{User: r.Header.Get("Authorization"), Status: "PENDING", Amount: req.Amount}
	f.mu.Unlock()
	w.Header().Set("Idempotency-Outcome", "executed")
	writeJSONBody(w, http.StatusCreated, map[string]any{"recharge_id": id, "status": "PENDING", "amount": req.Amount})
}

// notifyOnce is the fixed callback: the business key decides, and the credit happens once.
func (f *fakeOncepay) notifyOnce(w http.ResponseWriter, n notificationBody) {
	key := n.Channel + ":" + n.TradeNo
	f.mu.Lock()
	state := f.dedup[key]
	switch state {
	case "done":
		f.outcomes["replayed"]++
	case "in_progress":
		f.outcomes["in_progress"]++
	default:
		f.outcomes["executed"]++
		f.dedup[key] = "in_progress"
	}
	f.mu.Unlock()
	switch state {
	case "done":
		w.Header().Set("Idempotency-Outcome", "replayed")
		writeJSONBody(w, http.StatusOK, map[string]string{"result": "success"})
		return
	case "in_progress":
		w.Header().Set("Idempotency-Outcome", "in_progress")
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "idempotency_key_in_use")
		return
	}
	time.Sleep(20 * time.Millisecond)
	f.mu.Lock()
	if rc := f.recharges[n.OutTradeNo]; rc != nil && rc.Status == "PENDING" {
		rc.Status = "SUCCEEDED"
		f.balance[rc.User] += n.Amount
		f.captured[ledger.TradeID(n.Channel, n.TradeNo)] += n.Amount
	}
	f.dedup[key] = "done"
	f.mu.Unlock()
	w.Header().Set("Idempotency-Outcome", "executed")
	writeJSONBody(w, http.StatusOK, map[string]string{"result": "success"})
}

// notifyNaive is incident I2: read the status, work a while, then act on what was read.
func (f *fakeOncepay) notifyNaive(w http.ResponseWriter, n notificationBody) {
	f.mu.Lock()
	rc := f.recharges[n.OutTradeNo]
	pending := rc != nil && rc.Status == "PENDING"
	f.mu.Unlock()
	time.Sleep(200 * time.Millisecond)
	if pending {
		f.mu.Lock()
		rc.Status = "SUCCEEDED"
		f.balance[rc.User] += n.Amount
		f.captured[ledger.TradeID(n.Channel, n.TradeNo)] += n.Amount
		f.mu.Unlock()
	}
	writeJSONBody(w, http.StatusOK, map[string]string{"result": "success"})
}

func (f *fakeOncepay) metrics(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintln(w, "# TYPE oncepay_idempotency_outcomes_total counter")
	for _, o := range []string{"executed", "in_progress", "replayed"} {
		fmt.Fprintf(w, "oncepay_idempotency_outcomes_total{outcome=%q} %d\n", o, f.outcomes[o])
	}
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func problem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "code": code})
}

// drillFake runs the drill's I2 against a fake and returns the exit status and the report.
func drillFake(t *testing.T, f *fakeOncepay, extra ...string) (int, report, string) {
	t.Helper()
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	var out, errb bytes.Buffer
	args := append([]string{"--url", srv.URL, "--kafka=", "--only", "I2", "--json"}, extra...)
	code := run(t.Context(), args, &out, &errb)
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, stdout is not the JSON report: %v\nstdout: %s\nstderr: %s", code, err, out.String(), errb.String())
	}
	return code, rep, errb.String()
}

func TestRechargeCallbacksHeldAndReproducedInTheLab(t *testing.T) {
	code, rep, stderr := drillFake(t, newFakeOncepay(false, true))
	if code != exitOK {
		t.Fatalf("exit %d, want %d; report %+v\nstderr: %s", code, exitOK, rep, stderr)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want I2 against oncepay and against the lab", len(rep.Results))
	}
	once, lab := rep.Results[0], rep.Results[1]
	if once.Target != "oncepay" || once.Verdict != verdictHeld {
		t.Errorf("oncepay: %s %s: %s %v %v", once.Target, once.Verdict, once.Summary, once.Effect, once.Answers)
	}
	if !strings.HasPrefix(once.Summary, "credited once; 19 copies stopped: ") {
		t.Errorf("summary = %q", once.Summary)
	}
	if len(once.Copies) != 20 || once.Copies[0].Path != "recharge callback" || once.Copies[0].Route != "POST /v1/recharges/notify" {
		t.Errorf("copies = %+v", once.Copies)
	}
	if n := countOutcome(once.Copies, "executed"); n != 1 {
		t.Errorf("%d copies executed, want 1", n)
	}
	// The two runs went at the same time: the server-wide counters are the run's, not theirs.
	if len(once.Metrics) != 0 || !strings.HasPrefix(once.MetricsNote, "not attributed") {
		t.Errorf("overlapping run: metrics %v, note %q", once.Metrics, once.MetricsNote)
	}
	checkOneCredit(t, rep.Metrics)
	if lab.Target != "lab" || lab.Verdict != verdictReproduced || lab.Copies[0].Route != "POST /lab/recharges/notify" {
		t.Errorf("lab: %s %s: %s", lab.Target, lab.Verdict, lab.Summary)
	}
	// The row shows the books against the channel's bill: oncepay's capture is the one trade,
	// the lab's credits are more than the channel took.
	if !strings.Contains(once.Observed, "books +100000 against the bill's +100000") {
		t.Errorf("oncepay observed %q, want its books equal to the bill", once.Observed)
	}
	if strings.Contains(lab.Observed, "books +100000 ") || !strings.Contains(lab.Observed, "against the bill's +100000") {
		t.Errorf("lab observed %q, want books over the bill", lab.Observed)
	}
}

func TestSerialAttributesTheCountersToEachRun(t *testing.T) {
	code, rep, _ := drillFake(t, newFakeOncepay(false, true), "--serial")
	if code != exitOK || len(rep.Results) != 2 {
		t.Fatalf("exit %d, %d results", code, len(rep.Results))
	}
	checkOneCredit(t, rep.Results[0].Metrics)
	if lab := rep.Results[1]; len(lab.Metrics) != 0 || lab.MetricsNote != "" {
		t.Errorf("lab run: metrics %v, note %q; the fake's lab moves no counter", lab.Metrics, lab.MetricsNote)
	}
}

// checkOneCredit checks a counter delta of I2 against the fake: one executed, 19 stopped.
func checkOneCredit(t *testing.T, m map[string]float64) {
	t.Helper()
	stopped := m[`oncepay_idempotency_outcomes_total{outcome="replayed"}`] + m[`oncepay_idempotency_outcomes_total{outcome="in_progress"}`]
	if stopped != 19 || m[`oncepay_idempotency_outcomes_total{outcome="executed"}`] != 1 {
		t.Errorf("metrics delta = %v", m)
	}
}

func TestRechargeCallbacksViolated(t *testing.T) {
	code, rep, _ := drillFake(t, newFakeOncepay(true, false))
	if code != exitViolation {
		t.Fatalf("exit %d, want %d", code, exitViolation)
	}
	if len(rep.Results) != 1 || rep.Results[0].Verdict != verdictViolated || !strings.Contains(rep.Results[0].Summary, "credited") {
		t.Errorf("results = %+v", rep.Results)
	}
}

func TestWrongSecretIsADrillErrorNotAViolation(t *testing.T) {
	code, rep, _ := drillFake(t, newFakeOncepay(false, false), "--channel-secret", "not-the-secret")
	if code != exitTrouble {
		t.Fatalf("exit %d, want %d", code, exitTrouble)
	}
	r := rep.Results[0]
	if r.Verdict != verdictError || !strings.Contains(r.Error, "401 invalid_signature") || !strings.Contains(r.Error, "--channel-secret") {
		t.Errorf("result = %s: %s", r.Verdict, r.Error)
	}
}
