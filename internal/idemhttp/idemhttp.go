// Package idemhttp is oncepay's HTTP adapter of idempotent: it reads the
// Idempotency-Key header, runs a decoded and validated request's work through the guard,
// and writes the answer with the contract's headers (Idempotency-Outcome,
// Idempotent-Replayed, Retry-After) and problem codes. The guard sees the work's error
// directly; the transaction is the work's argument; the response is written after commit.
//
// A handler reads, top to bottom:
//
//	key, err := idemhttp.UserKey(r)            // 400 idempotency_key_missing / _invalid
//	req, err := decodeAndValidate(r)           // 400 invalid_request, nothing stored
//	h.idem.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
//		o, err := h.orders.Create(ctx, tx, userID, req.lines)  // the one transaction
//		if err != nil {
//			return idempotent.Response{}, err                  // out_of_stock: stored, replayed
//		}
//		return idemhttp.JSON(http.StatusCreated, ViewOf(o)), nil
//	})
package idemhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
	"github.com/oncepay/oncepay/idempotent/sqliteerr"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
	"gorm.io/gorm"
)

// Classify is the kit's classifier of db's dialect, for idempotent.Config's Classify: by
// MySQL error number (mysqlerr) or SQLite extended result code (sqliteerr), never by text.
func Classify(db *gorm.DB) func(error) idempotent.ErrorClass {
	if db.Dialector.Name() == "mysql" {
		return mysqlerr.Classify
	}
	return sqliteerr.Classify
}

// HTTP headers of the idempotency protocol (the kit's, idempotent/httpkey).
const (
	HeaderKey      = httpkey.HeaderKey
	HeaderOutcome  = httpkey.HeaderOutcome
	HeaderDegraded = httpkey.HeaderDegraded
	HeaderReplayed = httpkey.HeaderReplayed
)

// BizType is the biz_type of every client key: a key names one write of one user, whatever
// the endpoint (docs/contract.md), so the same key on another endpoint is a mismatch (422)
// through the fingerprint, never a second write.
const BizType = httpkey.BizType

// The client-facing errors of reading the key.
var (
	ErrKeyMissing = apperr.New(http.StatusBadRequest, "idempotency_key_missing", "this endpoint requires an Idempotency-Key header")
	ErrKeyInvalid = apperr.New(http.StatusBadRequest, "idempotency_key_invalid", "Idempotency-Key must be 1..255 visible ASCII characters")
)

// statusOf maps the guard's refusals to their HTTP statuses (docs/contract.md).
var statusOf = map[string]int{
	idempotent.ErrKeyInUse.Code:     http.StatusConflict,
	idempotent.ErrKeyReused.Code:    http.StatusUnprocessableEntity,
	idempotent.ErrTokenInvalid.Code: http.StatusBadRequest,
	idempotent.ErrUnavailable.Code:  http.StatusServiceUnavailable,
}

// AsAppErr turns a refusal of the guard into the client-facing error with its status; any
// other error is returned as it is.
func AsAppErr(err error) error {
	if errors.Is(err, idempotent.ErrLockLost) {
		return errLockLost
	}
	var e *idempotent.Error
	if errors.As(err, &e) {
		if status, ok := statusOf[e.Code]; ok {
			return apperr.New(status, e.Code, e.Detail)
		}
	}
	return err
}

// errLockLost answers a work the guard cancelled because its lease could not be renewed
// (I4, I10): Redis restarted or stopped answering while the work ran. The work's transaction
// rolled back and nothing is stored, so the client's retry with the same key runs again — a
// 503 to retry, not a 500 (found by the chaos run: a Redis restart under slow payments).
var errLockLost = apperr.ErrUnavailable.Withf("the request lost its idempotency lock (Redis) before it could finish; nothing was applied; retry with the same key")

// UserKey reads the Idempotency-Key header of an authenticated user's request
// (httpkey.Key), scoped to that user so that two users' keys never collide.
func UserKey(r *http.Request) (idempotent.Key, error) {
	who, ok := web.UserScope(r)
	if !ok {
		return idempotent.Key{}, apperr.ErrUnauthorized
	}
	k, err := httpkey.Key(r, who)
	switch {
	case errors.Is(err, httpkey.ErrKeyMissing):
		return idempotent.Key{}, ErrKeyMissing
	case err != nil:
		return idempotent.Key{}, ErrKeyInvalid
	}
	return k, nil
}

