package idempotent_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// thingHandler is the use case behind the middleware in these tests: it inserts a
// side_effects row through the request's context (so it joins the dedup transaction) and
// answers 201 JSON with a Location. Query parameters steer it without changing the
// fingerprint: ?status=N answers N after the insert, ?hold=1 waits for the test to release it.
type thingHandler struct {
	db      *gorm.DB
	entered chan struct{} // receives when a held request is inside the handler
	release chan struct{} // closed by the test to let held requests finish
}

// create serves POST /v1/things: one side_effects row, 201 with Location.
func (h *thingHandler) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Name string `json:"name"`
		Size int    `json:"size"`
	}
	if err := web.Decode(r, &in); err != nil {
		web.WriteError(w, r, err)
		return
	}
	id, err := insertEffect(r.Context(), h.db, "thing")
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if r.URL.Query().Get("hold") != "" {
		h.entered <- struct{}{}
		<-h.release
	}
	if s := r.URL.Query().Get("status"); s != "" {
		status, _ := strconv.Atoi(s)
		web.WriteError(w, r, apperr.New(status, "test_status", "asked for by the test"))
		return
	}
	w.Header().Set("Location", "/v1/things/"+strconv.FormatInt(id, 10))
	web.WriteJSON(w, http.StatusCreated, map[string]any{"id": id, "name": in.Name})
}

// cancel serves POST /v1/things/{id}/cancel: one side_effects row, 200 naming the thing.
func (h *thingHandler) cancel(w http.ResponseWriter, r *http.Request) {
	if _, err := insertEffect(r.Context(), h.db, "cancel"); err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"thing": chi.URLParam(r, "id"), "status": "CANCELLED"})
}

// testUser is the scope function of these tests: the caller named by X-Test-User.
func testUser(r *http.Request) (string, bool) {
	u := r.Header.Get("X-Test-User")
	return "user:" + u, u != ""
}

// httpEnv is a real chi router with the middleware, served by an httptest.Server.
type httpEnv struct {
	*env
	guard   *idempotent.Guard
	handler *thingHandler
	srv     *httptest.Server
}

