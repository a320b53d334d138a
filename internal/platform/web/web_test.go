package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// readProblem checks that res is an RFC 9457 problem with status and code, and returns it.
func readProblem(t *testing.T, res *http.Response, status int, code string) web.Problem {
	t.Helper()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if res.StatusCode != status {
		t.Fatalf("status = %d, want %d; body %s", res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p web.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body is not a problem document: %v\n%s", err, body)
	}
	if p.Status != status || p.Code != code {
		t.Errorf("problem status %d code %q, want %d %q; body %s", p.Status, p.Code, status, code, body)
	}
	if p.Type == "" || p.Title == "" {
		t.Errorf("problem lacks type or title: %s", body)
	}
	return p
}

// serve runs req through h and returns the response.
func serve(h http.Handler, req *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

// ok answers 204, standing for any handler that let the request through.
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

func TestRequestID(t *testing.T) {
	tests := []struct {
		name string
		sent *string // nil: no header at all.
		echo bool
	}{
		{name: "valid is echoed", sent: ptr("req-client-42"), echo: true},
		{name: "128 visible characters are echoed", sent: ptr(strings.Repeat("a", 128)), echo: true},
		{name: "missing is generated", sent: nil},
		{name: "empty is generated", sent: ptr("")},
		{name: "300 characters are replaced", sent: ptr(strings.Repeat("a", 300))},
		{name: "a space is replaced", sent: ptr("req 42")},
		{name: "a control character is replaced", sent: ptr("req\x0142")},
		{name: "non-ASCII is replaced", sent: ptr("req-é")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inCtx string
			h := web.RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inCtx = requestid.From(r.Context())
			}))
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.sent != nil {
				req.Header[requestid.Header] = []string{*tt.sent}
			}
			got := serve(h, req).Header.Get(requestid.Header)
			switch {
			case tt.echo && got != *tt.sent:
				t.Errorf("X-Request-Id = %q, want the caller's %q", got, *tt.sent)
			case !tt.echo && (tt.sent != nil && got == *tt.sent):
				t.Errorf("X-Request-Id = %q: the invalid id was echoed", got)
			case !tt.echo && (!requestid.Valid(got) || !strings.HasPrefix(got, "req_")):
				t.Errorf("X-Request-Id = %q, want a generated req_ id", got)
			}
			if inCtx != got {
				t.Errorf("the context carries %q, the response %q", inCtx, got)
			}
		})
	}
	t.Run("generated ids differ", func(t *testing.T) {
		h := web.RequestID(ok)
		a := serve(h, httptest.NewRequest(http.MethodGet, "/", nil)).Header.Get(requestid.Header)
		b := serve(h, httptest.NewRequest(http.MethodGet, "/", nil)).Header.Get(requestid.Header)
		if a == b {
			t.Errorf("two requests got the same generated id %q", a)
		}
	})
}

func ptr(s string) *string { return &s }

// captureLog sends the default slog logger to a buffer for the rest of the test.
func captureLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

func TestRecover(t *testing.T) {
	const secret = "db password is hunter2"
	logs := captureLog(t)
	h := web.RequestID(web.Recover(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(secret)
	})))
	req := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
	req.Header.Set(requestid.Header, "req-panic")
	res := serve(h, req)
	p := readProblem(t, res, http.StatusInternalServerError, "internal")
	if p.RequestID != "req-panic" || p.Instance != "/v1/orders" {
		t.Errorf("problem request_id %q instance %q, want req-panic and /v1/orders", p.RequestID, p.Instance)
	}
	raw, _ := json.Marshal(p)
	if strings.Contains(string(raw), "hunter2") || strings.Contains(p.Detail, "panic") {
		t.Errorf("the problem reveals the panic: %s", raw)
	}
	if !strings.Contains(logs.String(), secret) {
		t.Errorf("the panic was not logged for the operator; log:\n%s", logs)
	}

	t.Run("ErrAbortHandler is not swallowed", func(t *testing.T) {
		h := web.Recover(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler re-panicked so the server aborts the response", v)
			}
		}()
		serve(h, httptest.NewRequest(http.MethodGet, "/", nil))
	})
}

