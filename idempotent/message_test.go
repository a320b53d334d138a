package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// countingWork wraps w and counts its calls, to show that a duplicate never reaches it.
func countingWork(calls *atomic.Int32, w idempotent.Work) idempotent.Work {
	return func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		calls.Add(1)
		return w(ctx, tx, record)
	}
}

// notification is the Request of a payment notification: the business key channel +
// trade_no (I1), with the fingerprint the HTTP path computes for the same body.
func notification(tradeNo string) idempotent.Request {
	const body = `{"channel":"alipay","trade_no":"T1","amount":100,"status":"SUCCESS"}`
	return idempotent.Request{
		Key:         idempotent.Key{Scope: "channel:alipay", BizType: "payment.notify", BizKey: tradeNo},
		Fingerprint: idempotent.Fingerprint("POST", "/v1/payments/notify", []byte(body)),
	}
}

// TestMessage: the first delivery executes; redeliveries are acknowledged from the Redis
// marker without touching the work or the database.
func TestMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	req := notification("T1")
	var calls atomic.Int32
	work := countingWork(&calls, effectWork("paid", 0, http.StatusOK))

	res, err := g.Message(ctx, req, work)
	if err != nil || res.Outcome != idempotent.Executed {
		t.Fatalf("first delivery: outcome %q err %v, want executed", res.Outcome, err)
	}
	for i := range 5 {
		res, err := g.Message(ctx, req, work)
		if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerMessage {
			t.Errorf("redelivery %d: outcome %q layer %q err %v, want replayed by the message marker", i, res.Outcome, res.Layer, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the work ran %d times, want 1", n)
	}
	if n := countEffects(t, e.db, "paid"); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
}

// TestMessageInFlight: a copy consumed while the first is still being processed is not
// acknowledged (ErrKeyInUse), so the broker redelivers it later.
func TestMessageInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	req := notification("T1")
	first := make(chan call, 1)
	go func() {
		res, err := g.Message(ctx, req, effectWork("paid", 500*time.Millisecond, http.StatusOK))
		first <- call{res, err}
	}()
	time.Sleep(150 * time.Millisecond)
	res, err := g.Message(ctx, req, effectWork("paid", 0, http.StatusOK))
	if !errors.Is(err, idempotent.ErrKeyInUse) || res.Outcome != idempotent.InProgress {
		t.Errorf("copy during processing: outcome %q err %v, want in_progress / ErrKeyInUse", res.Outcome, err)
	}
	if c := <-first; c.err != nil || c.res.Outcome != idempotent.Executed {
		t.Fatalf("first delivery: outcome %q err %v", c.res.Outcome, c.err)
	}
	if n := countEffects(t, e.db, "paid"); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
}

// TestMessageFailureReleasesTheMarker: a delivery whose work fails — with an error or with
// an outcome that is not stored (5xx) — leaves no marker behind, is not to be acknowledged,
// and its redelivery runs.
func TestMessageFailureReleasesTheMarker(t *testing.T) {
	tests := []struct {
		name string
		work idempotent.Work
	}{
		{"work error", idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
			return idempotent.Response{}, errUpstream
		})},
		{"5xx outcome", effectWork("paid", 0, http.StatusServiceUnavailable)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			g := e.guard(idempotent.Config{})
			ctx := context.Background()
			req := notification("T1")

			if _, err := g.Message(ctx, req, tt.work); err == nil {
				t.Errorf("a failed delivery returned no error: the consumer would acknowledge it and lose the message")
			}
			if n, _ := e.rdb.Exists(ctx, g.MarkerKey(req.Key)).Result(); n != 0 {
				t.Errorf("the marker survived a failed delivery")
			}
			res, err := g.Message(ctx, req, effectWork("paid", 0, http.StatusOK))
			if err != nil || res.Outcome != idempotent.Executed {
				t.Fatalf("redelivery: outcome %q layer %q err %v, want executed", res.Outcome, res.Layer, err)
			}
			if n := countEffects(t, e.db, "paid"); n != 1 {
				t.Errorf("side_effects rows = %d, want 1", n)
			}
		})
	}
}

