package idem

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
	"github.com/oncepay/oncepay/idempotent/sqliteerr"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Kind says how a marked route is idempotent.
type Kind string

// The kinds of marks.
const (
	// ClientKey marks a route that requires an Idempotency-Key: listed in the published
	// policy's required_on, declared with the header in api/openapi.yaml.
	ClientKey Kind = "idempotency-key"
	// ReportKey marks a channel report's route: keyed by the channel's own number
	// (channel + trade_no, or refund_no), not by a header.
	ReportKey Kind = "report"
)

// KeyedWrite is the handler of a write that requires an Idempotency-Key, given the key.
type KeyedWrite func(w http.ResponseWriter, r *http.Request, key idempotent.Key)

// KeyRequired marks write, where it is mounted, as a route that requires an Idempotency-Key,
// and reads the key for it with keys, in keys' scope: a request without a valid key is
// refused 400 (idempotency_key_missing, idempotency_key_invalid) with Idempotency-Outcome:
// rejected before write runs, and nothing is stored. The mark is the one place the route says
// so: the rejected outcome of its early refusals (Marks.MarkRejected), the published policy's
// required_on and the check of api/openapi.yaml are read from it.
func KeyRequired(keys httpkey.Handler, write KeyedWrite) http.Handler {
	return route{kind: ClientKey, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := keys.Key(r)
		if err != nil {
			keys.Reject(w, r, err)
			return
		}
		write(w, r, key)
	})}
}

// ReportKeyed marks reports, where it is mounted, as a channel report's route: idempotent by
// the channel's own number, and answering with Idempotency-Outcome, its early refusals (401,
// 405, 413) too.
func ReportKeyed(reports http.Handler) http.Handler {
	return route{kind: ReportKey, Handler: reports}
}

// route is a handler marked as an idempotent write; chi.Walk hands it back as the route's
// handler, which is how Marks finds it.
type route struct {
	http.Handler
	kind Kind
}

// KindOf is how h, a route's handler as chi.Walk gives it, is marked: "" when it is not.
func KindOf(h http.Handler) Kind {
	if m, ok := h.(route); ok {
		return m.kind
	}
	return ""
}

// Marks are the idempotent routes of a router, read from their marks once every route is
// mounted (Collect), before the router serves. The zero value is ready and marks nothing.
type Marks struct {
	// routes are the marked routes, "METHOD /pattern", with their kinds.
	routes map[string]Kind
	// patterns are the marked routes' patterns split at "/", for MarkRejected, which matches
	// a path whatever its method.
	patterns [][]string
}

// Collect reads the marks of router's routes, walked with chi.Walk. A sub-router's root
// ("/v1/orders/") is named without the slash ("/v1/orders"), as api/openapi.yaml names it.
func (m *Marks) Collect(router chi.Routes) {
	m.routes, m.patterns = map[string]Kind{}, nil
	// The walk fails only when its function does, and this one never does.
	_ = chi.Walk(router, func(method, pattern string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		kind := KindOf(h)
		if kind == "" {
			return nil
		}
		if len(pattern) > 1 {
			pattern = strings.TrimSuffix(pattern, "/")
		}
		m.routes[method+" "+pattern] = kind
		m.patterns = append(m.patterns, strings.Split(pattern, "/"))
		return nil
	})
}

// Routes returns the marked routes, "METHOD /pattern", with their kinds.
func (m *Marks) Routes() map[string]Kind {
	out := make(map[string]Kind, len(m.routes))
	for r, k := range m.routes {
		out[r] = k
	}
	return out
}

// KeyRequired lists the marked routes that require an Idempotency-Key, sorted.
func (m *Marks) KeyRequired() []string {
	var out []string
	for r, k := range m.routes {
		if k == ClientKey {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// MarkRejected makes every error answer to a marked route's path carry Idempotency-Outcome:
// rejected unless a layer set another outcome, so that the refusals that happen before the
// key is read — 401 by authentication, 413 by Content-Length, the 405 answering another
// method on the path (PUT /v1/orders) — say so too (docs/contract.md). It matches the path
// whatever the method.
func (m *Marks) MarkRejected(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.marked(r) {
			w = &rejectMarker{ResponseWriter: w}
		}
		next.ServeHTTP(w, r)
	})
}

// marked reports whether r's path is a marked route's, as the router reads it (the escaped
// path when there is one): each "{param}" of a pattern stands for one segment, empty too, as
// in chi.
func (m *Marks) marked(r *http.Request) bool {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	segments := strings.Split(path, "/")
	for _, p := range m.patterns {
		if len(p) == len(segments) && matches(p, segments) {
			return true
		}
	}
	return false
}

// matches reports whether segments fill pattern, segment by segment.
func matches(pattern, segments []string) bool {
	for i, p := range pattern {
		param := strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}")
		if !param && p != segments[i] {
			return false
		}
	}
	return true
}

type rejectMarker struct{ http.ResponseWriter }