// TestBodyLimit sends bodies around the 1 MiB limit over real HTTP, with a declared length
// and chunked, through LimitBody and a handler that reads with ReadBody.
func TestBodyLimit(t *testing.T) {
	var readLen int
	srv := httptest.NewServer(web.LimitBody(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := web.ReadBody(r)
		if err != nil {
			web.WriteError(w, r, err)
			return
		}
		again, _ := io.ReadAll(r.Body)
		if !bytes.Equal(body, again) {
			web.WriteError(w, r, errors.New("ReadBody did not leave the body readable again"))
			return
		}
		readLen = len(body)
		w.WriteHeader(http.StatusNoContent)
	})))
	defer srv.Close()

	tests := []struct {
		name    string
		size    int
		chunked bool
		status  int
	}{
		{"1 MiB with length", web.MaxBodyBytes, false, http.StatusNoContent},
		{"1 MiB chunked", web.MaxBodyBytes, true, http.StatusNoContent},
		{"1 MiB + 1 with length", web.MaxBodyBytes + 1, false, http.StatusRequestEntityTooLarge},
		{"1 MiB + 1 chunked", web.MaxBodyBytes + 1, true, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readLen = -1
			var body io.Reader = bytes.NewReader(bytes.Repeat([]byte("x"), tt.size))
			if tt.chunked {
				body = io.MultiReader(body) // Hides the length, so the client sends it chunked.
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			if tt.chunked && req.ContentLength != 0 {
				t.Fatalf("request has Content-Length %d; want none (chunked)", req.ContentLength)
			}
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if tt.status != http.StatusNoContent {
				readProblem(t, res, tt.status, "payload_too_large")
				return
			}
			if res.StatusCode != tt.status || readLen != tt.size {
				b, _ := io.ReadAll(res.Body)
				t.Errorf("status %d, handler read %d bytes; want %d and %d bytes (%s)", res.StatusCode, readLen, tt.status, tt.size, b)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	type order struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	}
	tests := []struct {
		name   string
		body   string
		status int
		detail string // A part of the problem's detail.
	}{
		{"valid", `{"sku":"SKU-1001","quantity":2}`, http.StatusOK, ""},
		{"valid with trailing space", "{\"sku\":\"SKU-1001\",\"quantity\":2}\n ", http.StatusOK, ""},
		{"unknown field", `{"sku":"SKU-1001","quantity":2,"price":1}`, http.StatusBadRequest, `unknown field "price"`},
		{"trailing data", `{"sku":"SKU-1001","quantity":2}{"sku":"SKU-1002"}`, http.StatusBadRequest, "after the JSON value"},
		{"empty body", ``, http.StatusBadRequest, "empty"},
		{"wrong type", `{"sku":"SKU-1001","quantity":"two"}`, http.StatusBadRequest, `"quantity"`},
		{"not JSON", `sku=SKU-1001`, http.StatusBadRequest, "invalid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got order
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := web.Decode(r, &got); err != nil {
					web.WriteError(w, r, err)
					return
				}
				web.WriteJSON(w, http.StatusOK, got)
			})
			res := serve(h, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body)))
			if tt.status == http.StatusOK {
				if res.StatusCode != http.StatusOK || got != (order{SKU: "SKU-1001", Quantity: 2}) {
					t.Errorf("status %d, decoded %+v; want 200 and the order", res.StatusCode, got)
				}
				return
			}
			p := readProblem(t, res, tt.status, "invalid_request")
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail %q does not say %q", p.Detail, tt.detail)
			}
		})
	}
}

// fakeUsers is an Authenticator over a fixed key → user id map.
type fakeUsers map[string]int64

func (f fakeUsers) Authenticate(_ context.Context, key string) (int64, error) {
	if id, ok := f[key]; ok {
		return id, nil
	}
	return 0, apperr.ErrUnauthorized
}

// failingUsers is an Authenticator whose store is down.
type failingUsers struct{}

func (failingUsers) Authenticate(context.Context, string) (int64, error) {
	return 0, errors.New("database is down")
}

const (
	aliceKey = "demo-alice-key"
	adminKey = "the-admin-key"
)

var users = fakeUsers{aliceKey: 7}

