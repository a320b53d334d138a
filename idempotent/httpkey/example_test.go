package httpkey_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
)

// errNobody is a service's refusal of a request nobody authenticated.
var errNobody = errors.New("nobody is authenticated")

// ExampleHandler sets a service's settings once — whose keys a request's are, how a
// business refusal is stored, how long a client waits after a 503 — and serves a write: the
// key, the body, then the work in the guard's transaction.
func ExampleHandler() {
	var guard *idempotent.Guard // idempotent.New(db, rdb, idempotent.Config{…})
	h := httpkey.Handler{
		Guard: guard,
		Scope: func(r *http.Request) (string, error) {
			if user := r.Header.Get("X-User"); user != "" { // a real service's authentication
				return "user:" + user, nil
			}
			return "", errNobody // written through Problem with status 0: a 500 by default
		},
		Stored: func(r *http.Request, err error) (idempotent.Response, bool) {
			if err.Error() != "out of stock" {
				return idempotent.Response{}, false // not the client's: nothing stored
			}
			return idempotent.Response{Status: http.StatusConflict, Body: []byte(`{"code":"out_of_stock"}`)}, true
		},
		RetryAfter: 2 * time.Second,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		key, err := h.Key(r)
		if err != nil {
			h.Reject(w, r, err) // 400 idempotency_key_missing / _invalid, Idempotency-Outcome: rejected
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			h.Reject(w, r, err)
			return
		}
		_, _ = h.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
			// the new rows on tx, then record(the answer), then the contended rows
			return record(idempotent.Response{Status: http.StatusCreated})
		})
	})
	// then http.ListenAndServe(addr, mux)
}
