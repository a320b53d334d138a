package idem

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemops"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// maxScopeMatches bounds the records a biz selector without scope reads to tell one match
// from several.
const maxScopeMatches = 10

// API serves the service's own routes of the idempotency layer over HTTP: the published
// policy (GET /v1/idempotency-policy, public, as the IETF Idempotency-Key draft asks of
// servers), the one-time tokens of forms (POST /v1/idempotency-tokens) and the admin routes
// that look up a key's dedup record and evict a stored client error so that the next attempt
// runs again (GET and DELETE /v1/admin/idempotency-records).
//
// A record is named by one of two selectors:
//
//	?user_id=<id>&key=<Idempotency-Key>          a client's key (scope user:<id>)
//	?biz_type=<type>&biz_key=<key>[&scope=<s>]   any record, e.g. a payment notification:
//	                                             biz_type=channel.trade, biz_key=<trade_no>,
//	                                             scope=channel:<channel>
//
// Without scope, the biz selector must match exactly one record.
type API struct {
	guard *idempotent.Guard
	// policy is the published policy's document, built at its first request: by then every
	// route is mounted and the marks that say which require a key are read.
	policy    func() []byte
	lookups   *prometheus.CounterVec
	evictions *prometheus.CounterVec
}

// NewAPI returns the API of guard. The policy lists as requiring an Idempotency-Key the
// routes marks says do (Marks.KeyRequired), once they are collected; reg receives the lookup
// and eviction counters (nil registers nothing).
func NewAPI(guard *idempotent.Guard, marks *Marks, reg prometheus.Registerer) *API {
	h := &API{
		guard: guard,
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_idempotency_admin_lookups_total",
			Help: "Operator lookups of idempotency records by result (found, not_found, invalid, error).",
		}, []string{"result"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_idempotency_admin_evictions_total",
			Help: "Operator evictions of stored idempotency outcomes by result (evicted, effect_committed, in_progress, not_found, invalid, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(h.lookups, h.evictions)
	}
	h.policy = sync.OnceValue(func() []byte {
		doc, _ := json.MarshalIndent(PolicyOf(guard.Policy(), marks.KeyRequired()), "", "  ")
		return append(doc, '\n')
	})
	return h
}

// PolicyHandler serves GET /v1/idempotency-policy: the published policy, the same for every
// caller, cacheable.
func (h *API) PolicyHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(h.policy())
}

// TokenHandler serves POST /v1/idempotency-tokens: a one-time token bound to the caller (I7),
// to be sent back as the Idempotency-Key of the form it was issued for. Issuing cannot step
// around Redis: without it the answer is 503 in either failure mode.
func (h *API) TokenHandler(w http.ResponseWriter, r *http.Request) {
	who, ok := web.UserScope(r)
	if !ok {
		web.WriteError(w, r, apperr.ErrUnauthorized)
		return
	}
	token, expires, err := h.guard.IssueToken(r.Context(), who)
	if err != nil {
		web.WriteError(w, r, apperr.ErrUnavailable.Withf("redis is unavailable: cannot issue a token"))
		return
	}
	web.WriteJSON(w, http.StatusCreated, map[string]string{
		"token":      token,
		"expires_at": expires.Format(time.RFC3339),
	})
}

