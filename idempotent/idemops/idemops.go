// Package idemops holds what an operator, a job runner or an admin endpoint does with an
// idempotency guard beyond the request path: read a key's attempt log, forget a stored
// refusal that no longer holds, find records by business key, ask whether a key is in flight,
// and run a background job under the cluster-wide lock. A service that only guards writes
// never imports it; package idempotent's surface is the request path.
//
//	guard := idempotent.New(db, rdb, cfg)
//	attempts, err := idemops.Attempts(ctx, guard, key)
package idemops

import (
	"context"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/internal/opskit"
)

// The answers of Evict that are not a failure of the stores.
var (
	// ErrRecordNotFound: no dedup record is stored for the key.
	ErrRecordNotFound = opskit.ErrRecordNotFound
	// ErrEffectCommitted: the stored outcome is a success, whose writes committed with the
	// record; forgetting it would let the next attempt do the write a second time.
	ErrEffectCommitted = opskit.ErrEffectCommitted
)

// Attempt is one answered attempt at a key, from the key's attempt log: the diagnosis of
// seed 000 §5.4 made answerable. The same request id on several attempts means one request
// was retried; different request ids on one key mean several requests raced or were
// redelivered; milliseconds between them mean concurrency, seconds or more a retry.
type Attempt struct {
	At        time.Time     `json:"at"`
	RequestID string        `json:"request_id"`
	Via       string        `json:"via"`
	Outcome   string        `json:"outcome"`
	Layer     string        `json:"layer"`
	Status    int           `json:"status"`
	Duration  time.Duration `json:"-"`
	// DurationMS is Duration in milliseconds, for JSON.
	DurationMS float64 `json:"duration_ms"`
}

func ops() opskit.Ops[*idempotent.Guard, idempotent.Key, idempotent.Record] {
	return opskit.Installed.(opskit.Ops[*idempotent.Guard, idempotent.Key, idempotent.Record])
}

// Attempts returns the logged attempts at k, oldest first: every attempt g answered while
// Redis was reachable, for as long as the replay cache keeps the key (at most the last 64 or
// so). Attempts answered while Redis was down are only in the logs; a guard on the database
// alone keeps no log and returns none.
func Attempts(ctx context.Context, g *idempotent.Guard, k idempotent.Key) ([]Attempt, error) {
	logged, err := ops().Attempts(g, ctx, k)
	if logged == nil {
		return nil, err
	}
	out := make([]Attempt, len(logged))
	for i, a := range logged {
		out[i] = Attempt(a)
	}
	return out, err
}

// Evict forgets the stored 4xx outcome of k — its dedup record, its replay cache entry and its
// consumer marker — so that the next attempt with k runs the work again: an operator's answer
// to a refusal that was deterministic when it was stored but no longer holds (the stock was
// refilled, the order was fixed). It returns the evicted record.
//
// A stored success is never evicted (ErrEffectCommitted): its writes committed with the record,
// and the record is what keeps them from happening twice. A record still being written, or a key
// whose lock another attempt holds, answers idempotent.ErrKeyInUse; no record answers
// ErrRecordNotFound.
//
// Evict holds the key's lock while it works, so that no attempt refills the replay cache from
// the record it is deleting. It needs Redis for that, and fails while Redis is down
// (idempotent.ErrUnavailable); a guard on the database alone (idempotent.New with a nil
// client) has no cache and deletes the record only.
func Evict(ctx context.Context, g *idempotent.Guard, k idempotent.Key) (idempotent.Record, error) {
	return ops().Evict(g, ctx, k)
}

// LookupBizKey returns the committed records of bizType and bizKey in any scope, at most
// limit of them, oldest first: an operator who knows a notification's trade_no but not its
// channel finds its record with it. The unique index is (scope, biz_type, biz_key), so the
// same business key may be stored once per scope.
func LookupBizKey(ctx context.Context, g *idempotent.Guard, bizType, bizKey string, limit int) ([]idempotent.Record, error) {
	return ops().LookupBizKey(g, ctx, bizType, bizKey, limit)
}

// InFlight reports whether an attempt at k holds its lease right now, and for how much longer
// the lease runs unless renewed: a key with no committed record yet (the record is written
// with the work's commit) is in progress then, not unknown. Only a request with work outside
// its transaction takes a lease; one fenced by its record alone, in flight, is an uncommitted
// row that nothing outside its transaction sees, and answers false. Redis unreachable is an
// error; a guard on the database alone has no lease and answers false.
func InFlight(ctx context.Context, g *idempotent.Guard, k idempotent.Key) (bool, time.Duration, error) {
	return ops().InFlight(g, ctx, k)
}

// RunLocked runs fn while holding the cluster-wide redsync lock name in g's Redis, renewed by
// the watchdog; fn's context is cancelled if the lock is lost. When another instance holds the
// lock it returns ok=false at once. Background jobs and the outbox relay use it so that one
// instance at a time runs them; their state preconditions keep them correct even when two
// overlap (I5). Without Redis (a nil client, or Redis unreachable and the guard degrading) fn
// runs on those preconditions alone; a guard that rejects without Redis answers
// idempotent.ErrUnavailable.
func RunLocked(ctx context.Context, g *idempotent.Guard, name string, fn func(ctx context.Context) error) (ok bool, err error) {
	return ops().RunLocked(g, ctx, name, fn)
}

// Token is what Redis holds of a one-time token (I7): nothing once it expired (Found false),
// else the scope it was issued to, whether a submission used it, and how long Redis keeps it.
type Token struct {
	Found bool   `json:"found"`
	Used  bool   `json:"used"`
	Scope string `json:"scope,omitempty"`
	// TTL is how long Redis keeps the token; TTLMS is it in milliseconds, for JSON.
	TTL   time.Duration `json:"-"`
	TTLMS int64         `json:"ttl_ms,omitempty"`
}

// TokenOf reads token's state in g's Redis: an operator asking why a form's submission was
// refused (idempotency_token_invalid) or answered twice sees whether the token was issued to
// that user, used, or is gone. A key without the token prefix, or a guard on the database
// alone, answers a Token not found; Redis unreachable is an error.
func TokenOf(ctx context.Context, g *idempotent.Guard, token string) (Token, error) {
	t, err := ops().Token(g, ctx, token)
	return Token{Found: t.Found, Used: t.Used, Scope: t.Scope, TTL: t.TTL, TTLMS: t.TTL.Milliseconds()}, err
}
