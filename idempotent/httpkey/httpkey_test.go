package httpkey_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestHandler drives a POST through httpkey with nothing set but the database and Redis:
// twenty copies at once execute once; a replay is the same bytes with Idempotent-Replayed;
// the key with another body is 422; no key is 400; every answer says its outcome.
func TestHandler(t *testing.T) {
	dialect := idemtest.Default()
	db := idemtest.DB(t, dialect)
	if err := db.Exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, body VARCHAR(64) NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	h := httpkey.Handler{Guard: idempotent.New(db, idemtest.Redis(t), idempotent.Config{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := httpkey.Key(r, "user:1")
		if err != nil {
			h.Write(w, r, idempotent.Result{}, err)
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = h.Do(w, r, key, body, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
			var n int64
			if err := tx.Table("notes").Count(&n).Error; err != nil {
				return idempotent.Response{}, err
			}
			if err := tx.Exec("INSERT INTO notes (id, body) VALUES (?, ?)", n+1, string(body)).Error; err != nil {
				return idempotent.Response{}, err
			}
			return idempotent.Response{Status: http.StatusCreated, Body: []byte(`{"note":` + string(rune('0'+n+1)) + `}`)}, nil
		}))
	}))
	defer srv.Close()
	post := func(key, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/notes", strings.NewReader(body))
		if key != "" {
			req.Header.Set(httpkey.HeaderKey, key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[string]int{}
	)
	for range 20 {
		wg.Go(func() {
			res := post("k-1", `{"text":"hello"}`)
			res.Body.Close()
			mu.Lock()
			outcomes[res.Header.Get(httpkey.HeaderOutcome)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	var notes int64
	db.Table("notes").Count(&notes)
	if notes != 1 || outcomes["executed"] != 1 {
		t.Fatalf("%d notes, outcomes %v; want one note, executed once", notes, outcomes)
	}
	res := post("k-1", `{"text":"hello"}`)
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated || res.Header.Get(httpkey.HeaderReplayed) != "true" || string(b) != `{"note":1}` {
		t.Errorf("replay: %d %q %s", res.StatusCode, res.Header.Get(httpkey.HeaderReplayed), b)
	}
	for _, tt := range []struct {
		key, body string
		status    int
		code      string
	}{
		{"k-1", `{"text":"other"}`, http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{"", `{}`, http.StatusBadRequest, "idempotency_key_missing"},
		{"bad key", `{}`, http.StatusBadRequest, "idempotency_key_invalid"},
	} {
		res := post(tt.key, tt.body)
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != tt.status || !strings.Contains(string(b), tt.code) || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("key %q: %d %s, want %d %s", tt.key, res.StatusCode, b, tt.status, tt.code)
		}
	}
}

// answer is what a recorded handler wrote.
type answer struct {
	status int
	header http.Header
	code   string
	body   string
}

// record runs write against a recorder and reads what it wrote.
func record(t *testing.T, write func(w http.ResponseWriter)) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	write(rec)
	var p struct{ Code string }
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	return answer{status: rec.Code, header: rec.Result().Header, code: p.Code, body: rec.Body.String()}
}

// TestKeyRefusals: Key reads the header in the scope of Scope; a key missing, repeated,
// empty or not 1..255 visible ASCII characters is 400 idempotency_key_missing or
// idempotency_key_invalid, and Reject writes it with Idempotency-Outcome: rejected; a Scope
// that refuses the request reaches Problem with status 0, for the service to answer as its own.
func TestKeyRefusals(t *testing.T) {
	errNobody := errors.New("nobody is authenticated")
	var problemStatus int
	h := httpkey.Handler{
		Scope: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" {
				return "user:" + u, nil
			}
			return "", errNobody
		},
		Problem: func(w http.ResponseWriter, r *http.Request, status int, err error) {
			problemStatus = status
			if errors.Is(err, errNobody) {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			httpkey.DefaultProblem(w, r, status, err)
		},
	}
	for _, tt := range []struct {
		name   string
		user   string
		keys   []string
		status int
		code   string
	}{
		{"missing", "7", nil, http.StatusBadRequest, "idempotency_key_missing"},
		{"empty", "7", []string{""}, http.StatusBadRequest, "idempotency_key_invalid"},
		{"twice", "7", []string{"k-1", "k-2"}, http.StatusBadRequest, "idempotency_key_invalid"},
		{"a space", "7", []string{"k 1"}, http.StatusBadRequest, "idempotency_key_invalid"},
		{"256 characters", "7", []string{strings.Repeat("k", 256)}, http.StatusBadRequest, "idempotency_key_invalid"},
		{"non-ASCII", "7", []string{"clé"}, http.StatusBadRequest, "idempotency_key_invalid"},
		{"no scope", "", []string{"k-1"}, http.StatusUnauthorized, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/notes", nil)
			r.Header.Set("X-User", tt.user)
			if tt.keys != nil {
				r.Header[httpkey.HeaderKey] = tt.keys
			}
			_, err := h.Key(r)
			got := record(t, func(w http.ResponseWriter) { h.Reject(w, r, err) })
			if got.status != tt.status || got.code != tt.code || got.header.Get(httpkey.HeaderOutcome) != "rejected" {
				t.Errorf("%d %q outcome %q, want %d %q rejected", got.status, got.code, got.header.Get(httpkey.HeaderOutcome), tt.status, tt.code)
			}
			if want := map[bool]int{true: 0, false: tt.status}[tt.user == ""]; problemStatus != want {
				t.Errorf("Problem got status %d, want %d", problemStatus, want)
			}
		})
	}
	r := httptest.NewRequest(http.MethodPost, "/notes", nil)
	r.Header.Set("X-User", "7")
	r.Header.Set(httpkey.HeaderKey, " k-1 ")
	if key, err := h.Key(r); err != nil || key != (idempotent.Key{Scope: "user:7", BizType: httpkey.BizType, BizKey: "k-1"}) {
		t.Errorf("Key = %+v, %v; want k-1 in scope user:7", key, err)
	}
}

// TestRetryAfter: a 409 idempotency_key_in_use says Retry-After: 1; every 503 — a refusal of
// the guard, a lost lease, a work that answered 503 itself, a refusal before the guard —
// says RetryAfter in whole seconds (one by default), unless the work's answer set its own.
func TestRetryAfter(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/notes", nil)
	unavailable := idempotent.Response{Status: http.StatusServiceUnavailable}
	tests := []struct {
		name       string
		retryAfter time.Duration
		write      func(h httpkey.Handler, w http.ResponseWriter)
		status     int
		code, want string
	}{
		{"in progress", 5 * time.Second, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Write(w, r, idempotent.Result{Outcome: idempotent.InProgress}, idempotent.ErrKeyInUse)
		}, http.StatusConflict, "idempotency_key_in_use", "1"},
		{"redis down, reject", 2 * time.Second, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Write(w, r, idempotent.Result{Outcome: idempotent.Unavailable}, idempotent.ErrUnavailable)
		}, http.StatusServiceUnavailable, "unavailable", "2"},
		{"default", 0, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Write(w, r, idempotent.Result{Outcome: idempotent.Unavailable}, fmt.Errorf("busy: %w", idempotent.ErrUnavailable))
		}, http.StatusServiceUnavailable, "unavailable", "1"},
		{"rounded up", 1500 * time.Millisecond, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Write(w, r, idempotent.Result{Outcome: idempotent.Unavailable}, idempotent.ErrUnavailable)
		}, http.StatusServiceUnavailable, "unavailable", "2"},
		{"lock lost", 2 * time.Second, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Write(w, r, idempotent.Result{Outcome: idempotent.Failed}, fmt.Errorf("apply: %w", idempotent.ErrLockLost))
		}, http.StatusServiceUnavailable, "unavailable", "2"},
		{"the work answered 503", 2 * time.Second, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Write(w, r, idempotent.Result{Outcome: idempotent.Executed, Response: unavailable}, nil)
		}, http.StatusServiceUnavailable, "", "2"},
		{"the work's own Retry-After", 2 * time.Second, func(h httpkey.Handler, w http.ResponseWriter) {
			resp := idempotent.Response{Status: http.StatusServiceUnavailable, Header: map[string]string{"Retry-After": "30"}}
			h.Write(w, r, idempotent.Result{Outcome: idempotent.Executed, Response: resp}, nil)
		}, http.StatusServiceUnavailable, "", "30"},
		{"refused before the guard", 2 * time.Second, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Reject(w, r, idempotent.ErrUnavailable)
		}, http.StatusServiceUnavailable, "unavailable", "2"},
		{"a 422 says nothing", 2 * time.Second, func(h httpkey.Handler, w http.ResponseWriter) {
			h.Write(w, r, idempotent.Result{Outcome: idempotent.Mismatch}, idempotent.ErrKeyReused)
		}, http.StatusUnprocessableEntity, "idempotency_key_reused", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := record(t, func(w http.ResponseWriter) { tt.write(httpkey.Handler{RetryAfter: tt.retryAfter}, w) })
			if got.status != tt.status || got.code != tt.code || got.header.Get("Retry-After") != tt.want {
				t.Errorf("%d %q Retry-After %q, want %d %q Retry-After %q", got.status, got.code, got.header.Get("Retry-After"), tt.status, tt.code, tt.want)
			}
		})
	}
}