// RecordView is an idempotency record as the admin routes show it. The stored body is not
// shown: it may carry a user's data; its problem code, for a stored refusal, is.
type RecordView struct {
	Scope   string `json:"scope"`
	BizType string `json:"biz_type"`
	BizKey  string `json:"biz_key"`
	// UserID is the user of a client key (scope user:<id>), absent otherwise.
	UserID string `json:"user_id,omitempty"`
	// Status is the record's own status: COMPLETED, or PROCESSING while its first attempt runs.
	Status string `json:"status"`
	// Outcome says what is stored: success (2xx, its effect committed), client_error (a 4xx
	// replayed to every retry, evictable) or in_progress (nothing stored yet).
	Outcome string `json:"outcome"`
	// ResponseStatus is the stored HTTP status, 0 while in progress.
	ResponseStatus int `json:"response_status"`
	// ResponseCode is the problem code of a stored refusal ("out_of_stock"), if any.
	ResponseCode string `json:"response_code,omitempty"`
	// Evictable says whether DELETE would evict the record.
	Evictable   bool   `json:"evictable"`
	Fingerprint string `json:"fingerprint"`
	RequestID   string `json:"request_id"`
	// CreatedAt, UpdatedAt and ExpiresAt are the record's; absent for a key in progress
	// whose record is not written yet.
	CreatedAt *time.Time `json:"created_at,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Attempts are the answered attempts at the key, oldest first, from the guard's attempt
	// log (idemops.Attempts): request id, path (http, kafka), outcome, layer and
	// timing of each, so that a person can tell a retry (one request id again, seconds
	// apart) from concurrency (several request ids, milliseconds apart).
	Attempts []idemops.Attempt `json:"attempts"`
	// Evicted is true in the answer of a DELETE that evicted the record.
	Evicted bool `json:"evicted,omitempty"`
	// LeaseRemainingMS is, for a key in progress with no record yet, how long its holder's
	// lease runs unless its watchdog renews it.
	LeaseRemainingMS int64 `json:"lease_remaining_ms,omitempty"`
}

// The outcomes a RecordView names.
const (
	OutcomeSuccess     = "success"
	OutcomeClientError = "client_error"
	OutcomeInProgress  = "in_progress"
)

// The statuses of a dedup record (idempotent.Record.Status): committed, and in progress
// (a lease held, no record yet, or a record inserted first by idemlab's RecordFirst).
const (
	recordCompleted  = "COMPLETED"
	recordProcessing = "PROCESSING"
)

// ViewOf renders rec for the admin routes.
func ViewOf(rec idempotent.Record) RecordView {
	v := RecordView{
		Scope: rec.Scope, BizType: rec.BizType, BizKey: rec.BizKey,
		Status: rec.Status, ResponseStatus: rec.ResponseStatus,
		Fingerprint: rec.Fingerprint, RequestID: rec.RequestID,
	}
	if !rec.CreatedAt.IsZero() {
		c, u, e := rec.CreatedAt.UTC(), rec.UpdatedAt.UTC(), rec.ExpiresAt.UTC()
		v.CreatedAt, v.UpdatedAt, v.ExpiresAt = &c, &u, &e
	}
	if id, ok := strings.CutPrefix(rec.Scope, "user:"); ok && rec.BizType == httpkey.BizType {
		v.UserID = id
	}
	switch {
	case rec.Status != recordCompleted:
		v.Outcome = OutcomeInProgress
	case rec.ResponseStatus >= 400 && rec.ResponseStatus < 500:
		v.Outcome, v.Evictable = OutcomeClientError, true
		var p struct{ Code string }
		if json.Unmarshal(rec.ResponseBody, &p) == nil {
			v.ResponseCode = p.Code
		}
	default:
		v.Outcome = OutcomeSuccess
	}
	return v
}

// Lookup serves GET /v1/admin/idempotency-records: the record the selector names, or — for a
// key whose first attempt is still running, so that no record is committed yet — the key in
// progress, with the lease's remaining time and the attempts answered so far (409s). A key in
// flight is found by a full selector only (user_id and key, or biz_type, biz_key and scope).
func (h *API) Lookup(w http.ResponseWriter, r *http.Request) {
	var v RecordView
	rec, err := h.find(r)
	if err == nil {
		v = ViewOf(rec)
	} else if errors.Is(err, apperr.ErrNotFound) {
		v, err = h.inFlight(r, err)
	}
	h.lookups.WithLabelValues(resultOf(err, "found")).Inc()
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	v.Attempts, err = idemops.Attempts(r.Context(), h.guard, idempotent.Key{Scope: v.Scope, BizType: v.BizType, BizKey: v.BizKey})
	if err != nil {
		slog.WarnContext(r.Context(), "idempotency record lookup: the attempt log is unreadable", "err", err)
	}
	if v.Attempts == nil {
		v.Attempts = []idemops.Attempt{}
	}
	web.WriteJSON(w, http.StatusOK, v)
}

// Evict serves DELETE /v1/admin/idempotency-records: it forgets the stored 4xx outcome the
// selector names — record and replay cache — so that the next attempt with the key runs
// again. A stored success is refused with 409 effect_committed.
func (h *API) Evict(w http.ResponseWriter, r *http.Request) {
	rec, err := h.find(r)
	if err == nil {
		k := idempotent.Key{Scope: rec.Scope, BizType: rec.BizType, BizKey: rec.BizKey}
		rec, err = idemops.Evict(r.Context(), h.guard, k)
		err = adminErr(err, k)
	}
	h.evictions.WithLabelValues(resultOf(err, "evicted")).Inc()
	if err != nil {
		if errors.Is(err, idempotent.ErrKeyInUse) {
			w.Header().Set("Retry-After", "1")
		}
		web.WriteError(w, r, err)
		return
	}
	slog.WarnContext(r.Context(), "idempotency record evicted by an operator: the next attempt with its key runs again",
		"scope", rec.Scope, "biz_type", rec.BizType, "biz_key", rec.BizKey,
		"response_status", rec.ResponseStatus, "record_request_id", rec.RequestID)
	v := ViewOf(rec)
	v.Evicted = true
	web.WriteJSON(w, http.StatusOK, v)
}

// inFlight answers a lookup that found no record: the key in progress when an attempt holds
// its lease, or notFound.
func (h *API) inFlight(r *http.Request, notFound error) (RecordView, error) {
	sel, err := parseSelector(r.URL.Query())
	if err != nil || sel.Scope == "" {
		return RecordView{}, notFound
	}
	held, ttl, err := idemops.InFlight(r.Context(), h.guard, sel)
	if err != nil {
		slog.WarnContext(r.Context(), "idempotency record lookup: the lease is unreadable", "err", err)
	}
	if !held {
		return RecordView{}, notFound
	}
	v := ViewOf(idempotent.Record{Scope: sel.Scope, BizType: sel.BizType, BizKey: sel.BizKey, Status: recordProcessing})
	v.LeaseRemainingMS = max(ttl.Milliseconds(), 1)
	return v, nil
}

// find reads the selector of r and returns the committed record it names.
func (h *API) find(r *http.Request) (idempotent.Record, error) {
	sel, err := parseSelector(r.URL.Query())
	if err != nil {
		return idempotent.Record{}, err
	}
	if sel.Scope == "" {
		recs, err := idemops.LookupBizKey(r.Context(), h.guard, sel.BizType, sel.BizKey, maxScopeMatches)
		switch {
		case err != nil:
			return idempotent.Record{}, err
		case len(recs) == 0:
			return idempotent.Record{}, adminErr(idemops.ErrRecordNotFound, sel)
		case len(recs) > 1:
			scopes := make([]string, len(recs))
			for i, rec := range recs {
				scopes[i] = rec.Scope
			}
			return idempotent.Record{}, apperr.ErrInvalidRequest.Withf(
				"biz_type=%s and biz_key=%s name records in several scopes (%s): add scope=", sel.BizType, sel.BizKey, strings.Join(scopes, ", "))
		}
		return recs[0], nil
	}
	rec, found, err := h.guard.Lookup(r.Context(), sel)
	switch {
	case err != nil:
		return idempotent.Record{}, err
	case !found:
		return idempotent.Record{}, adminErr(idemops.ErrRecordNotFound, sel)
	}
	return rec, nil
}

// selectorParams are the query parameters the admin routes read.
var selectorParams = map[string]bool{"user_id": true, "key": true, "biz_type": true, "biz_key": true, "scope": true}

// parseSelector reads a record's key from the query: user_id and key (a client's
// Idempotency-Key), or biz_type and biz_key with an optional scope; never a mix of the two,
// never a parameter twice, nothing else. An empty Scope means "any scope".
func parseSelector(q url.Values) (idempotent.Key, error) {
	for name, values := range q {
		if !selectorParams[name] {
			return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("unknown query parameter %q: select a record with user_id and key, or biz_type and biz_key (and scope)", name)
		}
		if len(values) != 1 {
			return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("query parameter %q is given %d times", name, len(values))
		}
	}
	has := func(name string) bool { _, ok := q[name]; return ok }
	user := has("user_id") || has("key")
	biz := has("biz_type") || has("biz_key") || has("scope")
	switch {
	case user && biz:
		return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("user_id and key cannot be mixed with biz_type, biz_key or scope: use one selector")
	case user:
		id, ok := ids.Parse(q.Get("user_id"))
		if !ok {
			return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("user_id must be a user id, a positive decimal number without sign or leading zeros")
		}
		key := q.Get("key")
		if !idempotent.ValidKey(key) {
			return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("key must be an Idempotency-Key: 1..255 visible ASCII characters")
		}
		return idempotent.Key{Scope: "user:" + strconv.FormatInt(id, 10), BizType: httpkey.BizType, BizKey: key}, nil
	case biz:
		k := idempotent.Key{Scope: q.Get("scope"), BizType: q.Get("biz_type"), BizKey: q.Get("biz_key")}
		if k.BizType == "" || k.BizKey == "" || (has("scope") && k.Scope == "") {
			return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("biz_type and biz_key are both required (scope is optional but not empty)")
		}
		return k, nil
	default:
		return idempotent.Key{}, apperr.ErrInvalidRequest.Withf("select a record with user_id and key, or biz_type and biz_key (and scope)")
	}
}

// adminErr maps the core's answers to the contract's errors.
func adminErr(err error, k idempotent.Key) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idemops.ErrRecordNotFound):
		if k.Scope == "" {
			return apperr.ErrNotFound.Withf("no idempotency record for biz_type=%s biz_key=%s", k.BizType, k.BizKey)
		}
		return apperr.ErrNotFound.Withf("no idempotency record for scope=%s biz_type=%s biz_key=%s", k.Scope, k.BizType, k.BizKey)
	case errors.Is(err, idemops.ErrEffectCommitted):
		return apperr.ErrEffectCommitted
	case errors.Is(err, idempotent.ErrKeyInUse):
		return apperr.New(http.StatusConflict, idempotent.ErrKeyInUse.Code, "an attempt with this key is running, or its record is still being written; retry later")
	default:
		return appErr(httpkey.Status(err), err)
	}
}

// resultOf is the metric label of an answer: ok for a success, the problem code otherwise.
func resultOf(err error, ok string) string {
	if err == nil {
		return ok
	}
	e, isApp := apperr.As(err)
	if !isApp {
		return "error"
	}
	switch e.Code {
	case "invalid_request":
		return "invalid"
	case idempotent.ErrKeyInUse.Code:
		return "in_progress"
	case "not_found", "effect_committed":
		return e.Code
	default:
		return "error"
	}
}
