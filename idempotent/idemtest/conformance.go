package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/httpkey"
)

// Stack is what the conformance suite runs the kit on: an adopter's own database and Redis.
type Stack struct {
	// DB holds the kit's table (idempotent.CreateSchema, or Schema in the adopter's
	// migrations). The suite creates a table of its own beside it for each check, drops it
	// after, and purges every record of idempotency_records in one check: give it a database
	// of the tests, never one that matters.
	DB *gorm.DB
	// Redis is the adopter's Redis client; the suite's keys are random.
	Redis redis.UniversalClient
	// Config is the adopter's guard configuration. Its Classify must know the database's
	// duplicate key (mysqlerr, pgerr, sqliteerr); nil takes the kit's classifier of DB's
	// dialect. Registerer is replaced, since the suite builds several guards.
	Config idempotent.Config
}

// Run checks the kit's promises against the Stack setup returns, each in a subtest with a
// Stack of its own (setup may return the same database and Redis each time):
//
//   - storm: 50 copies of one key at once run the work once; every other copy is replayed
//     or told the first is in flight;
//   - storm, redis down: the same with Redis unreachable (degrade mode): the record alone
//     fences, and every answer says Idempotency-Degraded;
//   - replay: a copy after the first is answered the same status, headers and body, byte for
//     byte, from the cache and — Redis down — from the record, with Idempotency-Degraded;
//   - reused: the key again with another body is 422 idempotency_key_reused;
//   - in flight: a copy while the first runs waits for it and is answered its outcome, when
//     the request has no work outside its transaction (its record fences it); with such work
//     (Request.Before, under the lease) the copy is 409 idempotency_key_in_use with Retry-After;
//   - lease lost: the first copy's lease vanishes while it works (a Redis failover to a
//     replica that never saw it, I15) and a second copy takes the key: still one effect,
//     and the second is answered the first's outcome;
//   - redis down, reject: with Config.RejectWithoutRedis, 503 with Retry-After, nothing run;
//   - purge: once the records are purged, a redelivery runs the work again and the work's
//     own unique key refuses it (idempotent.Conflict): a stored 409, and still one effect.
//
// The checks go through idempotent/httpkey, as a client would see them.
func Run(t *testing.T, setup func(t *testing.T) Stack) {
	t.Helper()
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s suite)
	}{
		{"storm", checkStorm},
		{"storm, redis down", checkStormRedisDown},
		{"replay", checkReplay},
		{"reused", checkReused},
		{"in flight", checkInFlight},
		{"lease lost", checkLeaseLost},
		{"redis down, reject", checkReject},
		{"purge", checkPurge},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newSuite(t, setup(t))) })
	}
}

// suite is one check's stack, with its effects table and a random key prefix.
type suite struct {
	Stack
	effects string // the table of the work's effects: one row per effect, unique on k
	prefix  string
}

func newSuite(t *testing.T, st Stack) suite {
	t.Helper()
	if st.DB == nil || st.Redis == nil {
		t.Fatal("idemtest.Run: the setup's Stack needs a DB and a Redis")
	}
	if st.Config.Classify == nil {
		st.Config.Classify = Classify(st.DB.Dialector.Name())
	}
	st.Config.Registerer = nil
	s := suite{Stack: st, effects: "idemtest_effects_" + randomHex(4), prefix: "conf-" + randomHex(4) + "-"}
	ddl := "CREATE TABLE " + s.effects + " (k VARCHAR(64) NOT NULL, body VARCHAR(255) NOT NULL, CONSTRAINT uk_" + s.effects + " UNIQUE (k))"
	if err := st.DB.Exec(ddl).Error; err != nil {
		t.Fatalf("create %s: %v", s.effects, err)
	}
	t.Cleanup(func() { _ = st.DB.Exec("DROP TABLE " + s.effects).Error })
	return s
}

// handler is an httpkey.Handler on a guard of the stack with rdb, whose work adds the
// effect of its key — refused by the effects table's unique key, as a Conflict, when that
// effect exists — after hold returns.
func (s suite) handler(rdb redis.UniversalClient, cfg idempotent.Config, hold func()) http.Handler {
	return s.handlerWith(rdb, cfg, hold, false)
}

