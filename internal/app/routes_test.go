package app_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// notIdempotentByKey are the write routes mounted without an idempotency mark, each with the
// reason it needs none. A write route that is neither marked (idem.KeyRequired,
// idem.ReportKeyed) nor listed here fails TestWriteRoutesSayHowTheyAreIdempotent: mark it
// where it is mounted, or give its reason here.
var notIdempotentByKey = map[string]string{
	"PUT /v1/admin/inventory/{sku}": "naturally idempotent: absolute price and stock; If-Match makes it a conditional " +
		"read-modify-write (412 on a stale version)",
	"POST /v1/idempotency-tokens": "issues a one-time token, which is itself a key; a retry gets another token and " +
		"the unused one expires (ONCEPAY_IDEMPOTENCY_TOKEN_TTL), nothing else is written",
	"DELETE /v1/admin/idempotency-records": "naturally idempotent: an evicted record is gone, so a second eviction " +
		"finds nothing (404) and changes nothing",
	"POST /v1/admin/webhook-endpoints": "each call registers a new endpoint with its own secret, by design " +
		"(docs/contract.md); a retried registration is a second endpoint the admin can disable",
	"PATCH /v1/admin/webhook-endpoints/{endpoint_id}": "naturally idempotent: absolute values",
	"POST /v1/admin/jobs/close-expired-orders/run": "conditionally idempotent: the job's changes carry state " +
		"preconditions and run under its leader lock; running it twice closes nothing twice",
	"POST /v1/admin/jobs/purge-dedup-records/run": "conditionally idempotent: deletes only records past " +
		"retention; a second run finds none of them",
	"POST /v1/admin/jobs/reconcile-payments/run": "conditionally idempotent: each payment found is applied " +
		"through the report's own key (notify.Port.Settle)",
	"POST /v1/admin/jobs/resume-refunds/run": "conditionally idempotent: each refund keeps its out_refund_no " +
		"and each anomaly opens one refund (unique anomaly_id)",
	"POST /v1/admin/jobs/reconcile-bills/run": "conditionally idempotent: one anomaly per kind, channel and " +
		"number however often a day is run; a paid trade is applied through the report's own key",
	"POST /v1/admin/jobs/backfill-ledger/run": "naturally idempotent: each transfer's id is its fact, an " +
		"existing one is skipped, and a second run posts nothing",
}

// writeMethods are the methods of the routes that change something.
var writeMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// unsaid lists every disagreement between the served routes (with their marks) and the
// exemptions: a write route with neither, a route both marked and exempt, an exemption
// of a route that is not served or not a write.
func unsaid(served map[string]string, exempt map[string]string) []string {
	var out []string
	for route, mark := range served {
		method, _, _ := strings.Cut(route, " ")
		reason, isExempt := exempt[route]
		switch {
		case !slices.Contains(writeMethods, method):
		case mark == "" && !isExempt:
			out = append(out, route+" is a write route with no idempotency mark and no reason in notIdempotentByKey: "+
				"mount it with idem.KeyRequired (or idem.ReportKeyed), or say here why it needs none")
		case mark != "" && isExempt:
			out = append(out, route+" is marked "+mark+" and exempt too: remove it from notIdempotentByKey")
		case isExempt && strings.TrimSpace(reason) == "":
			out = append(out, route+" is exempt without a reason")
		}
	}
	for route := range exempt {
		method, _, _ := strings.Cut(route, " ")
		if _, ok := served[route]; !ok || !slices.Contains(writeMethods, method) {
			out = append(out, route+" is in notIdempotentByKey but is not a served write route: remove it")
		}
	}
	slices.Sort(out)
	return out
}

// TestWriteRoutesSayHowTheyAreIdempotent: every write route (POST, PUT, PATCH, DELETE) the
// router serves is mounted with an idempotency mark, or its reason for none is stated in
// notIdempotentByKey; the marks are what the rejected outcome, the published policy and the
// spec check are read from, so a route that forgot its mark would silently lose them.
func TestWriteRoutesSayHowTheyAreIdempotent(t *testing.T) {
	served := map[string]string{}
	for route, kind := range servedRoutes(t) {
		served[route] = string(kind)
	}
	if served["POST /v1/orders"] == "" || served["POST /v1/payments/notify"] == "" {
		t.Fatalf("POST /v1/orders is marked %q and POST /v1/payments/notify %q: the walk does not see the marks",
			served["POST /v1/orders"], served["POST /v1/payments/notify"])
	}
	for _, problem := range unsaid(served, notIdempotentByKey) {
		t.Error(problem)
	}
}

// TestUnsaid checks that the comparison fails in each direction.
func TestUnsaid(t *testing.T) {
	served := map[string]string{"POST /a": "idempotency-key", "POST /b": "", "GET /c": "", "PUT /d": "report"}
	tests := []struct {
		name   string
		exempt map[string]string
		want   int
	}{
		{"all said", map[string]string{"POST /b": "why"}, 0},
		{"a write without a mark or a reason", map[string]string{}, 1},
		{"a reason left empty", map[string]string{"POST /b": " "}, 1},
		{"marked and exempt", map[string]string{"POST /b": "why", "POST /a": "why"}, 1},
		{"an exemption of a read", map[string]string{"POST /b": "why", "GET /c": "why"}, 1},
		{"an exemption of nothing served", map[string]string{"POST /b": "why", "POST /e": "why"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unsaid(served, tt.exempt); len(got) != tt.want {
				t.Errorf("unsaid = %q, want %d problems", got, tt.want)
			}
		})
	}
}
