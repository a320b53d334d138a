package idempotent_test

import (
	"context"
	"maps"
	"net/http"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
)

// TestOnlyReplayedHeadersAreReplayed: the first answer carries every header the work set; a
// replay — from the cache and from the record — carries only those Policy().ReplayedHeaders
// lists, which is what a server publishes and the kit's README says.
func TestOnlyReplayedHeadersAreReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	req := idempotent.Request{Key: idempotent.Key{Scope: "user:1", BizType: "t", BizKey: "k-1"}, Fingerprint: fp("/x", `{}`)}
	work := idempotent.Respond(func(context.Context, *gorm.DB) (idempotent.Response, error) {
		return idempotent.Response{Status: http.StatusCreated, Body: []byte(`{}`), Header: map[string]string{
			"Content-Type": "application/json", "Location": "/x/1", "X-Trace": "t-1", "Set-Cookie": "s=1",
		}}, nil
	})
	first, err := g.Do(ctx, req, work)
	if err != nil || len(first.Response.Header) != 4 {
		t.Fatalf("first answer: headers %v err %v, want the work's four", first.Response.Header, err)
	}
	want := map[string]string{}
	for _, h := range g.Policy().ReplayedHeaders {
		want[h] = first.Response.Header[h]
	}
	fromCache, err := g.Do(ctx, req, work)
	if err != nil || fromCache.Outcome != idempotent.Replayed || !maps.Equal(fromCache.Response.Header, want) {
		t.Errorf("replay from the cache: %q headers %v err %v, want %v", fromCache.Outcome, fromCache.Response.Header, err, want)
	}
	if err := e.rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g.DropAnswers()
	fromRecord, err := g.Do(ctx, req, work)
	if err != nil || fromRecord.Layer != idempotent.LayerDedup || !maps.Equal(fromRecord.Response.Header, want) {
		t.Errorf("replay from the record: %q headers %v err %v, want %v", fromRecord.Layer, fromRecord.Response.Header, err, want)
	}
}
