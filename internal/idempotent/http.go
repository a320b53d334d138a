package idem

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
	"github.com/oncepay/oncepay/idempotent/sqliteerr"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// HTTP is the kit's HTTP adapter with oncepay's settings, for the users' writes: keys scoped
// to the authenticated user ("user:<id>", so that two users' keys never collide; no user is
// 401), refusals written as the contract's problems (web.WriteError), a work's business
// refusal stored with the request's instance and request id, and every 503 with the
// Retry-After of web.RetryAfterUnavailable.
func HTTP(guard *idempotent.Guard) httpkey.Handler {
	return httpkey.Handler{Guard: guard, Scope: userScope, Problem: problem, Stored: stored, RetryAfter: retryAfter}
}

// AdminHTTP is HTTP for the admin's writes: keys scoped to the admin ("admin"), whose keys
// never collide with a user's.
func AdminHTTP(guard *idempotent.Guard) httpkey.Handler {
	h := HTTP(guard)
	h.Scope = func(*http.Request) (string, error) { return "admin", nil }
	return h
}

// retryAfter is web.RetryAfterUnavailable, the Retry-After of every other 503 of the service,
// as a duration (a test holds them equal).
const retryAfter = 2 * time.Second

// userScope is the idempotency scope of the authenticated caller.
func userScope(r *http.Request) (string, error) {
	who, ok := web.UserScope(r)
	if !ok {
		return "", apperr.ErrUnauthorized
	}
	return who, nil
}

// problem writes a refusal or failure as the contract's problem document.
func problem(w http.ResponseWriter, r *http.Request, status int, err error) {
	web.WriteError(w, r, appErr(status, err))
}

// appErr turns a refusal of the kit, with its status, into the client-facing error; any other
// error is returned as it is, for web.ProblemFor to map.
func appErr(status int, err error) error {
	if errors.Is(err, idempotent.ErrLockLost) {
		return errLockLost
	}
	var e *idempotent.Error
	if status != 0 && errors.As(err, &e) {
		return apperr.New(status, e.Code, e.Detail)
	}
	return err
}

// errLockLost answers a work the guard cancelled because its lease could not be renewed
// (I4, I10): Redis restarted or stopped answering while the work ran. The work's transaction
// rolled back and nothing is stored, so the client's retry with the same key runs again — a
// 503 to retry, not a 500 (found by the chaos run: a Redis restart under slow payments).
var errLockLost = apperr.ErrUnavailable.Withf("the request lost its idempotency lock (Redis) before it could finish; nothing was applied; retry with the same key")

// stored renders err as the stored answer of a refused request: a problem document with r's
// instance and request id. ok is false for errors that are not the client's (5xx): those are
// never stored.
func stored(r *http.Request, err error) (idempotent.Response, bool) {
	return problemResponse(web.ProblemFor(r, err))
}

// StoredProblem is the guard's Config.Reject: a work's refusal away from an HTTP request (a
// Kafka copy of a report, a job) stored as the problem document HTTP would store, with the
// request id of ctx.
func StoredProblem(ctx context.Context, err error) (idempotent.Response, bool) {
	p := web.ProblemOf(err)
	p.RequestID = requestid.From(ctx)
	return problemResponse(p)
}

func problemResponse(p web.Problem) (idempotent.Response, bool) {
	if p.Status >= 500 {
		return idempotent.Response{}, false
	}
	resp := idempotent.Response{Status: p.Status, Header: map[string]string{"Content-Type": "application/problem+json"}}
	if p.Code == "illegal_state" {
		resp.Header[httpkey.HeaderOutcome] = string(idempotent.StateRejected)
	}
	resp.Body, _ = json.Marshal(p)
	resp.Body = append(resp.Body, '\n')
	return resp, true
}

// Classify is the kit's classifier of db's dialect, for idempotent.Config's Classify: by
// MySQL error number (mysqlerr) or SQLite extended result code (sqliteerr), never by text.
func Classify(db *gorm.DB) func(error) dberr.Class {
	if db.Dialector.Name() == "mysql" {
		return mysqlerr.Classify
	}
	return sqliteerr.Classify
}

// JSON is a Response with status and v as its JSON body, plus header pairs (name, value).
func JSON(status int, v any, header ...string) idempotent.Response {
	body, _ := json.Marshal(v)
	resp := idempotent.Response{Status: status, Header: map[string]string{"Content-Type": "application/json"}, Body: append(body, '\n')}
	for i := 0; i+1 < len(header); i += 2 {
		resp.Header[header[i]] = header[i+1]
	}
	return resp
}
