package drill

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// sampleReport is a fixed report: one held oncepay run with its copies and metrics, one
// reproduced lab run, and one skipped half.
func sampleReport() report {
	var copies []copyRecord
	copies = append(copies, copyRecord{Path: "recharge callback", Via: "http", Route: "POST /v1/recharges/notify", StartMS: 0.2, DurationMS: 41, Status: 200, Outcome: "executed"})
	for i := range 12 {
		copies = append(copies, copyRecord{Path: "recharge callback", Via: "http", Route: "POST /v1/recharges/notify", StartMS: float64(i) / 10, DurationMS: 3, Status: 200, Outcome: "replayed", Replayed: true})
	}
	for range 7 {
		copies = append(copies, copyRecord{Path: "recharge callback", Via: "http", Route: "POST /v1/recharges/notify", StartMS: 0.5, DurationMS: 2, Status: 409, Outcome: "in_progress", Code: "idempotency_key_in_use"})
	}
	held := result{ID: "I2", Name: "concurrent recharge callbacks", Target: "oncepay", Copies: copies,
		Expected: "balance +100000 once; recharge no longer PENDING", Observed: "balance +100000; recharge SUCCEEDED",
		Metrics: map[string]float64{`oncepay_idempotency_outcomes_total{outcome="replayed"}`: 12, `oncepay_idempotency_outcomes_total{outcome="in_progress"}`: 7}}
	held.Verdict, held.Summary = judge("oncepay", outcome{copies: copies, held: joinNonEmpty("credited once", stoppedSummary(copies))})
	lab := result{ID: "I2", Name: "concurrent recharge callbacks", Target: "lab", Verdict: verdictReproduced,
		Summary: "balance +300000 for one recharge of 100000 (credited 3×)", Effect: []string{"balance +300000 for one recharge of 100000 (credited 3×)"},
		Copies:      []copyRecord{{Path: "recharge callback", Via: "http", Status: 200, DurationMS: 30}, {Path: "kafka redelivery", Via: "kafka", DurationMS: 1500, ConsumedMS: 6400}},
		MetricsNote: "no oncepay_idempotency* counters exposed"}
	skipped := result{ID: "I5", Name: "payment after close", Target: "oncepay", Verdict: verdictSkipped, Summary: "ORDER_TTL too long: 15m0s"}
	r := report{URL: "http://localhost:8080", RunID: "0A1B2C3D", Kafka: []string{"127.0.0.1:19092"}, Lab: true,
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Results: []result{held, lab, skipped}}
	r.finish()
	r.FinishedAt = r.StartedAt.Add(31200 * time.Millisecond)
	return r
}

func TestStoppedSummaryNamesTheLayers(t *testing.T) {
	r := sampleReport()
	if got, want := r.Results[0].Summary, "credited once; 19 copies stopped: 12 replayed, 7 in_progress"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := writeTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	want := `I2 concurrent recharge callbacks, oncepay: held
  fired     20 copies (20 over HTTP), the last 1ms after the first
  answers   recharge callback  http  200                         executed     ×1   in 41ms
            recharge callback  http  200                         replayed     ×12  in 3ms
            recharge callback  http  409 idempotency_key_in_use  in_progress  ×7   in 2ms
  expected  balance +100000 once; recharge no longer PENDING
  observed  balance +100000; recharge SUCCEEDED
  metrics   oncepay_idempotency_outcomes_total{outcome="in_progress"}  +7
            oncepay_idempotency_outcomes_total{outcome="replayed"}     +12

I2 concurrent recharge callbacks, lab: REPRODUCED
  fired     2 copies (1 over HTTP, 1 over Kafka), the last 0ms after the first
  answers   recharge callback  http   200        -                          ×1  in 30ms
            kafka redelivery   kafka  published  consumer (not observable)  ×1  in 1.5s, handled within 6.4s
  effect!   balance +300000 for one recharge of 100000 (credited 3×)
  metrics   no oncepay_idempotency* counters exposed

I5 payment after close, oncepay: skipped
  metrics   no oncepay_idempotency* counter moved

oncepay drill 0A1B2C3D against http://localhost:8080 (kafka: 127.0.0.1:19092, lab: true)

I2  concurrent recharge callbacks  oncepay  held        0ms  (credited once; 19 copies stopped: 12 replayed, 7 in_progress)
I2  concurrent recharge callbacks  lab      REPRODUCED  0ms  (balance +300000 for one recharge of 100000 (credited 3×))
I5  payment after close            oncepay  skipped     0ms  (ORDER_TTL too long: 15m0s)

1 held, 1 REPRODUCED, 1 skipped; exit status 0; the drill took 31.2s
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteJSONShape(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSON(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	requireKeys(t, "report", doc, "url", "run_id", "kafka_brokers", "lab", "started_at", "finished_at", "results", "totals", "exit_code")
	results := doc["results"].([]any)
	if len(results) != 3 {
		t.Fatalf("%d results", len(results))
	}
	for _, r := range results {
		res := r.(map[string]any)
		requireKeys(t, "result", res, "id", "name", "target", "verdict", "summary", "expected", "observed",
			"effect_findings", "answer_findings", "notes", "copies", "metrics_delta", "started_at", "duration_ms")
		for _, list := range []string{"effect_findings", "answer_findings", "notes", "copies"} {
			if _, ok := res[list].([]any); !ok {
				t.Errorf("result %s: %s is %T, want an array even when empty", res["id"], list, res[list])
			}
		}
	}
	first := results[0].(map[string]any)
	if first["verdict"] != "held" || first["target"] != "oncepay" {
		t.Errorf("first result = %v", first)
	}
	cp := first["copies"].([]any)[0].(map[string]any)
	// The per-copy timing the HTML report draws.
	requireKeys(t, "copy", cp, "path", "via", "route", "request_id", "start_ms", "duration_ms", "status", "outcome", "replayed")
	if cp["status"] != 200.0 || cp["outcome"] != "executed" || cp["duration_ms"] != 41.0 {
		t.Errorf("copy = %v", cp)
	}
	if doc["exit_code"] != 0.0 || doc["totals"].(map[string]any)["REPRODUCED"] != 1.0 {
		t.Errorf("exit_code %v totals %v", doc["exit_code"], doc["totals"])
	}
}

func TestExitCodeViolationWinsOverError(t *testing.T) {
	r := report{Results: []result{{Verdict: verdictError}, {Verdict: verdictViolated}, {Verdict: verdictNotReproduced}}}
	r.finish()
	if r.ExitCode != exitViolation {
		t.Errorf("exit %d, want %d", r.ExitCode, exitViolation)
	}
	r = report{Results: []result{{Verdict: verdictHeld}, {Verdict: verdictError}}}
	r.finish()
	if r.ExitCode != exitTrouble {
		t.Errorf("exit %d, want %d", r.ExitCode, exitTrouble)
	}
}

func requireKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no %q: %v", what, k, strings.Join(mapKeys(m), ","))
		}
	}
}

func mapKeys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
