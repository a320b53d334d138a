package app_test

import (
	"net/http"
	"sync"
	"testing"

	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestRecordLookupListsAttempts is the diagnosis of seed 000 §5.4 made answerable: five
// concurrent copies of one order and a retry later are listed under the key's record with
// their request ids, path, outcome and layer — one executed, the others replayed or told "in
// progress" — so that a person can tell concurrency (several request ids, milliseconds
// apart) from a retry (the same request id again, later).
func TestRecordLookupListsAttempts(t *testing.T) {
	s := apptest.Start(t)
	body := apptest.OrderBody(apptest.Item{SKU: "SKU-1002", Quantity: 1})
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			s.Do(http.MethodPost, "/v1/orders", apptest.AliceKey, body,
				map[string]string{"Idempotency-Key": "diag-1", "X-Request-Id": "req-copy-" + string(rune('a'+i))})
		})
	}
	wg.Wait()
	retry := s.Do(http.MethodPost, "/v1/orders", apptest.AliceKey, body,
		map[string]string{"Idempotency-Key": "diag-1", "X-Request-Id": "req-copy-a"})
	if retry.Status != http.StatusCreated {
		t.Fatalf("retry: %s", retry)
	}

	var v idem.RecordView
	apptest.Must(t, s.Do(http.MethodGet, recordsPath(userSelector(aliceID(t, s), "diag-1")), s.Config.AdminKey, nil, nil), http.StatusOK).Decode(t, &v)
	if len(v.Attempts) != 6 {
		t.Fatalf("%d attempts listed, want the 6 sent: %+v", len(v.Attempts), v.Attempts)
	}
	executed, ids := 0, map[string]int{}
	for _, a := range v.Attempts {
		ids[a.RequestID]++
		if a.Via != "http" || a.At.IsZero() {
			t.Errorf("attempt %+v: want via http and a time", a)
		}
		switch a.Outcome {
		case "executed":
			executed++
		case "replayed", "in_progress":
		default:
			t.Errorf("attempt %+v: unexpected outcome", a)
		}
	}
	if executed != 1 {
		t.Errorf("%d executed attempts, want 1: %+v", executed, v.Attempts)
	}
	if ids["req-copy-a"] != 2 || len(ids) != 5 {
		t.Errorf("request ids %v, want five distinct, req-copy-a twice (the retry)", ids)
	}
	last := v.Attempts[len(v.Attempts)-1]
	if last.RequestID != "req-copy-a" || last.Outcome != "replayed" || last.Layer != "cache" {
		t.Errorf("last attempt %+v, want the retry replayed from the cache", last)
	}
}
