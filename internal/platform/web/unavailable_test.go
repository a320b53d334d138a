package web_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// TestWriteErrorRetryAfter checks that every 503 tells the client when to retry, that a
// database that cannot be reached is such a 503 and never a 500, and that the answer names
// no driver error (issue: 503 not 500).
func TestWriteErrorRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		preset     string // a Retry-After the caller set before WriteError
		status     int
		code       string
		retryAfter string
	}{
		{"database down", fmt.Errorf("create order: %w", driver.ErrBadConn), "", 503, "unavailable", web.RetryAfterUnavailable},
		{"dependency unavailable", apperr.ErrUnavailable, "", 503, "unavailable", web.RetryAfterUnavailable},
		// A transaction the database aborted and no guard reran, or a Galera node not ready:
		// the request may be sent again (issue 21: 503, never 500).
		{"deadlock", fmt.Errorf("close order: %w", &gomysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}}), "", 503, "unavailable", web.RetryAfterUnavailable},
		{"lock wait timeout", &gomysql.MySQLError{Number: 1205, SQLState: [5]byte{'H', 'Y', '0', '0', '0'}}, "", 503, "unavailable", web.RetryAfterUnavailable},
		{"galera error during commit", &gomysql.MySQLError{Number: 1180, SQLState: [5]byte{'H', 'Y', '0', '0', '0'}}, "", 503, "unavailable", web.RetryAfterUnavailable},
		{"galera node not ready", &gomysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: "WSREP has not yet prepared node for application use"}, "", 503, "unavailable", web.RetryAfterUnavailable},
		{"a statement's own mistake is internal", &gomysql.MySQLError{Number: 1064, SQLState: [5]byte{'4', '2', '0', '0', '0'}}, "", 500, "internal", ""},
		{"caller's Retry-After kept", apperr.ErrUnavailable, "7", 503, "unavailable", "7"},
		{"internal has none", apperr.ErrInternal, "", 500, "internal", ""},
		{"conflict has none of its own", apperr.New(http.StatusConflict, "illegal_state", "no"), "", 409, "illegal_state", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			captureLog(t)
			rec := httptest.NewRecorder()
			if tt.preset != "" {
				rec.Header().Set("Retry-After", tt.preset)
			}
			web.WriteError(rec, httptest.NewRequest(http.MethodPost, "/v1/orders", nil), tt.err)
			res := rec.Result()
			p := readProblem(t, res, tt.status, tt.code)
			if got := res.Header.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if strings.Contains(p.Detail, "bad connection") {
				t.Errorf("the problem reveals the driver error: %q", p.Detail)
			}
		})
	}
}

// downUsers is an Authenticator whose database cannot be reached.
type downUsers struct{}

func (downUsers) Authenticate(context.Context, string) (int64, error) {
	return 0, fmt.Errorf("look up api key: %w", driver.ErrBadConn)
}

// TestAuthDatabaseDown checks that a key that cannot be checked because the database is down
// is answered 503 with Retry-After — neither 500, nor a 401 that would call a valid key
// unknown — on user and admin routes alike, while the admin key, which needs no database,
// still gets through.
func TestAuthDatabaseDown(t *testing.T) {
	captureLog(t)
	for _, mw := range []struct {
		name string
		h    http.Handler
	}{
		{"user route", web.RequireUser(downUsers{})(whoAmI)},
		{"admin route", web.RequireAdmin(adminKey, downUsers{})(whoAmI)},
	} {
		t.Run(mw.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
			req.Header.Set("Authorization", "Bearer "+aliceKey)
			res := serve(mw.h, req)
			readProblem(t, res, http.StatusServiceUnavailable, "unavailable")
			if res.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
		})
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/admin/x", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	if res := serve(web.RequireAdmin(adminKey, downUsers{})(whoAmI), req); res.StatusCode != http.StatusOK {
		t.Errorf("admin key with the database down: %d, want 200", res.StatusCode)
	}
}
