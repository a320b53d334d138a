// Package httpkey is the net/http side of the idempotency kit: it reads the Idempotency-Key
// header (the IETF httpapi draft's), fingerprints the request, runs its work once through an
// idempotent.Guard and writes the answer with the protocol's headers — Idempotency-Outcome,
// Idempotent-Replayed, Idempotency-Degraded, Retry-After. It imports the kit's core and the
// standard library only. What differs from one service to the next is a setting of Handler:
// whose keys a request's are (Scope), how a refusal is written (Problem) and stored (Stored),
// and how long a client waits before it retries a 503 (RetryAfter).
//
// A handler reads, top to bottom:
//
//	key, err := h.Key(r) // 400 idempotency_key_missing / _invalid, in the scope of h.Scope
//	if err != nil {
//		h.Reject(w, r, err) // Idempotency-Outcome: rejected; nothing is stored
//		return
//	}
//	body, err := io.ReadAll(r.Body) // decode and validate too: a bad body is Rejected alike
//	h.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
//		// the new rows, then the record of the answer, then the contended rows
//	})
package httpkey

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/idempotent"
)

// The headers of the protocol.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderOutcome  = "Idempotency-Outcome"
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderDegraded lists the idempotency layers that stepped aside for the attempt because
	// Redis could not be reached ("token, cache, lock"): with a token among them, the token
	// was accepted unchecked (the guard's degrade mode). Absent when none did.
	HeaderDegraded = "Idempotency-Degraded"
)

// HeaderRetryAfter is the standard header that tells a client when to retry: on every 503 the
// Handler writes and on a 409 idempotency_key_in_use.
const HeaderRetryAfter = "Retry-After"

// Headers are the protocol's headers — the request's Idempotency-Key, then those the Handler
// writes — in that order: the one list the kit's README and a service's documentation take
// them from (TestREADME in package idempotent holds the README to it). Each call returns a
// new slice.
func Headers() []string {
	return []string{HeaderKey, HeaderOutcome, HeaderReplayed, HeaderDegraded, HeaderRetryAfter}
}

// BizType is the biz type of client keys: a key names one write of one scope, whatever the
// endpoint, so the same key on another endpoint is a key reused (422), never a second write.
const BizType = "idempotency-key"

// The refusals of reading the key.
var (
	ErrKeyMissing = &idempotent.Error{Code: "idempotency_key_missing", Detail: "this endpoint requires an Idempotency-Key header"}
	ErrKeyInvalid = &idempotent.Error{Code: "idempotency_key_invalid", Detail: "Idempotency-Key must be 1..255 visible ASCII characters, sent once"}
)

// Key reads r's Idempotency-Key for scope (whose keys they are: a user, an account): present
// once, 1..255 visible ASCII characters.
func Key(r *http.Request, scope string) (idempotent.Key, error) {
	values, present := r.Header[HeaderKey]
	if !present {
		return idempotent.Key{}, ErrKeyMissing
	}
	k := strings.TrimSpace(values[0])
	if len(values) != 1 || !idempotent.ValidKey(k) {
		return idempotent.Key{}, ErrKeyInvalid
	}
	return idempotent.Key{Scope: scope, BizType: BizType, BizKey: k}, nil
}

// Status is the HTTP status of a refusal of the guard (or of reading the key); 0 for an error
// that is not one.
func Status(err error) int {
	var e *idempotent.Error
	switch {
	case errors.Is(err, idempotent.ErrLockLost):
		return http.StatusServiceUnavailable
	case !errors.As(err, &e):
		return 0
	}
	switch e.Code {
	case idempotent.ErrKeyInUse.Code:
		return http.StatusConflict
	case idempotent.ErrKeyReused.Code:
		return http.StatusUnprocessableEntity
	case idempotent.ErrTokenInvalid.Code, ErrKeyMissing.Code, ErrKeyInvalid.Code:
		return http.StatusBadRequest
	case idempotent.ErrUnavailable.Code:
		return http.StatusServiceUnavailable
	}
	return 0
}

// Problem writes err, the answer of a request that was refused or failed, with status (0:
// not a refusal of the protocol — the service decides, a 500 by default).
type Problem func(w http.ResponseWriter, r *http.Request, status int, err error)

// Handler runs idempotent writes through Guard and answers them. Its zero settings are those
// of a service with one scope of keys, problem documents of DefaultProblem and a Retry-After
// of one second; a service sets its own once and hands the Handler to its handlers.
type Handler struct {
	// Guard runs each write once.
	Guard *idempotent.Guard
	// Scope says whose keys a request's are — "user:42" for the authenticated user — so that
	// two callers' equal keys never meet. An error refuses the request: Key returns it, and
	// Reject writes it through Problem with status 0, so that the service answers it as its
	// own (a 401 when nobody is authenticated). Nil puts every key in one scope, "".
	Scope func(r *http.Request) (string, error)
	// Problem writes refusals and failures; nil writes DefaultProblem.
	Problem Problem
	// Stored renders an error the work returned — a business refusal such as out of stock —
	// as the answer to store with the key and replay to every copy, with what it knows of r
	// (its path, its request id); ok=false stores nothing and the error is written through
	// Problem. It is the Reject of every Request the Handler builds. Nil leaves the choice to
	// the guard's Config.Reject.
	Stored func(r *http.Request, err error) (resp idempotent.Response, ok bool)
	// RetryAfter is the Retry-After of every 503 the Handler writes — the guard's refusals, a
	// lost lease, a work that answered 503 itself — in whole seconds, rounded up: long enough
	// for the dependency that failed to come back. Zero is one second. A 409
	// idempotency_key_in_use always says 1: the copy in flight ends soon.
	RetryAfter time.Duration
}

