package idem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestMain keeps the per-attempt "idempotency" log lines, the 5xx "request failed" lines
// the tests provoke and go-redis's dial errors out of the output; set ONCEPAY_TEST_LOG=1 to
// see them.
func TestMain(m *testing.M) {
	if os.Getenv("ONCEPAY_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1})))
		redis.SetLogger(quietLogger{})
	}
	fmt.Fprintln(os.Stderr, "idem tests:", testenv.Describe())
	os.Exit(m.Run())
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

// Printf drops the line.
func (quietLogger) Printf(context.Context, string, ...any) {}

// sideEffect is a row of side_effects: the business effect the tests count in the database.
type sideEffect struct {
	ID int64
	K  string
}

// TableName is the test table of sideEffect.
func (sideEffect) TableName() string { return "side_effects" }

// insertEffect writes one side_effects row for k through tx and returns its id.
func insertEffect(tx *gorm.DB, k string) (int64, error) {
	row := sideEffect{K: k}
	if err := tx.Create(&row).Error; err != nil {
		return 0, err
	}
	return row.ID, nil
}

// countEffects counts the committed side_effects rows of k.
func countEffects(t *testing.T, db *gorm.DB, k string) int64 {
	t.Helper()
	var n int64
	if err := db.Model(&sideEffect{}).Where("k = ?", k).Count(&n).Error; err != nil {
		t.Fatalf("count side_effects: %v", err)
	}
	return n
}

// users authenticates the bearer key "key-<id>" as user <id>, so that the handlers find the
// caller where production puts it: in the context, through web.RequireUser.
type users struct{}

// Authenticate resolves "key-<id>".
func (users) Authenticate(_ context.Context, key string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(key, "key-"), 10, 64)
	if err != nil || !strings.HasPrefix(key, "key-") {
		return 0, apperr.ErrUnauthorized
	}
	return id, nil
}

// things is the use case behind the adapter in these tests, written the way oncepay's
// handlers are: the key, the body decoded and validated (a bad one stores nothing), then the
// work through the adapter with the transaction as its argument. Query parameters steer it
// without changing the fingerprint (the path is fingerprinted, not the query):
//
//	?hold=1            the work waits inside its transaction until the test releases it
//	?status=N          the work fails with a problem N (code test_status, or ?code=…)
//	?status=N&as=resp  the work answers N as a Response with a nil error
type things struct {
	db      *gorm.DB
	idem    httpkey.Handler
	entered chan struct{} // receives when a held work is inside its transaction
	release chan struct{} // closed by the test to let held works finish
	inTx    atomic.Bool   // the last work's row was invisible outside its transaction
}

// create serves POST /v1/things: one side_effects row "thing", 201 with a Location.
func (h *things) create(w http.ResponseWriter, r *http.Request) {
	key, err := h.idem.Key(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	body, err := web.ReadBody(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	var in struct {
		Name string `json:"name"`
		Size int    `json:"size"`
	}
	if err := web.DecodeBytes(body, &in); err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	q := r.URL.Query()
	_, _ = h.idem.Do(w, r, key, body, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		id, err := insertEffect(tx, "thing")
		if err != nil {
			return idempotent.Response{}, err
		}
		var visible int64
		if err := h.db.Model(&sideEffect{}).Where("id = ?", id).Count(&visible).Error; err != nil {
			return idempotent.Response{}, err
		}
		h.inTx.Store(visible == 0)
		if q.Get("hold") != "" {
			h.entered <- struct{}{}
			<-h.release
		}
		if s := q.Get("status"); s != "" {
			status, _ := strconv.Atoi(s)
			code := q.Get("code")
			if code == "" {
				code = "test_status"
			}
			if q.Get("as") == "resp" {
				return idem.JSON(status, map[string]any{"code": code, "id": id}), nil
			}
			return idempotent.Response{}, apperr.New(status, code, "asked for by the test")
		}
		return idem.JSON(http.StatusCreated, map[string]any{"id": id, "name": in.Name},
			"Location", "/v1/things/"+strconv.FormatInt(id, 10)), nil
	}))
}

