// Package apperr defines the errors a client may see: each carries the HTTP status and the
// stable `code` of the contract. Domain packages declare their sentinels with New; the web
// layer turns any error into a problem response through one function (web.WriteError), and
// anything that is not an *Error becomes a logged 500 that reveals nothing.
package apperr

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a client-facing error with a stable code.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the contract's stable error code, e.g. "out_of_stock".
	Code string
	// Detail is a human-readable explanation safe to show the client.
	Detail string
}

// New returns a sentinel error with the given status, code and detail.
func New(status int, code, detail string) *Error {
	return &Error{Status: status, Code: code, Detail: detail}
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

// Is makes errors.Is match two errors with the same code, so that a sentinel matches the
// copies that carry a more specific detail.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Withf returns a copy of e whose detail is formatted from format and args.
func (e *Error) Withf(format string, args ...any) *Error {
	return &Error{Status: e.Status, Code: e.Code, Detail: fmt.Sprintf(format, args...)}
}

// As returns the *Error inside err, if any.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// The contract's codes that do not belong to one domain.
var (
	// ErrInvalidRequest is bad JSON, an unknown field or a value out of range.
	ErrInvalidRequest = New(http.StatusBadRequest, "invalid_request", "the request is malformed")
	// ErrUnauthorized is a missing or unknown API key.
	ErrUnauthorized = New(http.StatusUnauthorized, "unauthorized", "a valid API key is required: Authorization: Bearer <key>")
	// ErrInvalidSignature is a notification whose X-Signature does not match its body.
	ErrInvalidSignature = New(http.StatusUnauthorized, "invalid_signature", "X-Signature does not match the body")
	// ErrForbidden is a valid key that may not use this route.
	ErrForbidden = New(http.StatusForbidden, "forbidden", "this key may not use this route")
	// ErrNotFound is an unknown resource, or one that belongs to another user.
	ErrNotFound = New(http.StatusNotFound, "not_found", "no such resource")
	// ErrEffectCommitted is an operator's request to forget a stored outcome whose effect
	// committed (a 2xx): forgetting it would let the next attempt do the write again.
	ErrEffectCommitted = New(http.StatusConflict, "effect_committed", "the stored outcome is a success whose effect committed; it cannot be evicted")
	// ErrMethodNotAllowed is a known route with another method.
	ErrMethodNotAllowed = New(http.StatusMethodNotAllowed, "method_not_allowed", "this route does not accept this method")
	// ErrPreconditionFailed is a conditional request (If-Match) whose condition no longer
	// holds: the resource changed since the version the client read.
	ErrPreconditionFailed = New(http.StatusPreconditionFailed, "precondition_failed", "the resource changed since the version in If-Match; read it again")
	// ErrRequestTimeout is a body that did not arrive within the server's read timeout.
	ErrRequestTimeout = New(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive within the read timeout; send it again")
	// ErrPayloadTooLarge is a body over the 1 MiB limit.
	ErrPayloadTooLarge = New(http.StatusRequestEntityTooLarge, "payload_too_large", "the body is larger than 1 MiB")
	// ErrUnavailable is a dependency that cannot serve the request right now.
	ErrUnavailable = New(http.StatusServiceUnavailable, "unavailable", "a dependency is unavailable; retry later")
	// ErrInternal is any unexpected failure; its cause is logged, never sent.
	ErrInternal = New(http.StatusInternalServerError, "internal", "an unexpected error occurred; it has been logged")
)
