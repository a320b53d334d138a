package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/platform/keyring"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestWebhookSecretsNotStoredInClear: after a registration and a rotation (through the guard,
// whose dedup record and Redis replay cache keep its answer), a dump of every table and of
// every Redis key holds neither secret nor its key bytes in any spelling, nor does any log
// line; webhook_endpoints holds them sealed under the configured key, which another key ring
// cannot open (issue 27).
func TestWebhookSecretsNotStoredInClear(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	s := apptest.StartHTTPOnly(t)
	e := register(t, s, "http://127.0.0.1:9/hook", "order.paid")
	var rot struct {
		Secret string `json:"secret"`
	}
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/rotate-secret", apptest.AdminKey,
		map[string]string{"grace": "1h"}, apptest.IdemKey("rot-secret")), http.StatusOK).Decode(t, &rot)
	// A replay answers the same secret from the stored answer, which holds only its hash.
	var again struct {
		Secret string `json:"secret"`
	}
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints/"+e.EndpointID+"/rotate-secret", apptest.AdminKey,
		map[string]string{"grace": "1h"}, apptest.IdemKey("rot-secret")), http.StatusOK).Decode(t, &again)
	if e.Secret == "" || rot.Secret == "" || again.Secret != rot.Secret {
		t.Fatalf("secrets %q, %q, replay %q", e.Secret, rot.Secret, again.Secret)
	}

	var needles []string
	for _, secret := range []string{e.Secret, rot.Secret} {
		b64 := strings.TrimPrefix(secret, "whsec_")
		key, _ := base64.StdEncoding.DecodeString(b64)
		needles = append(needles, secret, b64, fmt.Sprintf("%x", key), string(key))
	}
	found := func(where, text string) {
		for _, n := range needles {
			if n != "" && strings.Contains(text, n) {
				t.Errorf("%s holds a secret (%q)", where, n)
			}
		}
	}

	tables, err := s.DB.Migrator().GetTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		var rows []map[string]any
		if err := s.DB.Table(table).Find(&rows).Error; err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		for _, r := range rows {
			var b strings.Builder
			for k, v := range r {
				fmt.Fprintf(&b, "%s=%s ", k, v)
			}
			found("table "+table, b.String())
		}
	}
	ctx := context.Background()
	keys, err := s.Deps.Redis.Client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		dump, _ := s.Deps.Redis.Client.Dump(ctx, k).Result()
		found("redis key "+k, k+" "+dump)
	}
	found("the logs", logs.String())

	var row webhook.Endpoint
	if err := s.DB.Where("id = ?", e.EndpointID).Take(&row).Error; err != nil {
		t.Fatal(err)
	}
	if row.SecretKeyID == nil || *row.SecretKeyID != "dev" || row.SealedPrevious == nil {
		t.Fatalf("stored key id %v, previous %v: want both secrets sealed under the dev key", row.SecretKeyID, row.SealedPrevious)
	}
	other, _ := keyring.Parse("dev:" + base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if _, err := other.Open("dev", row.SealedSecret, "webhook_endpoints/"+e.EndpointID+"/secret"); err == nil {
		t.Error("the dump opened under another key")
	}
}
