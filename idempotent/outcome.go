package idempotent

import (
	"net/http"
)

// Outcome says how a request was answered; it is sent as the Idempotency-Outcome header so
// that drills and people can tell which layer answered.
type Outcome string

// The outcomes of the contract, plus the ones for requests refused before any layer ran.
const (
	// Executed: the work ran now.
	Executed Outcome = "executed"
	// Replayed: an earlier outcome was sent again; the work did not run.
	Replayed Outcome = "replayed"
	// InProgress: another attempt with this key is running; retry later.
	InProgress Outcome = "in_progress"
	// Mismatch: the key was used before with another request.
	Mismatch Outcome = "mismatch"
	// TokenInvalid: a tok_ key that is not a live token of this user.
	TokenInvalid Outcome = "token_invalid"
	// StateRejected: a state precondition turned the request away (the domain sets it).
	StateRejected Outcome = "state_rejected"
	// Rejected: the request was refused and nothing was stored for it — before any layer ran
	// (missing or malformed key, unreadable body), or by a work whose refusals are not stored
	// (a channel report with an amount that does not match): a corrected copy runs.
	Rejected Outcome = "rejected"
	// Unavailable: Redis is down and the guard rejects without it (Config.RejectWithoutRedis),
	// or the request has work outside its transaction (Request.Before), which must run under
	// a lease that Redis cannot give now.
	Unavailable Outcome = "unavailable"
	// Failed: the attempt failed before it could answer (a database error, a lost lock);
	// it was rolled back, nothing was stored, and a retry runs again.
	Failed Outcome = "failed"
)

// The layers that answer an attempt (Result.Layer, Result.Degraded), cheapest first, and
// the work itself.
const (
	layerToken   = "token"
	layerCache   = "cache"
	layerLock    = "lock"
	layerDedup   = "dedup"
	layerMessage = "message"
	layerWork    = "work"
)

// Response is what the work answered: a status, the allow-listed headers and the body. It is
// what the dedup record and the replay cache store.
type Response struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header,omitempty"`
	Body   []byte            `json:"body,omitempty"`
}

// replayedHeaders are the response headers stored with an outcome and sent again on replay
// (Guard.Policy().ReplayedHeaders): the first answer carries every header the work set, a
// replay these only (replayable), so that what a server publishes as replayed is what is.
var replayedHeaders = []string{"Content-Type", "Location"}

// replayable is r as it is stored for replay: its headers cut to replayedHeaders, matched
// whatever their case.
func (r Response) replayable() Response {
	var kept map[string]string
	for name, v := range r.Header {
		for _, h := range replayedHeaders {
			if http.CanonicalHeaderKey(name) == h {
				if kept == nil {
					kept = make(map[string]string, len(replayedHeaders))
				}
				kept[h] = v
			}
		}
	}
	r.Header = kept
	return r
}

// Result is the answer of Guard.Do.
type Result struct {
	Response Response
	Outcome  Outcome
	// Layer names the defense that answered, for metrics and logs: "token", "cache", "lock"
	// (the lease), "dedup" (the record), "message" (a consumer's marker) or "work" (the work
	// ran).
	Layer string
	// Rejection is the work's error behind an executed, stored business refusal (see
	// Config.Reject), so that the caller can tell a refusal from a success.
	Rejection error
	// Degraded names the Redis layers that stepped aside for this attempt because Redis could
	// not be reached (Config.RejectWithoutRedis off): "token" (a tok_ key accepted without
	// checking that it is live), "cache", "lock". The dedup record still held.
	Degraded []string
}

// storable reports whether an outcome with this status is stored for replay (see the
// package documentation for the rule and its reasons).
func storable(status int) bool {
	switch {
	case status >= 200 && status < 300:
		return true
	case status == http.StatusUnauthorized, status == http.StatusForbidden,
		status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return false
	case status >= 400 && status < 500:
		return true
	default:
		return false
	}
}