// newHTTPEnv serves, through g.Middleware with the X-Test-User scope:
// POST /v1/things, POST /v1/things/{id}/cancel (both biz type "thing", as one endpoint
// family sharing a key space) and POST /v1/idempotency-tokens.
func newHTTPEnv(t *testing.T) *httpEnv {
	t.Helper()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	h := &thingHandler{db: e.db, entered: make(chan struct{}, 1), release: make(chan struct{})}
	mw := g.Middleware(idempotent.HeaderKeyFunc("thing", testUser))
	r := chi.NewRouter()
	r.Post("/v1/idempotency-tokens", g.TokenHandler(testUser))
	r.Route("/v1/things", func(r chi.Router) {
		r.With(mw).Post("/", h.create)
		r.With(mw).Post("/{id}/cancel", h.cancel)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &httpEnv{env: e, guard: g, handler: h, srv: srv}
}

// reply is an HTTP answer, read whole.
type reply struct {
	status int
	header http.Header
	body   string
}

// code returns the problem code of a problem+json reply.
func (r reply) code() string {
	var p web.Problem
	_ = json.Unmarshal([]byte(r.body), &p)
	return p.Code
}

// noKey, passed as the key, sends no Idempotency-Key header at all.
const noKey = "\x00absent"

// post sends body to path as user with key (noKey: no header) and returns the whole reply.
// Every answer of an idempotent endpoint must carry Idempotency-Outcome; post checks it.
func (h *httpEnv) post(t *testing.T, path, user, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test-User", user)
	if key != noKey {
		req.Header[idempotent.HeaderKey] = []string{key}
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	rep := reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if strings.HasPrefix(path, "/v1/things") && rep.header.Get(idempotent.HeaderOutcome) == "" {
		t.Errorf("POST %s answered %d without %s", path, rep.status, idempotent.HeaderOutcome)
	}
	return rep
}

// expect checks the status, the problem code (for errors) and the Idempotency-Outcome of a
// reply.
func expect(t *testing.T, what string, got reply, status int, code string, outcome idempotent.Outcome) {
	t.Helper()
	if got.status != status {
		t.Fatalf("%s: status %d (%s), want %d", what, got.status, got.body, status)
	}
	if code != "" && got.code() != code {
		t.Errorf("%s: code %q, want %q", what, got.code(), code)
	}
	if o := got.header.Get(idempotent.HeaderOutcome); o != string(outcome) {
		t.Errorf("%s: %s = %q, want %q", what, idempotent.HeaderOutcome, o, outcome)
	}
}

// TestMiddleware goes through every row of the contract's Idempotency-Key table with a real
// router and server, counting the handler's side effect in the database.
func TestMiddleware(t *testing.T) {
	t.Run("key missing", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		got := h.post(t, "/v1/things/", "1", noKey, `{"name":"a"}`)
		expect(t, "no key", got, http.StatusBadRequest, "idempotency_key_missing", idempotent.Rejected)
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d, want 0", n)
		}
	})

	t.Run("key malformed", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		for name, key := range map[string]string{
			"empty":          "",
			"256 characters": strings.Repeat("k", 256),
			"inner space":    "two words",
			"tab":            "a\tb",
			"non-ASCII":      "ключ",
		} {
			got := h.post(t, "/v1/things/", "1", key, `{"name":"a"}`)
			expect(t, name, got, http.StatusBadRequest, "idempotency_key_invalid", idempotent.Rejected)
		}
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d after malformed keys, want 0", n)
		}
		got := h.post(t, "/v1/things/", "1", strings.Repeat("k", 255), `{"name":"a"}`)
		expect(t, "255 characters", got, http.StatusCreated, "", idempotent.Executed)
	})

	t.Run("token", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		got := h.post(t, "/v1/things/", "1", "tok_"+strings.Repeat("f", 32), `{"name":"a"}`)
		expect(t, "unknown token", got, http.StatusBadRequest, "idempotency_token_invalid", idempotent.TokenInvalid)

		issued := h.post(t, "/v1/idempotency-tokens", "1", noKey, ``)
		var tok struct {
			Token     string `json:"token"`
			ExpiresAt string `json:"expires_at"`
		}
		if err := json.Unmarshal([]byte(issued.body), &tok); err != nil || issued.status != http.StatusCreated || !idempotent.IsToken(tok.Token) {
			t.Fatalf("POST /v1/idempotency-tokens = %d %s", issued.status, issued.body)
		}
		if _, err := time.Parse(time.RFC3339, tok.ExpiresAt); err != nil {
			t.Errorf("expires_at %q is not RFC 3339", tok.ExpiresAt)
		}
		first := h.post(t, "/v1/things/", "1", tok.Token, `{"name":"a"}`)
		expect(t, "first use of the token", first, http.StatusCreated, "", idempotent.Executed)
		again := h.post(t, "/v1/things/", "1", tok.Token, `{"name":"a"}`)
		expect(t, "double click", again, http.StatusCreated, "", idempotent.Replayed)
		other := h.post(t, "/v1/things/", "2", tok.Token, `{"name":"a"}`)
		expect(t, "another user's token", other, http.StatusBadRequest, "idempotency_token_invalid", idempotent.TokenInvalid)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})

	t.Run("first then replay", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		first := h.post(t, "/v1/things/", "1", "k-1", `{"name":"a","size":1}`)
		expect(t, "first", first, http.StatusCreated, "", idempotent.Executed)
		if first.header.Get("Location") == "" || first.header.Get("Content-Type") != "application/json" {
			t.Fatalf("first answer lacks Location or JSON Content-Type: %v", first.header)
		}
		if first.header.Get(idempotent.HeaderReplayed) != "" {
			t.Errorf("first answer carries %s", idempotent.HeaderReplayed)
		}
		// Another key order and whitespace are the same request.
		for _, body := range []string{`{"name":"a","size":1}`, "{ \"size\": 1,\n \"name\": \"a\" }"} {
			again := h.post(t, "/v1/things/", "1", "k-1", body)
			expect(t, "replay", again, first.status, "", idempotent.Replayed)
			if again.body != first.body {
				t.Errorf("replayed body %s, want %s", again.body, first.body)
			}
			for _, name := range []string{"Location", "Content-Type"} {
				if again.header.Get(name) != first.header.Get(name) {
					t.Errorf("replayed %s = %q, want %q", name, again.header.Get(name), first.header.Get(name))
				}
			}
			if again.header.Get(idempotent.HeaderReplayed) != "true" {
				t.Errorf("replay lacks %s: true", idempotent.HeaderReplayed)
			}
		}
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})

	t.Run("in flight", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		done := make(chan reply, 1)
		go func() { done <- h.post(t, "/v1/things/?hold=1", "1", "k-1", `{"name":"a"}`) }()
		select {
		case <-h.handler.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first request never reached the handler")
		}
		// Not held: if the copy got past the layers it would execute, and the count shows it.
		got := h.post(t, "/v1/things/", "1", "k-1", `{"name":"a"}`)
		close(h.handler.release)
		expect(t, "copy while the first runs", got, http.StatusConflict, "idempotency_key_in_use", idempotent.InProgress)
		if got.header.Get("Retry-After") == "" {
			t.Errorf("409 in progress lacks Retry-After")
		}
		expect(t, "first", <-done, http.StatusCreated, "", idempotent.Executed)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})

	t.Run("different request", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		expect(t, "first", h.post(t, "/v1/things/", "1", "k-1", `{"name":"a"}`), http.StatusCreated, "", idempotent.Executed)
		expect(t, "another body", h.post(t, "/v1/things/", "1", "k-1", `{"name":"b"}`),
			http.StatusUnprocessableEntity, "idempotency_key_reused", idempotent.Mismatch)
		expect(t, "another route", h.post(t, "/v1/things/7/cancel", "1", "k-1", `{"name":"a"}`),
			http.StatusUnprocessableEntity, "idempotency_key_reused", idempotent.Mismatch)
		if n := countEffects(t, h.db, "thing") + countEffects(t, h.db, "cancel"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})

	t.Run("different path, same route", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		first := h.post(t, "/v1/things/1/cancel", "1", "k-1", ``)
		expect(t, "cancel thing 1", first, http.StatusOK, "", idempotent.Executed)
		got := h.post(t, "/v1/things/2/cancel", "1", "k-1", ``)
		expect(t, "cancel thing 2 with the same key", got, http.StatusUnprocessableEntity, "idempotency_key_reused", idempotent.Mismatch)
		if got.body == first.body {
			t.Errorf("cancelling thing 2 answered thing 1's outcome: %s", got.body)
		}
	})

	t.Run("different user", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		a := h.post(t, "/v1/things/", "1", "k-1", `{"name":"a"}`)
		b := h.post(t, "/v1/things/", "2", "k-1", `{"name":"a"}`)
		expect(t, "user 1", a, http.StatusCreated, "", idempotent.Executed)
		expect(t, "user 2, same key", b, http.StatusCreated, "", idempotent.Executed)
		if n := countEffects(t, h.db, "thing"); n != 2 {
			t.Errorf("side_effects rows = %d, want 2", n)
		}
	})

	t.Run("5xx not stored", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable} {
			got := h.post(t, "/v1/things/?status="+strconv.Itoa(status), "1", "k-1", `{"name":"a"}`)
			expect(t, "failing first attempt", got, status, "test_status", idempotent.Executed)
			if n := countEffects(t, h.db, "thing"); n != 0 {
				t.Errorf("side_effects rows = %d after a %d, want 0", n, status)
			}
		}
		expect(t, "retry", h.post(t, "/v1/things/", "1", "k-1", `{"name":"a"}`), http.StatusCreated, "", idempotent.Executed)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d after the retry, want 1", n)
		}
	})

	t.Run("4xx business outcome stored", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t)
		first := h.post(t, "/v1/things/?status=409", "1", "k-1", `{"name":"a"}`)
		expect(t, "409", first, http.StatusConflict, "test_status", idempotent.Executed)
		again := h.post(t, "/v1/things/", "1", "k-1", `{"name":"a"}`)
		expect(t, "copy of a 409", again, http.StatusConflict, "test_status", idempotent.Replayed)
		if again.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("replayed 409 Content-Type %q, want application/problem+json", again.header.Get("Content-Type"))
		}
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1 (the 409 ran once, with what it wrote)", n)
		}
	})
}