func (m *rejectMarker) WriteHeader(status int) {
	if status >= 400 && m.Header().Get(httpkey.HeaderOutcome) == "" {
		m.Header().Set(httpkey.HeaderOutcome, string(idempotent.Rejected))
	}
	m.ResponseWriter.WriteHeader(status)
}

func (m *rejectMarker) Write(b []byte) (int, error) { return m.ResponseWriter.Write(b) }

// Unwrap lets http.ResponseController reach the underlying writer.
func (m *rejectMarker) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// The adapter's settings for the users' writes: whose key it is (userScope, on every keyed
// request), the contract's problems, the stored answer of a business refusal, Retry-After.

// HTTP is the kit's HTTP adapter with oncepay's settings, for the users' writes: keys scoped
// to the authenticated user ("user:<id>", so that two users' keys never collide; no user is
// 401), refusals written as the contract's problems (web.WriteError), a work's business
// refusal stored with the request's instance and request id, and every 503 with the
// Retry-After of web.RetryAfterUnavailable.
func HTTP(guard *idempotent.Guard) httpkey.Handler {
	return httpkey.Handler{Guard: guard, Scope: userScope, Problem: problem, Stored: stored, RetryAfter: retryAfter}
}

// AdminHTTP is HTTP for the admin's writes: keys scoped to the admin ("admin"), whose keys
// never collide with a user's.
func AdminHTTP(guard *idempotent.Guard) httpkey.Handler {
	h := HTTP(guard)
	h.Scope = func(*http.Request) (string, error) { return "admin", nil }
	return h
}

// retryAfter is web.RetryAfterUnavailable, the Retry-After of every other 503 of the service,
// as a duration (a test holds them equal).
const retryAfter = 2 * time.Second

// userScope is the idempotency scope of the authenticated caller.
func userScope(r *http.Request) (string, error) {
	who, ok := web.UserScope(r)
	if !ok {
		return "", apperr.ErrUnauthorized
	}
	return who, nil
}

// problem writes a refusal or failure as the contract's problem document.
func problem(w http.ResponseWriter, r *http.Request, status int, err error) {
	web.WriteError(w, r, appErr(status, err))
}

// appErr turns a refusal of the kit, with its status, into the client-facing error; any other
// error is returned as it is, for web.ProblemFor to map.
func appErr(status int, err error) error {
	if errors.Is(err, idempotent.ErrLockLost) {
		return errLockLost
	}
	var e *idempotent.Error
	if status != 0 && errors.As(err, &e) {
		return apperr.New(status, e.Code, e.Detail)
	}
	return err
}

// errLockLost answers a work the guard cancelled because its lease could not be renewed
// (I4, I10): Redis restarted or stopped answering while the work ran. The work's transaction
// rolled back and nothing is stored, so the client's retry with the same key runs again — a
// 503 to retry, not a 500 (found by the chaos run: a Redis restart under slow payments).
var errLockLost = apperr.ErrUnavailable.Withf("the request lost its idempotency lock (Redis) before it could finish; nothing was applied; retry with the same key")

// stored renders err as the stored answer of a refused request: a problem document with r's
// instance and request id. ok is false for errors that are not the client's (5xx): those are
// never stored.
func stored(r *http.Request, err error) (idempotent.Response, bool) {
	return problemResponse(web.ProblemFor(r, err))
}

// StoredProblem is the guard's Config.Reject: a work's refusal away from an HTTP request (a
// Kafka copy of a report, a job) stored as the problem document HTTP would store, with the
// request id of ctx.
func StoredProblem(ctx context.Context, err error) (idempotent.Response, bool) {
	p := web.ProblemOf(err)
	p.RequestID = requestid.From(ctx)
	return problemResponse(p)
}

func problemResponse(p web.Problem) (idempotent.Response, bool) {
	if p.Status >= 500 {
		return idempotent.Response{}, false
	}
	resp := idempotent.Response{Status: p.Status, Header: map[string]string{"Content-Type": "application/problem+json"}}
	if p.Code == "illegal_state" {
		resp.Header[httpkey.HeaderOutcome] = string(idempotent.StateRejected)
	}
	resp.Body, _ = json.Marshal(p)
	resp.Body = append(resp.Body, '\n')
	return resp, true
}

// Classify is the kit's classifier of db's dialect, for idempotent.Config's Classify: by
// MySQL error number (mysqlerr) or SQLite extended result code (sqliteerr), never by text.
func Classify(db *gorm.DB) func(error) dberr.Class {
	if db.Dialector.Name() == "mysql" {
		return mysqlerr.Classify
	}
	return sqliteerr.Classify
}

// JSON is a Response with status and v as its JSON body, plus header pairs (name, value).
func JSON(status int, v any, header ...string) idempotent.Response {
	body, _ := json.Marshal(v)
	resp := idempotent.Response{Status: status, Header: map[string]string{"Content-Type": "application/json"}, Body: append(body, '\n')}
	for i := 0; i+1 < len(header); i += 2 {
		resp.Header[header[i]] = header[i+1]
	}
	return resp
}
