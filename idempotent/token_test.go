package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestTokenLayer replays I7, the double click: a one-time token issued before the form is
// shown is the Idempotency-Key of its submission. The first submission executes, a copy is
// replayed, the token is worthless to another user, an unknown tok_ is refused, and 20
// simultaneous submissions of one token make one row.
func TestTokenLayer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	const alice, bob = "user:1", "user:2"
	tokenKey := func(scope, token string) idempotent.Key {
		return idempotent.Key{Scope: scope, BizType: "order.create", BizKey: token}
	}
	issue := func() string {
		t.Helper()
		tok, exp, err := g.IssueToken(ctx, alice)
		if err != nil || !idempotent.IsToken(tok) || !idempotent.ValidKey(tok) || exp.IsZero() {
			t.Fatalf("IssueToken = %q, %v, %v; want a valid tok_ key and an expiry", tok, exp, err)
		}
		return tok
	}

	tok := issue()
	req := request(tokenKey(alice, tok), `{"sku":"SKU-1"}`)
	work := effectWork("order", 0, http.StatusCreated)
	first := mustExecute(t, g, req, work)

	res, err := g.Do(ctx, req, work)
	if err != nil || res.Outcome != idempotent.Replayed || string(res.Response.Body) != string(first.Response.Body) {
		t.Errorf("second submission: outcome %q err %v body %s, want the first body replayed", res.Outcome, err, res.Response.Body)
	}

	res, err = g.Do(ctx, request(tokenKey(bob, tok), `{"sku":"SKU-1"}`), work)
	if !errors.Is(err, idempotent.ErrTokenInvalid) || res.Outcome != idempotent.TokenInvalid || res.Layer != idempotent.LayerToken {
		t.Errorf("alice's token used by bob: outcome %q layer %q err %v, want token_invalid", res.Outcome, res.Layer, err)
	}

	unknown := idempotent.TokenPrefix + strings.Repeat("0", 32)
	res, err = g.Do(ctx, request(tokenKey(alice, unknown), `{"sku":"SKU-1"}`), work)
	if !errors.Is(err, idempotent.ErrTokenInvalid) || res.Outcome != idempotent.TokenInvalid {
		t.Errorf("unknown token: outcome %q err %v, want token_invalid", res.Outcome, err)
	}
	if n := countEffects(t, e.db, "order"); n != 1 {
		t.Fatalf("side_effects rows = %d after one token's submissions, want 1", n)
	}

	tok2 := issue()
	req2 := request(tokenKey(alice, tok2), `{"sku":"SKU-2"}`)
	work2 := effectWork("order2", 0, http.StatusCreated)
	calls := storm(20, func(int) (idempotent.Result, error) { return g.Do(ctx, req2, work2) })
	checkStormAnswers(t, calls)
	if n := countEffects(t, e.db, "order2"); n != 1 {
		t.Errorf("side_effects rows = %d after 20 simultaneous submissions of one token, want 1", n)
	}
}

