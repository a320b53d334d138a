package idempotent

import (
	"context"
	"errors"
	"time"

	"github.com/oncepay/oncepay/idempotent/internal/opskit"
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

// evict forgets the stored 4xx outcome of k (idemops.Evict).
func (g *Guard) evict(ctx context.Context, k Key) (Record, error) {
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
	if err != nil && !errors.Is(err, opskit.ErrRecordNotFound) {
		return rec, err
	}
	// Without a record, the cache entry and marker are dropped too: they are what is left of
	// an eviction whose Redis step failed, and a retry of it must finish the job.
	if err := g.rdb.Del(ctx, g.cacheKey(k), g.markerKey(k)).Err(); err != nil {
		return rec, errors.Join(errEvictCacheKept, err)
	}
	// Every instance drops the answers it keeps in memory, the evicted one among them.
	if err := g.forgetAnswers(ctx); err != nil {
		return rec, errors.Join(errEvictCacheKept, err)
	}
	if !found {
		return Record{}, opskit.ErrRecordNotFound
	}
	return rec, nil
}

// The Redis failures of evict, as refusals with the code "unavailable" so that an adapter
// answers them like any other Redis outage: retry later.
var (
	errEvictWithoutRedis = &Error{Code: ErrUnavailable.Code, Detail: "redis is unavailable: evicting a key needs its lock; retry later"}
	errEvictCacheKept    = &Error{Code: ErrUnavailable.Code, Detail: "the record was evicted but redis did not drop its cached outcome, or could not make the instances drop the answers they keep; retry the eviction"}
)

// lookupBizKey returns the committed records of bizType and bizKey in any scope
// (idemops.LookupBizKey).
func (g *Guard) lookupBizKey(ctx context.Context, bizType, bizKey string, limit int) ([]Record, error) {
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
// written, opskit.ErrEffectCommitted for a stored success, opskit.ErrRecordNotFound for none.
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
			return rec, opskit.ErrEffectCommitted
		default:
			return Record{}, opskit.ErrRecordNotFound // purged between the read and the delete
		}
	}
	if !found {
		return Record{}, opskit.ErrRecordNotFound
	}
	return rec, nil
}
