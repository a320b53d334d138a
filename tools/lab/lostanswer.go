package lab

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// lostAnswerHold is the longest the lab holds back the first answer of a run of I18 for a
// client that does not give up; it then answers 503 instead, the real answer still never sent.
const lostAnswerHold = time.Minute

// lostAnswers remembers the runs of I18 whose first answer was already lost.
type lostAnswers struct {
	mu   sync.Mutex
	seen map[string]bool
}

// first reports whether run is new, and remembers it.
func (l *lostAnswers) first(run string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	if l.seen[run] {
		return false
	}
	l.seen[run] = true
	return true
}

// loseFirstAnswer is the lossy network of I18 in front of oncepay's own POST /v1/orders. It is
// not a bug: I18's bug is the client's. Every request of ?run= goes through the real route,
// router, guard and order service included, as a gateway forwards it, and the client's giving
// up does not reach the server (the work runs on a context the client cannot cancel). The
// FIRST request of each run is answered by nobody: the lab keeps the real answer until the
// client has given up, then drops it, so that the client sees a real timeout after the order
// was committed. Later requests of the run are forwarded and answered as they are.
//
// What the client does next is the incident: the drill's naive client sends the order again
// under a NEW Idempotency-Key, and oncepay takes it for a second order; oncepay's client
// (package client) sends it again under the SAME key, and the retry is answered, replayed,
// with the order the lost answer carried.
func (l *Lab) loseFirstAnswer(w http.ResponseWriter, r *http.Request) {
	run := r.URL.Query().Get("run")
	if run == "" || len(run) > 64 {
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("run must be 1..64 characters: it names the drill run whose first answer is lost"))
		return
	}
	if l.upstream == nil {
		web.WriteError(w, r, apperr.ErrUnavailable.Withf("the lab is not mounted on an instance's router"))
		return
	}
	inner := r.Clone(context.WithValue(context.WithoutCancel(r.Context()), chi.RouteCtxKey, nil))
	inner.URL.Path, inner.URL.RawPath, inner.URL.RawQuery, inner.RequestURI = "/v1/orders", "", "", "/v1/orders"
	if !l.lost.first(run) {
		l.upstream.ServeHTTP(w, inner)
		return
	}
	held := httptest.NewRecorder()
	l.upstream.ServeHTTP(held, inner)
	select {
	case <-r.Context().Done(): // the client gave up: its answer is lost
	case <-time.After(lostAnswerHold):
		web.WriteError(w, r, apperr.ErrUnavailable.Withf("the lab held this answer for %s and the client did not give up", lostAnswerHold))
	}
}
