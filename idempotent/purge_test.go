package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// countDeletes counts the DELETE statements gorm runs on idempotency_records through db.
func countDeletes(t *testing.T, db *gorm.DB) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	err := db.Callback().Delete().After("gorm:delete").Register("test:count_purge_batches", func(tx *gorm.DB) {
		if tx.Statement.Table == "idempotency_records" && tx.Error == nil {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatalf("register delete callback: %v", err)
	}
	return &n
}

// TestPurge: 1,200 records older than the retention and 10 fresh ones. Purge deletes exactly
// the 1,200 in three batches of at most 500, leaves the 10, and drops the replay cache
// entries of the purged keys, so nothing remembers a purged key (I6).
func TestPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	const oldN, newN = 1200, 10

	// A few keys go through Do for real; the rest are inserted in bulk, with cache entries.
	key := func(i int) idempotent.Key {
		return idempotent.Key{Scope: "user:1", BizType: "purge", BizKey: fmt.Sprintf("k-%05d", i)}
	}
	const viaDo = 5
	for i := range viaDo {
		mustExecute(t, g, request(key(i), `{}`), effectWork("purge", 0, http.StatusCreated))
	}
	now := time.Now().UTC()
	cachedEntry := fmt.Sprintf(`{"fp":%q,"r":{"status":201}}`, fp("/things", `{}`))
	bulk := make([]idempotent.Record, 0, oldN+newN-viaDo)
	pipe := e.rdb.Pipeline()
	flush := func() {
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("fill the cache: %v", err)
		}
	}
	for i := viaDo; i < oldN+newN; i++ {
		k := key(i)
		bulk = append(bulk, idempotent.Record{
			ID: recordID(), Scope: k.Scope, BizType: k.BizType, BizKey: k.BizKey, RequestID: "req_test",
			Fingerprint: fp("/things", `{}`), Status: idempotent.StatusCompleted, ResponseStatus: http.StatusCreated,
			CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
		})
		pipe.Set(ctx, g.CacheKey(k), cachedEntry, time.Hour)
		if pipe.Len() == 100 {
			flush()
		}
	}
	flush()
	if err := e.db.CreateInBatches(bulk, 200).Error; err != nil {
		t.Fatalf("insert records: %v", err)
	}
	oldKeys := make([]string, 0, oldN)
	for i := range oldN {
		oldKeys = append(oldKeys, key(i).BizKey)
	}
	aged := e.db.Model(&idempotent.Record{}).Where("biz_key IN ?", oldKeys).
		Update("created_at", now.Add(-2*time.Hour))
	if aged.Error != nil || aged.RowsAffected != oldN {
		t.Fatalf("age records: %d rows, %v", aged.RowsAffected, aged.Error)
	}

	deletes := countDeletes(t, e.db)
	purged, err := g.Purge(ctx, idempotent.PurgeOptions{OlderThan: time.Hour, BatchSize: 500, Pause: time.Millisecond})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if purged != oldN {
		t.Errorf("Purge deleted %d records, want %d", purged, oldN)
	}
	if n := deletes.Load(); n != 3 {
		t.Errorf("Purge ran %d DELETE batches, want 3 (500+500+200)", n)
	}
	var left []string
	if err := e.db.Model(&idempotent.Record{}).Order("biz_key").Pluck("biz_key", &left).Error; err != nil {
		t.Fatal(err)
	}
	if len(left) != newN || left[0] != key(oldN).BizKey || left[newN-1] != key(oldN+newN-1).BizKey {
		t.Errorf("records left: %d (%v…), want the %d fresh ones", len(left), left[:min(3, len(left))], newN)
	}

	exists := func(from, to int) int64 {
		keys := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			keys = append(keys, g.CacheKey(key(i)))
		}
		n, err := e.rdb.Exists(ctx, keys...).Result()
		if err != nil {
			t.Fatalf("EXISTS: %v", err)
		}
		return n
	}
	if n := exists(0, oldN); n != 0 {
		t.Errorf("%d cache entries of purged keys remain, want 0", n)
	}
	if n := exists(oldN, oldN+newN); n != newN {
		t.Errorf("%d cache entries of fresh keys remain, want %d", n, newN)
	}

	// A purged key is forgotten: its copy runs again (the state preconditions are what
	// protect the business then, I6); a fresh key is still replayed.
	res, err := g.Do(ctx, request(key(0), `{}`), effectWork("purge", 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Executed {
		t.Errorf("purged key: outcome %q layer %q err %v, want executed", res.Outcome, res.Layer, err)
	}
	res, err = g.Do(ctx, request(key(oldN), `{}`), effectWork("purge", 0, http.StatusCreated))
	if err != nil || res.Outcome != idempotent.Replayed {
		t.Errorf("fresh key: outcome %q err %v, want replayed", res.Outcome, err)
	}
}

// TestPurgeStopsWhenRedisCannotForget: with Redis unreachable the purge cannot drop the
// replay cache entries of a batch, so it keeps the batch's records (a cached answer never
// outlives its record unnoticed) and says so with ErrPurgeIncomplete instead of succeeding.
func TestPurgeStopsWhenRedisCannotForget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	up := e.guard(idempotent.Config{})
	for i := range 3 {
		mustExecute(t, up, request(idempotent.Key{Scope: "user:1", BizType: "purge", BizKey: fmt.Sprintf("down-%d", i)}, `{}`), effectWork("purge", 0, http.StatusCreated))
	}
	down := e.guardWith(idemtest.Unreachable(t), idempotent.Config{})
	purged, err := down.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Hour, Pause: time.Millisecond})
	if !errors.Is(err, idempotent.ErrPurgeIncomplete) || purged != 0 {
		t.Fatalf("Purge with Redis down = %d, %v; want 0 and ErrPurgeIncomplete", purged, err)
	}
	var left int64
	if err := e.db.Model(&idempotent.Record{}).Count(&left).Error; err != nil || left != 3 {
		t.Errorf("%d records left, %v; want all 3 kept", left, err)
	}
	if purged, err := up.Purge(ctx, idempotent.PurgeOptions{OlderThan: -time.Hour, Pause: time.Millisecond}); err != nil || purged != 3 {
		t.Errorf("Purge with Redis back = %d, %v; want 3", purged, err)
	}
}