// AdminKey reads the Idempotency-Key header of an admin request, scoped to the admin, whose
// keys never collide with a user's.
func AdminKey(r *http.Request) (idempotent.Key, error) {
	k, err := httpkey.Key(r, "admin")
	switch {
	case errors.Is(err, httpkey.ErrKeyMissing):
		return idempotent.Key{}, ErrKeyMissing
	case err != nil:
		return idempotent.Key{}, ErrKeyInvalid
	}
	return k, nil
}

// KeyAndBody reads what every client write starts with: the caller's Idempotency-Key
// (UserKey) and the raw body, within the body limit. A handler refuses the request with
// Reject when it fails: nothing is stored.
func KeyAndBody(r *http.Request) (idempotent.Key, []byte, error) {
	key, err := UserKey(r)
	if err != nil {
		return idempotent.Key{}, nil, err
	}
	body, err := web.ReadBody(r)
	return key, body, err
}

// Adapter answers idempotent HTTP writes through a guard.
type Adapter struct{ guard *idempotent.Guard }

// New returns the adapter of guard.
func New(guard *idempotent.Guard) *Adapter { return &Adapter{guard: guard} }

// Guard is the guard behind the adapter.
func (a *Adapter) Guard() *idempotent.Guard { return a.guard }

// Do runs work exactly once for key and writes the answer. body is the request's raw body:
// with the method and path it is the fingerprint, so the same key with another request is
// refused (422). A business refusal the work returns as an error (out_of_stock,
// illegal_state) is stored and replayed like a success; an unexpected error stores nothing.
func (a *Adapter) Do(w http.ResponseWriter, r *http.Request, key idempotent.Key, body []byte, work idempotent.Work) (idempotent.Result, error) {
	return a.Run(w, r, Request(r, key, body), work)
}

// Run runs req — built with Request, and given its phases (Before, After, Last) — through
// the guard and writes the answer.
func (a *Adapter) Run(w http.ResponseWriter, r *http.Request, req idempotent.Request, work idempotent.Work) (idempotent.Result, error) {
	res, err := a.guard.Do(r.Context(), req, work)
	Write(w, r, res, err)
	return res, err
}

// Request is the guard's request for r under key: the fingerprint of the method, the path —
// not the route pattern: the same key on /orders/1/cancel and /orders/2/cancel is two
// requests (422), never a replay of the other order's — and the body; refusals rendered with
// r's instance and request id; logged as coming via http. Handlers that look at the guard's
// answer before writing it (a trade_conflict) build their request with it.
func Request(r *http.Request, key idempotent.Key, body []byte) idempotent.Request {
	req := httpkey.Handler{}.Request(r, key, body) // an empty body and {} are one request
	req.Reject = func(_ context.Context, err error) (idempotent.Response, bool) { return Problem(r, err) }
	return req
}

// Problem renders err as the stored answer of a refused request: a problem document with
// the request's instance and request id. ok is false for errors that are not the client's
// (5xx): those are never stored.
func Problem(r *http.Request, err error) (idempotent.Response, bool) {
	return problemResponse(web.ProblemFor(r, err))
}

// StoredProblem is Problem away from an HTTP request (a Kafka copy of a notification): the
// problem document carries the request id of ctx. It is the guard's default Reject.
func StoredProblem(ctx context.Context, err error) (idempotent.Response, bool) {
	p := web.ProblemOf(err)
	p.RequestID = requestid.From(ctx)
	return problemResponse(p)
}

// StoredProblemAt is StoredProblem with the problem's instance set to path, the route a copy
// would have taken over HTTP: a Kafka copy and an HTTP copy of one notification store the
// same document.
func StoredProblemAt(path string) func(ctx context.Context, err error) (idempotent.Response, bool) {
	return func(ctx context.Context, err error) (idempotent.Response, bool) {
		p := web.ProblemOf(err)
		p.Instance = path
		p.RequestID = requestid.From(ctx)
		return problemResponse(p)
	}
}