// TestMiddlewareJoinsTheTransaction: the handler's database.Conn(r.Context(), db) is the
// dedup transaction, so its write and the record commit or roll back together (I3).
func TestMiddlewareJoinsTheTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	inTx := make(chan bool, 1)
	r := chi.NewRouter()
	r.With(g.Middleware(idempotent.HeaderKeyFunc("thing", testUser))).Post("/x", func(w http.ResponseWriter, r *http.Request) {
		inTx <- database.InTx(r.Context())
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	h := &httpEnv{env: e, guard: g, srv: srv}
	expect(t, "first", h.post(t, "/x", "1", "k", ``), http.StatusNoContent, "", idempotent.Executed)
	if !<-inTx {
		t.Errorf("the handler's context carries no transaction: its writes would commit outside the dedup record's")
	}
}

// TestMiddlewareRetrySeesTheBody: when the database aborts the dedup transaction after the
// handler ran, Do runs the handler again — and the handler must read the same body again,
// not an exhausted reader (which would store a 400 "the body is empty" under the key).
func TestMiddlewareRetrySeesTheBody(t *testing.T) {
	t.Parallel()
	h := newHTTPEnv(t)
	fired := abortOnce(t, h.db)
	got := h.post(t, "/v1/things/", "1", "k-1", `{"name":"a"}`)
	if !fired.Load() {
		t.Fatal("the abort was not injected")
	}
	expect(t, "aborted then retried", got, http.StatusCreated, "", idempotent.Executed)
	if !strings.Contains(got.body, `"name":"a"`) {
		t.Errorf("retried handler answered %s, want the request's name", got.body)
	}
	expect(t, "copy", h.post(t, "/v1/things/", "1", "k-1", `{"name":"a"}`), http.StatusCreated, "", idempotent.Replayed)
	if n := countEffects(t, h.db, "thing"); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
}
