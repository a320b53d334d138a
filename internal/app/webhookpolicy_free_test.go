package app

import (
	"context"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestWebhookPolicyGuardsEmbeddedServicesOnFreePorts: with the embedded Redis and Kafka on
// free ports (ONCEPAY_EMBEDDED_REDIS_ADDR=127.0.0.1:0, ONCEPAY_EMBEDDED_KAFKA_ADDR=127.0.0.1:0)
// and dev mode allowing loopback, a webhook is refused the ports they actually listen on:
// the configured port 0 guarded none (hostile pass of issue 27; the simulator had the same
// hole, see webhookPolicy).
func TestWebhookPolicyGuardsEmbeddedServicesOnFreePorts(t *testing.T) {
	cfg, err := config.LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	cfg.WebhookDev = true
	cfg.EmbeddedChannelAddr = "127.0.0.1:0"
	cfg.EmbeddedRedisAddr = "127.0.0.1:0"
	cfg.EmbeddedKafkaAddr = "127.0.0.1:0"
	a, err := New(context.Background(), cfg, Deps{DB: testenv.DB(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(a.Close)
	if a.Redis.Embedded == nil || a.Kafka.Embedded == nil {
		t.Fatal("want the embedded Redis and Kafka")
	}
	addrs := append([]string{a.Redis.Embedded.Addr()}, a.Kafka.Brokers...)
	for _, addr := range addrs {
		for _, u := range []string{"http://" + addr + "/", "http://" + strings.Replace(addr, "127.0.0.1", "localhost", 1) + "/"} {
			err := a.webhookPolicy.CheckURL(context.Background(), u)
			if e, ok := apperr.As(err); !ok || e.Code != "url_refused" || !strings.Contains(e.Detail, string(webhook.RuleOwn)) {
				t.Errorf("%s: %v, want url_refused (own_address)", u, err)
			}
		}
	}
}
