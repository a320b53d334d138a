package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// naiveDedup is the flow of incident I3, kept here only to show it fail: look for the dedup
// row, run the business update (autocommit), then insert the dedup row afterwards, outside
// that update's transaction, ignoring a duplicate-key error. The unique index catches the
// second insert — after both updates are done.
func naiveDedup(ctx context.Context, db *gorm.DB, key idempotent.Key, business time.Duration) error {
	var seen int64
	err := db.WithContext(ctx).Model(&idempotent.Record{}).
		Where("scope = ? AND biz_type = ? AND biz_key = ?", key.Scope, key.BizType, key.BizKey).
		Count(&seen).Error
	if err != nil || seen > 0 {
		return err
	}
	if _, err := insertEffect(db.WithContext(ctx), key.BizKey); err != nil {
		return err
	}
	time.Sleep(business) // the rest of the business update: a slow upstream, a few more writes
	now := time.Now().UTC()
	err = db.WithContext(ctx).Create(&idempotent.Record{
		ID: recordID(), Scope: key.Scope, BizType: key.BizType, BizKey: key.BizKey, RequestID: "req_naive",
		Fingerprint: fp("/things", `{}`), Status: idempotent.StatusCompleted, ResponseStatus: http.StatusOK,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
	}).Error
	if idemtest.Classify(db.Dialector.Name())(err) == dberr.DuplicateKey {
		return nil // "already recorded" — too late, the update ran twice
	}
	return err
}

// TestI3DedupRowPlacement puts I3 side by side: 50 copies of one write fired together at
// the naive flow (dedup row after the business update, outside its transaction) apply the
// update more than once; the same storm through Guard.Do — lock and cache off, so only the
// dedup record in the business transaction protects — applies it exactly once, whether the
// record is inserted finished after the work (the default) or PROCESSING before it
// (RecordFirst). What matters is the transaction, not the position in it.
func TestI3DedupRowPlacement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const copies = 50

	naive := idempotent.Key{Scope: "user:1", BizType: "naive", BizKey: "i3-naive"}
	var dup int64
	for attempt := 1; attempt <= 3 && dup <= 1; attempt++ {
		naive.BizKey = "i3-naive-" + strconv.Itoa(attempt)
		calls := storm(copies, func(int) (idempotent.Result, error) {
			return idempotent.Result{}, naiveDedup(ctx, e.db, naive, 50*time.Millisecond)
		})
		for i, c := range calls {
			if c.err != nil {
				t.Fatalf("naive copy %d: %v", i, c.err)
			}
		}
		dup = countEffects(t, e.db, naive.BizKey)
		t.Logf("naive flow, attempt %d: %d copies applied the business update %d times", attempt, copies, dup)
	}
	if dup <= 1 {
		t.Fatalf("the naive flow applied the update %d time(s) in 3 storms: I3 did not reproduce", dup)
	}
	if n := countRecords(t, e.db, naive); n != 1 {
		t.Errorf("naive flow left %d dedup rows, want 1: the unique index held, and did not help", n)
	}

	for _, placement := range []struct {
		name string
		cfg  idempotent.Config
	}{
		{"record last", idemlab.With(idempotent.Config{}, idemlab.Lab{NoLock: true, NoCache: true})},
		{"record first", idemlab.With(idempotent.Config{}, idemlab.Lab{NoLock: true, NoCache: true, RecordFirst: true})},
	} {
		g := e.guard(placement.cfg)
		key := idempotent.Key{Scope: "user:1", BizType: "guarded", BizKey: "i3-guarded-" + strings.ReplaceAll(placement.name, " ", "-")}
		req := request(key, `{}`)
		work := effectWork(key.BizKey, 50*time.Millisecond, http.StatusOK)
		calls := storm(copies, func(int) (idempotent.Result, error) { return g.Do(ctx, req, work) })
		for i, c := range calls {
			if c.err != nil && !errors.Is(c.err, idempotent.ErrKeyInUse) {
				t.Errorf("%s: guarded copy %d: %v", placement.name, i, c.err)
			}
		}
		if n := countEffects(t, e.db, key.BizKey); n != 1 {
			t.Errorf("%s: Guard.Do with the dedup record in the business transaction applied the update %d times, want exactly 1", placement.name, n)
		}
		if n := countRecords(t, e.db, key); n != 1 {
			t.Errorf("%s: idempotency_records rows = %d, want 1", placement.name, n)
		}
		t.Logf("guarded, %s: %d copies applied the business update %d time", placement.name, copies, countEffects(t, e.db, key.BizKey))
	}
}
