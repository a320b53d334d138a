package idem

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
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
