package idempotent

import (
	"context"
	"errors"
	"time"
)

// The answers of Evict that are not a failure of the stores.
var (
	// ErrRecordNotFound: no dedup record is stored for the key.
	ErrRecordNotFound = errors.New("idempotency record not found")
	// ErrEffectCommitted: the stored outcome is a success, whose writes committed with the
	// record; forgetting it would let the next attempt do the write a second time.
	ErrEffectCommitted = errors.New("the stored outcome is a success: its effect committed, so it cannot be evicted")
)

// Policy is what the guard does with keys, for a server to publish (the IETF Idempotency-Key
// draft asks servers to publish their idempotency policy, expiry included).
type Policy struct {
	// Retention is how long a dedup record, and so a key, is kept after its first request.
	Retention time.Duration
	// CacheTTL is how long a finished outcome stays in the replay cache.
	CacheTTL time.Duration
	// TokenTTL is how long an issued one-time token stays usable.
	TokenTTL time.Duration
	// LockTTL is the lease of the lock layer.
	LockTTL time.Duration
	// ReplayedHeaders are the response headers stored and replayed with an outcome.
	ReplayedHeaders []string
}

// Policy returns the guard's effective settings, defaults applied.
func (g *Guard) Policy() Policy {
	return Policy{
		Retention:       g.cfg.Retention,
		CacheTTL:        g.cfg.CacheTTL,
		TokenTTL:        g.cfg.TokenTTL,
		LockTTL:         g.cfg.LockTTL,
		ReplayedHeaders: append([]string(nil), replayedHeaders...),
	}
}

// evictRecordSQL deletes a record only while it holds a stored client error (4xx): the
// condition is in the statement, so a record that is a success, or still PROCESSING, is never
// deleted, whatever was read before.
const evictRecordSQL = "DELETE FROM idempotency_records WHERE id = ? AND status = ? " +
	"AND response_status >= 400 AND response_status < 500"

// Evict forgets the stored 4xx outcome of k — its dedup record, its replay cache entry and its
// consumer marker — so that the next attempt with k runs the work again: an operator's answer
// to a refusal that was deterministic when it was stored but no longer holds (the stock was
// refilled, the order was fixed). It returns the evicted record.
//
// A stored success is never evicted (ErrEffectCommitted): its writes committed with the record,
// and the record is what keeps them from happening twice. A record still being written, or a key
// whose lock another attempt holds, answers ErrKeyInUse; no record answers ErrRecordNotFound.
//
// Evict holds the key's lock while it works, so that no attempt refills the replay cache from
// the record it is deleting. It needs Redis for that, and fails while Redis is down; a guard on
// the database alone (New with a nil client) has no cache and deletes the record only.
func (g *Guard) Evict(ctx context.Context, k Key) (Record, error) {
	if g.rdb == nil {
		// No cache to refill: the record is all there is, and its conditional DELETE (a stored
		// 4xx only) is the whole eviction.
		return g.evictRecord(ctx, k)
	}
	owner := randomToken()
	ok, err := g.rdb.SetNX(ctx, g.leaseKey(k), owner, g.cfg.LockTTL).Result()
	switch {
	case err != nil:
		return Record{}, errors.Join(errEvictWithoutRedis, err)
	case !ok:
		return Record{}, ErrKeyInUse
	}
	defer func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = releaseScript.Run(bg, g.rdb, []string{g.cacheKey(k), g.leaseKey(k)}, owner, "", 0).Err()
	}()

	rec, err := g.evictRecord(ctx, k)
	found := err == nil
	if err != nil && !errors.Is(err, ErrRecordNotFound) {
		return rec, err
	}
	// Without a record, the cache entry and marker are dropped too: they are what is left of
	// an eviction whose Redis step failed, and a retry of it must finish the job.
	if err := g.rdb.Del(ctx, g.cacheKey(k), g.markerKey(k)).Err(); err != nil {
		return rec, errors.Join(errEvictCacheKept, err)
	}
	if !found {
		return Record{}, ErrRecordNotFound
	}
	return rec, nil
}

// The Redis failures of Evict, as refusals with the code "unavailable" so that an adapter
// answers them like any other Redis outage: retry later.
var (
	errEvictWithoutRedis = &Error{Code: ErrUnavailable.Code, Detail: "redis is unavailable: evicting a key needs its lock; retry later"}
	errEvictCacheKept    = &Error{Code: ErrUnavailable.Code, Detail: "the record was evicted but redis did not drop its cached outcome; retry the eviction"}
)

// LookupBizKey returns the committed records of bizType and bizKey in any scope, at most
// limit of them, oldest first: an operator who knows a notification's trade_no but not its
// channel finds its record with it. The unique index is (scope, biz_type, biz_key), so the
// same business key may be stored once per scope.
func (g *Guard) LookupBizKey(ctx context.Context, bizType, bizKey string, limit int) ([]Record, error) {
	var rows []recordRow // its times read whatever the driver's parseTime (recordRow)
	err := g.db.WithContext(ctx).
		Where("biz_type = ? AND biz_key = ?", bizType, bizKey).
		Order("created_at, id").Limit(limit).Find(&rows).Error
	recs := make([]Record, len(rows))
	for i, row := range rows {
		recs[i] = row.record()
	}
	return recs, err
}

// evictRecord deletes the committed 4xx record of k: ErrKeyInUse for a record still being
// written, ErrEffectCommitted for a stored success, ErrRecordNotFound for none.
func (g *Guard) evictRecord(ctx context.Context, k Key) (Record, error) {
	rec, found, err := loadRecord(ctx, g.db, k)
	if err != nil {
		return Record{}, err
	}
	if found {
		res := g.db.WithContext(ctx).Exec(evictRecordSQL, rec.ID, statusCompleted)
		switch {
		case res.Error != nil:
			return Record{}, res.Error
		case res.RowsAffected == 1:
		case rec.Status != statusCompleted:
			return rec, ErrKeyInUse
		case rec.ResponseStatus < 400 || rec.ResponseStatus >= 500:
			return rec, ErrEffectCommitted
		default:
			return Record{}, ErrRecordNotFound // purged between the read and the delete
		}
	}
	if !found {
		return Record{}, ErrRecordNotFound
	}
	return rec, nil
}
