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
// errors become HTTP: an *apperr.Error keeps its status and code; anything else is a 500
// that reveals nothing.
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
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			e = apperr.ErrUnavailable
		} else {
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
	if p.Status >= 500 {
		slog.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", p.Status, "err", err)
	}
	WriteProblem(w, p)
}

// WriteProblem writes p with the problem+json media type.
func WriteProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
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