// cancel serves POST /v1/things/{id}/cancel: one side_effects row "cancel", 200.
func (h *things) cancel(w http.ResponseWriter, r *http.Request) {
	key, err := h.idem.Key(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	body, err := web.ReadBody(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	thing := chi.URLParam(r, "id")
	_, _ = h.idem.Do(w, r, key, body, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		if _, err := insertEffect(tx, "cancel"); err != nil {
			return idempotent.Response{}, err
		}
		return idem.JSON(http.StatusOK, map[string]string{"thing": thing, "status": "CANCELLED"}), nil
	}))
}

// httpEnv is a real chi router with the adapter, behind web.RequestID and web.RequireUser,
// served by an httptest.Server on a fresh database and Redis.
type httpEnv struct {
	db     *gorm.DB
	rdb    redis.UniversalClient
	guard  *idempotent.Guard
	things *things
	srv    *httptest.Server
}

// newHTTPEnv serves POST /v1/things, POST /v1/things/{id}/cancel and POST
// /v1/idempotency-tokens through a guard with cfg (Classify is idem.Classify, as in
// oncepay's app). rdb, when not nil, replaces the test's Redis (testenv.Unreachable).
func newHTTPEnv(t *testing.T, cfg idempotent.Config, rdb redis.UniversalClient) *httpEnv {
	t.Helper()
	db := testenv.DB(t)
	ddl := "CREATE TABLE side_effects (id INTEGER PRIMARY KEY, k VARCHAR(64) NOT NULL)"
	if database.DialectOf(db) == database.MySQL {
		ddl = "CREATE TABLE side_effects (id BIGINT PRIMARY KEY AUTO_INCREMENT, k VARCHAR(64) NOT NULL) ENGINE=InnoDB"
	}
	if err := db.Exec(ddl).Error; err != nil {
		t.Fatalf("create side_effects: %v", err)
	}
	e := &httpEnv{db: db, rdb: testenv.Redis(t).Client}
	if rdb == nil {
		rdb = e.rdb
	}
	cfg.Classify = idem.Classify(db)
	cfg.Registerer = prometheus.NewRegistry()
	e.guard = idempotent.New(db, rdb, cfg)
	adapter := idem.HTTP(e.guard)
	e.things = &things{db: db, idem: adapter, entered: make(chan struct{}, 1), release: make(chan struct{})}

	r := chi.NewRouter()
	r.Use(web.RequestID, web.RequireUser(users{}))
	r.Post("/v1/idempotency-tokens", idem.NewAPI(e.guard, new(idem.Marks), nil).TokenHandler)
	r.Post("/v1/things", e.things.create)
	r.Post("/v1/things/{id}/cancel", e.things.cancel)
	e.srv = httptest.NewServer(r)
	t.Cleanup(e.srv.Close)
	return e
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

// post sends body to path as user (0: no Authorization) with key (noKey: no header; keys
// joined by "\n": several headers) and returns the whole reply. Every answer of an
// idempotent endpoint must carry Idempotency-Outcome; post checks it.
func (h *httpEnv) post(t *testing.T, path string, user int, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if user != 0 {
		req.Header.Set("Authorization", "Bearer key-"+strconv.Itoa(user))
	}
	if key != noKey {
		req.Header[httpkey.HeaderKey] = strings.Split(key, "\n")
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
	if strings.HasPrefix(path, "/v1/things") && user != 0 && rep.header.Get(httpkey.HeaderOutcome) == "" {
		t.Errorf("POST %s answered %d without %s", path, rep.status, httpkey.HeaderOutcome)
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
	if o := got.header.Get(httpkey.HeaderOutcome); o != string(outcome) {
		t.Errorf("%s: %s = %q, want %q", what, httpkey.HeaderOutcome, o, outcome)
	}
}

// expectReplay checks that again is first answered again: same status, byte-identical body,
// the replayed headers, Idempotent-Replayed: true and Idempotency-Outcome: replayed.
func expectReplay(t *testing.T, what string, again, first reply) {
	t.Helper()
	expect(t, what, again, first.status, "", idempotent.Replayed)
	if again.body != first.body {
		t.Errorf("%s: replayed body %q, want the first one byte for byte: %q", what, again.body, first.body)
	}
	for _, name := range []string{"Content-Type", "Location"} {
		if again.header.Get(name) != first.header.Get(name) {
			t.Errorf("%s: replayed %s = %q, want %q", what, name, again.header.Get(name), first.header.Get(name))
		}
	}
	if again.header.Get(httpkey.HeaderReplayed) != "true" {
		t.Errorf("%s: replay lacks %s: true", what, httpkey.HeaderReplayed)
	}
}

// TestIdempotencyKeyTable goes through every row of the contract's Idempotency-Key table
// (docs/contract.md) with a real router and server, counting the use case's side effect in the
// database.
func TestIdempotencyKeyTable(t *testing.T) {
	t.Run("key missing", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		got := h.post(t, "/v1/things", 1, noKey, `{"name":"a"}`)
		expect(t, "no key", got, http.StatusBadRequest, "idempotency_key_missing", idempotent.Rejected)
		if got.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("no key: Content-Type %q, want application/problem+json", got.header.Get("Content-Type"))
		}
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d, want 0", n)
		}
	})

	t.Run("key malformed", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		for name, key := range map[string]string{
			"empty":          "",
			"256 characters": strings.Repeat("k", 256),
			"inner space":    "two words",
			"tab":            "a\tb",
			"non-ASCII":      "ключ",
			"two headers":    "k-1\nk-2",
		} {
			got := h.post(t, "/v1/things", 1, key, `{"name":"a"}`)
			expect(t, name, got, http.StatusBadRequest, "idempotency_key_invalid", idempotent.Rejected)
		}
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d after malformed keys, want 0", n)
		}
		got := h.post(t, "/v1/things", 1, strings.Repeat("k", 255), `{"name":"a"}`)
		expect(t, "255 characters", got, http.StatusCreated, "", idempotent.Executed)
	})

	t.Run("body invalid stores nothing", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		got := h.post(t, "/v1/things", 1, "k-1", `{"name":"a","colour":"red"}`)
		expect(t, "unknown field", got, http.StatusBadRequest, "invalid_request", idempotent.Rejected)
		// The corrected request with the same key runs: the refused body left no trace.
		got = h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`)
		expect(t, "corrected body, same key", got, http.StatusCreated, "", idempotent.Executed)
	})

	t.Run("token", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		got := h.post(t, "/v1/things", 1, "tok_"+strings.Repeat("f", 32), `{"name":"a"}`)
		expect(t, "unknown token", got, http.StatusBadRequest, "idempotency_token_invalid", idempotent.TokenInvalid)

		if got := h.post(t, "/v1/idempotency-tokens", 0, noKey, ``); got.status != http.StatusUnauthorized {
			t.Errorf("token without a user: %d %s, want 401", got.status, got.body)
		}
		issued := h.post(t, "/v1/idempotency-tokens", 1, noKey, ``)
		var tok struct {
			Token     string `json:"token"`
			ExpiresAt string `json:"expires_at"`
		}
		if err := json.Unmarshal([]byte(issued.body), &tok); err != nil || issued.status != http.StatusCreated || !strings.HasPrefix(tok.Token, "tok_") {
			t.Fatalf("POST /v1/idempotency-tokens = %d %s", issued.status, issued.body)
		}
		if _, err := time.Parse(time.RFC3339, tok.ExpiresAt); err != nil {
			t.Errorf("expires_at %q is not RFC 3339", tok.ExpiresAt)
		}
		first := h.post(t, "/v1/things", 1, tok.Token, `{"name":"a"}`)
		expect(t, "first use of the token", first, http.StatusCreated, "", idempotent.Executed)
		expectReplay(t, "double click", h.post(t, "/v1/things", 1, tok.Token, `{"name":"a"}`), first)
		other := h.post(t, "/v1/things", 2, tok.Token, `{"name":"a"}`)
		expect(t, "another user's token", other, http.StatusBadRequest, "idempotency_token_invalid", idempotent.TokenInvalid)
		elsewhere := h.post(t, "/v1/things/9/cancel", 1, tok.Token, ``)
		expect(t, "the token on another endpoint", elsewhere, http.StatusUnprocessableEntity, "idempotency_key_reused", idempotent.Mismatch)
		if n := countEffects(t, h.db, "thing") + countEffects(t, h.db, "cancel"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})

	for _, cache := range []struct {
		name string
		cfg  idempotent.Config
	}{
		{"from the cache", idempotent.Config{}},
		{"from the dedup record", idemlab.With(idempotent.Config{}, idemlab.Lab{NoCache: true})},
	} {
		t.Run("first then replay "+cache.name, func(t *testing.T) {
			t.Parallel()
			h := newHTTPEnv(t, cache.cfg, nil)
			first := h.post(t, "/v1/things", 1, "k-1", `{"name":"a","size":1}`)
			expect(t, "first", first, http.StatusCreated, "", idempotent.Executed)
			if first.header.Get("Location") == "" || first.header.Get("Content-Type") != "application/json" {
				t.Fatalf("first answer lacks Location or JSON Content-Type: %v", first.header)
			}
			if first.header.Get(httpkey.HeaderReplayed) != "" {
				t.Errorf("first answer carries %s", httpkey.HeaderReplayed)
			}
			// Another key order and whitespace are the same request.
			for _, body := range []string{`{"name":"a","size":1}`, "{ \"size\": 1,\n \"name\": \"a\" }"} {
				expectReplay(t, "replay", h.post(t, "/v1/things", 1, "k-1", body), first)
			}
			if n := countEffects(t, h.db, "thing"); n != 1 {
				t.Errorf("side_effects rows = %d, want 1", n)
			}
		})
	}

	t.Run("in flight", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		done := make(chan reply, 1)
		go func() { done <- h.post(t, "/v1/things?hold=1", 1, "k-1", `{"name":"a"}`) }()
		select {
		case <-h.things.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first request never reached its work")
		}
		// Not held: if the copy got past the layers it would execute, and the count shows it.
		// Its work is all in its transaction, so its record fences it: it waits for the first
		// and is answered the first's outcome.
		copied := make(chan reply, 1)
		go func() { copied <- h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`) }()
		time.Sleep(100 * time.Millisecond)
		close(h.things.release)
		first := <-done
		expect(t, "first", first, http.StatusCreated, "", idempotent.Executed)
		expectReplay(t, "copy while the first runs", <-copied, first)
		expectReplay(t, "copy after the first finished", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), first)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})

	t.Run("different request", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		expect(t, "first", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), http.StatusCreated, "", idempotent.Executed)
		expect(t, "another body", h.post(t, "/v1/things", 1, "k-1", `{"name":"b"}`),
			http.StatusUnprocessableEntity, "idempotency_key_reused", idempotent.Mismatch)
		// One key names one write of one user, whatever the endpoint.
		expect(t, "another endpoint", h.post(t, "/v1/things/7/cancel", 1, "k-1", `{"name":"a"}`),
			http.StatusUnprocessableEntity, "idempotency_key_reused", idempotent.Mismatch)
		if n := countEffects(t, h.db, "thing") + countEffects(t, h.db, "cancel"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})

	t.Run("different path, same route", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		first := h.post(t, "/v1/things/1/cancel", 1, "k-1", ``)
		expect(t, "cancel thing 1", first, http.StatusOK, "", idempotent.Executed)
		got := h.post(t, "/v1/things/2/cancel", 1, "k-1", ``)
		expect(t, "cancel thing 2 with the same key", got, http.StatusUnprocessableEntity, "idempotency_key_reused", idempotent.Mismatch)
		if got.body == first.body {
			t.Errorf("cancelling thing 2 answered thing 1's outcome: %s", got.body)
		}
		if n := countEffects(t, h.db, "cancel"); n != 1 {
			t.Errorf("cancel rows = %d, want 1", n)
		}
	})

	t.Run("different user", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		a := h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`)
		b := h.post(t, "/v1/things", 2, "k-1", `{"name":"a"}`)
		expect(t, "user 1", a, http.StatusCreated, "", idempotent.Executed)
		expect(t, "user 2, same key", b, http.StatusCreated, "", idempotent.Executed)
		if a.body == b.body {
			t.Errorf("user 2 got user 1's outcome %s", a.body)
		}
		if n := countEffects(t, h.db, "thing"); n != 2 {
			t.Errorf("side_effects rows = %d, want 2", n)
		}
	})

	t.Run("5xx not stored", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		// A 5xx the work fails with: nothing happened, the attempt failed.
		for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable} {
			got := h.post(t, "/v1/things?status="+strconv.Itoa(status), 1, "k-1", `{"name":"a"}`)
			expect(t, fmt.Sprintf("work failing with %d", status), got, status, "test_status", idempotent.Failed)
		}
		// A 5xx (or 401/403/408/429) the work answers: passed through, rolled back, not stored.
		for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
			got := h.post(t, "/v1/things?as=resp&status="+strconv.Itoa(status), 1, "k-1", `{"name":"a"}`)
			expect(t, fmt.Sprintf("work answering %d", status), got, status, "test_status", idempotent.Executed)
		}
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d after the failed attempts, want 0 (rolled back)", n)
		}
		expect(t, "retry", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), http.StatusCreated, "", idempotent.Executed)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d after the retry, want 1", n)
		}
	})
}

// TestBusinessRefusals: a refusal the work returns as an error (out_of_stock) is rendered as
// a problem, stored after the work's writes rolled back, and replayed byte for byte; a 4xx
// Response the work answers with a nil error commits with the work's writes and is stored
// too; an illegal_state refusal says Idempotency-Outcome: state_rejected.
func TestBusinessRefusals(t *testing.T) {
	t.Run("error rendered, stored, writes rolled back", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		first := h.post(t, "/v1/things?status=409&code=out_of_stock", 1, "k-1", `{"name":"a"}`)
		expect(t, "out of stock", first, http.StatusConflict, "out_of_stock", idempotent.Executed)
		if first.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("refusal Content-Type %q, want application/problem+json", first.header.Get("Content-Type"))
		}
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d after the refusal, want 0: its partial writes roll back", n)
		}
		// Without the query the work would now succeed: only the stored refusal answers.
		expectReplay(t, "copy of the refusal", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), first)
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d after the copy, want 0", n)
		}
	})

	t.Run("4xx response commits with the work", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		first := h.post(t, "/v1/things?as=resp&status=409", 1, "k-1", `{"name":"a"}`)
		expect(t, "409 response", first, http.StatusConflict, "test_status", idempotent.Executed)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1: a 4xx response commits with what the work wrote", n)
		}
		expectReplay(t, "copy of the 409", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), first)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d after the copy, want 1", n)
		}
	})

	t.Run("illegal state", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, nil)
		first := h.post(t, "/v1/things?status=409&code=illegal_state", 1, "k-1", `{"name":"a"}`)
		expect(t, "illegal state", first, http.StatusConflict, "illegal_state", idempotent.StateRejected)
		expectReplay(t, "copy of the illegal state", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), first)
	})
}

// TestWithoutRedis: with Redis unreachable the adapter answers 503 unavailable in reject
// mode (Idempotency-Outcome: unavailable, nothing written), and in degrade mode the dedup
// record alone makes the write exactly-once and replays it.
func TestWithoutRedis(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{RejectWithoutRedis: true}, testenv.Unreachable(t))
		got := h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`)
		expect(t, "redis down, reject", got, http.StatusServiceUnavailable, "unavailable", idempotent.Unavailable)
		if n := countEffects(t, h.db, "thing"); n != 0 {
			t.Errorf("side_effects rows = %d, want 0", n)
		}
		if got := h.post(t, "/v1/idempotency-tokens", 1, noKey, ``); got.status != http.StatusServiceUnavailable || got.code() != "unavailable" {
			t.Errorf("token with Redis down: %d %s, want 503 unavailable", got.status, got.body)
		}
	})
	t.Run("degrade", func(t *testing.T) {
		t.Parallel()
		h := newHTTPEnv(t, idempotent.Config{}, testenv.Unreachable(t))
		first := h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`)
		expect(t, "redis down, degrade", first, http.StatusCreated, "", idempotent.Executed)
		expectReplay(t, "copy", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), first)
		if n := countEffects(t, h.db, "thing"); n != 1 {
			t.Errorf("side_effects rows = %d, want 1", n)
		}
	})
}

// TestWorkRunsInTheDedupTransaction: the tx the work receives is the dedup transaction, not
// autocommit: its write is invisible outside until the commit, so it commits or rolls back
// with the record (I3).
func TestWorkRunsInTheDedupTransaction(t *testing.T) {
	t.Parallel()
	h := newHTTPEnv(t, idempotent.Config{}, nil)
	expect(t, "first", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), http.StatusCreated, "", idempotent.Executed)
	if !h.things.inTx.Load() {
		t.Errorf("the work's write was visible outside before the commit: it did not run in the dedup transaction")
	}
	if n := countEffects(t, h.db, "thing"); n != 1 {
		t.Errorf("side_effects rows = %d after the commit, want 1", n)
	}
}

// abortFirstRecord makes the database abort the INSERT of the dedup record numbered 1 as a
// deadlock would, after the work ran (a trigger: MySQL error 1213, SQLite "database is
// locked", both aborted to idem.Classify). The guard's Config.NewID must number the
// records 1, 2, 3 … (see counter).
func abortFirstRecord(t *testing.T, db *gorm.DB) {
	t.Helper()
	ddl := "CREATE TRIGGER test_abort_first BEFORE INSERT ON idempotency_records WHEN NEW.id = 1 " +
		"BEGIN SELECT RAISE(ABORT, 'database is locked (injected by the test)'); END"
	if database.DialectOf(db) == database.MySQL {
		ddl = "CREATE TRIGGER test_abort_first BEFORE INSERT ON idempotency_records FOR EACH ROW BEGIN " +
			"IF NEW.id = 1 THEN SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'Deadlock found when trying to get lock (injected by the test)', MYSQL_ERRNO = 1213; END IF; END"
	}
	if err := db.Exec(ddl).Error; err != nil {
		t.Fatalf("create trigger: %v", err)
	}
}

// counter returns 1, 2, 3 … on successive calls.
func counter() func() int64 {
	var next atomic.Int64
	return func() int64 { return next.Add(1) }
}

// TestAbortedTransactionRunsAgain: when the database aborts the dedup transaction after the
// work ran, the guard runs it again with the same request; the client sees one 201 for its
// body and a copy replays it.
func TestAbortedTransactionRunsAgain(t *testing.T) {
	t.Parallel()
	h := newHTTPEnv(t, idempotent.Config{NewID: counter()}, nil)
	abortFirstRecord(t, h.db)

	got := h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`)
	expect(t, "aborted then run again", got, http.StatusCreated, "", idempotent.Executed)
	if !strings.Contains(got.body, `"name":"a"`) {
		t.Errorf("the work run again answered %s, want the request's name", got.body)
	}
	key := idempotent.Key{Scope: "user:1", BizType: httpkey.BizType, BizKey: "k-1"}
	if rec, found, err := h.guard.Lookup(context.Background(), key); err != nil || !found || rec.ID == 1 {
		t.Errorf("Lookup = record %d, %v, %v; want record 1 aborted and another committed", rec.ID, found, err)
	}
	expectReplay(t, "copy", h.post(t, "/v1/things", 1, "k-1", `{"name":"a"}`), got)
	if n := countEffects(t, h.db, "thing"); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
}
