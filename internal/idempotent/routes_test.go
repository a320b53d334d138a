package idem_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
)

// TestMarks: the marks are read from a router with chi.Walk, through its sub-routers; the
// routes marked KeyRequired are listed; an error answer on a marked route's path, whatever
// the method, carries Idempotency-Outcome: rejected, and one on any other path does not; a
// marked route refuses a request without a key before its handler runs.
func TestMarks(t *testing.T) {
	keys := httpkey.Handler{}
	ran := 0
	write := func(w http.ResponseWriter, _ *http.Request, key idempotent.Key) {
		ran++
		w.WriteHeader(http.StatusUnauthorized) // an answer of the handler's, marked too
	}
	marks := new(idem.Marks)
	r := chi.NewRouter()
	r.Use(marks.MarkRejected)
	r.Route("/v1", func(r chi.Router) {
		r.Mount("/things", func() chi.Router {
			sub := chi.NewRouter()
			sub.Method(http.MethodPost, "/", idem.KeyRequired(keys, write))
			sub.Method(http.MethodPost, "/{id}/cancel", idem.KeyRequired(keys, write))
			sub.Get("/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
			return sub
		}())
		r.Method(http.MethodPost, "/reports", idem.ReportKeyed(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
		})))
		r.Post("/other", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) })
	})
	marks.Collect(r)

	if got, want := marks.KeyRequired(), []string{"POST /v1/things", "POST /v1/things/{id}/cancel"}; !slices.Equal(got, want) {
		t.Errorf("KeyRequired = %v, want %v", got, want)
	}
	if got := marks.Routes(); len(got) != 3 || got["POST /v1/reports"] != idem.ReportKey {
		t.Errorf("Routes = %v, want the two keyed routes and POST /v1/reports as a report's", got)
	}
	for _, tt := range []struct {
		method, path string
		key          bool
		status       int
		outcome      string
	}{
		{http.MethodPost, "/v1/things", false, http.StatusBadRequest, "rejected"},
		{http.MethodPost, "/v1/things/", false, http.StatusBadRequest, "rejected"},
		{http.MethodPost, "/v1/things", true, http.StatusUnauthorized, "rejected"},
		{http.MethodPut, "/v1/things", true, http.StatusMethodNotAllowed, "rejected"},
		{http.MethodPost, "/v1/things/7/cancel", true, http.StatusUnauthorized, "rejected"},
		{http.MethodDelete, "/v1/things/7/cancel", false, http.StatusMethodNotAllowed, "rejected"},
		{http.MethodGet, "/v1/things/7", false, http.StatusNotFound, ""},
		{http.MethodPost, "/v1/things//cancel", false, http.StatusBadRequest, "rejected"},
		{http.MethodPost, "/v1/things/7/cancel/more", false, http.StatusNotFound, ""},
		{http.MethodPost, "/v1/reports", false, http.StatusBadRequest, "rejected"},
		{http.MethodPost, "/v1/other", false, http.StatusBadRequest, ""},
	} {
		req := httptest.NewRequest(tt.method, tt.path, nil)
		if tt.key {
			req.Header.Set(httpkey.HeaderKey, "k-1")
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		if rec.Code != tt.status || rec.Header().Get(httpkey.HeaderOutcome) != tt.outcome {
			t.Errorf("%s %s: %d outcome %q, want %d %q", tt.method, tt.path, rec.Code, rec.Header().Get(httpkey.HeaderOutcome), tt.status, tt.outcome)
		}
	}
	if ran != 2 {
		t.Errorf("the marked handlers ran %d times, want 2: only for the requests with a key", ran)
	}
}
