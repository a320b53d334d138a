package lab

import (
	"context"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// The failover of I15, modelled. Redis replicates asynchronously: a master that granted a
// lease and died before its replica received the SET leaves a promoted replica with no lease
// at all, and the next copy is granted the same lease again while the first holder still
// works. A drill cannot time a real kill -9 between a SET and its replication, so both I15
// routes delete the holder's lease key right after it was taken, which leaves Redis exactly as
// such a failover leaves it; TestClusterFailover (idempotent/) runs the real failover on a
// Redis Cluster of three masters and three replicas.

// forgetLease deletes the lease key: the promoted replica never saw it.
func forgetLease(ctx context.Context, rdb redis.UniversalClient, key string) {
	_ = rdb.Del(context.WithoutCancel(ctx), key).Err()
}

// failoverKey marks the request whose holder loses its lease to the failover.
type failoverKey struct{}

// lostToFailover is the guard's idemlab.Lab.ForgetLease on the I15 route: the holder that asked for a
// ?pause= loses its lease.
func lostToFailover(ctx context.Context, _ idempotent.Key) bool {
	lost, _ := ctx.Value(failoverKey{}).(bool)
	return lost
}

// newFailoverGuard is oncepay's guard with the real routes' settings — the default 30 s
// lease, its watchdog — and the failover of I15 (idemlab.Lab.ForgetLease) and a holder's pause
// (pauseHolder) turned on per request. The watchdog would notice the lost lease at its first
// renewal, a third of the lease after it was taken; the holder commits long before that, as a
// holder does that a failover catches between two renewals.
func newFailoverGuard(l *Lab) httpkey.Handler {
	return idem.HTTP(idempotent.New(l.db, l.rdb, idemlab.With(idempotent.Config{
		KeyPrefix: l.prefix,
		Classify:  idem.Classify(l.db),
		Reject:    idem.StoredProblem,
		NewID:     l.ids.Next,
		RequestID: requestid.From,
	}, idemlab.Lab{ForgetLease: lostToFailover, BeforeWork: pauseHolder})))
}

// payAfterFailover is the BUG of I15: the naive payment of I4, fenced only by its Redis lock.
// The holder takes the lease and checks that the order is unpaid; the lease is then lost to a
// failover (see forgetLease) and the holder works on for ?pause=. A copy that comes meanwhile
// takes the lease — nothing holds it any more — finds the order unpaid and pays it; the
// holder then writes as well, with no precondition: paid twice, the stock confirmed twice.
func (l *Lab) payAfterFailover(w http.ResponseWriter, r *http.Request) {
	pause, err := pauseOf(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	l.payUnderFixedLease(w, r, l.prefix+"failover:", fixedLease, pause, pause > 0)
}

// payGuardedAfterFailover is NOT a bug: it is I15 against oncepay's own defenses. The payment
// runs through oncepay's guard and the order service's Pay, as the real notification route
// does; a copy that asks for ?pause= loses its lease to the failover right after taking it
// and then pauses before its transaction. The copy that comes meanwhile takes the lease
// again and pays: two holders at once. The first holder's transaction then meets the state
// precondition (the order is no longer PENDING_PAYMENT) and the dedup record's unique key,
// rolls back, and is answered the stored result of the copy that paid (replayed).
func (l *Lab) payGuardedAfterFailover(w http.ResponseWriter, r *http.Request) {
	l.payGuarded(w, r, l.failover, "lab.failover.payment", true)
}
