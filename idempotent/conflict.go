package idempotent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/oncepay/oncepay/idempotent/dberr"
)

// Conflict marks err, returned by a work, as a deterministic refusal of the business: the
// work's own unique key refused the write ("one coupon per user per campaign"), or a
// precondition it checked does not hold. The guard rolls the work's transaction back and
// stores a 409 for the key alone, so that every copy of the request is answered that 409
// again, byte for byte, instead of a 500 that a retry runs again (and that stores nothing).
//
// The 409 is a problem document (RFC 9457, application/problem+json) with code "conflict"
// and a generic detail — never err's text, which may hold a driver's message — or, when err
// is or wraps an *Error, that error's Code and Detail. ExampleConflict runs it:
//
//	if err := tx.Create(&claim{User: "42", Campaign: "spring"}).Error; err != nil {
//		if sqliteerr.Classify(err) == dberr.DuplicateKey { // mysqlerr, pgerr
//			return idempotent.Response{}, idempotent.Conflict(errors.Join(errAlreadyClaimed, err))
//		}
//		return idempotent.Response{}, err
//	}
//
// Wrap only errors that are refusals: a duplicate key of the work's own unique index, a
// precondition that failed. A database error Config.Classify calls transient (an aborted
// transaction, a lock wait timeout, a lost connection) is never stored, even marked. A
// Config.Reject or Request.Reject that renders the error is asked first; Conflict's 409 is
// what the guard stores when none does. A copy of the same key that committed first wins:
// its outcome is answered instead (the record's unique key decides, as for every answer).
func Conflict(err error) error {
	if err == nil {
		return nil
	}
	return &conflictError{err: err}
}

// conflictError is an error marked by Conflict.
type conflictError struct{ err error }

func (c *conflictError) Error() string { return "conflict: " + c.err.Error() }
func (c *conflictError) Unwrap() error { return c.err }

// conflictCode and conflictDetail answer a Conflict whose error carries no *Error.
const (
	conflictCode   = "conflict"
	conflictDetail = "the request conflicts with the current state of the resource"
)

// conflictResponse renders err as the 409 to store when the work marked it with Conflict
// and the database did not call it transient.
func (g *Guard) conflictResponse(_ context.Context, err error) (Response, bool) {
	var c *conflictError
	if !errors.As(err, &c) {
		return Response{}, false
	}
	switch g.cfg.Classify(err) {
	case dberr.Aborted, dberr.LockWait, dberr.Unavailable, dberr.ConnectionLost:
		return Response{}, false
	}
	code, detail := conflictCode, conflictDetail
	var e *Error
	if errors.As(c.err, &e) {
		code, detail = e.Code, e.Detail
	}
	body, _ := json.Marshal(map[string]any{"status": http.StatusConflict, "code": code, "detail": detail})
	return Response{
		Status: http.StatusConflict,
		Header: map[string]string{"Content-Type": "application/problem+json"},
		Body:   append(body, '\n'),
	}, true
}