// leasedHandler is handler for a request with work outside its transaction (a Before that
// does nothing), which runs under the key's lease.
func (s suite) leasedHandler(hold func()) http.Handler {
	return s.handlerWith(s.Redis, s.Config, hold, true)
}

func (s suite) handlerWith(rdb redis.UniversalClient, cfg idempotent.Config, hold func(), leased bool) http.Handler {
	h := httpkey.Handler{Guard: idempotent.New(s.DB, rdb, cfg)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := h.Key(r)
		if err != nil {
			h.Reject(w, r, err)
			return
		}
		body := []byte(r.Header.Get("X-Body"))
		req := h.Request(r, key, body)
		if leased {
			req.Before = func(context.Context) error { return nil }
		}
		_, _ = h.Run(w, r, req, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
			if hold != nil {
				hold()
			}
			err := tx.Exec("INSERT INTO "+s.effects+" (k, body) VALUES (?, ?)", key.BizKey, string(body)).Error
			if err != nil && cfg.Classify(err) == dberr.DuplicateKey {
				return idempotent.Response{}, idempotent.Conflict(err)
			}
			if err != nil {
				return idempotent.Response{}, err
			}
			return idempotent.Response{
				Status: http.StatusCreated,
				Header: map[string]string{"Content-Type": "application/json", "Location": "/effects/" + key.BizKey},
				Body:   fmt.Appendf(nil, `{"k":%q,"at":%q}`, key.BizKey, time.Now().Format(time.RFC3339Nano)),
			}, nil
		}))
	})
}

// post sends a POST with key and body to h and returns its recorded answer.
func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/effects", nil)
	r.Header.Set(httpkey.HeaderKey, key)
	r.Header.Set("X-Body", body)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// effects counts the rows of key in the effects table.
func (s suite) count(t *testing.T, key string) int64 {
	t.Helper()
	var n int64
	if err := s.DB.Table(s.effects).Where("k = ?", key).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", s.effects, err)
	}
	return n
}

// code is the problem code of a refusal's body.
func code(w *httptest.ResponseRecorder) string {
	var p struct{ Code string }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	return p.Code
}

func checkStorm(t *testing.T, s suite) {
	storm(t, s, s.handler(s.Redis, s.Config, func() { time.Sleep(20 * time.Millisecond) }), s.prefix+"storm", 50, "")
}

func checkStormRedisDown(t *testing.T, s suite) {
	storm(t, s, s.handler(Unreachable(t), s.Config, func() { time.Sleep(20 * time.Millisecond) }), s.prefix+"storm-down", 20, " with Redis down")
}

