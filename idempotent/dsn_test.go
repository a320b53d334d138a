package idempotent_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemops"
	"github.com/oncepay/oncepay/idempotent/idemtest"
	"github.com/oncepay/oncepay/idempotent/mysqlerr"
)

// TestMySQLWithoutParseTime runs the kit on a MySQL DSN without parseTime=true, the
// go-sql-driver default a stranger's DSN often has: the driver then hands DATETIME columns
// over as text. Every replay that reaches the record — the cache entry expired or evicted,
// Redis down — must still be answered from it, and the operator's reads must work; once a
// record's created_at failed to scan into a time.Time and every such replay was a 500.
func TestMySQLWithoutParseTime(t *testing.T) {
	idemtest.RequireMySQL(t)
	fresh := idemtest.DB(t, idemtest.MySQL) // a fresh database with the kit's table
	createSideEffects(t, fresh)
	var name string
	if err := fresh.Raw("SELECT DATABASE()").Scan(&name).Error; err != nil {
		t.Fatal(err)
	}
	c, err := gomysql.ParseDSN(os.Getenv(idemtest.EnvMySQL))
	if err != nil {
		t.Fatal(err)
	}
	c.DBName, c.ParseTime = name, false
	db, err := gorm.Open(mysql.Open(c.FormatDSN()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	if err := idempotent.CreateSchema(db); err != nil { // the table exists: a no-op that must not fail
		t.Fatal(err)
	}

	ctx := context.Background()
	rdb := idemtest.Redis(t)
	g := idempotent.New(db, rdb, idempotent.Config{Classify: mysqlerr.Classify})
	req := idempotent.Request{Key: idempotent.Key{Scope: "user:1", BizType: "t", BizKey: "k-1"}, Fingerprint: fp("/x", `{}`)}
	first, err := g.Do(ctx, req, effectWork("once", 0, http.StatusCreated))
	if err != nil || first.Outcome != idempotent.Executed {
		t.Fatalf("first: outcome %q err %v, want executed", first.Outcome, err)
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil { // the cache entry is gone: the record answers
		t.Fatal(err)
	}
	g.DropAnswers()
	down := idempotent.New(db, idemtest.Unreachable(t), idempotent.Config{Classify: mysqlerr.Classify})
	for name, guard := range map[string]*idempotent.Guard{"cache empty": g, "redis down": down} {
		res, err := guard.Do(ctx, req, effectWork("once", 0, http.StatusCreated))
		if err != nil || res.Outcome != idempotent.Replayed || res.Layer != idempotent.LayerDedup {
			t.Errorf("%s: outcome %q layer %q err %v, want replayed from the record", name, res.Outcome, res.Layer, err)
			continue
		}
		if res.Response.Status != first.Response.Status || !bytes.Equal(res.Response.Body, first.Response.Body) {
			t.Errorf("%s: replayed %d %s, want %d %s", name, res.Response.Status, res.Response.Body, first.Response.Status, first.Response.Body)
		}
	}
	if n := countEffects(t, db, "once"); n != 1 {
		t.Errorf("side_effects rows = %d, want 1", n)
	}

	rec, found, err := g.Lookup(ctx, req.Key)
	if err != nil || !found {
		t.Fatalf("Lookup: found %t err %v", found, err)
	}
	if age := time.Since(rec.CreatedAt); age < -time.Minute || age > time.Minute {
		t.Errorf("Lookup: created_at %v is %v from now: read in the wrong zone or not at all", rec.CreatedAt, age)
	}
	recs, err := idemops.LookupBizKey(ctx, g, "t", "k-1", 10)
	if err != nil || len(recs) != 1 || !recs[0].ExpiresAt.After(recs[0].CreatedAt) {
		t.Errorf("LookupBizKey: %d records, err %v; want one, expiring after its creation", len(recs), err)
	}
}
