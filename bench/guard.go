package main

import (
	"context"
	"errors"
	"io"
	"net/http"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
)

// The headers of oncepay's HTTP contract (idempotent/httpkey), spelled here so that the bench
// depends on the core package only.
const (
	headerKey      = "Idempotency-Key"
	headerOutcome  = "Idempotency-Outcome"
	headerReplayed = "Idempotent-Replayed"
)

// newGuard returns a guard on the bench database and Redis with cfg, under a Redis key
// prefix of its own.
func (e *env) newGuard(name string, cfg idempotent.Config) *idempotent.Guard {
	return e.newGuardOn(e.db, name, cfg)
}

// newGuardOn is newGuard on another of the bench's databases.
func (e *env) newGuardOn(db *gorm.DB, name string, cfg idempotent.Config) *idempotent.Guard {
	cfg.KeyPrefix = e.prefix + name + ":"
	cfg.Classify = classify
	cfg.Reject = rejectOutOfStock
	return idempotent.New(db, e.rdb, cfg)
}

// classify tells the guard what a MySQL error means.
func classify(err error) dberr.Class {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return dberr.Other
	}
	switch me.Number {
	case 1062: // ER_DUP_ENTRY
		return dberr.DuplicateKey
	case 1213: // ER_LOCK_DEADLOCK
		return dberr.Aborted
	case 1205: // ER_LOCK_WAIT_TIMEOUT
		return dberr.LockWait
	}
	return dberr.Other
}

// rejectOutOfStock stores "out of stock" as the answer of its key: a deterministic business
// refusal that every copy gets again.
func rejectOutOfStock(_ context.Context, err error) (idempotent.Response, bool) {
	if !errors.Is(err, errOutOfStock) {
		return idempotent.Response{}, false
	}
	return jsonResponse(http.StatusConflict, errorJSON("out_of_stock")), true
}

// jsonResponse is a stored JSON answer.
func jsonResponse(status int, body []byte) idempotent.Response {
	return idempotent.Response{Status: status, Header: map[string]string{"Content-Type": "application/json"}, Body: body}
}

// guardHandler is the baseline's POST /orders behind the guard: the client's Idempotency-Key
// names the write, and the transaction's statements run on the guard's transaction, which
// also inserts the dedup record.
func guardHandler(g *idempotent.Guard, o *orders) http.Handler {
	return guardHandlerWith(g, o, false)
}

// guardHandlerWith is guardHandler; with last, the work writes the dedup record before the
// hot stock UPDATE, right before the commit, as oncepay's POST /v1/orders does.
func guardHandlerWith(g *idempotent.Guard, o *orders, last bool) http.Handler {
	work := idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		body, err := o.place(tx)
		if err != nil {
			return idempotent.Response{}, err
		}
		return jsonResponse(http.StatusCreated, body), nil
	})
	if last {
		work = func(_ context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
			body, err := o.open(tx)
			if err != nil {
				return err
			}
			if err := record(jsonResponse(http.StatusCreated, body)); err != nil {
				return err
			}
			return o.take(tx)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(headerKey)
		if !idempotent.ValidKey(key) {
			writeJSON(w, http.StatusBadRequest, errorJSON("idempotency_key_missing"))
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorJSON("unreadable_body"))
			return
		}
		req := idempotent.Request{
			Key:         idempotent.Key{Scope: "user:1", BizType: "bench", BizKey: key},
			Fingerprint: idempotent.Fingerprint(r.Method, "/orders", body),
		}
		res, err := g.Do(r.Context(), req, work)
		writeResult(w, res, err)
	})
}

// writeResult writes the guard's answer: the stored or fresh response with its outcome, or
// the refusal of the protocol.
func writeResult(w http.ResponseWriter, res idempotent.Result, err error) {
	h := w.Header()
	if res.Outcome != "" {
		h.Set(headerOutcome, string(res.Outcome))
	}
	if err != nil {
		var protocol *idempotent.Error
		code := "internal"
		if errors.As(err, &protocol) {
			code = protocol.Code
		}
		writeJSON(w, statusOf(err), errorJSON(code))
		return
	}
	for k, v := range res.Response.Header {
		h.Set(k, v)
	}
	if res.Outcome == idempotent.Replayed {
		h.Set(headerReplayed, "true")
	}
	w.WriteHeader(res.Response.Status)
	_, _ = w.Write(res.Response.Body)
}

// statusOf maps a refusal of the guard to its HTTP status, as oncepay's contract does.
func statusOf(err error) int {
	switch {
	case errors.Is(err, idempotent.ErrKeyInUse):
		return http.StatusConflict
	case errors.Is(err, idempotent.ErrKeyReused), errors.Is(err, idempotent.ErrTokenInvalid):
		return http.StatusUnprocessableEntity
	case errors.Is(err, idempotent.ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