// TestDegraded: with Redis unreachable and the guard in degrade mode, the write runs once under
// the dedup record, and every answer — the first and its replay — names the layers that
// stepped aside in Idempotency-Degraded, the token among them for a tok_ key; so does the
// replay a second process with Redis down answers from the record of a write that executed
// while Redis was up. With Redis up the header is absent. On every dialect.
func TestDegraded(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testDegraded(t, dialect)
		})
	}
}

func testDegraded(t *testing.T, dialect string) {
	db := idemtest.DB(t, dialect)
	down := httpkey.Handler{Guard: idempotent.New(db, idemtest.Unreachable(t), idempotent.Config{Classify: idemtest.Classify(dialect)})}
	up := httpkey.Handler{Guard: idempotent.New(db, idemtest.Redis(t), idempotent.Config{Classify: idemtest.Classify(dialect)})}
	post := func(h httpkey.Handler, key string) answer {
		r := httptest.NewRequest(http.MethodPost, "/notes", strings.NewReader(`{}`))
		return record(t, func(w http.ResponseWriter) {
			_, _ = h.Do(w, r, idempotent.Key{Scope: "user:1", BizType: httpkey.BizType, BizKey: key}, []byte(`{}`),
				idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
					return idempotent.Response{Status: http.StatusCreated, Body: []byte(`{"id":1}`)}, nil
				}))
		})
	}
	for _, tt := range []struct {
		name, key, want string
	}{
		{"plain key", "degraded-" + t.Name(), "cache, lock"},
		{"token", "tok_" + strings.Repeat("a", 32), "token, cache, lock"},
	} {
		first := post(down, tt.key)
		again := post(down, tt.key)
		if first.status != http.StatusCreated || first.header.Get(httpkey.HeaderDegraded) != tt.want {
			t.Errorf("%s with Redis down: %d %s %q, want 201 %q", tt.name, first.status, httpkey.HeaderDegraded, first.header.Get(httpkey.HeaderDegraded), tt.want)
		}
		if again.header.Get(httpkey.HeaderReplayed) != "true" || again.header.Get(httpkey.HeaderDegraded) != tt.want {
			t.Errorf("%s replayed with Redis down: replayed %q %s %q, want true %q", tt.name,
				again.header.Get(httpkey.HeaderReplayed), httpkey.HeaderDegraded, again.header.Get(httpkey.HeaderDegraded), tt.want)
		}
	}
	if got := post(up, "up-"+t.Name()); got.status != http.StatusCreated || got.header.Get(httpkey.HeaderDegraded) != "" {
		t.Errorf("with Redis up: %d %s %q, want 201 without it", got.status, httpkey.HeaderDegraded, got.header.Get(httpkey.HeaderDegraded))
	}
	// Executed with Redis up, replayed by another process that cannot reach Redis.
	replay := post(down, "up-"+t.Name())
	if replay.status != http.StatusCreated || replay.header.Get(httpkey.HeaderReplayed) != "true" ||
		replay.header.Get(httpkey.HeaderOutcome) != string(idempotent.Replayed) || replay.header.Get(httpkey.HeaderDegraded) != "cache, lock" {
		t.Errorf("replay with Redis down of a write made with Redis up: %d replayed %q outcome %q %s %q, want 201 true replayed %q",
			replay.status, replay.header.Get(httpkey.HeaderReplayed), replay.header.Get(httpkey.HeaderOutcome),
			httpkey.HeaderDegraded, replay.header.Get(httpkey.HeaderDegraded), "cache, lock")
	}
}

