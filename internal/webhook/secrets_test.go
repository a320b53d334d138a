package webhook_test

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/keyring"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestResealLegacyAndRotatedKeys: a row written before sealing (plain text, no key id) is
// sealed by Reseal and keeps its secret; putting a new master key first and resealing moves
// every row to it, after which the old key can leave the ring; a ring without a row's key
// cannot open it.
func TestResealLegacyAndRotatedKeys(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	e := f.endpoint(t, "https://hooks.example/a", outbox.OrderPaid)
	// As written before sealing.
	if err := f.db.Exec("UPDATE webhook_endpoints SET secret = ?, secret_key_id = NULL WHERE id = ?", e.Secret, e.ID).Error; err != nil {
		t.Fatal(err)
	}
	if n, err := f.endpoints.Reseal(ctx); n != 1 || err != nil {
		t.Fatalf("resealed %d (%v), want the legacy row", n, err)
	}
	var row webhook.Endpoint
	f.db.Where("id = ?", e.ID).Take(&row)
	if row.SecretKeyID == nil || *row.SecretKeyID != "t1" || row.SealedSecret == e.Secret {
		t.Fatalf("after reseal: key %v, stored %q", row.SecretKeyID, row.SealedSecret)
	}
	if got, err := f.endpoints.Get(ctx, f.db, e.ID); err != nil || got.Secret != e.Secret {
		t.Fatalf("opened %q (%v), want %q", got.Secret, err, e.Secret)
	}

	k2 := "k2:" + base64.StdEncoding.EncodeToString([]byte("a second key, thirty-two bytes!!"))
	t1 := "t1:" + base64.StdEncoding.EncodeToString([]byte("the test key of thirty-two bytes"))
	both, err := keyring.Parse(k2 + "," + t1)
	if err != nil {
		t.Fatal(err)
	}
	rotated := webhook.NewEndpoints(f.db, f.gen, both)
	if n, err := rotated.Reseal(ctx); n != 1 || err != nil {
		t.Fatalf("resealed %d (%v) under the new key, want 1", n, err)
	}
	onlyNew, _ := keyring.Parse(k2)
	if got, err := webhook.NewEndpoints(f.db, f.gen, onlyNew).Get(ctx, f.db, e.ID); err != nil || got.Secret != e.Secret {
		t.Errorf("with the old key gone: %q (%v), want %q", got.Secret, err, e.Secret)
	}
	if _, err := f.endpoints.Get(ctx, f.db, e.ID); err == nil {
		t.Error("a ring without k2 opened a row sealed under k2")
	}
}