// storm sends n copies of one request to h at once and checks the business effect — one —
// and the answers: 201 executed once, then 201 replayed or 409 in_progress. With Redis down
// (down is not empty) every answer must also say Idempotency-Degraded.
func storm(t *testing.T, s suite, h http.Handler, key string, n int, down string) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[string]int{}
	)
	suffix := ""
	if down != "" {
		suffix = " degraded:true"
	}
	for range n {
		wg.Go(func() {
			w := post(h, key, "storm")
			answer := fmt.Sprint(w.Code, " ", w.Header().Get(httpkey.HeaderOutcome))
			if down != "" {
				answer += fmt.Sprint(" degraded:", w.Header().Get(httpkey.HeaderDegraded) != "")
			}
			mu.Lock()
			outcomes[answer]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got := s.count(t, key); got != 1 {
		t.Errorf("%d copies of one key%s made %d effects, want 1 (answers %v)", n, down, got, outcomes)
	}
	for answer, k := range outcomes {
		switch answer {
		case "201 executed" + suffix, "201 replayed" + suffix, "409 in_progress" + suffix:
		default:
			t.Errorf("%d copies answered %s; want 201 executed once, then 201 replayed or 409 in_progress%s", k, answer, suffix)
		}
	}
	if outcomes["201 executed"+suffix] != 1 {
		t.Errorf("%d copies executed, want 1 (answers %v)", outcomes["201 executed"+suffix], outcomes)
	}
}

func checkReplay(t *testing.T, s suite) {
	h := s.handler(s.Redis, s.Config, nil)
	down := s.handler(Unreachable(t), s.Config, nil)
	key := s.prefix + "replay"
	first := post(h, key, "replay")
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s, want 201", first.Code, first.Body)
	}
	for name, w := range map[string]*httptest.ResponseRecorder{"from the cache": post(h, key, "replay"), "from the record, Redis down": post(down, key, "replay")} {
		if w.Code != first.Code || !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) ||
			w.Header().Get("Content-Type") != first.Header().Get("Content-Type") || w.Header().Get("Location") != first.Header().Get("Location") {
			t.Errorf("replay %s: %d %v %s, want %d %v %s", name, w.Code, w.Header(), w.Body, first.Code, first.Header(), first.Body)
		}
		if w.Header().Get(httpkey.HeaderReplayed) != "true" || w.Header().Get(httpkey.HeaderOutcome) != string(idempotent.Replayed) {
			t.Errorf("replay %s: %s %q, %s %q; want true, replayed", name, httpkey.HeaderReplayed, w.Header().Get(httpkey.HeaderReplayed),
				httpkey.HeaderOutcome, w.Header().Get(httpkey.HeaderOutcome))
		}
		if degraded := w.Header().Get(httpkey.HeaderDegraded); (name == "from the cache") != (degraded == "") {
			t.Errorf("replay %s: %s %q", name, httpkey.HeaderDegraded, degraded)
		}
	}
	if n := s.count(t, key); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

func checkReused(t *testing.T, s suite) {
	h := s.handler(s.Redis, s.Config, nil)
	key := s.prefix + "reused"
	if w := post(h, key, "one"); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s, want 201", w.Code, w.Body)
	}
	if w := post(h, key, "another"); w.Code != http.StatusUnprocessableEntity || code(w) != idempotent.ErrKeyReused.Code {
		t.Errorf("the key with another body: %d %s, want 422 %s", w.Code, w.Body, idempotent.ErrKeyReused.Code)
	}
}

func checkInFlight(t *testing.T, s suite) {
	for _, leased := range []bool{false, true} {
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		hold := func() {
			once.Do(func() { close(started) })
			<-release
		}
		h, key := s.handler(s.Redis, s.Config, hold), s.prefix+"inflight"
		if leased {
			h, key = s.leasedHandler(hold), s.prefix+"inflight-leased"
		}
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- post(h, key, "inflight") }()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("the first copy never reached its work")
		}
		copied := make(chan *httptest.ResponseRecorder)
		go func() { copied <- post(h, key, "inflight") }()
		var w *httptest.ResponseRecorder
		if leased {
			w = <-copied // answered at once, while the first still holds the lease
			close(release)
		} else {
			time.Sleep(100 * time.Millisecond) // the copy reaches the guard and waits
			close(release)
			w = <-copied
		}
		first := <-done
		if first.Code != http.StatusCreated {
			t.Errorf("the first copy: %d %s, want 201", first.Code, first.Body)
		}
		switch {
		case leased && (w.Code != http.StatusConflict || code(w) != idempotent.ErrKeyInUse.Code || w.Header().Get(httpkey.HeaderRetryAfter) == ""):
			t.Errorf("a copy in flight of a request with work outside its transaction: %d %s Retry-After %q, want 409 %s with Retry-After",
				w.Code, w.Body, w.Header().Get(httpkey.HeaderRetryAfter), idempotent.ErrKeyInUse.Code)
		case !leased && (w.Code != http.StatusCreated || !bytes.Equal(w.Body.Bytes(), first.Body.Bytes())):
			t.Errorf("a copy in flight: %d %s, want the first copy's 201 %s once it is done", w.Code, w.Body, first.Body)
		}
		if n := s.count(t, key); n != 1 {
			t.Errorf("%d effects of %s, want 1", n, key)
		}
	}
}

