package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"time"
)

// The clock skew (docs/chaos.md, "Clock skew"). Debian's faketime cannot skew an instance —
// libfaketime replaces libc's clock calls, and the Go runtime reads the clock through the vDSO
// — so the instance's own clock seam does: ONCEPAY_CHAOS_CLOCK_OFFSET
// (internal/platform/clock) runs skewedInstance's wall clock clockSkew ahead of the machine's,
// and so of MariaDB's, Redis's and the other instances', for the whole run.
const (
	skewedInstance = 2
	clockSkew      = 10 * time.Minute
	// chaosTokenTTL is ONCEPAY_IDEMPOTENCY_TOKEN_TTL: short, so that some buyers can let their
	// token expire before they submit.
	chaosTokenTTL = 3 * time.Second
)

// clockEnv is the clock settings of instance n.
func clockEnv(n int) []string {
	env := []string{"ONCEPAY_IDEMPOTENCY_TOKEN_TTL=" + chaosTokenTTL.String()}
	if n == skewedInstance {
		env = append(env, "ONCEPAY_CHAOS_CLOCK_OFFSET="+clockSkew.String())
	}
	return env
}

// clockSkewFault records the standing skew in the history, as a fault of the run.
func clockSkewFault(h *history, counts map[string]int) {
	counts["clock_skew"] = 1
	h.add(&event{Kind: kindFault, Op: "clock_skew", Detail: fmt.Sprintf(
		"oncepay-%d runs its wall clock %s ahead of the database's, Redis's and the other instances' for the whole run (ONCEPAY_CHAOS_CLOCK_OFFSET)",
		skewedInstance, clockSkew)})
}

// tokenShare and expiredShare are the percentages of orders placed with a one-time token
// (POST /v1/idempotency-tokens, I7) and, of those, the token left to expire first.
const tokenShare, expiredShare = 10, 30

// placeOrder places an order as a buyer does: mostly under a key of its own, tokenShare % of
// the time under a one-time token, of which expiredShare % are submitted only after the token
// expired and must be refused (400 idempotency_token_invalid).
func (wl *workload) placeOrder(ctx context.Context, u user) *orderRef {
	if mrand.IntN(100) >= tokenShare {
		return wl.order(ctx, u, "")
	}
	tok, expires := wl.token(ctx, u)
	if tok == "" {
		return nil
	}
	if mrand.IntN(100) < expiredShare {
		// Past its expires_at, and no longer than the TTL allows should expires_at be wrong.
		sleepCtx(ctx, min(time.Until(expires), chaosTokenTTL)+300*time.Millisecond)
	}
	return wl.order(ctx, u, tok)
}

// token issues a one-time token for u on a random instance (through the gateway) and returns
// it with the expires_at it was announced with; "" when none was issued.
func (wl *workload) token(ctx context.Context, u user) (string, time.Time) {
	e := wl.deliver(ctx, wl.randomInst(), call{op: "token", user: u.name, method: http.MethodPost, path: "/v1/idempotency-tokens", bearer: u.apiKey})
	tok, expires, ok := issuedToken(e)
	if !ok {
		return "", time.Time{}
	}
	return tok, expires
}

// issuedToken reads a token and its expires_at from the answer of POST /v1/idempotency-tokens.
func issuedToken(e *event) (string, time.Time, bool) {
	if e == nil || e.Kind != kindHTTP || e.Op != "token" || e.Status != http.StatusCreated {
		return "", time.Time{}, false
	}
	var v struct {
		Token     string `json:"token"`
		ExpiresAt string `json:"expires_at"`
	}
	if json.Unmarshal([]byte(e.Resp), &v) != nil || v.Token == "" {
		return "", time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v.ExpiresAt)
	return v.Token, t, err == nil
}
