package chaos

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// checkClock runs the checks of the clock skew (clock.go): no_order_closed_early and
// no_expired_token_accepted.
func (c *checker) checkClock(ctx context.Context) error {
	if err := c.checkClosedEarly(ctx); err != nil {
		return err
	}
	c.checkExpiredTokens()
	return nil
}

// checkClosedEarly: no order was closed before its expires_at by the database's clock. A
// close stamps updated_at with the database's clock (order.Service.Close) and nothing moves a
// closed order's updated_at back, so a CLOSED order whose updated_at is before its
// expires_at was closed early: by a close job on an instance whose clock runs ahead, say.
func (c *checker) checkClosedEarly(ctx context.Context) error {
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(id AS CHAR), CAST(created_at AS CHAR), CAST(expires_at AS CHAR), CAST(updated_at AS CHAR),
		TIMESTAMPDIFF(MICROSECOND, updated_at, expires_at) FROM orders WHERE status = 'CLOSED' ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var vs []string
	n := 0
	for rows.Next() {
		var id, created, expires, closed string
		var early int64
		if err := rows.Scan(&id, &created, &expires, &closed, &early); err != nil {
			return err
		}
		n++
		if early > 0 {
			vs = append(vs, fmt.Sprintf("order %s (created_at %s) was closed at %s by the database's clock, %s before its expires_at %s",
				id, created, closed, time.Duration(early)*time.Microsecond, expires))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	c.add("no_order_closed_early", "no order is closed before its expires_at by the database's clock (a closed order's updated_at is its close time)", n, vs)
	return nil
}

// checkExpiredTokens: no write was accepted with a one-time token sent after the expires_at
// the token was issued with. Accepted means the write ran — answered executed or
// state_rejected — or got a 2xx when no copy of it had been sent before the expiry (a replay
// of nothing). Times are the run's clock, which is the machine's, as Redis's is; a request
// counts from when it was sent.
func (c *checker) checkExpiredTokens() {
	type issued struct {
		expires time.Time
		inst    int
		seq     int64
	}
	tokens := map[string]issued{}
	for _, e := range c.events {
		if tok, exp, ok := issuedToken(e); ok {
			tokens[tok] = issued{exp, e.Inst, e.Seq}
		}
	}
	sentAt := func(e *event) time.Time {
		return c.start.Add(time.Duration((e.AtMs - e.Ms) * float64(time.Millisecond)))
	}
	inTime := map[string]bool{} // a copy of the token's write was sent before its expiry
	for _, e := range c.events {
		if t, ok := tokens[e.Key]; ok && e.Kind == kindHTTP && e.Op != "token" && !sentAt(e).After(t.expires) {
			inTime[e.Key] = true
		}
	}
	// A write the token layer let through unchecked — Redis unreachable, the guard in degrade
	// mode (Idempotency-Degraded: token) — is not a token accepted: the contract lets the
	// layer step aside, and the record still keeps the write once. Its replays are not either.
	unchecked := map[string]bool{}
	for _, e := range c.events {
		if _, ok := tokens[e.Key]; ok && e.Kind == kindHTTP && slices.Contains(strings.Split(e.Degraded, ", "), "token") {
			unchecked[e.Key] = true
		}
	}
	var vs []string
	n, refused := 0, 0
	for _, e := range c.events {
		t, ok := tokens[e.Key]
		if !ok || e.Kind != kindHTTP || e.Op == "token" || !e.final() || unchecked[e.Key] {
			continue
		}
		sent := sentAt(e)
		if !sent.After(t.expires) {
			continue
		}
		n++
		ran := e.Outcome == "executed" || e.Outcome == "state_rejected"
		switch {
		case ran || (e.Status < 300 && !inTime[e.Key]):
			vs = append(vs, fmt.Sprintf("#%d %s %s with token %s (issued by #%d, expires_at %s) sent %s after its expiry was accepted: %d %s %s",
				e.Seq, e.Method, e.Path, e.Key, t.seq, t.expires.Format(time.RFC3339), sent.Sub(t.expires).Round(time.Millisecond), e.Status, e.Outcome, clip(e.Resp)))
		case e.Status == http.StatusBadRequest && strings.Contains(e.Resp, "idempotency_token_invalid"):
			refused++
		}
	}
	c.tokensIssued, c.tokensRefused = len(tokens), refused
	c.add("no_expired_token_accepted", fmt.Sprintf("no write is accepted with a one-time token sent after its expires_at (%d tokens let through unchecked while Redis was unreachable are not counted)", len(unchecked)), n, vs)
}
