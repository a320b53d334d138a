package app_test

import (
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestHeadAnswersEveryGet: every GET route answers HEAD with the GET's status and no body
// (docs/contract.md: load balancers probe /healthz with HEAD), and a HEAD on a write route is
// still 405.
func TestHeadAnswersEveryGet(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	for _, tc := range []struct {
		path, key string
		status    int
	}{
		{"/healthz", "", http.StatusOK},
		{"/v1/inventory/SKU-1001", "", http.StatusOK},
		{"/v1/idempotency-policy", "", http.StatusOK},
		{"/v1/accounts/me", apptest.AliceKey, http.StatusOK},
		{"/v1/orders/123", apptest.AliceKey, http.StatusNotFound},
		{"/v1/admin/anomalies", apptest.AdminKey, http.StatusOK},
	} {
		r := s.Do(http.MethodHead, tc.path, tc.key, nil, nil)
		if r.Status != tc.status || len(r.Body) != 0 {
			t.Errorf("HEAD %s: %d with %d body bytes, want %d and no body", tc.path, r.Status, len(r.Body), tc.status)
		}
		if r.Header.Get("X-Request-Id") == "" {
			t.Errorf("HEAD %s: no X-Request-Id", tc.path)
		}
	}
	if r := s.Do(http.MethodHead, "/v1/orders", apptest.AliceKey, nil, nil); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("HEAD /v1/orders: %d, want 405", r.Status)
	}
}
