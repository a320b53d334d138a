package idem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestDatabaseDownIsNotStored runs a write whose database connection keeps breaking (the
// driver's "invalid connection") through the guard wired as oncepay wires it: the guard runs
// the transaction again for its RetryFor (a connection lost under a statement left nothing
// behind, dberr.ConnectionLost), then answers 503 unavailable with Retry-After; the
// key's outcome is not stored, and the retry with the same key runs the work and answers 201
// executed (issue: 503 not 500).
func TestDatabaseDownIsNotStored(t *testing.T) {
	db := testenv.DB(t)
	guard := idempotent.New(db, testenv.Redis(t).Client, idempotent.Config{
		Classify: idem.Classify(db),
		Reject:   idem.StoredProblem,
		RetryFor: 300 * time.Millisecond,
	})
	adapter := idem.HTTP(guard)
	key := idempotent.Key{Scope: "user:7", BizType: httpkey.BizType, BizKey: "db-down-" + t.Name()}
	body := []byte(`{"name":"x"}`)
	post := func(work idempotent.Work) *http.Response {
		r := httptest.NewRequest(http.MethodPost, "/v1/things", strings.NewReader(string(body)))
		r = r.WithContext(web.WithUser(r.Context(), 7))
		rec := httptest.NewRecorder()
		_, _ = adapter.Do(rec, r, key, body, work)
		return rec.Result()
	}

	runs := 0
	down := post(idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
		runs++
		return idempotent.Response{}, fmt.Errorf("insert thing: %w", gomysql.ErrInvalidConn)
	}))
	if down.StatusCode != http.StatusServiceUnavailable || down.Header.Get("Retry-After") == "" {
		t.Fatalf("database down: %d Retry-After %q, want 503 with Retry-After", down.StatusCode, down.Header.Get("Retry-After"))
	}
	if got := down.Header.Get(httpkey.HeaderOutcome); got != string(idempotent.Unavailable) || runs < 2 {
		t.Errorf("Idempotency-Outcome %q after %d runs, want %q after reruns", got, runs, idempotent.Unavailable)
	}
	before := runs
	if _, found, err := guard.Lookup(context.Background(), key); err != nil || found {
		t.Fatalf("after the 503 the key's record: found=%v err=%v, want none", found, err)
	}

	back := post(idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
		runs++
		return idem.JSON(http.StatusCreated, map[string]string{"name": "x"}), nil
	}))
	if back.StatusCode != http.StatusCreated || back.Header.Get(httpkey.HeaderOutcome) != string(idempotent.Executed) || runs != before+1 {
		t.Errorf("database back: %d %s after %d more runs, want 201 executed after 1", back.StatusCode, back.Header.Get(httpkey.HeaderOutcome), runs-before)
	}
}

// TestWriteRetryAfter checks the answers Write sends itself: a response the work answered
// with 503 (never stored) carries Retry-After, and a 409 in progress keeps its own.
func TestWriteRetryAfter(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/things", nil)
	rec := httptest.NewRecorder()
	idem.HTTP(nil).Write(rec, r, idempotent.Result{Response: idempotent.Response{Status: http.StatusServiceUnavailable}, Outcome: idempotent.Executed}, nil)
	if got := rec.Result().Header.Get("Retry-After"); got != web.RetryAfterUnavailable {
		t.Errorf("503 response: Retry-After %q, want %q", got, web.RetryAfterUnavailable)
	}
	rec = httptest.NewRecorder()
	idem.HTTP(nil).Write(rec, r, idempotent.Result{Outcome: idempotent.InProgress}, idempotent.ErrKeyInUse)
	if res := rec.Result(); res.StatusCode != http.StatusConflict || res.Header.Get("Retry-After") != "1" {
		t.Errorf("in progress: %d Retry-After %q, want 409 with 1", res.StatusCode, res.Header.Get("Retry-After"))
	}
}

// TestLockLostIsUnavailable: a work cancelled because its lease could not be renewed (Redis
// restarted under a slow payment, as the chaos run does) is answered 503 with Retry-After, not
// 500: the work rolled back and a retry with the same key runs again.
func TestLockLostIsUnavailable(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/payments/notify", nil)
	rec := httptest.NewRecorder()
	idem.HTTP(nil).Write(rec, r, idempotent.Result{Outcome: idempotent.Failed}, fmt.Errorf("apply: %w", idempotent.ErrLockLost))
	res := rec.Result()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("lock lost: %d Retry-After %q, want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if body := rec.Body.String(); !strings.Contains(body, `"code":"unavailable"`) {
		t.Errorf("lock lost: body %s, want code unavailable", body)
	}
}

// TestConflictsAreUnavailable runs, through the guard wired as oncepay wires it, a write whose
// transaction the database aborts every time (error 1213: a deadlock, or on Galera a
// certification conflict on a hot row): the guard runs it again within its retry budget, then
// the answer is 503 unavailable with Retry-After and Idempotency-Outcome unavailable — never
// 500 internal — and the key's outcome is not stored, so that once the conflicts end the same
// key executes (issue 21).
func TestConflictsAreUnavailable(t *testing.T) {
	db := testenv.DB(t)
	guard := idempotent.New(db, testenv.Redis(t).Client, idempotent.Config{
		Classify: idem.Classify(db),
		Reject:   idem.StoredProblem,
		RetryFor: 300 * time.Millisecond,
	})
	adapter := idem.HTTP(guard)
	key := idempotent.Key{Scope: "user:7", BizType: httpkey.BizType, BizKey: "conflict-" + t.Name()}
	body := []byte(`{"name":"x"}`)
	post := func(work idempotent.Work) *http.Response {
		r := httptest.NewRequest(http.MethodPost, "/v1/things", strings.NewReader(string(body)))
		r = r.WithContext(web.WithUser(r.Context(), 7))
		rec := httptest.NewRecorder()
		_, _ = adapter.Do(rec, r, key, body, work)
		return rec.Result()
	}

	runs := 0
	conflict := &gomysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}, Message: "Deadlock: wsrep aborted transaction"}
	res := post(idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
		runs++
		return idempotent.Response{}, fmt.Errorf("update stock: %w", conflict)
	}))
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("conflicts that last: %d Retry-After %q after %d runs, want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"), runs)
	}
	var p web.Problem
	if err := json.NewDecoder(res.Body).Decode(&p); err != nil || p.Code != "unavailable" || strings.Contains(p.Detail, "Deadlock") {
		t.Errorf("problem %+v (%v), want code unavailable naming no driver error", p, err)
	}
	if testenv.UsingMySQL() {
		if got := res.Header.Get(httpkey.HeaderOutcome); got != string(idempotent.Unavailable) || runs < 5 {
			t.Errorf("Idempotency-Outcome %q after %d runs, want %q after more than 4", got, runs, idempotent.Unavailable)
		}
	}
	if _, found, err := guard.Lookup(context.Background(), key); err != nil || found {
		t.Fatalf("after the 503 the key's record: found=%v err=%v, want none", found, err)
	}
	back := post(idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
		return idem.JSON(http.StatusCreated, map[string]string{"name": "x"}), nil
	}))
	if back.StatusCode != http.StatusCreated || back.Header.Get(httpkey.HeaderOutcome) != string(idempotent.Executed) {
		t.Errorf("conflicts over: %d %s, want 201 executed", back.StatusCode, back.Header.Get(httpkey.HeaderOutcome))
	}
}
