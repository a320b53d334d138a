package idem

import (
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
)

// Specification is the IETF draft the policy follows.
const Specification = "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"

// Policy is the published idempotency policy: what a client may rely on when it sends an
// Idempotency-Key. The draft asks a server to publish it, expiry included; every field here
// is something the code enforces, and the values come from the running configuration.
type Policy struct {
	// Specification is the URL of the IETF draft the policy follows.
	Specification string `json:"specification"`
	// Header is the request header that carries the key.
	Header string `json:"header"`
	// RequiredOn lists the routes that refuse a request without the header.
	RequiredOn []string `json:"required_on"`
	// Key is the format a key must have.
	Key KeyFormat `json:"key"`
	// Scope says whose key it is.
	Scope ScopePolicy `json:"scope"`
	// Retention is how long a key is remembered.
	Retention Retention `json:"retention"`
	// Fingerprint says what "the same request" means.
	Fingerprint FingerprintPolicy `json:"fingerprint"`
	// Stored says which answers are stored with the key and replayed.
	Stored StoredPolicy `json:"stored"`
	// Replay says how a replayed answer is marked.
	Replay ReplayPolicy `json:"replay"`
	// Errors are the refusals of the protocol, by situation.
	Errors map[string]ErrorPolicy `json:"errors"`
	// Tokens is the one-time token endpoint for forms.
	Tokens TokenPolicy `json:"tokens"`
	// OutcomeHeader is the response header that says how the layers answered.
	OutcomeHeader string `json:"outcome_header"`
	// Outcomes are the values of OutcomeHeader, each with what it means.
	Outcomes map[string]string `json:"outcomes"`
	// Reports says how the channels' reports are keyed: by the channel's own number, not a
	// header.
	Reports ReportPolicy `json:"reports"`
}

// ReportPolicy is how a payment channel's reports are made idempotent.
type ReportPolicy struct {
	Routes      []string `json:"routes"`
	Key         string   `json:"key"`
	Signature   string   `json:"signature"`
	Stored      string   `json:"stored"`
	Description string   `json:"description"`
}

// KeyFormat is the format of a key.
type KeyFormat struct {
	MinLength   int    `json:"min_length"`
	MaxLength   int    `json:"max_length"`
	Characters  string `json:"characters"`
	Pattern     string `json:"pattern"`
	Comparison  string `json:"comparison"`
	Recommended string `json:"recommended"`
}

// ScopePolicy says whose key it is.
type ScopePolicy struct {
	Per         string `json:"per"`
	Description string `json:"description"`
}

// Retention is how long a key is remembered.
type Retention struct {
	// Duration is the configured dedup retention (ONCEPAY_DEDUP_RETENTION), Go syntax.
	Duration string `json:"duration"`
	Seconds  int64  `json:"seconds"`
	// Description says what happens after it.
	Description string `json:"description"`
}

// FingerprintPolicy says what "the same request" means.
type FingerprintPolicy struct {
	Fields      []string `json:"fields"`
	Algorithm   string   `json:"algorithm"`
	Description string   `json:"description"`
}

// StoredPolicy says which answers are stored and replayed, and what of them.
type StoredPolicy struct {
	Statuses      string   `json:"statuses"`
	NeverStored   []string `json:"never_stored"`
	Parts         []string `json:"parts"`
	Headers       []string `json:"headers"`
	NotStoredNote string   `json:"not_stored_note"`
}

// ReplayPolicy says how a replayed answer is marked.
type ReplayPolicy struct {
	Header      string `json:"header"`
	Value       string `json:"value"`
	Description string `json:"description"`
}

// ErrorPolicy is the answer to one refusal.
type ErrorPolicy struct {
	Status      int    `json:"status"`
	Code        string `json:"code"`
	RetryAfter  bool   `json:"retry_after,omitempty"`
	Description string `json:"description"`
}

// TokenPolicy is the one-time token endpoint.
type TokenPolicy struct {
	Endpoint    string `json:"endpoint"`
	Prefix      string `json:"prefix"`
	TTL         string `json:"ttl"`
	Description string `json:"description"`
}

