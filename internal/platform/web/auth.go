package web

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// Authenticator resolves an API key to a user id. It returns apperr.ErrUnauthorized for an
// unknown key.
type Authenticator interface {
	Authenticate(ctx context.Context, apiKey string) (userID int64, err error)
}

type userKey struct{}

// WithUser returns ctx carrying the authenticated user id.
func WithUser(ctx context.Context, userID int64) context.Context {
	return context.WithValue(ctx, userKey{}, userID)
}

// UserID returns the authenticated user id carried by ctx.
func UserID(ctx context.Context) (int64, bool) {
	id, ok := ctx.Value(userKey{}).(int64)
	return id, ok
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header, or "".
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return ""
	}
	return strings.TrimSpace(h[len(prefix):])
}

// ErrTwoAuthorizations is a request with more than one Authorization header: which one a
// proxy, a cache or oncepay reads is anybody's guess, so none is (issue 27, like two
// Idempotency-Key headers).
var ErrTwoAuthorizations = apperr.ErrInvalidRequest.Withf("the Authorization header is given more than once; give it once")

// oneAuthorization reports whether r carries at most one Authorization header line.
func oneAuthorization(r *http.Request) bool { return len(r.Header.Values("Authorization")) <= 1 }

// RequireUser lets through only requests whose bearer key belongs to a user.
func RequireUser(a Authenticator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !oneAuthorization(r) {
				WriteError(w, r, ErrTwoAuthorizations)
				return
			}
			key := BearerToken(r)
			if key == "" {
				WriteError(w, r, apperr.ErrUnauthorized)
				return
			}
			id, err := a.Authenticate(r.Context(), key)
			if err != nil {
				WriteError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithUser(r.Context(), id)))
		})
	}
}

// RequireAdmin lets through only requests bearing the admin key. A valid user key gets
// 403 forbidden; a missing or unknown key gets 401 unauthorized; a key that cannot be checked
// (the database is down) gets the error of the check, 503 unavailable.
func RequireAdmin(adminKey string, users Authenticator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !oneAuthorization(r) {
				WriteError(w, r, ErrTwoAuthorizations)
				return
			}
			key := BearerToken(r)
			if key != "" && subtle.ConstantTimeCompare([]byte(key), []byte(adminKey)) == 1 {
				next.ServeHTTP(w, r)
				return
			}
			if key != "" {
				_, err := users.Authenticate(r.Context(), key)
				switch {
				case err == nil:
					WriteError(w, r, apperr.ErrForbidden.Withf("admin routes need the admin key"))
					return
				case !errors.Is(err, apperr.ErrUnauthorized):
					// The key could not be checked (the database is down): 503, not a 401
					// that would tell a user their valid key is unknown (issue: 503 not 500).
					WriteError(w, r, err)
					return
				}
			}
			WriteError(w, r, apperr.ErrUnauthorized)
		})
	}
}

// UserScope is the idempotency scope of the authenticated caller ("user:<id>"), so that two
// users' keys never collide.
func UserScope(r *http.Request) (string, bool) {
	id, ok := UserID(r.Context())
	if !ok {
		return "", false
	}
	return "user:" + strconv.FormatInt(id, 10), true
}
