// Package web holds oncepay's HTTP plumbing: RFC 9457 problem responses, JSON decoding with
// the contract's limits, request-id, recovery, body-limit, metrics and auth middleware.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// Problem is an RFC 9457 problem document with the contract's stable code.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// ProblemFor returns the problem document for err answering r. It is the one place where
// errors become HTTP: an *apperr.Error keeps its status and code; a deadline, a cancellation,
// a database that cannot be reached or that aborted the transaction is 503 unavailable;
// anything else is a 500 that reveals nothing.
func ProblemFor(r *http.Request, err error) Problem {
	p := ProblemOf(err)
	p.Instance = r.URL.Path
	p.RequestID = requestid.From(r.Context())
	return p
}

// ProblemOf is ProblemFor without the request's details, for answers built away from an
// HTTP request (a Kafka copy of a notification stores the same answer as an HTTP copy).
func ProblemOf(err error) Problem {
	e, ok := apperr.As(err)
	if !ok {
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			e = apperr.ErrUnavailable
		case database.IsUnavailable(err):
			// While the database is down the request failed for the moment, not for a bug,
			// and nothing of it was stored: 503 with Retry-After, never 500 (issue: 503 not
			// 500). The detail names no driver error.
			e = ErrDatabaseUnavailable
		case database.IsRetryable(err), database.IsLockWaitTimeout(err):
			// A deadlock, a Galera certification conflict or a lock wait that reached here
			// (a transaction no guard reran, or one the guard gave up on) rolled back whole:
			// the request may be sent again, so it is a 503 to retry, not a 500.
			e = ErrDatabaseBusy
		default:
			e = apperr.ErrInternal
		}
	}
	return Problem{
		Type:   "https://oncepay.dev/problems/" + e.Code,
		Title:  http.StatusText(e.Status),
		Status: e.Status,
		Code:   e.Code,
		Detail: e.Detail,
	}
}

// ErrDatabaseUnavailable is the answer to a request that needs the database while it cannot
// be reached: the contract's 503 unavailable, with a detail a client can act on.
var ErrDatabaseUnavailable = apperr.ErrUnavailable.Withf("the database is unavailable; retry after Retry-After seconds (a write with the same Idempotency-Key: nothing of this attempt was stored)")

// ErrDatabaseBusy is the answer to a request whose transaction the database kept aborting
// (deadlocks, certification conflicts on a Galera cluster) or whose statement waited out the
// lock wait timeout: nothing of it was stored, and the same request may be sent again.
var ErrDatabaseBusy = apperr.ErrUnavailable.Withf("the database aborted this request's transaction (conflicting writes); nothing was stored; retry after Retry-After seconds")

// RetryAfterUnavailable is the Retry-After, in seconds, of every 503 answer: long enough for
// database/sql to reconnect or Redis to come back, short enough that a client's retry lands
// soon after it has.
const RetryAfterUnavailable = "2"

// Challenge is the WWW-Authenticate challenge of every 401 answer (RFC 9110 §11.6.1 requires
// one): the API's keys are bearer tokens.
const Challenge = `Bearer realm="oncepay"`

// WriteError writes err as a problem response. Unexpected errors are logged with their cause.
// Every 401 carries the WWW-Authenticate challenge, whichever check refused the request. The
// answer carries X-Request-Id whatever middleware ran before — the request's id, or a fresh
// one when the request has none — so that even a rejection served outside the RequestID
// middleware can be traced.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	p := ProblemFor(r, err)
	if p.RequestID == "" {
		p.RequestID = requestid.New()
	}
	h := w.Header()
	if h.Get(requestid.Header) == "" {
		h.Set(requestid.Header, p.RequestID)
	}
	if p.Status == http.StatusUnauthorized && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", Challenge)
	}
	switch {
	case p.Status == http.StatusServiceUnavailable:
		// A dependency that is down answers every request 503 until it is back: a warning
		// each, not an error each (the chaos run's MariaDB kill filled the log with errors).
		slog.WarnContext(r.Context(), "request refused: unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	case p.Status >= 500:
		slog.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", p.Status, "err", err)
	}
	WriteProblem(w, p)
}

// WriteProblem writes p with the problem+json media type. Every 503 carries Retry-After
// (RFC 9110 §10.2.3) unless the caller set one: a dependency is down for the moment, and the
// client is told when to try again rather than left to guess (issue: 503 not 500).
func WriteProblem(w http.ResponseWriter, p Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", RetryAfterUnavailable)
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// NotFound answers unknown routes with a problem response.
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, r, apperr.ErrNotFound.Withf("no route %s %s", r.Method, r.URL.Path))
}

// MethodNotAllowed answers a known route called with another method.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	WriteError(w, r, apperr.ErrMethodNotAllowed)
}