// whoAmI answers 200 with the authenticated user id, or 200 "admin" when there is none.
var whoAmI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if id, ok := web.UserID(r.Context()); ok {
		fmt.Fprint(w, id)
		return
	}
	fmt.Fprint(w, "admin")
})

func TestRequireUser(t *testing.T) {
	captureLog(t)
	tests := []struct {
		name          string
		authorization string
		users         web.Authenticator
		status        int
		code          string
		body          string
	}{
		{"user key", "Bearer " + aliceKey, users, http.StatusOK, "", "7"},
		{"scheme is case-insensitive", "bearer " + aliceKey, users, http.StatusOK, "", "7"},
		{"missing", "", users, http.StatusUnauthorized, "unauthorized", ""},
		{"wrong key", "Bearer nobody-key", users, http.StatusUnauthorized, "unauthorized", ""},
		{"admin key is not a user", "Bearer " + adminKey, users, http.StatusUnauthorized, "unauthorized", ""},
		{"not bearer", "Basic " + aliceKey, users, http.StatusUnauthorized, "unauthorized", ""},
		{"bearer without key", "Bearer ", users, http.StatusUnauthorized, "unauthorized", ""},
		{"store down", "Bearer " + aliceKey, failingUsers{}, http.StatusInternalServerError, "internal", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/v1/accounts/me", nil)
			if tt.authorization != "" {
				req.Header.Set("Authorization", tt.authorization)
			}
			res := serve(web.RequireUser(tt.users)(whoAmI), req)
			if tt.code != "" {
				p := readProblem(t, res, tt.status, tt.code)
				if strings.Contains(p.Detail, "database is down") {
					t.Errorf("the problem reveals the cause: %q", p.Detail)
				}
				return
			}
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status || string(body) != tt.body {
				t.Errorf("got %d %q, want %d %q", res.StatusCode, body, tt.status, tt.body)
			}
		})
	}
}

func TestRequireAdmin(t *testing.T) {
	tests := []struct {
		name          string
		authorization string
		status        int
		code          string
	}{
		{"admin key", "Bearer " + adminKey, http.StatusOK, ""},
		{"user key", "Bearer " + aliceKey, http.StatusForbidden, "forbidden"},
		{"wrong key", "Bearer nobody-key", http.StatusUnauthorized, "unauthorized"},
		{"admin key prefix", "Bearer " + adminKey[:len(adminKey)-1], http.StatusUnauthorized, "unauthorized"},
		{"missing", "", http.StatusUnauthorized, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPut, "/v1/admin/inventory/SKU-1001", nil)
			if tt.authorization != "" {
				req.Header.Set("Authorization", tt.authorization)
			}
			res := serve(web.RequireAdmin(adminKey, users)(whoAmI), req)
			if tt.code != "" {
				readProblem(t, res, tt.status, tt.code)
				return
			}
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status || string(body) != "admin" {
				t.Errorf("got %d %q, want %d through to the handler", res.StatusCode, body, tt.status)
			}
		})
	}
}

// TestTwoAuthorizationsAre400: two Authorization header lines are refused 400 on user and
// admin routes, whichever comes first — the admin key first must not let a request through
// that a proxy may have read as the user's, or the other way round (issue 27).
func TestTwoAuthorizationsAre400(t *testing.T) {
	for name, mw := range map[string]func(http.Handler) http.Handler{
		"user": web.RequireUser(users), "admin": web.RequireAdmin(adminKey, users),
	} {
		for _, pair := range [][2]string{{"Bearer " + aliceKey, "Bearer " + adminKey}, {"Bearer " + adminKey, "Bearer " + aliceKey}, {"Bearer " + aliceKey, "Bearer " + aliceKey}} {
			req := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
			req.Header.Add("Authorization", pair[0])
			req.Header.Add("Authorization", pair[1])
			t.Run(name, func(t *testing.T) { readProblem(t, serve(mw(whoAmI), req), http.StatusBadRequest, "invalid_request") })
		}
	}
}

