package idempotent_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
)

// TestUnguardedRunsEveryCopy: with Lab.Unguarded the guard is out of the way — each copy of a
// key runs the work in its own committed transaction, nothing is recorded, and a refusal is
// rendered but not stored. It is what the bench's unguarded variants measure, so it must be
// the work alone.
func TestUnguardedRunsEveryCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idemlab.With(idempotent.Config{}, idemlab.Lab{Unguarded: true}))
	k := testKey(t, "user:1", "unguarded")
	var before, after int
	req := request(k, `{}`)
	req.Before = func(context.Context) error { before++; return nil }
	req.After = func(context.Context, idempotent.Result) { after++ }
	for i := range 3 {
		res, err := g.Do(context.Background(), req, effectWork(k.BizKey, 0, http.StatusCreated))
		if err != nil || res.Outcome != idempotent.Executed || res.Response.Status != http.StatusCreated {
			t.Fatalf("copy %d: %+v, %v; want executed 201", i+1, res, err)
		}
	}
	if n := countEffects(t, e.db, k.BizKey); n != 3 {
		t.Errorf("%d effects after 3 unguarded copies, want 3", n)
	}
	if n := countRecords(t, e.db, k); n != 0 {
		t.Errorf("%d dedup records, want none", n)
	}
	if before != 3 || after != 3 {
		t.Errorf("Before ran %d times and After %d, want 3 each", before, after)
	}
}