// Key reads r's Idempotency-Key (the package's Key) in the scope Scope gives r.
func (h Handler) Key(r *http.Request) (idempotent.Key, error) {
	var scope string
	if h.Scope != nil {
		var err error
		if scope, err = h.Scope(r); err != nil {
			return idempotent.Key{}, err
		}
	}
	return Key(r, scope)
}

// Request is the guard's Request for r under key: the fingerprint of the method, the path —
// not the route pattern: one key on /orders/1/cancel and /orders/2/cancel is two requests —
// and body, an empty body being {}; the work's errors rendered by Stored. A handler that
// gives its request phases (Before, After) runs it with Run.
func (h Handler) Request(r *http.Request, key idempotent.Key, body []byte) idempotent.Request {
	if len(body) == 0 {
		body = []byte("{}")
	}
	req := idempotent.Request{Key: key, Fingerprint: idempotent.Fingerprint(r.Method, r.URL.Path, body), Via: "http"}
	if h.Stored != nil {
		req.Reject = func(_ context.Context, err error) (idempotent.Response, bool) { return h.Stored(r, err) }
	}
	return req
}

// Do runs work once for key and writes the answer: the fresh or stored response, or the
// refusal (400, 409 with Retry-After, 422, 503 with Retry-After) through Problem.
func (h Handler) Do(w http.ResponseWriter, r *http.Request, key idempotent.Key, body []byte, work idempotent.Work) (idempotent.Result, error) {
	return h.Run(w, r, h.Request(r, key, body), work)
}

// Run runs req, built with Request, through the guard and writes the answer as Do does.
func (h Handler) Run(w http.ResponseWriter, r *http.Request, req idempotent.Request, work idempotent.Work) (idempotent.Result, error) {
	res, err := h.Guard.Do(r.Context(), req, work)
	h.Write(w, r, res, err)
	return res, err
}

// Write sends the answer of Guard.Do: the stored or fresh response with its outcome, or the
// refusal through Problem. Idempotency-Degraded names the layers that stepped aside, on
// every answer. Every 503 carries Retry-After, and so does a 409 idempotency_key_in_use.
func (h Handler) Write(w http.ResponseWriter, r *http.Request, res idempotent.Result, err error) {
	hdr := w.Header()
	if len(res.Degraded) > 0 {
		hdr.Set(HeaderDegraded, strings.Join(res.Degraded, ", "))
	}
	if err != nil {
		outcome := res.Outcome
		if outcome == "" {
			outcome = idempotent.Failed
		}
		hdr.Set(HeaderOutcome, string(outcome))
		h.refuse(w, r, err)
		return
	}
	for k, v := range res.Response.Header {
		hdr.Set(k, v)
	}
	switch stored, ok := res.Response.Header[HeaderOutcome]; {
	case res.Outcome == idempotent.Replayed:
		hdr.Set(HeaderReplayed, "true")
		hdr.Set(HeaderOutcome, string(idempotent.Replayed))
	case ok:
		hdr.Set(HeaderOutcome, stored)
	default:
		hdr.Set(HeaderOutcome, string(res.Outcome))
	}
	if res.Response.Status == http.StatusServiceUnavailable && hdr.Get(HeaderRetryAfter) == "" {
		// A work that answered 503 itself (nothing is stored for it) tells the client when to
		// retry, like every other 503.
		hdr.Set(HeaderRetryAfter, h.retryAfter())
	}
	w.WriteHeader(res.Response.Status)
	_, _ = w.Write(res.Response.Body)
}

// Reject answers a request refused before the guard ran — a key missing or malformed, a
// body that does not decode — through Problem, with Idempotency-Outcome: rejected. Nothing
// is stored, so a corrected retry with the same key runs.
func (h Handler) Reject(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set(HeaderOutcome, string(idempotent.Rejected))
	h.refuse(w, r, err)
}

// refuse writes err through Problem with its status and, for a 409 in progress or a 503, its
// Retry-After.
func (h Handler) refuse(w http.ResponseWriter, r *http.Request, err error) {
	status := Status(err)
	switch {
	case errors.Is(err, idempotent.ErrKeyInUse):
		w.Header().Set(HeaderRetryAfter, "1")
	case status == http.StatusServiceUnavailable:
		w.Header().Set(HeaderRetryAfter, h.retryAfter())
	}
	problem := h.Problem
	if problem == nil {
		problem = DefaultProblem
	}
	problem(w, r, status, err)
}

// retryAfter is RetryAfter in whole seconds, at least one.
func (h Handler) retryAfter() string {
	return strconv.FormatInt(max(1, int64((h.RetryAfter+time.Second-1)/time.Second)), 10)
}

// DefaultProblem writes an application/problem+json document (RFC 9457) with the refusal's
// code; a lost lease is 503 unavailable; an error that is not a refusal of the protocol is a
// 500 whose detail says nothing of it.
func DefaultProblem(w http.ResponseWriter, _ *http.Request, status int, err error) {
	code, detail := "internal", "an unexpected error occurred"
	var e *idempotent.Error
	switch {
	case errors.Is(err, idempotent.ErrLockLost):
		code, detail = idempotent.ErrUnavailable.Code, "the request lost its idempotency lock before it could finish; nothing was applied; retry with the same key"
	case status != 0 && errors.As(err, &e):
		code, detail = e.Code, e.Detail
	case status == 0:
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "code": code, "detail": detail})
}