// TestTokenEdges: a first attempt that failed leaves the token usable by its retry; a used
// token that has since expired is still answered from its dedup record; a token that
// expired unused is refused.
func TestTokenEdges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	issue := func() string {
		t.Helper()
		tok, _, err := g.IssueToken(ctx, "user:1")
		if err != nil {
			t.Fatalf("IssueToken: %v", err)
		}
		return tok
	}
	key := func(tok string) idempotent.Key {
		return idempotent.Key{Scope: "user:1", BizType: "order.create", BizKey: tok}
	}

	tok := issue()
	req := request(key(tok), `{}`)
	if res, err := g.Do(ctx, req, effectWork("retried", 0, http.StatusServiceUnavailable)); err != nil || res.Response.Status != http.StatusServiceUnavailable {
		t.Fatalf("failing first attempt: %d, %v", res.Response.Status, err)
	}
	mustExecute(t, g, req, effectWork("retried", 0, http.StatusCreated))
	if n := countEffects(t, e.db, "retried"); n != 1 {
		t.Errorf("side_effects rows = %d after a failed attempt and its retry, want 1", n)
	}

	if err := e.rdb.Del(ctx, g.CacheKey(key(tok)), g.TokenKey(tok)).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(ctx, req, effectWork("retried", 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup {
		t.Errorf("used token expired: outcome %q layer %q err %v, want replayed from the dedup record", res.Outcome, res.Layer, err)
	}

	unused := issue()
	if err := e.rdb.Del(ctx, g.TokenKey(unused)).Err(); err != nil {
		t.Fatal(err)
	}
	res, err = g.Do(ctx, request(key(unused), `{}`), effectWork("expired", 0, http.StatusCreated))
	if !errors.Is(err, idempotent.ErrTokenInvalid) {
		t.Errorf("token expired unused: outcome %q err %v, want token_invalid", res.Outcome, err)
	}
	if n := countEffects(t, e.db, "expired"); n != 0 {
		t.Errorf("an expired token executed (%d rows)", n)
	}
}

// TestTokenExpiryOnRedisClock: the expires_at a token is issued with is the end Redis
// enforces, whatever the issuing instance's clock says. The guard's clock runs ten minutes
// behind (as an instance of the chaos run's clock skew does); the announced expiry is still
// the token TTL from now by the real clock, the token works until then and is refused after.
// The announced expiry once came from the instance's clock: ten minutes before the token's
// real end, while Redis still accepted it.
func TestTokenExpiryOnRedisClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, skew := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		g := e.guard(idempotent.Config{TokenTTL: 2 * time.Second, Now: func() time.Time { return time.Now().Add(skew) }})
		ctx := context.Background()
		before := time.Now()
		tok, exp, err := g.IssueToken(ctx, "user:1")
		if err != nil {
			t.Fatal(err)
		}
		if exp.Before(before.Add(time.Second-50*time.Millisecond)) || exp.After(time.Now().Add(2*time.Second+50*time.Millisecond)) {
			t.Fatalf("clock %s off: a 2s token issued at %s expires at %s, want 1–2 s later by the real clock",
				skew, before.UTC().Format(time.RFC3339Nano), exp.Format(time.RFC3339Nano))
		}
		if exp.Truncate(time.Second) != exp {
			t.Errorf("expires_at %s is not whole seconds", exp.Format(time.RFC3339Nano))
		}
		key := idempotent.Key{Scope: "user:1", BizType: "order.create", BizKey: tok}
		time.Sleep(time.Until(exp.Add(150 * time.Millisecond)))
		res, err := g.Do(ctx, request(key, `{}`), effectWork("late"+skew.String(), 0, http.StatusCreated))
		if !errors.Is(err, idempotent.ErrTokenInvalid) || res.Outcome != idempotent.TokenInvalid {
			t.Errorf("clock %s off: token used 150 ms after its expires_at: outcome %q err %v, want token_invalid", skew, res.Outcome, err)
		}
		tok, exp, err = g.IssueToken(ctx, "user:1")
		if err != nil {
			t.Fatal(err)
		}
		if time.Until(exp) > 250*time.Millisecond {
			time.Sleep(time.Until(exp.Add(-250 * time.Millisecond)))
			key.BizKey = tok
			mustExecute(t, g, request(key, `{}`), effectWork("inTime"+skew.String(), 0, http.StatusCreated))
		}
	}
}

// TestDegradedNamesTheLayersThatSteppedAside: with Redis unreachable and the guard in degrade
// mode, a tok_ key cannot be checked; the write runs once under the record, and the result
// says which layers stepped aside (Result.Degraded, the Idempotency-Degraded header), so that
// a client or a checker can tell a token accepted unchecked from a live one. With Redis up,
// nothing is named.
func TestDegradedNamesTheLayersThatSteppedAside(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	down := e.guardWith(idemtest.Unreachable(t), idempotent.Config{})
	key := idempotent.Key{Scope: "u1", BizType: "test", BizKey: "tok_" + strconv.FormatInt(recordID(), 16)}
	res, err := down.Do(ctx, request(key, "a"), effectWork("degraded-token", 0, 201))
	if err != nil || res.Outcome != idempotent.Executed {
		t.Fatalf("Do with Redis down = %+v, %v; want executed (degrade)", res, err)
	}
	want := []idempotent.Layer{idempotent.LayerToken, idempotent.LayerCache, idempotent.LayerLock}
	if !slices.Equal(res.Degraded, want) {
		t.Errorf("Degraded = %v, want %v", res.Degraded, want)
	}
	plain := testKey(t, "u1", "plain-key")
	if res, _ := down.Do(ctx, request(plain, "a"), effectWork("degraded-plain", 0, 201)); !slices.Equal(res.Degraded, want[1:]) {
		t.Errorf("Degraded of a plain key = %v, want %v", res.Degraded, want[1:])
	}
	up := e.guard(idempotent.Config{})
	other := testKey(t, "u1", "plain-up")
	if res, err := up.Do(ctx, request(other, "a"), effectWork("plain-up", 0, 201)); err != nil || res.Degraded != nil {
		t.Errorf("Do with Redis up = %+v, %v; want nothing degraded", res, err)
	}
}