func problemResponse(p web.Problem) (idempotent.Response, bool) {
	if p.Status >= 500 {
		return idempotent.Response{}, false
	}
	resp := idempotent.Response{Status: p.Status, Header: map[string]string{"Content-Type": "application/problem+json"}}
	if p.Code == "illegal_state" {
		resp.Header[HeaderOutcome] = string(idempotent.StateRejected)
	}
	resp.Body, _ = json.Marshal(p)
	resp.Body = append(resp.Body, '\n')
	return resp, true
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

// Write sends the answer of Guard.Do: the stored or fresh response with its outcome, or the
// refusal as a problem response. Every 503 carries Retry-After — a refusal's through
// web.WriteError, a response the work answered with 503 here — and so does a 409
// idempotency_key_in_use.
func Write(w http.ResponseWriter, r *http.Request, res idempotent.Result, err error) {
	h := w.Header()
	if len(res.Degraded) > 0 {
		layers := make([]string, len(res.Degraded))
		for i, l := range res.Degraded {
			layers[i] = string(l)
		}
		h.Set(HeaderDegraded, strings.Join(layers, ", "))
	}
	if err != nil {
		outcome := res.Outcome
		if outcome == "" {
			outcome = idempotent.Failed
		}
		h.Set(HeaderOutcome, string(outcome))
		if outcome == idempotent.InProgress {
			h.Set("Retry-After", "1")
		}
		web.WriteError(w, r, AsAppErr(err))
		return
	}
	for k, v := range res.Response.Header {
		h.Set(k, v)
	}
	switch outcome, stored := res.Response.Header[HeaderOutcome]; {
	case res.Outcome == idempotent.Replayed:
		h.Set(HeaderReplayed, "true")
		h.Set(HeaderOutcome, string(idempotent.Replayed))
	case stored:
		h.Set(HeaderOutcome, outcome)
	default:
		h.Set(HeaderOutcome, string(res.Outcome))
	}
	if res.Response.Status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		// A work that answered 503 itself (nothing is stored for it) tells the client when
		// to retry, like every other 503 (issue: 503 not 500).
		h.Set("Retry-After", web.RetryAfterUnavailable)
	}
	w.WriteHeader(res.Response.Status)
	_, _ = w.Write(res.Response.Body)
}

// Reject answers a request refused before the guard ran (missing key, invalid body): the
// problem response with Idempotency-Outcome: rejected. Nothing is stored, so a corrected
// retry with the same key runs.
func Reject(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set(HeaderOutcome, string(idempotent.Rejected))
	web.WriteError(w, r, err)
}

// TokenHandler serves POST /v1/idempotency-tokens: a one-time token bound to the caller (I7),
// to be sent back as the Idempotency-Key of the form it was issued for. Issuing cannot step
// around Redis: without it the answer is 503 in either failure mode.
func (a *Adapter) TokenHandler(w http.ResponseWriter, r *http.Request) {
	who, ok := web.UserScope(r)
	if !ok {
		web.WriteError(w, r, apperr.ErrUnauthorized)
		return
	}
	token, expires, err := a.guard.IssueToken(r.Context(), who)
	if err != nil {
		web.WriteError(w, r, apperr.ErrUnavailable.Withf("redis is unavailable: cannot issue a token"))
		return
	}
	web.WriteJSON(w, http.StatusCreated, map[string]string{
		"token":      token,
		"expires_at": expires.Format(time.RFC3339),
	})
}

// MarkRejected makes every error response of the requests it matches carry
// Idempotency-Outcome: rejected unless a layer set another outcome, so that the refusals that
// happen before the key is read (401, 413 by Content-Length) say so too (docs/contract.md).
func MarkRejected(matches func(*http.Request) bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if matches(r) {
				w = &rejectMarker{ResponseWriter: w}
			}
			next.ServeHTTP(w, r)
		})
	}
}

type rejectMarker struct{ http.ResponseWriter }

func (m *rejectMarker) WriteHeader(status int) {
	if status >= 400 && m.Header().Get(HeaderOutcome) == "" {
		m.Header().Set(HeaderOutcome, string(idempotent.Rejected))
	}
	m.ResponseWriter.WriteHeader(status)
}

func (m *rejectMarker) Write(b []byte) (int, error) { return m.ResponseWriter.Write(b) }

// Unwrap lets http.ResponseController reach the underlying writer.
func (m *rejectMarker) Unwrap() http.ResponseWriter { return m.ResponseWriter }