// TestStored: a refusal the work returns is rendered by Stored with what it knows of the
// request, stored and replayed byte for byte, the work's rows rolled back; one Stored
// declines is written through Problem and stores nothing, so the retry runs again.
func TestStored(t *testing.T) {
	dialect := idemtest.Default()
	db := idemtest.DB(t, dialect)
	errOutOfStock, errBroken := errors.New("out of stock"), errors.New("broken")
	h := httpkey.Handler{
		Guard: idempotent.New(db, idemtest.Redis(t), idempotent.Config{Classify: idemtest.Classify(dialect)}),
		Stored: func(r *http.Request, err error) (idempotent.Response, bool) {
			if !errors.Is(err, errOutOfStock) {
				return idempotent.Response{}, false
			}
			return idempotent.Response{Status: http.StatusConflict, Body: []byte(`{"code":"out_of_stock","instance":"` + r.URL.Path + `"}`)}, true
		},
	}
	runs := 0
	post := func(fail error) answer {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		return record(t, func(w http.ResponseWriter) {
			_, _ = h.Do(w, r, idempotent.Key{Scope: "user:1", BizType: httpkey.BizType, BizKey: t.Name()}, nil,
				idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
					runs++
					return idempotent.Response{Status: http.StatusCreated}, fail
				}))
		})
	}
	broken := post(errBroken)
	if broken.status != http.StatusInternalServerError || broken.header.Get(httpkey.HeaderOutcome) != "failed" {
		t.Errorf("declined by Stored: %d %q, want 500 failed", broken.status, broken.header.Get(httpkey.HeaderOutcome))
	}
	first := post(errOutOfStock)
	if first.status != http.StatusConflict || first.body != `{"code":"out_of_stock","instance":"/orders"}` || first.header.Get(httpkey.HeaderOutcome) != "executed" {
		t.Errorf("refusal: %d %s %q, want 409 out_of_stock at /orders, executed", first.status, first.body, first.header.Get(httpkey.HeaderOutcome))
	}
	again := post(nil)
	if again.status != http.StatusConflict || again.body != first.body || again.header.Get(httpkey.HeaderReplayed) != "true" || runs != 2 {
		t.Errorf("copy: %d %s replayed %q after %d runs, want the refusal replayed after 2", again.status, again.body, again.header.Get(httpkey.HeaderReplayed), runs)
	}
}