// TestHTTPAndMessageConverge replays I1's fix: the same payment fact arriving over HTTP and
// then from Kafka converges on one key; the message is answered from the HTTP outcome.
func TestHTTPAndMessageConverge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	req := notification("T1")
	var calls atomic.Int32
	work := countingWork(&calls, effectWork("paid", 0, http.StatusOK))

	if res, err := g.Do(ctx, req, work); err != nil || res.Outcome != idempotent.Executed {
		t.Fatalf("HTTP copy: outcome %q err %v, want executed", res.Outcome, err)
	}
	res, err := g.Message(ctx, req, work)
	if err != nil || res.Outcome != idempotent.Replayed {
		t.Errorf("Kafka copy: outcome %q layer %q err %v, want replayed", res.Outcome, res.Layer, err)
	}
	res, err = g.Message(ctx, req, work)
	if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerMessage {
		t.Errorf("Kafka redelivery: outcome %q layer %q err %v, want replayed by the marker", res.Outcome, res.Layer, err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the work ran %d times, want 1", n)
	}
	if n := countEffects(t, e.db, "paid"); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
}

// TestMessageShortFingerprint: Message takes any fingerprint a caller builds, even one
// shorter than a SHA-256; it must not panic on it.
func TestMessageShortFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	req := idempotent.Request{Key: idempotent.Key{Scope: "s", BizType: "t", BizKey: "k"}, Fingerprint: "v1"}
	var (
		res idempotent.Result
		err error
	)
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("Message panicked on a short fingerprint: %v", v)
			}
		}()
		res, err = g.Message(context.Background(), req, effectWork("short", 0, http.StatusOK))
	}()
	if err != nil || res.Outcome != idempotent.Executed {
		t.Errorf("outcome %q err %v, want executed", res.Outcome, err)
	}
}

// TestMessageRejectionIsAcknowledged: a delivery whose work is refused for good (a business
// error that Reject renders as a stored 4xx) is acknowledged and marked done, so the broker
// stops redelivering it; the refusal's partial writes are rolled back and a redelivery is
// answered by the marker without running the work.
func TestMessageRejectionIsAcknowledged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	errConflict := errors.New("trade_no belongs to another order")
	g := e.guard(idempotent.Config{Reject: func(_ context.Context, err error) (idempotent.Response, bool) {
		if errors.Is(err, errConflict) {
			return jsonResponse(http.StatusUnprocessableEntity, map[string]string{"code": "trade_conflict"}), true
		}
		return idempotent.Response{}, false
	}})
	ctx := context.Background()
	req := notification("T1")
	var calls atomic.Int32
	work := countingWork(&calls, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		if _, err := insertEffect(tx, "partial"); err != nil {
			return idempotent.Response{}, err
		}
		return idempotent.Response{}, errConflict
	}))

	res, err := g.Message(ctx, req, work)
	if err != nil || res.Outcome != idempotent.Executed || !errors.Is(res.Rejection, errConflict) || res.Response.Status != http.StatusUnprocessableEntity {
		t.Fatalf("first delivery: outcome %q status %d rejection %v err %v; want an executed, stored 422 refusal", res.Outcome, res.Response.Status, res.Rejection, err)
	}
	if v, _ := e.rdb.Get(ctx, g.MarkerKey(req.Key)).Result(); v != "done" {
		t.Errorf("marker after a stored refusal = %q, want done", v)
	}
	res, err = g.Message(ctx, req, work)
	if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerMessage {
		t.Errorf("redelivery: outcome %q layer %q err %v, want replayed by the marker", res.Outcome, res.Layer, err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the work ran %d times, want 1", n)
	}
	if n := countEffects(t, e.db, "partial"); n != 0 {
		t.Errorf("partial rows = %d, want 0: a refusal stored by Reject rolls the work back", n)
	}
}

// TestMessageWithoutRedis: with Redis unreachable the marker steps aside in degrade mode and
// the dedup record alone answers a redelivery; in reject mode the delivery is refused with
// unavailable and must not be acknowledged.
func TestMessageWithoutRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	req := notification("T1")
	var calls atomic.Int32
	work := countingWork(&calls, effectWork("paid", 0, http.StatusOK))

	rejecting := e.guardWith(idemtest.Unreachable(t), idempotent.Config{RejectWithoutRedis: true})
	res, err := rejecting.Message(ctx, req, work)
	if code(err) != "unavailable" || res.Outcome != idempotent.Unavailable {
		t.Errorf("reject mode: outcome %q err %v, want unavailable", res.Outcome, err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("reject mode ran the work %d times, want 0", n)
	}

	g := e.guardWith(idemtest.Unreachable(t), idempotent.Config{})
	if res, err := g.Message(ctx, req, work); err != nil || res.Outcome != idempotent.Executed {
		t.Fatalf("degrade, first delivery: outcome %q err %v, want executed", res.Outcome, err)
	}
	res, err = g.Message(ctx, req, work)
	if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup {
		t.Errorf("degrade, redelivery: outcome %q layer %q err %v, want replayed from the dedup record", res.Outcome, res.Layer, err)
	}
	if n := countEffects(t, e.db, "paid"); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}
}
