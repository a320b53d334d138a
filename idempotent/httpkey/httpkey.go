// Package httpkey is the net/http side of the idempotency kit: it reads the Idempotency-Key
// header (the IETF httpapi draft's), fingerprints the request, runs its work once through an
// idempotent.Guard and writes the answer with the protocol's headers — Idempotency-Outcome,
// Idempotent-Replayed, Retry-After. It imports the kit's core and the standard library only;
// how a refusal is rendered is the service's (Handler.Problem), with a small
// application/problem+json default.
//
// A handler reads, top to bottom:
//
//	key, err := httpkey.Key(r, "user:"+userID) // 400 idempotency_key_missing / _invalid
//	body, err := io.ReadAll(r.Body)            // decode and validate: a bad body stores nothing
//	h.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
//		// the new rows, then the record of the answer, then the contended rows
//	})
package httpkey

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/oncepay/oncepay/idempotent"
)

// The headers of the protocol.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderOutcome  = "Idempotency-Outcome"
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderDegraded lists the idempotency layers that stepped aside for the attempt because
	// Redis could not be reached ("token, cache, lock"): with a token among them, the token
	// was accepted unchecked (ONCEPAY_REDIS_FAILURE_MODE=degrade). Absent when none did.
	HeaderDegraded = "Idempotency-Degraded"
)

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

// Request is the guard's Request for r under key: the fingerprint of the method, the path —
// not the route pattern: one key on /orders/1/cancel and /orders/2/cancel is two requests —
// and body, an empty body being {}.
func Request(r *http.Request, key idempotent.Key, body []byte) idempotent.Request {
	if len(body) == 0 {
		body = []byte("{}")
	}
	return idempotent.Request{Key: key, Fingerprint: idempotent.Fingerprint(r.Method, r.URL.Path, body), Via: "http"}
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

// Handler runs idempotent writes through Guard.
type Handler struct {
	Guard *idempotent.Guard
	// Problem renders refusals and failures; nil writes DefaultProblem.
	Problem Problem
}

// Do runs work once for key and writes the answer: the fresh or stored response, or the
// refusal (400, 409 with Retry-After, 422, 503 with Retry-After) through Problem.
func (h Handler) Do(w http.ResponseWriter, r *http.Request, key idempotent.Key, body []byte, work idempotent.Work) (idempotent.Result, error) {
	res, err := h.Guard.Do(r.Context(), Request(r, key, body), work)
	h.Write(w, r, res, err)
	return res, err
}

// Write sends the answer of Guard.Do.
func (h Handler) Write(w http.ResponseWriter, r *http.Request, res idempotent.Result, err error) {
	hdr := w.Header()
	if err != nil {
		outcome := res.Outcome
		if outcome == "" {
			outcome = idempotent.Failed
		}
		hdr.Set(HeaderOutcome, string(outcome))
		status := Status(err)
		if status == http.StatusConflict || status == http.StatusServiceUnavailable {
			hdr.Set("Retry-After", "1")
		}
		problem := h.Problem
		if problem == nil {
			problem = DefaultProblem
		}
		problem(w, r, status, err)
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
	w.WriteHeader(res.Response.Status)
	_, _ = w.Write(res.Response.Body)
}

// DefaultProblem writes an application/problem+json document (RFC 9457) with the refusal's
// code; an error that is not a refusal of the protocol is a 500 whose detail says nothing of
// it.
func DefaultProblem(w http.ResponseWriter, _ *http.Request, status int, err error) {
	code, detail := "internal", "an unexpected error occurred"
	var e *idempotent.Error
	if status != 0 && errors.As(err, &e) {
		code, detail = e.Code, e.Detail
	} else if status == 0 {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "code": code, "detail": detail})
}
