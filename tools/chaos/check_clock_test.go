package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestCheckExpiredTokens breaks no_expired_token_accepted on purpose: a write sent after its
// token's expires_at that ran, or got a 2xx that no copy sent in time explains, is named; a
// refusal, a write sent in time and answered late, and a replay of an acceptance in time are
// not.
func TestCheckExpiredTokens(t *testing.T) {
	start := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	const tok = "tok_0123456789abcdef0123456789abcdef"
	issue := &event{Seq: 1, Kind: kindHTTP, Op: "token", User: "chaos-01", Inst: 1, Method: "POST", Path: "/v1/idempotency-tokens", Status: 201,
		AtMs: 5, Ms: 4, Resp: fmt.Sprintf(`{"token":%q,"expires_at":%q}`, tok, start.Add(3*time.Second).Format(time.RFC3339))}
	// write is a delivery of the order under tok, sent at sentMs and answered ms later.
	write := func(seq int64, sentMs, ms float64, status int, outcome, resp string) *event {
		return &event{Seq: seq, Kind: kindHTTP, Op: "order", User: "chaos-01", Key: tok, Inst: 1, Method: "POST", Path: "/v1/orders",
			Status: status, Outcome: outcome, Resp: resp, AtMs: sentMs + ms, Ms: ms}
	}
	// degraded marks e as answered with the token layer stepped aside (Redis unreachable).
	degradedOnly := func(e *event, layers string) *event { e.Degraded = layers; return e }
	degraded := func(e *event) *event { return degradedOnly(e, "token, cache, lock") }
	const created, invalid = `{"order_id":"5001","status":"PENDING_PAYMENT"}`, `{"code":"idempotency_token_invalid"}`
	cases := []struct {
		name   string
		events []*event
		want   int
		detail []string
	}{
		{"accepted after expiry", []*event{issue, write(2, 3500, 20, 201, "executed", created)}, 1,
			[]string{"#2", tok, "sent 500ms after its expiry", "201 executed"}},
		{"ran into a state refusal after expiry", []*event{issue, write(2, 4000, 20, 409, "state_rejected", `{"code":"out_of_stock"}`)}, 1,
			[]string{"409 state_rejected"}},
		{"a 2xx after expiry with no copy sent in time", []*event{issue, write(2, 3100, 20, 201, "replayed", created)}, 1,
			[]string{"201 replayed"}},
		{"refused after expiry", []*event{issue, write(2, 3300, 5, 400, "token_invalid", invalid)}, 0, nil},
		{"sent in time, answered after expiry", []*event{issue, write(2, 2900, 400, 201, "executed", created)}, 0, nil},
		{"replayed after expiry of an acceptance in time", []*event{issue,
			write(2, 2000, 1500, 201, "executed", created), write(3, 3800, 10, 201, "replayed", created)}, 0, nil},
		{"let through unchecked with Redis unreachable, and its replay", []*event{issue,
			degraded(write(2, 3500, 20, 201, "executed", created)), write(3, 3900, 10, 201, "replayed", created)}, 0, nil},
		{"a cache that stepped aside is no unchecked token", []*event{issue,
			degradedOnly(write(2, 3500, 20, 201, "executed", created), "cache, lock")}, 1, []string{"201 executed"}},
		{"a 503 after expiry is no answer", []*event{issue, write(2, 3500, 10, 503, "", `{"code":"unavailable"}`)}, 0, nil},
		{"a key that is no token of the history", []*event{issue,
			{Seq: 2, Kind: kindHTTP, Op: "order", User: "chaos-01", Key: "order-0123456789", Status: 201, Outcome: "executed", AtMs: 9000, Ms: 1}}, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{events: tc.events, start: start}
			c.checkExpiredTokens()
			expectOnly(t, c, "no_expired_token_accepted", tc.want)
			if tc.detail != nil {
				expectDetail(t, c, "no_expired_token_accepted", tc.detail...)
			}
			if c.tokensIssued != 1 {
				t.Errorf("tokens issued: %d, want 1", c.tokensIssued)
			}
		})
	}
}

// TestCheckClosedEarly breaks no_order_closed_early on purpose, on MariaDB: the consistent
// world's closed order 5003 was closed at its expires_at; moved ten minutes later, as a close
// job ten minutes ahead on its own clock would have left it, the checker names it.
func TestCheckClosedEarly(t *testing.T) {
	w := newDBWorld(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		breaks string
		want   int
		detail []string
	}{
		{"closed at its expiry", "", 0, nil},
		{"closed after its expiry", `UPDATE orders SET expires_at = updated_at - INTERVAL 1 SECOND WHERE id = 5003`, 0, nil},
		{"closed ten minutes early", `UPDATE orders SET expires_at = updated_at + INTERVAL 10 MINUTE WHERE id = 5003`, 1,
			[]string{"order 5003", "10m0s before its expires_at"}},
		{"closed a microsecond early", `UPDATE orders SET expires_at = updated_at + INTERVAL 1 MICROSECOND WHERE id = 5003`, 1,
			[]string{"order 5003", "1µs before"}},
		{"a cancelled order is no close", `UPDATE orders SET status = 'CANCELLED', expires_at = updated_at + INTERVAL 10 MINUTE WHERE id = 5003`, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.reset(t)
			if tc.breaks != "" {
				w.exec(t, tc.breaks)
			}
			c := w.checker()
			if err := c.checkClosedEarly(ctx); err != nil {
				t.Fatal(err)
			}
			expectOnly(t, c, "no_order_closed_early", tc.want)
			if tc.detail != nil {
				expectDetail(t, c, "no_order_closed_early", tc.detail...)
			}
		})
	}
}
