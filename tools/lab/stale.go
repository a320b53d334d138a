package lab

import (
	"context"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// staleLease is the lease of both I10 routes: short, so that a pause of a few seconds
// outlives it, and never renewed, because a paused process cannot renew anything.
const staleLease = time.Second

// maxPause bounds the pause a drill may ask for.
const maxPause = 10 * time.Second

// pauseKey carries the requested pause from an I10 handler to pauseHolder.
type pauseKey struct{}

// pauseOf reads ?pause= (a Go duration, at most maxPause): how long the holder stops after
// taking the lock, standing for a GC pause or a stopped process.
func pauseOf(r *http.Request) (time.Duration, error) {
	raw := r.URL.Query().Get("pause")
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 || d > maxPause {
		return 0, apperr.ErrInvalidRequest.Withf("pause must be a duration from 0s to %s, got %q", maxPause, raw)
	}
	return d, nil
}

// pauseHolder is the guard's BeforeWork on the I10 route: it stops the holder for the pause
// its request asked for, after the lock was taken and before the transaction begins.
func pauseHolder(ctx context.Context, _ idempotent.Key) error {
	d, _ := ctx.Value(pauseKey{}).(time.Duration)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// payAfterPause is the BUG of I10 (Kleppmann's fencing example): a lock holder — the naive
// payment of I4 with a short lease, staleLease — checks that the order is unpaid and is then
// paused (a GC pause, a stopped process) past its lease. Another copy takes the lock, finds
// the order unpaid and pays it. The paused holder wakes up, still believing it holds the
// lock, and writes anyway: UPDATE orders SET status='PAID', paid_at=now WHERE id=? and
// reserved → sold, with no precondition and no dedup record, so nothing in the store refuses
// the stale write. The order is paid twice and its stock confirmed twice. The lock alone
// cannot prevent this; the drill asks for the pause with ?pause=.
func (l *Lab) payAfterPause(w http.ResponseWriter, r *http.Request) {
	pause, err := pauseOf(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	l.payUnderFixedLease(w, r, l.prefix+"stale:", staleLease, pause, false)
}

// payGuardedAfterPause is NOT a bug: it is I10 against oncepay's own defenses, under the same
// pause. It runs the payment through oncepay's idempotency guard and the order service's
// Pay, as the real notification route does, except that the guard's lease is staleLease and
// nothing renews it (a paused process cannot run its watchdog), and the holder stops for
// ?pause= after taking the lock. When the paused holder wakes, another copy has taken the
// expired lease and paid; the stale holder's transaction then meets
//
//   - the state precondition: UPDATE orders … WHERE status = 'PENDING_PAYMENT' affects 0
//     rows, so it changes nothing, and
//   - the dedup record's unique key (scope, biz_type, biz_key): its insert fails, the whole
//     transaction rolls back, and the holder is answered the first copy's stored result
//     (Idempotency-Outcome: replayed).
//
// The store refuses the stale write; the lease never had to hold.
func (l *Lab) payGuardedAfterPause(w http.ResponseWriter, r *http.Request) {
	l.payGuarded(w, r, l.guarded, "lab.guarded.payment", false)
}

// payGuarded is the guarded payment of I10 and I15: the notification through guard (one of
// the lab's copies of oncepay's guard) and the order service's Pay, as the real notification
// route does, with ?pause= for the holder (and, with failover, its lease lost right after it
// was taken: forgetLease, failover.go).
func (l *Lab) payGuarded(w http.ResponseWriter, r *http.Request, guard httpkey.Handler, bizType string, failover bool) {
	pause, err := pauseOf(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	body, err := web.ReadBody(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	n, id, err := decodeNotification(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	key := idempotent.Key{Scope: "channel:" + n.Channel, BizType: bizType, BizKey: n.TradeNo}
	ctx := context.WithValue(r.Context(), pauseKey{}, pause)
	if failover {
		ctx = context.WithValue(ctx, failoverKey{}, pause > 0)
	}
	_, _ = guard.Do(w, r.WithContext(ctx), key, body, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
		moved, _, err := l.orders.Pay(ctx, tx, id, n.Channel, n.TradeNo)
		switch {
		case err != nil:
			return idempotent.Response{}, err
		case !moved: // the state precondition turned the write away
			return idem.JSON(http.StatusOK, success, httpkey.HeaderOutcome, string(idempotent.StateRejected)), nil
		}
		return idem.JSON(http.StatusOK, success), nil
	}))
}
