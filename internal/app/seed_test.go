package app_test

import (
	"context"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestDemoSeedOnARealDatabase: ONCEPAY_SEED_DEMO with a real database never seeds the public
// demo keys (and revokes them where an earlier start left them): each demo user gets a random
// key, made by one start and shown by that start only; a later start, or a second instance,
// makes none (issue 27).
func TestDemoSeedOnARealDatabase(t *testing.T) {
	deps := apptest.NewDeps(t)
	start := func(real bool) *app.App {
		t.Helper()
		cfg := apptest.Config(t, func(c *config.Config) {
			if real {
				c.MySQLDSN = "configured:****@tcp(db)/oncepay" // the database is deps.DB; only the choice matters
			}
		})
		a, err := app.New(context.Background(), cfg, deps)
		if err != nil {
			t.Fatalf("app.New: %v", err)
		}
		t.Cleanup(a.Close)
		return a
	}
	// An earlier start on the embedded settings left the public keys in this database.
	if got := start(false).Seeded; len(got) != 2 || !got[0].Public {
		t.Fatalf("embedded seed %+v, want the two public demo users", got)
	}
	first := start(true)
	if len(first.Seeded) != len(app.DemoUsers) {
		t.Fatalf("seeded %+v, want a new key for each demo user", first.Seeded)
	}
	users := account.NewUsers(deps.DB, nil)
	for i, u := range first.Seeded {
		if u.Public || !strings.HasPrefix(u.APIKey, "key_") || len(u.APIKey) < 40 || u.APIKey == app.DemoUsers[i].APIKey {
			t.Errorf("seeded %+v, want a random key", u)
		}
		if _, err := users.Authenticate(context.Background(), u.APIKey); err != nil {
			t.Errorf("the seeded key of %s does not authenticate: %v", u.Name, err)
		}
	}
	for _, u := range app.DemoUsers {
		if _, err := users.Authenticate(context.Background(), u.APIKey); err == nil {
			t.Errorf("the public key %s still authenticates on a real database", u.APIKey)
		}
	}
	if again := start(true); len(again.Seeded) != 0 {
		t.Errorf("a second start seeded %+v, want nothing new (the keys exist)", again.Seeded)
	}
	var keys int64
	deps.DB.Model(&account.APIKey{}).Count(&keys)
	if keys != int64(len(app.DemoUsers)) {
		t.Errorf("%d API keys stored, want one per demo user", keys)
	}
}