// PolicyOf builds the published policy from the guard's effective settings and the routes
// that require a key.
func PolicyOf(p idempotent.Policy, requiredOn []string) Policy {
	return Policy{
		Specification: Specification,
		Header:        httpkey.HeaderKey,
		RequiredOn:    append([]string{}, requiredOn...),
		Key: KeyFormat{
			MinLength:   1,
			MaxLength:   255,
			Characters:  "visible ASCII, 0x21..0x7E (no spaces, no control characters)",
			Pattern:     `^[\x21-\x7E]{1,255}$`,
			Comparison:  "byte for byte: CaseKey and casekey are two keys",
			Recommended: "a UUID (v4 or v7) per write, or a one-time token from the tokens endpoint",
		},
		Scope: ScopePolicy{
			Per: "user",
			Description: "A key belongs to the authenticated user: another user's identical key is independent. " +
				"Within one user, a key names one write whatever the endpoint: the same key on another endpoint, " +
				"or with another method or body, is refused (422), never run as a second write.",
		},
		Retention: Retention{
			Duration: p.Retention.String(),
			Seconds:  int64(p.Retention / time.Second),
			Description: "A key and its stored answer are kept at least this long after the first request; " +
				"after it they may be purged, and a request reusing the key is then processed as a new one.",
		},
		Fingerprint: FingerprintPolicy{
			Fields:    []string{"method", "path", "body"},
			Algorithm: "SHA-256",
			Description: "The HTTP method, the request path (not the route pattern) and the canonical form of the JSON body: " +
				"object keys sorted, insignificant whitespace dropped, numbers as written. Headers and the query string are not part of it.",
		},
		Stored: StoredPolicy{
			Statuses:    "2xx, and 4xx that are deterministic refusals (400, 404, 409, 422 …)",
			NeverStored: []string{"401", "403", "408", "429", "5xx"},
			Parts:       []string{"status", "headers", "body"},
			Headers:     p.ReplayedHeaders,
			NotStoredNote: "An answer that is not stored (an error about the caller or the moment, a server error, a rolled-back attempt) " +
				"leaves the key free: a retry with the same key runs again.",
		},
		Replay: ReplayPolicy{
			Header: httpkey.HeaderReplayed,
			Value:  "true",
			Description: "A request with a key whose first request finished gets the stored status, headers and body again, " +
				"with this header; the write does not run again.",
		},
		Errors: map[string]ErrorPolicy{
			"missing":     {Status: 400, Code: "idempotency_key_missing", Description: "the endpoint requires the header and it is absent"},
			"malformed":   {Status: 400, Code: "idempotency_key_invalid", Description: "empty, longer than 255 characters, not visible ASCII, or the header repeated"},
			"token":       {Status: 400, Code: "idempotency_token_invalid", Description: "a key starting with tok_ that is not a live token issued to this user"},
			"in_progress": {Status: 409, Code: "idempotency_key_in_use", RetryAfter: true, Description: "the first request with this key is still calling the payment channel under the key's lease (cancel, open a payment, refund); retry after Retry-After seconds. A copy of any other write waits for the first and gets its answer"},
			"reused":      {Status: 422, Code: "idempotency_key_reused", Description: "the key was used before with another method, path or body"},
		},
		Tokens: TokenPolicy{
			Endpoint: "POST /v1/idempotency-tokens",
			Prefix:   "tok_",
			TTL:      p.TokenTTL.String(),
			Description: "A one-time token bound to the caller, to send as the Idempotency-Key of the one form submission " +
				"it was issued for; a second submission with it gets the first one's answer.",
		},
		OutcomeHeader: httpkey.HeaderOutcome,
		Outcomes: map[string]string{
			string(idempotent.Executed):      "this request ran the write (or its refusal) and its answer is stored",
			string(idempotent.Replayed):      "the stored answer of the key's first request, sent again; the write did not run",
			string(idempotent.InProgress):    "the key's first request is still running: 409, retry after Retry-After",
			string(idempotent.Mismatch):      "the key was used before with another method, path or body: 422",
			string(idempotent.TokenInvalid):  "a tok_ key that is not a live token of this user: 400",
			string(idempotent.StateRejected): "the state had moved on (an order already paid, cancelled…): the answer says so and nothing changed",
			string(idempotent.Rejected):      "refused with nothing stored: before the key was claimed (authentication, a malformed body, a missing key), or a channel report the work turned away (a corrected copy runs)",
			string(idempotent.Unavailable):   "a dependency the write needs is unavailable (503): nothing stored, retry with the same key",
			string(idempotent.Failed):        "the attempt failed before it could answer (a database error, a lost lease): nothing stored, retry with the same key",
		},
		Reports: ReportPolicy{
			Routes: []string{"POST /v1/payments/notify", "POST /v1/recharges/notify", "POST /v1/refunds/notify", "Kafka payment.notifications"},
			Key: "the channel's own number: channel + trade_no (one key whether it pays an order or a recharge) or channel + refund_no; " +
				"a status other than SUCCESS is keyed apart",
			Signature: "X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<kind>.<body>\">, kind trade, recharge or refund",
			Stored:    "only success answers; a report refused by the work (amount mismatch, unknown number, a number another owner holds) stores nothing",
			Description: "Every copy of a report, whatever path it takes, converges on one key; the number is claimed by its owner for good, " +
				"so that a copy redelivered after its record was purged is still a duplicate.",
		},
	}
}
