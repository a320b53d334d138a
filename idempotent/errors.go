package idempotent

import "errors"

// Error is a refusal of the idempotency protocol, with the stable code a client sees. The
// package knows no transport: an adapter (the kit's net/http one is idempotent/httpkey) maps
// each code to its status, e.g. 409 for idempotency_key_in_use.
type Error struct {
	// Code is the stable code of the contract, e.g. "idempotency_key_in_use".
	Code string
	// Detail is a sentence safe to show the client.
	Detail string
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

// Is makes errors.Is match two errors with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// The refusals of the Idempotency-Key table (docs/contract.md).
var (
	// ErrKeyInUse: another attempt with this key is running; retry later.
	ErrKeyInUse = &Error{Code: "idempotency_key_in_use", Detail: "a request with this key is still being processed; retry later"}
	// ErrKeyReused: the key was used before with another request.
	ErrKeyReused = &Error{Code: "idempotency_key_reused", Detail: "this key was used with a different request (method, path or body)"}
	// ErrTokenInvalid: a tok_ key that is not a live token of this scope.
	ErrTokenInvalid = &Error{Code: "idempotency_token_invalid", Detail: "the tok_ key is not a live token issued to this user; get one from the service's token endpoint"}
	// ErrUnavailable: a store the attempt needs is not serving it now; nothing was stored,
	// retry later. Redis is unreachable and the guard was told to reject without it, or the
	// database kept aborting the attempt's transaction (errDatabaseBusy, whose code it is).
	ErrUnavailable = &Error{Code: "unavailable", Detail: "redis is unavailable; retry later"}
	// errDatabaseBusy: the database kept aborting the attempt's transaction (deadlocks,
	// Galera certification conflicts on a hot row) or refusing it (a node not ready) for
	// Config.RetryFor, or a statement waited out the lock wait timeout; nothing was stored,
	// retry later. Its code is ErrUnavailable's, so errors.Is(err, ErrUnavailable) matches it.
	errDatabaseBusy = &Error{Code: "unavailable", Detail: "the database kept aborting this request's transaction (conflicting writes) or is not ready; nothing was stored; retry later with the same key"}
)

// ErrLockLost is the cause of a work context cancelled because the lease could not be
// renewed (I4): a lock we cannot prove we hold protects nothing.
var ErrLockLost = errors.New("idempotency lock lost: renewal failed")

// errLockBusy means another attempt holds the lock of the key.
var errLockBusy = errors.New("lock busy")

// ErrStale is returned (wrapped or not) by a work whose plain read of the state was overtaken
// before its conditional write: the work decided its answer — and placed its record — from
// what it read, then found the state moved under it (a conditional UPDATE that changed no
// row). Nothing of the attempt may commit; the guard runs the whole transaction again, as it
// does one the database aborted (within Config.RetryFor), and the rerun reads the new state.
// It lets a work record its answer before it locks its contended rows.
var ErrStale = errors.New("idempotent: the state the work read moved before its write; run it again")
