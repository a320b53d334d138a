package web

import (
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// RequestID takes X-Request-Id from the caller when it is valid, or generates one; it is
// echoed on the response and carried in the context to every log line and message (000 §4.1).
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestid.Header)
		if !requestid.Valid(id) {
			id = requestid.New()
		}
		w.Header().Set(requestid.Header, id)
		next.ServeHTTP(w, r.WithContext(requestid.With(r.Context(), id)))
	})
}

// Recover turns a panic into a logged problem 500 instead of a dropped connection.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				slog.ErrorContext(r.Context(), "panic", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				WriteError(w, r, apperr.ErrInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// LimitBody rejects bodies over MaxBodyBytes with 413 payload_too_large. A declared length
// is refused before reading; a streamed body is cut off by ReadBody.
func LimitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			WriteError(w, r, apperr.ErrPayloadTooLarge)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Metrics counts requests by route pattern and status and observes their latency.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics registers the HTTP metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_http_requests_total",
			Help: "HTTP requests by method, route pattern and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "oncepay_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

// methodLabel is the method label of a request: one of the methods the API knows, or
// "OTHER". A client chooses the method freely, so taking it as it came would let anyone grow
// the metrics without bound (one series per invented method).
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodPatch, http.MethodOptions:
		return method
	default:
		return "OTHER"
	}
}

// routeLabel is the route label of a request: the pattern of the route that served it, or
// "unmatched" when none did — an unknown path, which chi reports with no pattern or with the
// "/*" of the mount it fell into, or a known path called with a method nobody serves.
// Patterns come from the code, never from the request, so the set of labels is fixed.
func routeLabel(r *http.Request) string {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return "unmatched"
	}
	p := rc.RoutePattern()
	if p == "" || strings.HasSuffix(p, "*") {
		return "unmatched"
	}
	return p
}

// statusLabel is the status label: the code's three digits, which handlers choose, within
// the range HTTP defines.
func statusLabel(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status)
}

// Middleware records every request and writes one access log line for it.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := routeLabel(r)
		method := methodLabel(r.Method)
		elapsed := time.Since(start)
		m.requests.WithLabelValues(method, route, statusLabel(sw.status)).Inc()
		m.latency.WithLabelValues(method, route).Observe(elapsed.Seconds())
		slog.InfoContext(r.Context(), "http request", "method", method, "route", route, "path", r.URL.Path,
			"status", sw.status, "duration_ms", float64(elapsed.Microseconds())/1000,
			"idempotency_outcome", sw.Header().Get("Idempotency-Outcome"))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status  int
	written bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.written {
		w.status, w.written = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.written = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