func checkLeaseLost(t *testing.T, s suite) {
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := true
	var mu sync.Mutex
	h := s.leasedHandler(func() {
		mu.Lock()
		holder := first
		first = false
		mu.Unlock()
		if holder {
			once.Do(func() { close(started) })
			<-release
		}
	})
	key := s.prefix + "leaselost"
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post(h, key, "leaselost") }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the first copy never reached its work")
	}
	// The lease's Redis key, as the guard names it (Config.KeyPrefix, then the key's hash
	// tag): what a failover to a replica that never saw it loses.
	lease := s.Config.KeyPrefix + "idem:{" + idempotent.Key{BizType: httpkey.BizType, BizKey: key}.String() + "}:lock"
	if n, err := s.Redis.Del(context.Background(), lease).Result(); err != nil || n != 1 {
		close(release)
		t.Fatalf("delete the first copy's lease %s: deleted %d, err %v", lease, n, err)
	}
	second := make(chan *httptest.ResponseRecorder)
	go func() { second <- post(h, key, "leaselost") }()
	time.Sleep(200 * time.Millisecond) // the second copy takes the key and reaches the database
	close(release)
	a, b := <-done, <-second
	if n := s.count(t, key); n != 1 {
		t.Errorf("%d effects with two holders of one key, want 1 (answers %d %s, %d %s)", n, a.Code, a.Body, b.Code, b.Body)
	}
	if a.Code != http.StatusCreated && a.Code != http.StatusServiceUnavailable {
		t.Errorf("the first holder: %d %s, want 201, or 503 if its watchdog noticed the lost lease", a.Code, a.Body)
	}
	if b.Code != http.StatusCreated || (a.Code == http.StatusCreated && !bytes.Equal(a.Body.Bytes(), b.Body.Bytes())) {
		t.Errorf("the second holder: %d %s, want 201 with the first's body %s", b.Code, b.Body, a.Body)
	}
}

func checkReject(t *testing.T, s suite) {
	cfg := s.Config
	cfg.RejectWithoutRedis = true
	h := s.handler(Unreachable(t), cfg, nil)
	key := s.prefix + "reject"
	w := post(h, key, "reject")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get(httpkey.HeaderRetryAfter) == "" {
		t.Errorf("Redis down, reject mode: %d %s Retry-After %q, want 503 with Retry-After", w.Code, w.Body, w.Header().Get(httpkey.HeaderRetryAfter))
	}
	if n := s.count(t, key); n != 0 {
		t.Errorf("%d effects with the request refused, want 0", n)
	}
}

func checkPurge(t *testing.T, s suite) {
	h := s.handler(s.Redis, s.Config, nil)
	key := s.prefix + "purge"
	if w := post(h, key, "purge"); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s, want 201", w.Code, w.Body)
	}
	g := idempotent.New(s.DB, s.Redis, s.Config)
	// A negative age puts the cutoff in the future: every record goes, as if the retention
	// had passed.
	if _, err := g.Purge(context.Background(), idempotent.PurgeOptions{OlderThan: -time.Minute}); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if _, found, err := g.Lookup(context.Background(), idempotent.Key{Scope: "", BizType: httpkey.BizType, BizKey: key}); found || err != nil {
		t.Fatalf("the record survived the purge (found %t, err %v)", found, err)
	}
	w := post(h, key, "purge")
	if w.Code != http.StatusConflict {
		t.Errorf("a redelivery after the purge: %d %s, want the work's own fence to refuse it, 409", w.Code, w.Body)
	}
	again := post(h, key, "purge")
	if again.Code != w.Code || !bytes.Equal(again.Body.Bytes(), w.Body.Bytes()) || again.Header().Get(httpkey.HeaderReplayed) != "true" {
		t.Errorf("its retry: %d %s replayed %q, want the stored %d again", again.Code, again.Body, again.Header().Get(httpkey.HeaderReplayed), w.Code)
	}
	if n := s.count(t, key); n != 1 {
		t.Errorf("%d effects after the purge and redelivery, want 1", n)
	}
	if strings.Contains(w.Body.String(), "Duplicate") || strings.Contains(w.Body.String(), "UNIQUE") {
		t.Errorf("the 409 shows the driver's message: %s", w.Body)
	}
}
