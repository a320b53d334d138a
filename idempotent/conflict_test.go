package idempotent_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// claimWork claims user's coupon of campaign: one per user per campaign, held by a unique
// key of the work's own table. A duplicate on it is the work's refusal, marked Conflict.
func claimWork(classify func(error) dberr.Class, user, campaign string, conflict func(error) error) idempotent.Work {
	return idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
		err := tx.Exec("INSERT INTO coupon_claims (user_id, campaign) VALUES (?, ?)", user, campaign).Error
		if err != nil && classify(err) == dberr.DuplicateKey {
			return idempotent.Response{}, conflict(err)
		}
		if err != nil {
			return idempotent.Response{}, err
		}
		return jsonResponse(http.StatusCreated, map[string]string{"user": user, "campaign": campaign}), nil
	})
}

// TestConflictStored: a second key that hits the work's own unique key ("one coupon per user
// per campaign") is a deterministic refusal the work marks with Conflict: answered 409 with a
// problem document, stored, and replayed byte for byte — from the cache and from the record —
// never a 500 that a retry runs again. An *idempotent.Error under Conflict gives its code.
func TestConflictStored(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, dialect)
			ddl := "CREATE TABLE coupon_claims (user_id VARCHAR(64) NOT NULL, campaign VARCHAR(64) NOT NULL, " +
				"CONSTRAINT uk_claim UNIQUE (user_id, campaign))"
			if err := e.db.Exec(ddl).Error; err != nil {
				t.Fatal(err)
			}
			g := e.guard(idempotent.Config{})
			classify := idemtest.Classify(dialect)
			ctx := context.Background()
			req := func(key string) idempotent.Request {
				return idempotent.Request{Key: idempotent.Key{Scope: "user:1", BizType: "coupon.claim", BizKey: key}, Fingerprint: fp("/claims", `{"campaign":"c1"}`)}
			}
			res, err := g.Do(ctx, req("k-1"), claimWork(classify, "u1", "c1", idempotent.Conflict))
			if err != nil || res.Outcome != idempotent.Executed || res.Response.Status != http.StatusCreated {
				t.Fatalf("first claim: %d %q err %v, want 201 executed", res.Response.Status, res.Outcome, err)
			}

			second, err := g.Do(ctx, req("k-2"), claimWork(classify, "u1", "c1", idempotent.Conflict))
			if err != nil || second.Outcome != idempotent.Executed || second.Response.Status != http.StatusConflict || second.Rejection == nil {
				t.Fatalf("second key, same coupon: %d %q rejection %v err %v, want a stored 409", second.Response.Status, second.Outcome, second.Rejection, err)
			}
			if ct := second.Response.Header["Content-Type"]; ct != "application/problem+json" || !bytes.Contains(second.Response.Body, []byte(`"code":"conflict"`)) {
				t.Errorf("409 answer: Content-Type %q body %s, want a problem document with code conflict", ct, second.Response.Body)
			}
			fromCache, err := g.Do(ctx, req("k-2"), claimWork(classify, "u1", "c1", idempotent.Conflict))
			if err != nil || fromCache.Outcome != idempotent.Replayed {
				t.Errorf("replay of k-2: %q err %v, want replayed", fromCache.Outcome, err)
			}
			if err := e.rdb.FlushDB(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			g.DropAnswers()
			fromRecord, err := g.Do(ctx, req("k-2"), claimWork(classify, "u1", "c1", idempotent.Conflict))
			if err != nil || fromRecord.Outcome != idempotent.Replayed || fromRecord.Layer != idempotent.LayerDedup {
				t.Errorf("replay of k-2 from the record: %q %q err %v, want replayed by the dedup layer", fromRecord.Outcome, fromRecord.Layer, err)
			}
			for name, r := range map[string]idempotent.Result{"cache": fromCache, "record": fromRecord} {
				if r.Response.Status != second.Response.Status || !bytes.Equal(r.Response.Body, second.Response.Body) ||
					r.Response.Header["Content-Type"] != second.Response.Header["Content-Type"] {
					t.Errorf("replay from the %s: %d %v %s, want %d %v %s", name, r.Response.Status, r.Response.Header, r.Response.Body,
						second.Response.Status, second.Response.Header, second.Response.Body)
				}
			}

			// The work's own code and detail: an *idempotent.Error under Conflict.
			taken := &idempotent.Error{Code: "coupon_already_claimed", Detail: "this user has claimed this campaign's coupon"}
			third, err := g.Do(ctx, req("k-3"), claimWork(classify, "u1", "c1", func(err error) error {
				return idempotent.Conflict(errors.Join(taken, err))
			}))
			if err != nil || third.Response.Status != http.StatusConflict || !bytes.Contains(third.Response.Body, []byte(`"code":"coupon_already_claimed"`)) {
				t.Errorf("coded conflict: %d %s err %v, want 409 coupon_already_claimed", third.Response.Status, third.Response.Body, err)
			}
			var claims int64
			if err := e.db.Table("coupon_claims").Count(&claims).Error; err != nil || claims != 1 {
				t.Errorf("coupon_claims rows = %d (%v), want 1", claims, err)
			}
		})
	}
}
