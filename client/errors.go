package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Problem is an error answer of oncepay: an RFC 9457 problem document with the contract's
// stable Code (docs/contract.md, Error codes). A refusal of the work — out_of_stock,
// illegal_state, unknown_sku — is stored under the key and replayed to every later attempt;
// Meta.Replayed says so.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// Meta is what the answer said about its key, and how many attempts the call took.
	Meta Meta `json:"-"`
}

// Error renders the problem on one line.
func (p *Problem) Error() string {
	s := fmt.Sprintf("oncepay answered %d", p.Status)
	if p.Code != "" {
		s += " " + p.Code
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	} else if p.Title != "" {
		s += ": " + p.Title
	}
	return s
}

// The codes a client decides on (docs/contract.md); compare them with Problem.Code or IsCode.
const (
	CodeKeyInUse    = "idempotency_key_in_use"
	CodeKeyReused   = "idempotency_key_reused"
	CodeUnavailable = "unavailable"
)

// IsCode reports whether err is, or wraps, a Problem with code.
func IsCode(err error, code string) bool {
	var p *Problem
	return errors.As(err, &p) && p.Code == code
}

// retryable reports whether the contract says the same key may settle later: a 5xx stored
// nothing; 408 and 429 are about the moment and are never stored; 409 idempotency_key_in_use
// means a copy of this very write is running now. Every other 4xx is the answer.
func (p *Problem) retryable() bool {
	switch {
	case p.Status >= 500, p.Status == http.StatusRequestTimeout, p.Status == http.StatusTooManyRequests:
		return true
	case p.Status == http.StatusConflict:
		return p.Code == CodeKeyInUse
	}
	return false
}

// problemOf decodes an error answer; a body that is no problem document still gives a
// Problem with the status.
func problemOf(r *Response) *Problem {
	p := &Problem{}
	if ct := r.Header.Get("Content-Type"); strings.Contains(ct, "json") {
		_ = json.Unmarshal(r.Body, p)
	}
	p.Status = r.Status
	if p.Title == "" {
		p.Title = http.StatusText(r.Status)
	}
	p.Meta = r.Meta
	return p
}

// ErrIndefinite is what every *IndefiniteError is (errors.Is).
var ErrIndefinite = errors.New("no final answer")

// IndefiniteError is a call that ended without a final answer: every attempt was lost, timed
// out, or met a 5xx or a copy in flight, until the deadline, MaxAttempts or the caller's
// context ended it. The write may have happened or not. Do not send it again under a new key
// (I18): send it again later WithKey(Key) and the same body, and oncepay answers with what
// happened.
type IndefiniteError struct {
	// Key is the write's Idempotency-Key; empty for a read.
	Key          string
	Method, Path string
	// Attempts is how many attempts were made.
	Attempts int
	// Last is why the last attempt did not settle the call: a transport error or a *Problem.
	Last error
	// Cause is the context's error when it ended the call (the deadline, or the caller's).
	Cause error
}

// Error says what is unknown and what to do.
func (e *IndefiniteError) Error() string {
	s := fmt.Sprintf("client: %s %s: no final answer after %d attempt(s)", e.Method, e.Path, e.Attempts)
	if e.Cause != nil {
		s += " (" + e.Cause.Error() + ")"
	}
	if e.Last != nil {
		s += ": last: " + e.Last.Error()
	}
	if e.Key != "" {
		s += "; the write may have happened: retry with Idempotency-Key " + e.Key
	}
	return s
}

// Is makes errors.Is(err, ErrIndefinite) true.
func (e *IndefiniteError) Is(target error) bool { return target == ErrIndefinite }

// Unwrap returns the last attempt's error and the context's.
func (e *IndefiniteError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Last, e.Cause} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