// TestProblemFor checks the one mapping from errors to problems: client errors keep their
// status, code and detail; a deadline or an unreachable database is 503; anything else is a
// 500 that reveals nothing.
func TestProblemFor(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		detail string
	}{
		{"sentinel", apperr.ErrForbidden, 403, "forbidden", apperr.ErrForbidden.Detail},
		{"wrapped with detail", fmt.Errorf("put: %w", apperr.ErrNotFound.Withf("no such SKU %q", "X")), 404, "not_found", `no such SKU "X"`},
		{"unexpected", errors.New("Error 1054 (42S22): Unknown column 'x' in 'field list'"), 500, "internal", apperr.ErrInternal.Detail},
		{"database down", errors.New("dial tcp 10.0.0.5:3306: connection refused"), 503, "unavailable", web.ErrDatabaseUnavailable.Detail},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), 503, "unavailable", apperr.ErrUnavailable.Detail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/x", nil)
			p := web.ProblemFor(r, tt.err)
			if p.Status != tt.status || p.Code != tt.code || p.Detail != tt.detail {
				t.Errorf("ProblemFor = %+v, want %d %s %q", p, tt.status, tt.code, tt.detail)
			}
			if p.Type != "https://oncepay.dev/problems/"+tt.code {
				t.Errorf("type = %q", p.Type)
			}
		})
	}
}

// TestRouterProblems checks the router-level answers: unknown route and wrong method.
func TestRouterProblems(t *testing.T) {
	r := chi.NewRouter()
	r.NotFound(web.NotFound)
	r.MethodNotAllowed(web.MethodNotAllowed)
	r.Get("/v1/inventory/{sku}", ok)
	readProblem(t, serve(r, httptest.NewRequest(http.MethodGet, "/nope", nil)), http.StatusNotFound, "not_found")
	readProblem(t, serve(r, httptest.NewRequest(http.MethodDelete, "/v1/inventory/SKU-1", nil)), http.StatusMethodNotAllowed, "method_not_allowed")
}

// TestMetrics checks that requests are counted by route pattern, not by raw path, so that
// the label set stays bounded whatever ids clients send.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := web.NewMetrics(reg)
	r := chi.NewRouter()
	r.Use(m.Middleware)
	r.NotFound(web.NotFound)
	r.Get("/v1/inventory/{sku}", ok)
	for _, path := range []string{"/v1/inventory/A", "/v1/inventory/B", "/nope"} {
		serve(r, httptest.NewRequest(http.MethodGet, path, nil))
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "oncepay_http_requests_total" {
			continue
		}
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["method"]+" "+labels["route"]+" "+labels["status"]] = metric.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"GET /v1/inventory/{sku} 204": 2,
		"GET unmatched 404":           1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("oncepay_http_requests_total = %v, want %v", got, want)
	}
}

// timeoutErr is the error a connection's read deadline gives: a net.Error that timed out,
// whose text names the sockets.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "read tcp 127.0.0.1:8080->10.1.2.3:55555: i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// stalling is a body that sends a little, then stalls past the read timeout.
type stalling struct{ sent bool }

func (s *stalling) Read(p []byte) (int, error) {
	if !s.sent {
		s.sent = true
		return copy(p, `{"items":`), nil
	}
	return 0, timeoutErr{}
}

// TestStalledBodyIs408: a body that stalls past the server's read timeout is 408
// request_timeout, and the detail names no socket address; another broken read is 400
// without one either.
func TestStalledBodyIs408(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "/x", &stalling{})
	_, err := web.ReadBody(req)
	e, ok := apperr.As(err)
	if !ok || e.Status != http.StatusRequestTimeout || e.Code != "request_timeout" {
		t.Fatalf("ReadBody of a stalled body: %v, want 408 request_timeout", err)
	}
	if strings.Contains(e.Detail, "127.0.0.1") || strings.Contains(e.Detail, "10.1.2.3") {
		t.Errorf("the detail %q names a socket", e.Detail)
	}
	req = httptest.NewRequest(http.MethodPost, "/x", iotest.ErrReader(errors.New("read tcp 127.0.0.1:8080->10.1.2.3:55555: connection reset by peer")))
	_, err = web.ReadBody(req)
	if e, ok := apperr.As(err); !ok || e.Status != http.StatusBadRequest || strings.Contains(e.Detail, "10.1.2.3") {
		t.Errorf("ReadBody of a reset connection: %v, want 400 naming no socket", err)
	}
}
